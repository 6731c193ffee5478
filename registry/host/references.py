"""Components that name other components (a sampler's token decoder, an objective's reward): each option declared
with ``registry.toolkit.options.refers_to`` is resolved by the same rules as a config's slots, its options checked
against the named component's config, and the choice recorded beside its owner."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from registry.errors import InvalidConfigError
from registry.toolkit.options import Reference, references

from .component import Component


@dataclass(frozen=True)
class Resolved:
    """A component as ladd chose it, with the components its options name (by option name), as chosen in turn."""

    component: Component
    nested: Mapping[str, Resolved] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The component's record (kind, name, qualified name, plugin, origin), with ``nested``: its references'."""
        record = self.component.as_dict()
        if self.nested:
            record["nested"] = {option: chosen.record() for option, chosen in self.nested.items()}
        return record


@dataclass(frozen=True)
class Choice:
    """What a component's options choose for one of its references: the name and that component's options."""

    option: str  # the option holding the name
    reference: Reference
    name: str
    options: dict[str, Any]

    @property
    def options_key(self) -> str:
        """Where its options are set, for messages (``token_decoder_options``, or the name's option)."""
        return self.reference.options or self.option


def choices(component: Component, options: Mapping[str, Any]) -> list[Choice]:
    """The references ``component``'s ``options`` make (unset ones at their defaults), in declaration order."""
    config = component.spec.config
    declared = references(config)
    if not declared or config is None:
        return []
    defaults = {f.name: _default(f) for f in dataclasses.fields(config)}
    found = []
    for option, reference in declared.items():
        name = options.get(option, defaults[option])
        if not isinstance(name, str) or not name:
            raise InvalidConfigError(
                f"{component.kind} {component.name!r}: {option}={name!r} must name a registered {reference.kind}"
            )
        nested = options.get(reference.options, defaults.get(reference.options)) if reference.options else None
        if nested is not None and not isinstance(nested, Mapping):
            raise InvalidConfigError(
                f"{component.kind} {component.name!r}: {reference.options} must be a mapping of the options of its "
                f"{option}, got {nested!r}"
            )
        found.append(Choice(option, reference, name, dict(nested or {})))
    return found


def inherited(choice: Choice, owner: Component, options: Mapping[str, Any], named: Component) -> dict[str, Any]:
    """The named component's options: those given, plus each option its owner passes on (``inherits``) where the named
    one has it and leaves it unset; one it lacks, set away from the owner's default, is refused."""
    given = dict(choice.options)
    config = owner.spec.config
    defaults = {} if config is None else {f.name: _default(f) for f in dataclasses.fields(config)}
    for key in choice.reference.inherits:
        value = options.get(key, defaults.get(key))
        if key in named.option_names():
            given.setdefault(key, value)
        elif value != defaults.get(key):
            raise InvalidConfigError(
                f"{owner.kind} {owner.name!r}: {key}={value!r} is passed on to its {choice.option}, but "
                f"{named.kind} {named.qualified!r} has no option {key!r}; leave {key} at {defaults.get(key)!r}"
            )
    return given


def _default(option: dataclasses.Field) -> Any:
    if option.default is not dataclasses.MISSING:
        return option.default
    if option.default_factory is not dataclasses.MISSING:
        return option.default_factory()
    return None
