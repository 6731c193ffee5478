"""The plugin contract's version, how a plugin declares the version it was written for, and the module paths that
moved (``docs/contract.md`` is the changelog)."""
from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["CONTRACT_VERSION", "DECLARATION", "MOVED_MODULES", "CHANGELOG"]

#: The version of the plugin contract this ladd implements: a whole number, raised by every change a plugin may need
#: to follow (interfaces, toolkit, hooks, factory keywords, module paths).
CONTRACT_VERSION = 3
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
