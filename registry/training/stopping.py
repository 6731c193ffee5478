"""Stopping cleanly on the signals that schedulers and users send: SIGTERM, SIGINT and SIGUSR1.

Within :func:`stopping_on_signals`, a signal that comes while a training stage runs (:func:`deferred`) is
only noted: the training stops every process at the end of the step it is taking and writes ``last.ckpt``
there. A signal anywhere else raises :class:`Stopped` at once: nothing is lost there, since every file is
written under a temporary name and renamed into place. While a stop is under way further signals are
ignored, except a second SIGINT (Ctrl-C pressed again), which ends the process at once by the signal's
default action.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
RESUME_HINT = "run the same command to resume"


class Stopped(BaseException):
    """A command stopped by a signal (not an ``Exception``: handlers of errors must not swallow it)."""

    def __init__(self, signum: int, where: str = "", quiet: bool = False) -> None:
        self.signum, self.where, self.quiet = signum, where, quiet
        super().__init__(f"stopped {f'{where} ' if where else ''}by {signal.Signals(signum).name}; {RESUME_HINT}")

    @property
    def exit_status(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended: 143, 130, 138 (SIGUSR1, Linux)."""
        return 128 + self.signum

    def at(self, where: str, quiet: bool = False) -> Stopped:
        """The same stop, saying where the command got to."""
        return Stopped(self.signum, where, quiet)


class _Stops:
    """The handlers' state: how deep the installations nest, the signal received, whether a stage is training."""

    def __init__(self) -> None:
        self.depth = 0
        self.received: int | None = None
        self.deferring = False


_STOPS = _Stops()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _STOPS.received is None:
        _STOPS.received = signum
        if not _STOPS.deferring:
            raise Stopped(signum)
    elif signum == _STOPS.received == signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.raise_signal(signal.SIGINT)


@contextmanager
def stopping_on_signals() -> Iterator[None]:
    """Within: SIGTERM, SIGINT and SIGUSR1 stop the command as the module says; the previous handlers come back after.

    Nests (the outermost installs); in a thread other than the main one, where Python runs no handler, it does nothing.
    """
    if _STOPS.depth or threading.current_thread() is not threading.main_thread():
        _STOPS.depth += 1
        try:
            yield
        finally:
            _STOPS.depth -= 1
        return
    previous = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    _STOPS.depth, _STOPS.received = 1, None
    for number in STOP_SIGNALS:
        signal.signal(number, _on_signal)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        _STOPS.depth, _STOPS.received, _STOPS.deferring = 0, None, False


def received() -> int | None:
    """The signal that asked to stop, if one did."""
    return _STOPS.received


def check() -> None:
    """Raise :class:`Stopped` if a signal came while a stage trained and the stage ended before it could stop."""
    if _STOPS.received is not None:
        raise Stopped(_STOPS.received)


def reclaim() -> None:
    """Install the handlers again where a library replaced them (Lightning's SIGTERM handler, for each fit)."""
    if _STOPS.depth and threading.current_thread() is threading.main_thread():
        for number in STOP_SIGNALS:
            signal.signal(number, _on_signal)


@contextmanager
def deferred() -> Iterator[None]:
    """Within: a signal only asks the training to stop at a step's end (see :func:`received`)."""
    _STOPS.deferring = True
    try:
        yield
    finally:
        _STOPS.deferring = False
