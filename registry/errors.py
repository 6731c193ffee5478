"""Errors shown to users as one clear message (the CLI prints them without a traceback)."""
from __future__ import annotations

import difflib
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
