"""ladd's framework core: plugin contract, component registry, config assembly, training and sampling loops."""
from __future__ import annotations

from ._component import KINDS, Component, ComponentSpec, Origin
from ._hookspecs import hookimpl, hookspec
from ._registry import Registry, load
from .errors import (
    ComponentClashError,
    IncompatibleComponentsError,
    LaddError,
    PluginLoadError,
    UnknownComponentError,
)

__all__ = [
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
    "PluginLoadError",
    "IncompatibleComponentsError",
]
