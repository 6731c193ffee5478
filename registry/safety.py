"""Configs are data: refuse anything that would make loading one run code or import by path."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import LaddError

#: Hydra instantiation keys: ladd never instantiates by import path, so a config carrying them is refused.
FORBIDDEN_KEYS = frozenset({"_target_", "_partial_", "_args_", "_recursive_", "_convert_"})


class UnsafeConfigError(LaddError):
    """A config that tries to import by path or to evaluate an expression."""


def check_config(cfg: Mapping[str, Any], where: str = "config") -> None:
    """Raise UnsafeConfigError for import-path keys or unresolved interpolations anywhere in ``cfg``."""
    _check(cfg, where, "")


def _check(node: Any, where: str, path: str) -> None:
    if isinstance(node, Mapping):
        for key, value in node.items():
            child = f"{path}.{key}" if path else str(key)
            if key in FORBIDDEN_KEYS:
                raise UnsafeConfigError(
                    f"{where}: key {child!r} is refused: ladd selects components by registry name "
                    f"(e.g. backbone=dit, see `ladd list-components`), never by import path"
                )
            _check(value, where, child)
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            _check(value, where, f"{path}[{index}]")
    elif isinstance(node, str) and "${" in node:
        raise UnsafeConfigError(
            f"{where}: {path} holds the expression {node!r}; configs given to ladd here must be plain, "
            f"fully resolved values (interpolations and resolvers are refused)"
        )
