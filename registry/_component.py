"""The unit a plugin contributes: a named, typed, lazily built component."""
from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .errors import InvalidConfigError, did_you_mean

KINDS: tuple[str, ...] = (
    "process",
    "latent",
    "encoder",
    "schedule",
    "backbone",
    "sampler",
    "dataset",
    "metric",
)


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
            raise ValueError(f"config of {self.kind} {self.name!r} may not define a field 'name': it holds the registry name")


@dataclass(frozen=True)
class Origin:
    """Where a component came from, recorded by the host (never claimed by the plugin)."""

    plugin: str
    distribution: str | None = None
    version: str | None = None


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

    def factory(self) -> Callable[..., Any]:
        """The factory callable, importing a lazy 'module:attr' reference on first use."""
        if not self._resolved:
            target = self.spec.factory
            if isinstance(target, str):
                module_name, _, attr = target.partition(":")
                obj: Any = importlib.import_module(module_name)
                for part in attr.split("."):
                    obj = getattr(obj, part)
                target = obj
            self._resolved.append(target)
        return self._resolved[0]

    def build(self, options: dict[str, Any] | None = None, **context: Any) -> Any:
        """Instantiate the component from its config options plus host-provided context."""
        options = dict(options or {})
        if self.spec.config is not None:
            known = [f.name for f in dataclasses.fields(self.spec.config)]
            for key in options:
                if key not in known:
                    raise InvalidConfigError(
                        f"{self.kind} {self.name!r} has no option {key!r}{did_you_mean(key, known)} "
                        f"valid options: {', '.join(known)}"
                    )
            try:
                # the same type checks and conversions as a Hydra config, for options given from Python
                config = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(self.spec.config), options))
            except OmegaConfBaseException as error:
                key = getattr(error, "full_key", None)
                where = f"option {key!r} of " if key else "options for "
                raise InvalidConfigError(f"invalid {where}{self.kind} {self.name!r}: {str(error).splitlines()[0]}") from None
            except (TypeError, ValueError) as error:
                raise InvalidConfigError(f"invalid options for {self.kind} {self.name!r}: {error}") from None
            return self.factory()(config, **context)
        if options:
            raise TypeError(f"{self.kind} {self.name!r} takes no options, got {sorted(options)}")
        return self.factory()(**context)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready description used by the CLI and recorded in run folders."""
        return {
            "kind": self.kind,
            "name": self.name,
            "plugin": self.origin.plugin,
            "distribution": self.origin.distribution,
            "version": self.origin.version,
            "description": self.spec.description,
        }
