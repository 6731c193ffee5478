"""The unit a plugin contributes: a named, typed, lazily built component."""
from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from registry.errors import ComponentError, InvalidConfigError, LaddError, did_you_mean
from registry.toolkit.options import references

from .config_types import typed_config
from .kinds import KIND_SPECS, KINDS
from .migrations import change_missed, migration_line
from .plugin_code import FAULTS, PluginCode, describe


@dataclass(frozen=True)
class ComponentSpec:
    """What a plugin declares: kind, registry name, factory, optional config dataclass."""

    kind: str
    name: str
    factory: Callable[..., Any] | str
    config: type | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"component {self.name!r} has unknown kind {self.kind!r}{did_you_mean(self.kind, KINDS)} "
                f"valid kinds: {', '.join(KINDS)}"
            )
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"component name {self.name!r} must be a non-empty identifier (letters, digits, _ and -)")
        if isinstance(self.factory, str) and ":" not in self.factory:
            raise ValueError(f"lazy factory {self.factory!r} of {self.kind} {self.name!r} must read 'module:attribute'")
        if self.config is not None and not dataclasses.is_dataclass(self.config):
            raise TypeError(f"config of {self.kind} {self.name!r} must be a dataclass, got {self.config!r}")
        if self.config is not None and "name" in {f.name for f in dataclasses.fields(self.config)}:
            raise ValueError(
                f"config of {self.kind} {self.name!r} may not define a field 'name': it holds the registry name"
            )


#: What separates a plugin's name from a component's in a qualified name: ``PLUGIN:NAME`` (``builtin:confidence``).
QUALIFIER = ":"


def qualify(plugin: str, name: str) -> str:
    """The qualified name ``PLUGIN:NAME`` of plugin ``plugin``'s component ``name``."""
    return f"{plugin}{QUALIFIER}{name}"


def split_name(name: str) -> tuple[str | None, str]:
    """``PLUGIN:NAME`` as (plugin, name); a bare name as (None, name)."""
    plugin, separator, bare = str(name).rpartition(QUALIFIER)
    return (plugin, bare) if separator else (None, bare)


def _import(reference: str) -> Any:
    module_name, _, attr = reference.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class Origin:
    """Where a component came from, recorded by the host (never claimed by the plugin)."""

    plugin: str
    distribution: str | None = None
    version: str | None = None
    own: bool = False  # registered by ladd's own distribution: its names win over a third party's
    contract: int | None = None  # the contract version the plugin declares it was written for (None: not declared)


@dataclass(frozen=True)
class Component:
    """A registered component: the plugin's spec plus the host-recorded origin."""

    spec: ComponentSpec
    origin: Origin
    _resolved: list = field(default_factory=list, compare=False, repr=False)

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def qualified(self) -> str:
        """``PLUGIN:NAME``: the name that selects this component whatever else is installed."""
        return qualify(self.origin.plugin, self.name)

    @property
    def label(self) -> str:
        """``kind 'name' of plugin 'p' (distribution version)``: what error messages call this component."""
        origin = self.origin
        source = f" ({origin.distribution} {origin.version or ''})".rstrip() if origin.distribution else ""
        return f"{self.kind} {self.name!r} of plugin {origin.plugin!r}{source}"

    def factory(self) -> Callable[..., Any]:
        """The factory callable, importing a lazy 'module:attr' reference on first use."""
        if not self._resolved:
            target = self.spec.factory
            if isinstance(target, str):
                with PluginCode() as code:
                    try:
                        target = _import(target)
                    except FAULTS as error:
                        if not code.is_fault(error):
                            raise
                        problem = f"factory {self.spec.factory!r} does not import: {describe(error)}"
                        raise self._error(problem) from error
            self._resolved.append(target)
        return self._resolved[0]

    def build(
        self, options: dict[str, Any] | None = None, nested: Mapping[str, Any] | None = None, **context: Any
    ) -> Any:
        """Instantiate the component from its config options plus host-provided context.

        ``nested``: the built component each option naming one refers to (``Registry.instantiate`` builds them),
        passed to the factory as the keyword of the option's name.
        """
        options = dict(options or {})
        if self.spec.config is None and options:
            raise InvalidConfigError(f"{self.kind} {self.name!r} takes no options, got {sorted(options)}")
        unbuilt = sorted(set(references(self.spec.config)) - set(nested or {}))
        if unbuilt:
            raise ComponentError(
                "built without the components its options name",
                f"{self.label} names other components in {', '.join(unbuilt)}: build it with registry.build or "
                "Registry.instantiate, which build those too",
            )
        context = {**context, **(nested or {})}
        arguments = () if self.spec.config is None else (self._config(options),)
        factory = self.factory()
        if isinstance(factory, type):
            self._refuse_outdated(factory)  # before its own checks fail for what the contract no longer passes
        with PluginCode() as code:
            try:
                instance = factory(*arguments, **context)
            except LaddError:
                raise
            except FAULTS as error:
                if not code.is_fault(error):
                    raise
                raise self._error(f"failed to build: {describe(error)}") from error
        self._refuse_outdated(instance)
        spec = KIND_SPECS[self.kind]
        lacking = spec.lacks(instance)
        if lacking:
            actual = type(instance)
            where = "" if actual.__module__ == "builtins" else f"{actual.__module__}."
            raise self._error(
                f"factory returned {where}{actual.__qualname__}, expected registry.interfaces.{spec.interface} "
                f"(it lacks {', '.join(lacking)})"
            )
        return instance

    def _refuse_outdated(self, component: Any) -> None:
        """Refuse, naming the change, a component (its class or an instance) written before a change of the
        contract."""
        change = change_missed(self.kind, component)
        if change is not None:
            raise self._error(migration_line(change, self.origin.contract))

    def check_options(self, options: dict[str, Any]) -> None:
        """Refuse ``options`` as building the component would, without building it."""
        if self.spec.config is not None:
            self._config(dict(options))

    def option_names(self) -> list[str]:
        """The options of this component's config, in declaration order."""
        return [] if self.spec.config is None else [f.name for f in dataclasses.fields(self.spec.config)]

    def unknown_option(self, key: str) -> str:
        """Why ``key`` is not an option of this component, with the closest and the valid ones."""
        known = self.option_names()
        if not known:
            return f"{self.kind} {self.name!r} takes no options"
        valid = ", ".join(known)
        return f"{self.kind} {self.name!r} has no option {key!r}{did_you_mean(key, known)} valid options: {valid}"

    def _config(self, options: dict[str, Any]) -> Any:
        """The config dataclass filled from ``options``, checked and converted as a Hydra config would be."""
        for key in options:
            if key not in self.option_names():
                raise InvalidConfigError(self.unknown_option(key))
        try:
            return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(typed_config(self.spec.config)), options))
        except OmegaConfBaseException as error:
            full_key = getattr(error, "full_key", None)
            where = f"option {full_key!r} of " if full_key else "options for "
            raise InvalidConfigError(
                f"invalid {where}{self.kind} {self.name!r}: {str(error).splitlines()[0]}"
            ) from None
        except (TypeError, ValueError) as error:
            raise InvalidConfigError(f"invalid options for {self.kind} {self.name!r}: {error}") from None

    def _error(self, problem: str) -> ComponentError:
        return ComponentError(
            problem,
            f"{self.label} {problem}; fix or update plugin {self.origin.plugin!r}, or choose another {self.kind} "
            f"(`ladd list-components --kind {self.kind}`)",
        )

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready description used by the CLI and recorded in run folders."""
        return {
            "kind": self.kind,
            "name": self.name,
            "qualified": self.qualified,
            "plugin": self.origin.plugin,
            "distribution": self.origin.distribution,
            "version": self.origin.version,
            "description": self.spec.description,
        }
