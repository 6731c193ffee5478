"""Plugin discovery: entry points of group ``ladd`` loaded into a pluggy manager, each plugin checked before use."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from registry.errors import PluginLoadError, did_you_mean
from registry.host import hookspecs as _hookspecs

from .commands import CommandHook
from .component import QUALIFIER, Component, ComponentSpec, Origin, qualify
from .config_types import SUPPORTED, untypable
from .migrations import declared_contract
from .model_folders import ModelFolder, PluginImporter
from .plugin_code import FAULTS, PluginCode, describe
from .switches import switch

ENTRY_POINT_GROUP = "ladd"
STRICT_ENV = "LADD_STRICT_PLUGINS"
ALLOW_ENV = "LADD_PLUGINS_ALLOW"  # comma-separated plugin names: load only these (plus ladd's own)
BLOCK_ENV = "LADD_PLUGINS_BLOCK"  # comma-separated plugin names never loaded
NO_AUTOLOAD_ENV = "LADD_DISABLE_PLUGIN_AUTOLOAD"  # load no third-party entry point at all
OWN_DISTRIBUTION = "ladd"  # its own entry points are the only ones the variables above cannot turn off


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
    """Why the environment keeps this plugin from loading, or None when it may load (``own``: ladd's own entry
    point)."""
    if own:
        return None
    if plugin in (_names(BLOCK_ENV) or set()):
        return f"blocked by {BLOCK_ENV}"
    if not autoload:
        return f"autoloading disabled by {NO_AUTOLOAD_ENV}"
    allowed = _names(ALLOW_ENV)
    if allowed is not None and plugin not in allowed:
        return f"not in {ALLOW_ENV}"
    return None


def _describe(error: BaseException) -> str:
    return str(error) if isinstance(error, PluginLoadError) else describe(error)


def _check_config(component: Component) -> None:
    """A component's config dataclass must be one OmegaConf can type: else no config of any experiment composes."""
    config = component.spec.config
    problem = None if config is None else untypable(config)
    if problem is not None:
        raise PluginLoadError(
            f"config {getattr(config, '__name__', config)} of {component.kind} {component.name!r} is not a type "
            f"OmegaConf can check ({problem}): use {SUPPORTED}"
        )


class PluginHost:
    """Owns the pluggy manager: loads each plugin, checks it, and collects its components, config and model folders.

    A plugin is taken whole or not at all: one that fails to import, implements an unknown hook, leaves a
    hook function undecorated or raises from a hook is unregistered and reported, and the others load.
    """

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager(_hookspecs.PROJECT)
        self.manager.add_hookspecs(_hookspecs)
        self.components: list[Component] = []
        self.config_dirs: dict[Path, str] = {}  # folder -> the plugin contributing it
        self.model_folders: dict[str, ModelFolder] = {}  # by qualified name PLUGIN:NAME
        self.importers: dict[str, PluginImporter] = {}  # by qualified name PLUGIN:NAME
        self.command_hooks: list[CommandHook] = []
        self.failures: list[PluginFailure] = []
        self.blocked: list[PluginFailure] = []
        self.notes: list[str] = []  # one line each, for the user: what the environment asked that ladd did not do
        self._origins: dict[str, Origin] = {}

    def register(self, plugin: ModuleType | Any, name: str, origin: Origin | None = None, own: bool = False) -> None:
        """Register one plugin object under ``name`` and collect what it contributes (``own``: ladd's own, whose
        failure is fatal)."""
        origin = dataclasses.replace(origin or Origin(plugin=name), own=own)
        if self.manager.has_plugin(name):
            taken = self._origins[name].distribution
            error = f"the plugin name {name!r} is already taken by distribution {taken}; rename this entry point"
            self._fail(PluginFailure(name, error, origin.distribution), PluginLoadError(error))
            return
        with PluginCode() as code:
            try:
                origin = dataclasses.replace(origin, contract=declared_contract(plugin))
                self.manager.register(plugin, name=name)  # pluggy validates each hook's arguments
                self._origins[name] = origin
                collected = self._collect(name, origin)
            except FAULTS as exc:
                if not code.is_fault(exc):
                    raise
                if self.manager.is_registered(plugin):
                    self.manager.unregister(name=name)
                self._fail(PluginFailure(name, _describe(exc), origin.distribution), exc, own)
                return
        self.components.extend(collected[0])
        self.config_dirs.update(dict.fromkeys(collected[1], name))
        self.model_folders.update(collected[2])
        self.importers.update(collected[3])
        self.command_hooks += [CommandHook(origin, hook) for hook in self._implementations(name, "ladd_commands")]

    def load_entry_points(self) -> None:
        """Load every permitted plugin of entry-point group ``ladd``; third-party failures are recorded, not raised."""
        autoload = not switch(NO_AUTOLOAD_ENV)
        switch(STRICT_ENV)  # a value ladd does not understand is refused now, not at the first failure
        own = own_entry_points()
        # ladd's own entry points first: a third party cannot take their names
        ordered = sorted(
            metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ((ep.name, ep.value) not in own, ep.name)
        )
        for entry_point in ordered:
            dist = entry_point.dist
            origin = Origin(
                plugin=entry_point.name,
                distribution=dist.metadata["Name"] if dist else None,
                version=dist.version if dist else None,
            )
            is_own = (entry_point.name, entry_point.value) in own
            if is_own and entry_point.name in (_names(BLOCK_ENV) or set()):
                self.notes.append(f"{BLOCK_ENV} names ladd's own plugin {entry_point.name!r}, which always loads")
            reason = blocked_reason(entry_point.name, is_own, autoload)
            if reason is not None:
                self.manager.set_blocked(entry_point.name)
                self.blocked.append(PluginFailure(entry_point.name, reason, origin.distribution))
                continue
            with PluginCode() as code:
                try:
                    plugin = entry_point.load()
                except FAULTS as exc:  # a broken third-party plugin must not take the others down
                    if not code.is_fault(exc):
                        raise
                    self._fail(PluginFailure(entry_point.name, _describe(exc), origin.distribution), exc, is_own)
                    continue
            self.register(plugin, entry_point.name, origin, is_own)

    def _collect(
        self, name: str, origin: Origin
    ) -> tuple[list[Component], list[Path], dict[str, ModelFolder], dict[str, PluginImporter]]:
        """Plugin ``name``'s components, config folders, model folders and importers, each checked (raises on the
        first fault)."""
        self._check_hooks(name)
        components = [Component(spec, origin) for spec in self._specs(name)]
        for component in components:
            _check_config(component)
        folders = self._named(name, "ladd_model_folders")
        importers = self._named(name, "ladd_importers")
        return (
            components,
            self._folders(name),
            {qualify(name, key): ModelFolder(key, value, origin) for key, value in folders.items()},
            {qualify(name, key): PluginImporter(key, value, origin) for key, value in importers.items()},
        )

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

    def _implementations(self, name: str, hook: str) -> list[Any]:
        """Plugin ``name``'s implementations of ``hook``."""
        return [impl.function for impl in getattr(self.manager.hook, hook).get_hookimpls() if impl.plugin_name == name]

    def _returns(self, name: str, hook: str) -> list[Any]:
        """What plugin ``name``'s implementations of ``hook`` return, called without arguments (empty when it has
        none)."""
        return [function() for function in self._implementations(name, hook)]

    def _results(self, name: str, hook: str) -> list[Any]:
        """The items of the lists plugin ``name``'s implementations of ``hook`` return."""
        found: list[Any] = []
        for returned in self._returns(name, hook):
            if isinstance(returned, (str, bytes)) or not hasattr(returned, "__iter__"):
                raise PluginLoadError(f"{hook}() returned {returned!r}; it must return a list")
            found.extend(returned)
        return found

    def _specs(self, name: str) -> list[ComponentSpec]:
        specs = self._results(name, "ladd_components")
        for spec in specs:
            if not isinstance(spec, ComponentSpec):
                raise PluginLoadError(
                    f"ladd_components() returned {spec!r}; every item must be a registry.ComponentSpec"
                )
        return specs

    def _folders(self, name: str) -> list[Path]:
        folders = []
        for entry in self._results(name, "ladd_config_dirs"):
            if not isinstance(entry, (str, os.PathLike)) or not Path(entry).is_dir():
                raise PluginLoadError(f"ladd_config_dirs() returned {entry!r}, which is not a folder")
            folders.append(Path(entry))
        return folders

    def _named(self, name: str, hook: str) -> dict[str, str]:
        """The ``{NAME: "module:function"}`` plugin ``name`` returns from ``hook``. A NAME another plugin also
        declares is no fault of either: the bare name is refused where it is used, ``PLUGIN:NAME`` selects each."""
        declared: dict[str, str] = {}
        for returned in self._returns(name, hook):
            if not isinstance(returned, dict) or not all(
                isinstance(k, str) and QUALIFIER not in k and isinstance(v, str) and ":" in v
                for k, v in returned.items()
            ):
                raise PluginLoadError(
                    f"{hook}() returned {returned!r}; it must return a dict of NAME: 'module:function' (a NAME "
                    f"without {QUALIFIER!r})"
                )
            declared.update(returned)
        return declared

    def _fail(self, failure: PluginFailure, exc: BaseException, own: bool = False) -> None:
        if own:
            raise PluginLoadError(
                f"ladd's own plugin {failure.plugin!r} failed to load ({failure.error}): this installation of ladd "
                f"is broken; reinstall it"
            ) from exc
        if switch(STRICT_ENV):
            raise PluginLoadError(f"{failure.message} ({STRICT_ENV} is set)") from exc
        self.failures.append(failure)
