"""What a plugin's command receives besides its arguments (``function(args, ladd)``): the registry and a loader of
run and model folders."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from registry.host.commands import EARLIER_HANDLER, HANDLER
from registry.host.registry import Registry

if TYPE_CHECKING:  # annotations only: loading imports torch when a command asks for it
    from registry.engine.assembly import Experiment


@dataclass(frozen=True)
class CommandContext:
    """``ladd`` in a plugin command's ``function(args, ladd)``."""

    registry: Registry

    def load(self, path: str | Path) -> Experiment:
        """A finished run folder or a model folder, rebuilt with its weights (``registry.load_trained``)."""
        from registry import load_trained

        return load_trained(path, self.registry)


def run_command(args: argparse.Namespace, registry: Registry) -> Any:
    """Run the command ``args`` were parsed for: a plugin's with a :class:`CommandContext`, ladd's own with the
    registry."""
    handler = vars(args).get(HANDLER)
    if handler is not None:
        return handler(args, CommandContext(registry))
    return getattr(args, EARLIER_HANDLER)(args, registry)
