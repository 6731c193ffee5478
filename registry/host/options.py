"""A component's options as a user sees them: name, type, default and one line of help from its config dataclass."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
import typing
from dataclasses import dataclass
from typing import Any

from registry.toolkit.options import Reference, references

from .component import Component
from .kinds import SLOTS


@dataclass(frozen=True)
class OptionHelp:
    """One field of a component's config dataclass, ready to print."""

    name: str
    type: str
    default: str
    help: str


def option_help(config: type | None) -> list[OptionHelp]:
    """Every option of ``config``; help is ``field(metadata={"help": ...})`` or the field's comment in the source."""
    if config is None:
        return []
    comments = _field_comments(config)
    named = references(config)
    return [
        OptionHelp(
            f.name,
            _reference_type(named[f.name]) if f.name in named else _type_name(f.type),
            _default(f),
            f.metadata.get("help") or comments.get(f.name, ""),
        )
        for f in dataclasses.fields(config)
    ]


def _reference_type(reference: Reference) -> str:
    """How ``ladd show`` types an option naming a component: its kind, and the interface it must implement."""
    interface = f" ({reference.interface})" if reference.interface else ""
    return f"{reference.kind} name{interface}"


def format_options(component: Component) -> str:
    """A table of the component's options, set on the command line as ``SLOT.NAME=VALUE`` in any slot of its kind."""
    rows = option_help(component.spec.config)
    if not rows:
        return "options: none"
    header = OptionHelp("option", "type", "default", "help")
    widths = [max(len(getattr(r, key)) for r in [header, *rows]) for key in ("name", "type", "default")]
    slots = " or ".join(f"{slot.name}.OPTION=VALUE" for slot in SLOTS.values() if slot.kind == component.kind)
    lines = [f"options ({slots or f'{component.kind}.OPTION=VALUE'}):"]
    for r in [header, *rows]:
        lines.append(f"  {r.name:<{widths[0]}}  {r.type:<{widths[1]}}  {r.default:<{widths[2]}}  {r.help}".rstrip())
    return "\n".join(lines)


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, str):
        return annotation
    if typing.get_args(annotation):  # Literal['a', 'b'], Optional[int], list[int]: spelt out, not just "Literal"
        return str(annotation).replace("typing.", "")
    return getattr(annotation, "__name__", str(annotation))


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return _as_override(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return _as_override(field.default_factory())
    return "(required)"


def _as_override(value: Any) -> str:
    """The value as it is written in a Hydra override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _field_comments(config: type) -> dict[str, str]:
    """Field name -> its comment, from the sources of ``config`` and its dataclass bases (a subclass's wins)."""
    found: dict[str, str] = {}
    for cls in reversed(config.__mro__):
        if not dataclasses.is_dataclass(cls):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue  # no source installed: the options print without help
        found.update(_comments_in(source))
    return found


def _comments_in(source: str) -> dict[str, str]:
    """For each annotated field of a class's source: the comment on its line, else the comment lines right above it."""
    comments = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    lines = source.splitlines()
    result = {}
    definition = ast.parse(source).body[0]
    assert isinstance(definition, ast.ClassDef), "the source of a class"
    for node in definition.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if node.lineno in comments:
            result[node.target.id] = comments[node.lineno]
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line in comments and lines[line - 1].lstrip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        if above:
            result[node.target.id] = " ".join(above)
    return result
