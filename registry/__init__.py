"""ladd's framework core: plugin contract, component registry, config assembly, training and sampling loops."""
from __future__ import annotations

from typing import Any

from ._component import KINDS, Component, ComponentSpec, Origin
from ._hookspecs import hookimpl, hookspec
from ._registry import Registry, load
from .errors import (
    ComponentClashError,
    ComponentError,
    IncompatibleComponentsError,
    InvalidConfigError,
    LaddError,
    MissingResourceError,
    PluginLoadError,
    UnknownComponentError,
)


def build(kind: str, name: str, options: dict[str, Any] | None = None, **context: Any) -> Any:
    """Build one registered component from Python: ``options`` are checked like config options, ``context`` as ladd passes it."""
    return load().build(kind, name, options, **context)


def from_pretrained(path: str, registry: Registry | None = None):
    """Load a model folder written by ``ladd export`` (weights are safetensors: loading runs no code)."""
    from .export import from_pretrained as _from_pretrained

    return _from_pretrained(path, registry)


__all__ = [
    "build",
    "from_pretrained",
    "KINDS",
    "Component",
    "ComponentSpec",
    "Origin",
    "Registry",
    "hookimpl",
    "hookspec",
    "load",
    "LaddError",
    "UnknownComponentError",
    "ComponentClashError",
    "ComponentError",
    "PluginLoadError",
    "IncompatibleComponentsError",
    "InvalidConfigError",
    "MissingResourceError",
]
