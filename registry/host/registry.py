"""The component registry: lookup by (kind, name), name clashes reported where a name is used, helpful errors."""
from __future__ import annotations

import copy
import importlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from registry.errors import ComponentClashError, InvalidConfigError, LaddError, UnknownComponentError, did_you_mean

from .commands import CommandHook
from .component import KINDS, Component, qualify, split_name
from .kinds import KIND_SPECS
from .model_folders import ModelFolder, PluginImporter, names, resolve, select
from .plugins import PluginFailure, PluginHost
from .references import Choice, Resolved, choices, inherited


class Registry:
    """Every component contributed by the loaded plugins, indexed by kind and name.

    Two plugins registering the same (kind, name) do not stop ladd: the clash is listed by ``clashes()``, and the bare
    name is an error where it is looked up (ladd's own plugin, ``builtin``, included); the qualified name
    ``PLUGIN:NAME`` selects each. A lookup naming the plugin a run recorded gets that plugin's component.
    """

    def __init__(
        self,
        components: Iterable[Component],
        failures: Iterable[PluginFailure] = (),
        config_dirs: Mapping[Path, str] | None = None,
        blocked: Iterable[PluginFailure] = (),
        model_folders: Mapping[str, ModelFolder] | None = None,
        notes: Iterable[str] = (),
        importers: Mapping[str, PluginImporter] | None = None,
        command_hooks: Iterable[CommandHook] = (),
    ):
        self._by_kind: dict[str, dict[str, list[Component]]] = {kind: {} for kind in KINDS}
        for component in components:
            self._by_kind[component.kind].setdefault(component.name, []).append(component)
        self.failures = list(failures)
        self.config_dirs = dict(config_dirs or {})  # folder -> the plugin contributing it
        self.blocked = list(blocked)
        self.model_folders = dict(model_folders or {})
        self.notes = list(notes)
        self.importers = dict(importers or {})
        self.command_hooks = list(command_hooks)  # plugins' ladd_commands(commands), run as the parser is built
        self._pins: dict[tuple[str, str], str] = {}  # (kind, bare name) -> the plugin a record names for it

    @classmethod
    def from_host(cls, host: PluginHost) -> Registry:
        """Collect components from an already-loaded plugin host."""
        return cls(
            host.components, host.failures, host.config_dirs, host.blocked, host.model_folders, host.notes,
            host.importers, host.command_hooks,
        )

    def names(self, kind: str) -> list[str]:
        """Sorted registry names of one kind."""
        return sorted(self._table(kind))

    def get(self, kind: str, name: str, plugin: str | None = None) -> Component:
        """The component of that kind and name, or an error listing valid names and closest matches.

        ``name`` is bare (``confidence``) or qualified (``PLUGIN:NAME``, ``builtin:confidence``). A bare name that
        several plugins register is refused naming their qualified names, never resolved by a preference.
        ``plugin``: the plugin a run or a model recorded for a bare name, which picks it among several when loaded.
        """
        table = self._table(kind)
        wanted, bare = split_name(name)
        found = table.get(bare, [])
        if wanted is not None:
            return self._of_plugin(kind, bare, wanted, found)
        if not found:
            valid = ", ".join(sorted(table)) or "(none registered)"
            raise UnknownComponentError(
                f"unknown {kind} {name!r}{did_you_mean(name, table)} valid {kind} names: {valid}{self._not_loaded()}"
            )
        pinned = plugin or self._pins.get((kind, bare))
        recorded = [c for c in found if c.origin.plugin == pinned]
        chosen = recorded or found
        if len(chosen) > 1:
            raise ComponentClashError(clash_message(found))
        return chosen[0]

    def _of_plugin(self, kind: str, name: str, plugin: str, found: list[Component]) -> Component:
        """Plugin ``plugin``'s component ``name`` (a qualified name), or one line saying why there is none."""
        for component in found:
            if component.origin.plugin == plugin:
                return component
        qualified = qualify(plugin, name)
        reason = self.unavailable(plugin)
        if reason is not None:
            raise UnknownComponentError(f"{kind} {qualified!r} is not available: {reason}")
        own = sorted(c.name for c in self if c.kind == kind and c.origin.plugin == plugin)
        if not own and not any(c.origin.plugin == plugin for c in self):
            loaded = sorted({c.origin.plugin for c in self})
            close = did_you_mean(plugin, loaded) or ";"
            raise UnknownComponentError(
                f"{kind} {qualified!r} names plugin {plugin!r}, which is not installed{close} loaded plugins: "
                f"{', '.join(loaded)}"
            )
        others = ", ".join(c.qualified for c in found)
        valid = ", ".join(own) or f"none (it registers no {kind})"
        elsewhere = f"; {name!r} is {others}" if others else ""
        raise UnknownComponentError(
            f"plugin {plugin!r} registers no {kind} {name!r}{did_you_mean(name, own) or ';'} its {kind} names: "
            f"{valid}{elsewhere}"
        )

    def pinned(self, records: Mapping[str, Any]) -> Registry:
        """This registry with each bare name a run recorded (``components.json``: slot -> kind, name, plugin and
        ``nested``) looked up as that run's plugin's, whatever else registers it: what a resumed run composes with."""
        pinned = copy.copy(self)
        pinned._pins = {**self._pins}
        entries = list(records.values())
        while entries:
            entry = entries.pop()
            if isinstance(entry, Mapping) and all(isinstance(entry.get(k), str) for k in ("kind", "name", "plugin")):
                pinned._pins[entry["kind"], entry["name"]] = entry["plugin"]
                entries += list((entry.get("nested") or {}).values())
        return pinned

    def option(self, kind: str, name: str) -> Component:
        """The component whose options a config selecting ``name`` takes: the one ``get`` finds, or the first
        registered for a clash ``get`` refuses (the config then fails where it is built)."""
        try:
            return self.get(kind, name)
        except ComponentClashError:
            return self._table(kind)[split_name(name)[1]][0]

    def build(self, kind: str, name: str, options: dict[str, Any] | None = None, **context: Any) -> Any:
        """Instantiate a component by kind and name (with the components its options name)."""
        return self.instantiate(self.get(kind, name), options, **context)[0]

    def instantiate(
        self, component: Component, options: Mapping[str, Any] | None = None, recorded: Any = None, **context: Any
    ) -> tuple[Any, Resolved]:
        """``component`` built from ``options`` and ``context``, and what was chosen for it.

        Each option naming another component (``registry.toolkit.options.refers_to``) is looked up as a config's
        component is (``recorded``: the record of an earlier choice, whose plugins pick a bare name among several),
        built from its options (with the context keywords of its own kind that ``context`` holds) and passed to the
        factory as the keyword of the option's name; the option itself then holds the qualified name.
        """
        options = dict(options or {})
        built: dict[str, Any] = {}
        chosen: dict[str, Resolved] = {}
        for choice in choices(component, options):
            earlier = _nested_record(recorded, choice.option)
            named = self.get(choice.reference.kind, choice.name, recorded_plugin_of(earlier))
            _check_interface(self, component, choice, named)
            kind_context = {key: value for key, value in context.items() if key in KIND_SPECS[named.kind].context}
            try:
                instance, resolved = self.instantiate(
                    named, inherited(choice, component, options, named), earlier, **kind_context
                )
            except InvalidConfigError as error:
                raise InvalidConfigError(f"{choice.options_key}: {error}") from None
            built[choice.option], chosen[choice.option] = instance, resolved
            options[choice.option] = named.qualified
        return component.build(options, nested=built, **context), Resolved(component, chosen)

    def check_options(self, component: Component, options: Mapping[str, Any]) -> None:
        """Refuse ``options`` as building ``component`` would (the components they name and their options included),
        without building anything."""
        component.check_options(dict(options))
        for choice in choices(component, options):
            named = self.get(choice.reference.kind, choice.name)
            try:
                self.check_options(named, inherited(choice, component, options, named))
            except InvalidConfigError as error:
                raise InvalidConfigError(f"{choice.options_key}: {error}") from None

    def clashes(self) -> list[list[Component]]:
        """Groups of components that share a kind and name (each group from two or more plugins)."""
        return [found for kind in KINDS for _, found in sorted(self._by_kind[kind].items()) if len(found) > 1]

    def locate(self, spec: str) -> str:
        """A model given in a config: Hub ids and paths as given, ``pkg:NAME`` as a folder a plugin provides."""
        return resolve(spec, self.model_folders)

    def importer(self, name: str) -> PluginImporter:
        """The checkpoint importer a plugin ships under ``name``, or an error listing the ones installed."""
        importer = select(self.importers, name, "importer")
        if importer is None:
            provided = names(self.importers)
            raise UnknownComponentError(
                f"no installed plugin imports {name!r} checkpoints{did_you_mean(name, provided)} "
                f"(importers: {', '.join(provided) or 'none'})"
            )
        return importer

    def unavailable(self, plugin: str) -> str | None:
        """Why plugin ``plugin`` contributes nothing here (failed or blocked), or None when nothing is known."""
        for failure in self.failures:
            if failure.plugin == plugin:
                return failure.message
        for blocked in self.blocked:
            if blocked.plugin == plugin:
                return f"plugin {plugin!r} is not loaded ({blocked.error})"
        return None

    def __iter__(self) -> Iterator[Component]:
        for kind in KINDS:
            for name in sorted(self._by_kind[kind]):
                yield from self._by_kind[kind][name]

    def _table(self, kind: str) -> dict[str, list[Component]]:
        if kind not in self._by_kind:
            raise UnknownComponentError(f"unknown component kind {kind!r}; valid kinds: {', '.join(KINDS)}")
        return self._by_kind[kind]

    def _not_loaded(self) -> str:
        """A note on the plugins that did not load, whose components may be the ones missing."""
        if not self.failures and not self.blocked:
            return ""
        notes = [f.message for f in self.failures] + [f"plugin {b.plugin!r} is not loaded "
            f"({b.error})" for b in self.blocked]
        return "; not searched: " + "; ".join(notes)


def recorded_plugin_of(entry: Any) -> str | None:
    """The plugin a component record names, or None when it names none usable."""
    plugin = entry.get("plugin") if isinstance(entry, Mapping) else None
    return plugin if isinstance(plugin, str) else None


def _nested_record(entry: Any, option: str) -> Any:
    """The record of the component that option ``option`` of a recorded component named, or None."""
    nested = entry.get("nested") if isinstance(entry, Mapping) else None
    return nested.get(option) if isinstance(nested, Mapping) else None


def _check_interface(registry: Registry, owner: Component, choice: Choice, named: Component) -> None:
    """Refuse, before building it, a named component that is not of the interface its reference asks for."""
    interface = choice.reference.interface
    if interface is None:
        return
    wanted = getattr(importlib.import_module("registry.interfaces"), interface)
    if _is_a(named, wanted):
        return
    valid = [c.name for c in registry if c.kind == named.kind and _is_a(c, wanted)]
    raise InvalidConfigError(
        f"{owner.kind} {owner.name!r}: {choice.option}={choice.name!r} is no registry.interfaces.{interface} "
        f"({named.label} is not one); valid: {', '.join(sorted(valid)) or 'none installed'}"
    )


def _is_a(component: Component, interface: type) -> bool:
    """Whether a component's factory is a class implementing ``interface`` (a factory that does not import is not)."""
    try:
        factory = component.factory()
    except LaddError:
        return False
    return isinstance(factory, type) and issubclass(factory, interface)


def clash_message(found: list[Component]) -> str:
    """One line naming every plugin that registers the same component and the qualified names that select each."""
    first = found[0]
    plugins = ", ".join(
        f"{c.origin.plugin!r} ({c.origin.distribution or '-'} {c.origin.version or '-'})" for c in found
    )
    return (
        f"{first.kind} {first.name!r} is registered by several plugins: {plugins}; name the one you mean: "
        f"{' or '.join(c.qualified for c in found)}"
    )


_REGISTRY: Registry | None = None


def load(*, reload: bool = False) -> Registry:
    """Load plugins from entry points (once per process) and return the registry."""
    global _REGISTRY
    if _REGISTRY is None or reload:
        host = PluginHost()
        host.load_entry_points()
        _REGISTRY = Registry.from_host(host)
    return _REGISTRY
