"""Reading the records of folders someone else may have written (JSON and YAML): bounded, checked, one line when bad.

Run folders and exported models travel between machines, so every record in them is read as untrusted
data: its size and nesting depth are bounded before anything walks it (a file nested 100,000 levels deep
or a YAML alias bomb is refused, not a crash or a hang), and the component record, whose text ends up in
messages and install commands, is checked field by field.
"""
from __future__ import annotations

import json
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from registry.errors import LaddError, first_line
from registry.host.kinds import KINDS

#: no record ladd writes comes near these (a run's config is a few kB)
MAX_RECORD_BYTES = 16 * 2**20
MAX_DEPTH = 64
MAX_YAML_NODES = 100_000
COMPONENT_TEXT_FIELDS = ("kind", "name", "plugin")
COMPONENT_ORIGIN_FIELDS = ("distribution", "version")
_ORIGIN_LABELS = ("a package name (PEP 508) or null", "a version or null")
#: a distribution name as PEP 508 defines it
_DISTRIBUTION = re.compile(r"[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9]", re.IGNORECASE)
#: the characters of a version string (PEP 440 and older schemes): nothing a shell or a terminal reads
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")


def read_json(path: Path, what: str, fix: str) -> Any:
    """The JSON value in ``path`` (a ``what``); one not JSON, too large or too deep is refused, ending in ``fix``."""
    _check_size(path, what, fix)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise LaddError(f"{path} is nested too deeply to be {what}; {fix}") from None
    except (OSError, ValueError) as error:
        raise LaddError(f"{path} is not valid JSON ({first_line(error)}); {fix}") from None
    if _depth(value) > MAX_DEPTH:
        raise LaddError(f"{path} is nested more than {MAX_DEPTH} levels deep, too deep to be {what}; {fix}")
    return value


def check_yaml(path: Path, what: str, fix: str) -> None:
    """Refuse a YAML file too large, too deep, or whose aliases would expand it past ``MAX_YAML_NODES`` nodes."""
    _check_size(path, what, fix)
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except RecursionError:
        raise LaddError(f"{path} is nested too deeply to be {what}; {fix}") from None
    except (OSError, ValueError, yaml.YAMLError) as error:
        raise LaddError(f"cannot read {path}: it is not {what} ({first_line(error)}); {fix}") from None
    if root is not None and _expanded_nodes(root) > MAX_YAML_NODES:
        raise LaddError(
            f"{path} holds more than {MAX_YAML_NODES} values once its YAML aliases (&name/*name) are expanded (or "
            f"nests more than {MAX_DEPTH} levels), too many to be {what}; {fix}"
        )


def _check_size(path: Path, what: str, fix: str) -> None:
    try:
        found = path.stat()
    except OSError as error:
        raise LaddError(f"cannot read {path} ({error.strerror or error}); {fix}") from None
    if not stat.S_ISREG(found.st_mode):  # a device or a pipe would never end (and reports no size)
        raise LaddError(f"{path} is not a regular file (a device, pipe or folder), so it is not {what}; {fix}")
    size = found.st_size
    if size > MAX_RECORD_BYTES:
        raise LaddError(f"{path} holds {size} bytes, too many to be {what} (at most {MAX_RECORD_BYTES}); {fix}")


def _depth(value: Any) -> int:
    """The nesting depth of parsed JSON (a scalar is 0), walked without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _expanded_nodes(root: yaml.Node) -> int:
    """How many nodes the YAML graph holds once every alias is expanded; past the bound (or deeper than
    ``MAX_DEPTH``, or an alias inside its own anchor) the count stops at ``MAX_YAML_NODES + 1``."""
    over = MAX_YAML_NODES + 1
    sizes: dict[int, int] = {}  # aliases share node objects: each is counted once, then its size reused

    def size(node: yaml.Node, depth: int, open_nodes: set[int]) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if depth > MAX_DEPTH or id(node) in open_nodes:
            return over
        open_nodes.add(id(node))
        total = 1
        for child in _children(node):
            total = min(total + size(child, depth + 1, open_nodes), over)
        open_nodes.discard(id(node))
        sizes[id(node)] = total
        return total

    return size(root, 0, set())


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def checked_components(components: Any, owner: str, where: Path | None = None) -> dict[str, dict[str, Any]]:
    """A component record (slot -> kind, name, plugin, distribution, version, and ``nested``: option -> the record of
    the component that option names), refused unless every field is sound; ``where``: the file that holds it, named
    in the refusal."""
    damaged = f"{owner}'s component record{'' if where is None else f' ({where})'} is damaged or was edited"
    if not isinstance(components, Mapping):
        raise LaddError(f"{damaged}: it is {type(components).__name__}, not a mapping of slots to components")
    for slot, entry in components.items():
        _check_entry(entry, f"slot {slot!r}", damaged)
    return {str(slot): dict(entry) for slot, entry in components.items()}


def _check_entry(entry: Any, where: str, damaged: str) -> None:
    """One component's record (``where``: how the refusal names its place) and those of the components it names."""
    if not isinstance(entry, Mapping):
        raise LaddError(f"{damaged}: {where} holds {type(entry).__name__}, not a component")
    missing = [key for key in (*COMPONENT_TEXT_FIELDS, *COMPONENT_ORIGIN_FIELDS) if key not in entry]
    if missing:
        raise LaddError(f"{damaged}: {where} lacks {', '.join(missing)}")
    if entry["kind"] not in KINDS:
        raise LaddError(f"{damaged}: {where} has kind {entry['kind']!r}; kinds are {', '.join(KINDS)}")
    for key in COMPONENT_TEXT_FIELDS:
        if not isinstance(entry[key], str) or not entry[key].isprintable():
            raise LaddError(f"{damaged}: {where} has {key} {entry[key]!r}, not a printable name")
    for key, pattern, valid in zip(COMPONENT_ORIGIN_FIELDS, (_DISTRIBUTION, _VERSION), _ORIGIN_LABELS, strict=True):
        value = entry[key]
        if value is not None and (not isinstance(value, str) or pattern.fullmatch(value) is None):
            raise LaddError(f"{damaged}: {where} has {key} {value!r}, which is not {valid}")
    nested = entry.get("nested", {})
    if not isinstance(nested, Mapping):
        shape = type(nested).__name__
        raise LaddError(f"{damaged}: {where} has nested {shape}, not a mapping of options to components")
    for option, named in nested.items():
        _check_entry(named, f"{where}'s {option}", damaged)


def install_hint(distribution: str | None, version: str | None) -> str:
    """How to install a recorded distribution: a pip command only for a valid PEP 508 name (and version characters)."""
    if distribution is None or _DISTRIBUTION.fullmatch(distribution) is None:
        return "install the plugin that provides it"
    pinned = distribution if version is None or _VERSION.fullmatch(version) is None else f"{distribution}=={version}"
    return f"pip install '{pinned}'"
