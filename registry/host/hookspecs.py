"""The hooks a ladd plugin may implement: one purpose each."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # annotations only
    from .commands import Commands
    from .component import ComponentSpec


PROJECT = "ladd"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def ladd_components() -> Iterable[ComponentSpec]:
    """Return the components this plugin contributes."""


@hookspec
def ladd_config_dirs() -> Iterable[str | Path]:
    """Return folders of Hydra YAML (e.g. experiment presets) this plugin contributes."""


@hookspec
def ladd_model_folders() -> Mapping[str, str]:
    """Return model folders this plugin ships, as ``{NAME: "module:function"}``; configs name them ``pkg:NAME``."""


@hookspec
def ladd_importers() -> Mapping[str, str]:
    """Return checkpoint importers this plugin ships, as ``{NAME: "module:attribute"}``, each naming a
    ``registry.interfaces.Importer`` (a subclass or an instance): ``ladd import NAME SRC OUT`` has it read the
    checkpoint and fill the model it declares; ladd builds, checks and writes the model folder."""


@hookspec
def ladd_commands(commands: Commands) -> None:
    """Add commands to ``ladd``: ``parser = commands.add_command(NAME, function, help=...)`` (an argparse parser), then
    its arguments; ``ladd NAME ...`` calls ``function(args, ladd)``, where ``ladd.registry`` is the loaded registry and
    ``ladd.load(path)`` loads a run or model folder. ``commands.add_parser`` with ``parser.set_defaults(run=function)``,
    called as ``function(args, registry)``, is the deprecated earlier way."""
