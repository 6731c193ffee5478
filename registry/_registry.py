"""The component registry: lookup by (kind, name), clash detection, helpful errors."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ._component import KINDS, Component
from ._plugins import PluginFailure, PluginHost
from .errors import ComponentClashError, UnknownComponentError, did_you_mean
from .model_folders import ModelFolder, resolve


class Registry:
    """Every component contributed by the loaded plugins, indexed by kind and name."""

    def __init__(
        self,
        components: Iterable[Component],
        failures: Iterable[PluginFailure] = (),
        config_dirs: Iterable[Path] = (),
        blocked: Iterable[PluginFailure] = (),
        model_folders: Mapping[str, ModelFolder] | None = None,
    ):
        self._by_kind: dict[str, dict[str, Component]] = {kind: {} for kind in KINDS}
        for component in components:
            table = self._by_kind[component.kind]
            previous = table.get(component.name)
            if previous is not None:
                raise ComponentClashError(
                    f"{component.kind} {component.name!r} is registered by two plugins: "
                    f"{previous.origin.plugin!r} ({previous.origin.distribution}) and "
                    f"{component.origin.plugin!r} ({component.origin.distribution}); uninstall or rename one"
                )
            table[component.name] = component
        self.failures = list(failures)
        self.config_dirs = list(config_dirs)
        self.blocked = list(blocked)
        self.model_folders = dict(model_folders or {})

    @classmethod
    def from_host(cls, host: PluginHost) -> Registry:
        """Collect components from an already-loaded plugin host."""
        components, folders = host.components(), host.model_folders()
        return cls(components, host.failures, host.config_dirs(), host.blocked, folders)

    def names(self, kind: str) -> list[str]:
        """Sorted registry names of one kind."""
        return sorted(self._table(kind))

    def get(self, kind: str, name: str) -> Component:
        """The component of that kind and name, or an error listing valid names and closest matches."""
        table = self._table(kind)
        if name in table:
            return table[name]
        valid = ", ".join(sorted(table)) or "(none registered)"
        raise UnknownComponentError(f"unknown {kind} {name!r}{did_you_mean(name, table)} valid {kind} names: {valid}")

    def build(self, kind: str, name: str, options: dict[str, Any] | None = None, **context: Any) -> Any:
        """Instantiate a component by kind and name."""
        return self.get(kind, name).build(options, **context)

    def locate(self, spec: str) -> str:
        """A model given in a config: Hub ids and paths as given, ``pkg:NAME`` as a folder a plugin provides."""
        return resolve(spec, self.model_folders)

    def __iter__(self):
        for kind in KINDS:
            yield from (self._by_kind[kind][name] for name in sorted(self._by_kind[kind]))

    def _table(self, kind: str) -> dict[str, Component]:
        if kind not in self._by_kind:
            raise UnknownComponentError(f"unknown component kind {kind!r}; valid kinds: {', '.join(KINDS)}")
        return self._by_kind[kind]


_HOST: PluginHost | None = None
_REGISTRY: Registry | None = None


def load(*, reload: bool = False) -> Registry:
    """Load plugins from entry points (once per process) and return the registry."""
    global _HOST, _REGISTRY
    if _REGISTRY is None or reload:
        _HOST = PluginHost()
        _HOST.load_entry_points()
        _REGISTRY = Registry.from_host(_HOST)
    return _REGISTRY
