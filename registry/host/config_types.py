"""Config dataclasses as OmegaConf types them: a ``Literal`` field becomes a field of its choices' type, checked
against the choices; a field OmegaConf cannot type is found when its plugin loads, not when a config is composed."""
from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from registry.errors import first_line
from registry.ranges import check_choice

#: the value types a ``Literal`` option may choose among (one per field)
CHOICE_TYPES = (str, int, bool)
SUPPORTED = (
    "bool, int, float, str, an Enum, a Literal of str, int or bool values, a list, a dict or a dataclass "
    "(or Optional of one)"
)


@dataclasses.dataclass(frozen=True)
class _Choices:
    values: tuple[Any, ...]
    optional: bool  # None is a valid value too
    type: type


def _choices(name: str, annotation: Any) -> _Choices | None:
    """The choices of a ``Literal[...]`` annotation, also inside ``Optional``; None for any other annotation."""
    optional = False
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) != 1:
            return None
        optional, annotation = True, members[0]
    if get_origin(annotation) is not Literal:
        return None
    values = tuple(v for v in get_args(annotation) if v is not None)
    kinds = {type(v) for v in values}
    if len(kinds) != 1 or next(iter(kinds)) not in CHOICE_TYPES:
        choices = list(get_args(annotation))
        raise TypeError(f"field {name!r}: Literal{choices} must choose among values of one type: str, int or bool")
    return _Choices(values, optional or len(values) < len(get_args(annotation)), kinds.pop())


@functools.cache
def typed_config(config: type) -> type:
    """``config``, or a subclass in which every ``Literal`` field has its choices' type and is checked against them."""
    hints = typing.get_type_hints(config)
    found = {f.name: c for f in dataclasses.fields(config) if (c := _choices(f.name, hints[f.name])) is not None}
    if not found:
        return config
    fields = []
    for f in dataclasses.fields(config):
        if f.name in found:
            choices = found[f.name]
            value_type: Any = choices.type | None if choices.optional else choices.type
            kept = dataclasses.field(default=f.default, default_factory=f.default_factory, metadata=f.metadata)
            fields.append((f.name, value_type, kept))

    def __post_init__(self: Any) -> None:
        for name, choices in found.items():
            value = getattr(self, name)
            if not (choices.optional and value is None):
                check_choice(name, value, choices.values)
        if hasattr(config, "__post_init__"):
            config.__post_init__(self)

    namespace = {"__post_init__": __post_init__, "__module__": config.__module__, "__doc__": config.__doc__}
    frozen = config.__dataclass_params__.frozen  # type: ignore[attr-defined]
    return dataclasses.make_dataclass(config.__name__, fields, bases=(config,), namespace=namespace, frozen=frozen)


def untypable(config: type) -> str | None:
    """Why OmegaConf cannot type ``config`` (a field of a type it does not support), or None when it can."""
    try:
        OmegaConf.structured(typed_config(config))
    except (OmegaConfBaseException, NameError, TypeError) as error:
        key = getattr(error, "full_key", None)
        return f"{f'field {key!r}: ' if key else ''}{first_line(error)}"
    return None
