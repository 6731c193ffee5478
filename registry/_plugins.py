"""Plugin discovery: entry points of group ``ladd`` loaded into a pluggy manager, each plugin checked before use."""
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
from .errors import PluginLoadError, did_you_mean

ENTRY_POINT_GROUP = "ladd"
STRICT_ENV = "LADD_STRICT_PLUGINS"
ALLOW_ENV = "LADD_PLUGINS_ALLOW"  # comma-separated plugin names: load only these (plus ladd's own)
BLOCK_ENV = "LADD_PLUGINS_BLOCK"  # comma-separated plugin names never loaded
NO_AUTOLOAD_ENV = "LADD_DISABLE_PLUGIN_AUTOLOAD"  # load no third-party entry point at all
OWN_DISTRIBUTION = "ladd"


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that was not loaded (failed or blocked), with the reason."""

    plugin: str
    error: str
    distribution: str | None = None

    @property
    def message(self) -> str:
        """One line: which plugin failed, why, and what to do about it."""
        source = f" ({self.distribution})" if self.distribution else ""
        return (
            f"plugin {self.plugin!r}{source} failed to load: {self.error}; "
            f"fix or uninstall it, or hide it with {BLOCK_ENV}={self.plugin}"
        )


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes"}


def _names(name: str) -> set[str] | None:
    value = os.environ.get(name)
    return None if value is None else {n.strip() for n in value.split(",") if n.strip()}


def blocked_reason(plugin: str, distribution: str | None) -> str | None:
    """Why the environment keeps this plugin from loading, or None when it may load."""
    if plugin in (_names(BLOCK_ENV) or set()):
        return f"blocked by {BLOCK_ENV}"
    if distribution == OWN_DISTRIBUTION:
        return None
    if _flag(NO_AUTOLOAD_ENV):
        return f"autoloading disabled by {NO_AUTOLOAD_ENV}"
    allowed = _names(ALLOW_ENV)
    if allowed is not None and plugin not in allowed:
        return f"not in {ALLOW_ENV}"
    return None


def _describe(error: Exception) -> str:
    return str(error) if isinstance(error, PluginLoadError) else f"{type(error).__name__}: {error}"


class PluginHost:
    """Owns the pluggy manager: loads each plugin, checks it, and collects its components and config folders.

    A plugin is taken whole or not at all: one that fails to import, implements an unknown hook, leaves a
    hook function undecorated or raises from a hook is unregistered and reported, and the others load.
    """

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager(_hookspecs.PROJECT)
        self.manager.add_hookspecs(_hookspecs)
        self.components: list[Component] = []
        self.config_dirs: list[Path] = []
        self.failures: list[PluginFailure] = []
        self.blocked: list[PluginFailure] = []

    def register(self, plugin: ModuleType | Any, name: str) -> None:
        """Register one plugin object under ``name`` and collect what it contributes."""
        try:
            self.manager.register(plugin, name=name)
        except Exception as exc:  # pluggy's validation of a hook's arguments, or a name taken twice
            self._fail(PluginFailure(name, _describe(exc)), exc)
            return
        self._admit(name)

    def load_entry_points(self) -> None:
        """Load every permitted plugin of entry-point group ``ladd``; third-party failures are recorded, not raised."""
        for entry_point in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name):
            distribution = entry_point.dist.metadata["Name"] if entry_point.dist else None
            reason = blocked_reason(entry_point.name, distribution)
            if reason is not None:
                self.manager.set_blocked(entry_point.name)
                self.blocked.append(PluginFailure(entry_point.name, reason, distribution))
                continue
            try:
                self.manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=entry_point.name)
            except Exception as exc:  # a broken third-party plugin must not take the others down
                self._fail(PluginFailure(entry_point.name, _describe(exc), distribution), exc)
                continue
            self._admit(entry_point.name)

    def origin(self, name: str) -> Origin:
        """Where a registered plugin came from, as pluggy recorded it when loading its entry point."""
        plugin = self.manager.get_plugin(name)
        for loaded, dist in self.manager.list_plugin_distinfo():
            if loaded is plugin:
                return Origin(plugin=name, distribution=dist.project_name, version=dist.version)
        return Origin(plugin=name)

    def _admit(self, name: str) -> None:
        origin = self.origin(name)
        try:
            self._check_hooks(name)
            components = [Component(spec, origin) for spec in self._specs(name)]
            folders = self._folders(name)
        except Exception as exc:
            self.manager.unregister(name=name)
            self._fail(PluginFailure(name, _describe(exc), origin.distribution), exc)
            return
        self.components.extend(components)
        self.config_dirs.extend(folders)

    def _hook_names(self) -> list[str]:
        return sorted(n for n, caller in vars(self.manager.hook).items() if not n.startswith("_") and caller.has_spec())

    def _check_hooks(self, name: str) -> None:
        """pluggy's check for unknown hooks, and a hook-named function that lacks ``@hookimpl``."""
        plugin = self.manager.get_plugin(name)
        hooks = self._hook_names()
        try:
            self.manager.check_pending()
        except pluggy.PluginValidationError:
            unknown = [c.name for c in self.manager.get_hookcallers(plugin) or [] if not c.has_spec()]
            raise PluginLoadError(
                f"@hookimpl function {unknown[0]!r} is not a ladd hook{did_you_mean(unknown[0], hooks)} "
                f"ladd's hooks are {', '.join(hooks)}"
            ) from None
        for hook in hooks:
            if callable(getattr(plugin, hook, None)) and self.manager.parse_hookimpl_opts(plugin, hook) is None:
                raise PluginLoadError(
                    f"it defines {hook}() without the @hookimpl decorator, so ladd would ignore it: "
                    f"decorate it with @registry.hookimpl"
                )

    def _results(self, name: str, hook: str) -> list[Any]:
        """What plugin ``name``'s implementation of ``hook`` returns, as a list (empty when it has none)."""
        found: list[Any] = []
        for impl in getattr(self.manager.hook, hook).get_hookimpls():
            if impl.plugin_name == name:
                returned = impl.function()
                if isinstance(returned, (str, bytes)) or not hasattr(returned, "__iter__"):
                    raise PluginLoadError(f"{hook}() returned {returned!r}; it must return a list")
                found.extend(returned)
        return found

    def _specs(self, name: str) -> list[ComponentSpec]:
        specs = self._results(name, "ladd_components")
        for spec in specs:
            if not isinstance(spec, ComponentSpec):
                raise PluginLoadError(f"ladd_components() returned {spec!r}; every item must be a registry.ComponentSpec")
        return specs

    def _folders(self, name: str) -> list[Path]:
        folders = []
        for entry in self._results(name, "ladd_config_dirs"):
            if not isinstance(entry, (str, os.PathLike)) or not Path(entry).is_dir():
                raise PluginLoadError(f"ladd_config_dirs() returned {entry!r}, which is not a folder")
            folders.append(Path(entry))
        return folders

    def _fail(self, failure: PluginFailure, exc: Exception) -> None:
        if failure.distribution == OWN_DISTRIBUTION:
            raise PluginLoadError(
                f"ladd's own plugin {failure.plugin!r} failed to load ({failure.error}): this installation of ladd "
                f"is broken; reinstall it"
            ) from exc
        if _flag(STRICT_ENV):
            raise PluginLoadError(f"{failure.message} ({STRICT_ENV} is set)") from exc
        self.failures.append(failure)
