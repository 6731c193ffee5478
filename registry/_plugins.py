"""Plugin discovery: entry points of group ``ladd`` loaded into a pluggy manager."""
from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from . import _hookspecs
from ._component import Component, ComponentSpec, Origin
from .errors import PluginLoadError
from .model_folders import ModelFolder
from .switches import switch

ENTRY_POINT_GROUP = "ladd"
STRICT_ENV = "LADD_STRICT_PLUGINS"
ALLOW_ENV = "LADD_PLUGINS_ALLOW"  # comma-separated plugin names: load only these (plus ladd's own)
BLOCK_ENV = "LADD_PLUGINS_BLOCK"  # comma-separated plugin names never loaded
NO_AUTOLOAD_ENV = "LADD_DISABLE_PLUGIN_AUTOLOAD"  # load no third-party entry point at all
OWN_DISTRIBUTION = "ladd"  # its own entry points are the only ones the variables above cannot turn off


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded, with the reason."""

    plugin: str
    error: str
    distribution: str | None = None


def _names(name: str) -> set[str] | None:
    value = os.environ.get(name)
    return None if value is None else {n.strip() for n in value.split(",") if n.strip()}


def own_entry_points() -> set[tuple[str, str]]:
    """(name, value) of each entry point that ladd's installed distribution itself declares in group ``ladd``.

    Found through ladd's own distribution, never through a name a plugin can claim: another distribution
    calling itself ``ladd`` in its metadata, or naming an entry point ``builtin``, is a third party.
    """
    try:
        declared = metadata.distribution(OWN_DISTRIBUTION).entry_points
    except metadata.PackageNotFoundError:
        return set()
    return {(ep.name, ep.value) for ep in declared if ep.group == ENTRY_POINT_GROUP}


def blocked_reason(plugin: str, own: bool, autoload: bool = True) -> str | None:
    """Why the environment keeps this plugin from loading, or None when it may load (``own``: ladd's own entry point)."""
    if plugin in (_names(BLOCK_ENV) or set()):
        return f"blocked by {BLOCK_ENV}"
    if own:
        return None
    if not autoload:
        return f"autoloading disabled by {NO_AUTOLOAD_ENV}"
    allowed = _names(ALLOW_ENV)
    if allowed is not None and plugin not in allowed:
        return f"not in {ALLOW_ENV}"
    return None


class PluginHost:
    """Owns the pluggy manager; loads plugins explicitly and records each one's origin."""

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager(_hookspecs.PROJECT)
        self.manager.add_hookspecs(_hookspecs)
        self.origins: dict[str, Origin] = {}
        self.failures: list[PluginFailure] = []
        self.blocked: list[PluginFailure] = []
        self._entry_points_loaded = False

    def register(self, plugin: ModuleType | Any, name: str, origin: Origin | None = None) -> None:
        """Register one plugin object; idempotent for the same name."""
        if self.manager.has_plugin(name):
            return
        self.manager.register(plugin, name=name)
        self.origins[name] = origin or Origin(plugin=name)

    def load_entry_points(self) -> None:
        """Import every permitted plugin of entry-point group ``ladd`` once; failures are recorded, not raised."""
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        autoload = not switch(NO_AUTOLOAD_ENV)
        switch(STRICT_ENV)  # a value ladd does not understand is refused now, not at the first failure
        own = own_entry_points()
        # ladd's own entry points first: a third party cannot take their names
        ordered = sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ((ep.name, ep.value) not in own, ep.name))
        for entry_point in ordered:
            dist = entry_point.dist
            origin = Origin(
                plugin=entry_point.name,
                distribution=dist.metadata["Name"] if dist else None,
                version=dist.version if dist else None,
            )
            is_own = (entry_point.name, entry_point.value) in own
            reason = blocked_reason(entry_point.name, is_own, autoload)
            if reason is not None:
                self.blocked.append(PluginFailure(entry_point.name, reason, origin.distribution))
                continue
            if self.manager.has_plugin(entry_point.name) and not is_own:
                taken = self.origins[entry_point.name].distribution
                error = f"the plugin name {entry_point.name!r} is already taken by distribution {taken}; rename this entry point"
                self._fail(PluginFailure(entry_point.name, error, origin.distribution), PluginLoadError(error))
                continue
            try:
                plugin = entry_point.load()
                self.register(plugin, entry_point.name, origin)
            except Exception as exc:  # a broken third-party plugin must not take the others down
                self._fail(PluginFailure(entry_point.name, f"{type(exc).__name__}: {exc}", origin.distribution), exc)

    def components(self) -> list[Component]:
        """Call every plugin's ``ladd_components`` hook and attach host-recorded origins."""
        found: list[Component] = []
        for impl in self.manager.hook.ladd_components.get_hookimpls():
            origin = self.origins.get(impl.plugin_name, Origin(plugin=impl.plugin_name))
            try:
                specs = list(impl.function())
                for spec in specs:
                    if not isinstance(spec, ComponentSpec):
                        raise TypeError(f"ladd_components() returned {spec!r}, expected ComponentSpec")
            except Exception as exc:
                self._fail(PluginFailure(impl.plugin_name, f"{type(exc).__name__}: {exc}", origin.distribution), exc)
                continue
            found.extend(Component(spec, origin) for spec in specs)
        return found

    def config_dirs(self) -> list[Path]:
        """Folders of Hydra YAML contributed by plugins."""
        dirs: list[Path] = []
        for impl in self.manager.hook.ladd_config_dirs.get_hookimpls():
            dirs.extend(Path(d) for d in impl.function())
        return dirs

    def model_folders(self) -> dict[str, ModelFolder]:
        """Model folders declared by plugins; a name declared twice is a failure of the second plugin."""
        folders: dict[str, ModelFolder] = {}
        for impl in self.manager.hook.ladd_model_folders.get_hookimpls():
            origin = self.origins.get(impl.plugin_name, Origin(plugin=impl.plugin_name))
            for name, locator in dict(impl.function()).items():
                if name in folders:
                    error = f"model folder {name!r} is already provided by plugin {folders[name].origin.plugin!r}"
                    self._fail(PluginFailure(impl.plugin_name, error, origin.distribution), PluginLoadError(error))
                    continue
                folders[name] = ModelFolder(name, locator, origin)
        return folders

    def _fail(self, failure: PluginFailure, exc: Exception) -> None:
        if switch(STRICT_ENV):
            raise PluginLoadError(f"plugin {failure.plugin!r} failed to load: {failure.error}") from exc
        self.failures.append(failure)
