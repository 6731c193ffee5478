"""ladd's framework core: plugin contract, component registry, config assembly, training and sampling loops."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from registry.contract import CONTRACT_VERSION, install_moved_modules
from registry.host.component import KINDS, Component, ComponentSpec, Origin
from registry.host.hookspecs import hookimpl, hookspec
from registry.host.registry import Registry, load

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

if TYPE_CHECKING:  # importing it here would import torch with every `import registry`
    from registry.engine.assembly import Experiment

install_moved_modules()  # `import registry.assembly` (a path that moved) says where it went, in one line


def build(kind: str, name: str, options: dict[str, Any] | None = None, **context: Any) -> Any:
    """Build one registered component from Python: ``options`` are checked like config options, ``context`` as ladd
    passes it.

    Raises ``UnknownComponentError`` (no such name) or ``ComponentClashError`` (two plugins register it),
    ``InvalidConfigError`` for options the config refuses, ``ComponentError`` when the factory does not import, raises
    or returns something not of its kind (its ``problem`` says which; the original exception is its ``__cause__``), and
    the ``LaddError`` a factory raises itself (``IncompatibleComponentsError``, ``MissingResourceError``) as it is.
    """
    return load().build(kind, name, options, **context)


def from_pretrained(
    path: str | Path, registry: Registry | None = None, adapter: str | Path | None = None
) -> Experiment:
    """Load a model folder written by ``ladd export`` (weights are safetensors: loading runs no code).

    Returns a ``registry.engine.assembly.Experiment``: ``model`` (a ``DiffusionModel`` on the CPU, in eval mode, its
    weights the exported EMA weights), ``sampler`` (``sampler.sample(model, n, steps, generator)``),
    ``dataset``, ``metric`` and ``components`` (slot -> the registered component, with its origin).
    ``adapter``: a folder ``ladd export --adapter`` wrote, merged into the model, which must be the one it was
    trained over (refused otherwise, by the SHA-256 of its frozen weights).
    """
    from registry.engine.loading import from_pretrained as _from_pretrained

    return _from_pretrained(path, registry, adapter)


def load_trained(path: str | Path, registry: Registry | None = None) -> Experiment:
    """Load a finished run folder (``ladd train``) or a model folder (``ladd export``, ``ladd import``), rebuilt with
    its weights in eval mode on the CPU, as ``ladd sample`` and ``ladd eval`` read them: the loader for a plugin's
    commands.

    Returns the ``Experiment`` ``from_pretrained`` returns; a folder whose components come from a plugin that is not
    installed is refused in one line naming it.
    """
    from registry.engine.loading import load_trained as _load_trained

    return _load_trained(path, registry or load())[0]


__all__ = [
    "CONTRACT_VERSION",
    "build",
    "from_pretrained",
    "load_trained",
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
