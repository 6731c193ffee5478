"""The plugin contract's version, how a plugin declares the version it was written for, the module paths that
moved, and the earlier ways that still work for one more contract with a deprecation line (``docs/contract.md`` is
the changelog)."""
from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from types import ModuleType

from registry.errors import LaddError

__all__ = ["CHANGELOG", "CONTRACT_VERSION", "DECLARATION", "DEPRECATIONS", "MOVED_MODULES", "Deprecation", "deprecated"]

#: The version of the plugin contract this ladd implements: a whole number, raised by every change a plugin may need
#: to follow (interfaces, toolkit, hooks, factory keywords, module paths, new built-in names).
CONTRACT_VERSION = 4
#: What a plugin's entry-point module sets to the contract version it was written for: ``LADD_CONTRACT = 3``.
DECLARATION = "LADD_CONTRACT"
CHANGELOG = "docs/contract.md"

#: Module paths that once held public names, and where those names live now (the version that moved them).
MOVED_MODULES: dict[str, tuple[str, int]] = {
    **{f"registry.{name}": (f"registry.engine.{name}", 2) for name in (
        "assembly", "batches", "evaluation", "export", "loading", "memory", "model", "prompts", "runs",
        "sampling_limits", "timesteps",
    )},
    **{f"registry.{name}": (f"registry.conformance.{name}", 2) for name in ("exercises", "probes", "validation")},
    **{f"registry.{name}": (f"registry.paper.{name}", 2) for name in ("flops", "frontier", "report", "zeroshot")},
    **{f"registry.{name}": (f"registry.storage.{name}", 2) for name in ("files", "records", "weights")},
    **{f"registry.{name}": (f"registry.config.{name}", 2) for name in ("lr_schedules", "safety")},
    **{f"registry.{name}": (f"registry.training.{name}", 2) for name in (
        "console", "ema", "metrics_file", "stopping", "trainable",
    )},
    **{f"registry.{name}": (f"registry.host.{name}", 2) for name in (
        "kinds", "model_folders", "options", "presets", "switches",
    )},
    **{f"registry._{name}": (f"registry.host.{name}", 2) for name in (
        "component", "config_types", "hookspecs", "plugin_code", "plugins", "registry",
    )},
    "registry.train_command": ("registry.cli.train", 2),
}


def moved_message(name: str) -> str | None:
    """One line saying where the module ``name`` went, or None when it did not move."""
    moved = MOVED_MODULES.get(name)
    if moved is None:
        return None
    target, version = moved
    return (
        f"{name} is no longer a module of ladd: it moved to {target} in plugin contract {version} "
        f"(this ladd implements contract {CONTRACT_VERSION}; {CHANGELOG} lists every change); import it from there"
    )


class MovedModules(importlib.abc.MetaPathFinder):
    """An import finder, consulted after the others, that answers a moved module path with one line naming its new
    place."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        message = moved_message(fullname)
        if message is None:
            return None
        raise ModuleNotFoundError(message, name=fullname)


def install_moved_modules() -> None:
    """Put :class:`MovedModules` last on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())


@dataclass(frozen=True)
class Deprecation:
    """An earlier way of the contract that keeps working, with a deprecation line, until contract ``removed``, which
    refuses it in one line naming the migration."""

    key: str
    since: int  # the contract that made the change
    removed: int  # the first contract that refuses the earlier way
    before: str  # what the earlier way is
    migration: str  # what to do instead

    def line(self, who: str) -> str:
        """The one line saying that ``who`` (a component, a plugin's command) keeps working the earlier way."""
        return (
            f"{who} {self.before}, which plugin contract {self.since} deprecated and contract {self.removed} refuses: "
            f"{self.migration} ({CHANGELOG}, contract {self.since})"
        )

    def refusal(self, who: str) -> str:
        """The one line refusing ``who`` once this ladd's contract no longer accepts the earlier way."""
        return (
            f"{who} {self.before}, which plugin contract {self.removed} refuses (this ladd implements contract "
            f"{CONTRACT_VERSION}): {self.migration} ({CHANGELOG}, contract {self.since})"
        )


#: Earlier ways that still work, each until the contract that removes it
DEPRECATIONS: dict[str, Deprecation] = {
    change.key: change
    for change in (
        Deprecation(
            "takes_fixed",
            3,
            5,
            "has a step() without the `fixed` keyword and does not declare `takes_fixed = False`",
            "declare `takes_fixed = False` on the process, or take `fixed` in step() and keep the known tokens",
        ),
        Deprecation(
            "command_parser",
            4,
            5,
            "adds its command with commands.add_parser(NAME) and parser.set_defaults(run=function)",
            "add it with commands.add_command(NAME, function, help=...), whose function is called as "
            "function(args, ladd) and whose arguments may have any name",
        ),
    )
}

_TOLD: set[tuple[str, str]] = set()


def deprecated(key: str, who: str) -> None:
    """Print the deprecation line of ``DEPRECATIONS[key]`` for ``who`` (once per process), or raise its refusal when
    this ladd's contract has removed the earlier way."""
    change = DEPRECATIONS[key]
    if CONTRACT_VERSION >= change.removed:
        raise LaddError(change.refusal(who))
    if (key, who) not in _TOLD:
        _TOLD.add((key, who))
        print(f"ladd: deprecated: {change.line(who)}", file=sys.stderr)
