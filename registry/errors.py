"""Errors shown to users as one clear message (the CLI prints them without a traceback)."""
from __future__ import annotations

__all__ = [
    "LaddError",
    "UnknownComponentError",
    "ComponentClashError",
    "PluginLoadError",
    "IncompatibleComponentsError",
    "InvalidConfigError",
    "MissingResourceError",
]


class LaddError(Exception):
    """Base class of every error ladd reports as a message rather than a crash."""


class UnknownComponentError(LaddError, LookupError):
    """A component name that no loaded plugin registered."""


class ComponentClashError(LaddError):
    """Two plugins registered the same (kind, name)."""


class PluginLoadError(LaddError):
    """A plugin failed to import or to declare its components (fatal only in strict mode)."""


class IncompatibleComponentsError(LaddError):
    """Components that cannot work together, detected when the experiment is assembled."""


class InvalidConfigError(LaddError, ValueError):
    """An option value that a component or the objective rejects."""


class MissingResourceError(LaddError):
    """A model, tokenizer or data set that is not cached locally and cannot be downloaded (offline)."""
