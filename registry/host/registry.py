"""The component registry: lookup by (kind, name), name clashes reported where a name is used, helpful errors."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from registry.errors import ComponentClashError, UnknownComponentError, did_you_mean

from .commands import CommandHook
from .component import KINDS, Component
from .model_folders import ModelFolder, PluginImporter, resolve
from .plugins import BLOCK_ENV, PluginFailure, PluginHost


class Registry:
    """Every component contributed by the loaded plugins, indexed by kind and name.

    Two plugins registering the same (kind, name) do not stop ladd: the clash is listed by ``clashes()``.
    A name ladd's own plugin registers stays ladd's; between third parties, the name is an error only
    where it is looked up. A lookup naming the plugin a run recorded gets that plugin's component.
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

        ``plugin``: the plugin a run or a model recorded for it, which wins a clash when it is loaded.
        """
        table = self._table(kind)
        found = table.get(name)
        if not found:
            valid = ", ".join(sorted(table)) or "(none registered)"
            raise UnknownComponentError(
                f"unknown {kind} {name!r}{did_you_mean(name, table)} valid {kind} names: {valid}{self._not_loaded()}"
            )
        recorded = [c for c in found if c.origin.plugin == plugin]
        own = [c for c in found if c.origin.own]
        chosen = recorded or own or found
        if len(chosen) > 1:
            raise ComponentClashError(clash_message(found))
        return chosen[0]

    def option(self, kind: str, name: str) -> Component:
        """The component whose options a config selecting ``name`` takes: the one ``get`` finds, or the first
        registered for a clash ``get`` refuses (the config then fails where it is built)."""
        try:
            return self.get(kind, name)
        except ComponentClashError:
            return self._table(kind)[name][0]

    def build(self, kind: str, name: str, options: dict[str, Any] | None = None, **context: Any) -> Any:
        """Instantiate a component by kind and name."""
        return self.get(kind, name).build(options, **context)

    def clashes(self) -> list[list[Component]]:
        """Groups of components that share a kind and name (each group from two or more plugins)."""
        return [found for kind in KINDS for _, found in sorted(self._by_kind[kind].items()) if len(found) > 1]

    def locate(self, spec: str) -> str:
        """A model given in a config: Hub ids and paths as given, ``pkg:NAME`` as a folder a plugin provides."""
        return resolve(spec, self.model_folders)

    def importer(self, name: str) -> PluginImporter:
        """The checkpoint importer a plugin ships under ``name``, or an error listing the ones installed."""
        if name not in self.importers:
            provided = ", ".join(sorted(self.importers)) or "none"
            raise UnknownComponentError(
                f"no installed plugin imports {name!r} checkpoints{did_you_mean(name, self.importers)} "
                f"(importers: {provided})"
            )
        return self.importers[name]

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


def clash_message(found: list[Component]) -> str:
    """One line naming every plugin that registers the same component and how to keep one."""
    first = found[0]
    others = [c for c in found if not c.origin.own]
    plugins = ", ".join(
        f"{c.origin.plugin!r} ({c.origin.distribution or '-'} {c.origin.version or '-'})" for c in others
    )
    if len(others) < len(found):
        return (
            f"{first.kind} {first.name!r} of {'plugins' if len(others) > 1 else 'plugin'} {plugins} has the name of "
            f"ladd's own {first.kind}, which configs select; rename it in that plugin (runs and models that recorded "
            "it still load it)"
        )
    return (
        f"{first.kind} {first.name!r} is registered by several plugins: {plugins}; to use one, hide the others "
        f"with {BLOCK_ENV}={found[-1].origin.plugin} (comma-separated), or uninstall or rename one"
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
