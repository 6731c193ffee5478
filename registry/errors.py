"""Errors shown to users as one clear message (the CLI prints them without a traceback)."""
from __future__ import annotations

import difflib
import errno
import re
from collections.abc import Iterable

__all__ = [
    "ComponentClashError",
    "ComponentError",
    "IncompatibleComponentsError",
    "InvalidConfigError",
    "LaddError",
    "MissingResourceError",
    "PluginLoadError",
    "UnknownComponentError",
]


class LaddError(Exception):
    """Base class of every error ladd reports as a message rather than a crash."""


class UnknownComponentError(LaddError, LookupError):
    """A component name that no loaded plugin registered."""


class ComponentClashError(LaddError):
    """Two plugins registered the same (kind, name)."""


class ComponentError(LaddError):
    """A component's factory failed to import or raised while building; ``problem`` says which, without the
    component."""

    def __init__(self, problem: str, message: str) -> None:
        super().__init__(message)
        self.problem = problem


class PluginLoadError(LaddError):
    """A plugin failed to import or to declare its components (fatal only in strict mode)."""


class IncompatibleComponentsError(LaddError):
    """Components that cannot work together, detected when the experiment is assembled."""


class InvalidConfigError(LaddError, ValueError):
    """An option value that a component or the objective rejects."""


class MissingResourceError(LaddError):
    """A model, tokenizer or data set that is not cached locally and cannot be downloaded (offline)."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'a', 'b'?"`` for the choices closest to ``word``, or an empty string."""
    close = difflib.get_close_matches(str(word), list(choices), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def first_line(error: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def describe_failure(error: BaseException) -> str | None:
    """What a command that ``error`` ended tells its user, in one line: a ladd error's message, a failed file
    operation or allocation said plainly; None for anything else (a fault in the code, shown with its traceback)."""
    if isinstance(error, LaddError):
        return str(error)
    if isinstance(error, OSError):  # a full disk, a read-only folder, a file that vanished
        where = f" ({error.filename})" if error.filename else ""
        if error.errno in _DISK_FULL:  # ladd writes every file whole, so what existed is still there
            return f"{error.strerror}{where}: the disk is full or a size limit applies; free space and run it again"
        return f"{error.strerror or error}{where}"
    text = str(error)
    # torch reports a failed allocation as a RuntimeError
    if not isinstance(error, MemoryError) and "out of memory" not in text.lower() and "allocate memory" not in text:
        return None
    asked = re.search(r"tried to allocate ([0-9.]+ ?[KMGT]iB|[0-9]+ bytes)", text, re.IGNORECASE)
    size = asked and (f"{int(asked[1].split()[0]) / 2**30:.1f} GiB" if asked[1].endswith("bytes") else asked[1])
    detail = f" (an allocation of {size} failed)" if size else ""
    return (
        f"out of memory{detail}; what ladd had written is intact (files are written whole, a run resumes from its last "
        f"checkpoint): reduce the batch size or the sequence length, or free memory, and run the command again"
    )
