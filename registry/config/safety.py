"""Configs are data: refuse anything that would make loading one run code or import by path."""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from registry.errors import LaddError
from registry.host.kinds import SLOTS
from registry.toolkit.options import local_path_options

if TYPE_CHECKING:  # annotations only
    from registry.host.registry import Registry

#: Hydra instantiation keys: ladd never instantiates by import path, so a config carrying them is refused.
FORBIDDEN_KEYS = frozenset({"_target_", "_partial_", "_args_", "_recursive_", "_convert_"})
#: Resolvers a composed config may use: the time (run folder names). References to other keys are always fine.
ALLOWED_RESOLVERS = frozenset({"now"})
_RESOLVER = re.compile(r"\$\{\s*([\w.-]+)\s*:")


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


def check_interpolations(cfg: DictConfig) -> None:
    """Refuse resolvers other than ``now`` in a composed config: ``${oc.env:...}`` would save a secret into run folders
    and exports."""
    _check_resolvers(OmegaConf.to_container(cfg, resolve=False), "")


def _check_resolvers(node: Any, path: str) -> None:
    if isinstance(node, Mapping):
        for key, value in node.items():
            _check_resolvers(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _check_resolvers(value, f"{path}[{index}]")
    elif isinstance(node, str):
        refused = sorted(set(_RESOLVER.findall(node)) - ALLOWED_RESOLVERS)
        if refused:
            raise UnsafeConfigError(
                f"{path}={node!r} uses the resolver {refused[0]!r}: ladd saves resolved configs into run folders and "
                f"exports, so configs may only refer to other keys and ${{now:...}}; pass the value itself instead"
            )


def without_local_paths(cfg: Mapping[str, Any], registry: Registry) -> dict[str, Any]:
    """A saved config without the options that name places on the machine that wrote it (cache folders).

    Read back from a run folder or an export, such an option takes its default (the reader's cache folder),
    so a shared file never chooses where ladd writes on the machine that reads it.
    """
    plain = dict(cfg)
    for slot in SLOTS.values():
        node = plain.get(slot.name)
        if not isinstance(node, Mapping) or "name" not in node:
            continue
        try:
            local = local_path_options(registry.get(slot.kind, str(node["name"])).spec.config)
        except LaddError:
            continue  # an unknown or clashing component is reported when the experiment is built
        if local & set(node):
            plain[slot.name] = {key: value for key, value in node.items() if key not in local}
    return plain
