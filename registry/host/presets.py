"""Config folders: ladd's own (the primary config and its presets), those plugins add, and the names two share."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only
    from .registry import Registry


CONFIG_MODULE = "ladd_configs"


def own_config_folder() -> Path:
    """The folder of ladd's own configs (the installed ``ladd_configs`` package), found without importing it."""
    spec = importlib.util.find_spec(CONFIG_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"ladd's configs ({CONFIG_MODULE}) are not installed; reinstall ladd")
    return Path(next(iter(spec.submodule_search_locations)))


def preset_clashes(registry: Registry) -> list[str]:
    """One line for each config of a plugin's folder named like one ladd ships or an earlier folder holds.

    Hydra takes the first folder holding a name: ladd's own, then the plugins' in the order they load.
    """
    plugins = [(Path(folder), f"plugin {plugin!r}") for folder, plugin in registry.config_dirs.items()]
    folders = [(own_config_folder(), "ladd's own configs"), *plugins]
    holders: dict[str, str] = {}
    clashes = []
    for folder, holder in folders:
        for path in sorted(folder.rglob("*.yaml")):
            name = path.relative_to(folder).with_suffix("").as_posix()
            if name in holders:
                used = holders[name]
                clashes.append(f"config {name} of {holder} has the name of one in {used}, which is used; rename it")
            else:
                holders[name] = holder
    return clashes
