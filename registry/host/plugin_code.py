"""Running a plugin's own code (its import, its hooks, its factories): what it prints goes to stderr, so ladd's
output stays parseable, and an exit or an interrupt it raises itself is its fault, not the end of the command."""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
import traceback
from types import FrameType, TracebackType
from typing import Any

#: what plugin code may raise that is the plugin's fault; a KeyboardInterrupt is one only when no Ctrl-C came
FAULTS = (Exception, SystemExit, KeyboardInterrupt)


def raised_at(error: BaseException) -> str:
    """Where ``error`` was raised: the innermost frame's file, line and function."""
    frames = traceback.extract_tb(error.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno} ({frames[-1].name})" if frames else "an unknown place"


def unasked_interrupt(error: BaseException) -> str:
    """One line for a KeyboardInterrupt that code raised itself while no Ctrl-C was pressed."""
    return (
        f"KeyboardInterrupt raised at {raised_at(error)}, though no Ctrl-C was pressed: the code there (a plugin's, "
        f"or ladd's) ends the command itself; what ladd had written is intact"
    )


def describe(error: BaseException) -> str:
    """One line saying what plugin code raised."""
    if isinstance(error, SystemExit):
        return f"SystemExit: it calls sys.exit({error.code!r}), which would end every ladd command"
    if isinstance(error, KeyboardInterrupt):
        return "KeyboardInterrupt: it raises it itself (no Ctrl-C was pressed), which would end every ladd command"
    return f"{type(error).__name__}: {error}"


class PluginCode:
    """A ``with`` block running plugin code. Its stdout is sent to stderr (unless ``own_output``: a plugin's command,
    whose output it is), and a SIGINT arriving meanwhile is recorded, so that ``is_fault`` can tell the user's Ctrl-C
    (which must end ladd) from a KeyboardInterrupt the plugin raised itself (which only leaves the plugin out).
    SIGINT is only seen on the main thread.
    """

    def __init__(self, own_output: bool = False) -> None:
        self.interrupted = False
        self._previous: Any = None
        self._stdout = contextlib.nullcontext() if own_output else contextlib.redirect_stdout(sys.stderr)

    def __enter__(self) -> PluginCode:
        self._stdout.__enter__()
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.getsignal(signal.SIGINT)
            if self._previous is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(signal.SIGINT, self._on_interrupt)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        self._stdout.__exit__(kind, error, trace)

    def _on_interrupt(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted = True
        if callable(self._previous):
            self._previous(signum, frame)
        elif self._previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    def is_fault(self, error: BaseException) -> bool:
        """Whether ``error``, raised by the plugin code, is the plugin's fault rather than the user's Ctrl-C."""
        return isinstance(error, FAULTS) and not (isinstance(error, KeyboardInterrupt) and self.interrupted)
