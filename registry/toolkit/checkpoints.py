"""Reading another library's checkpoint, for an importer (``registry.interfaces.Importer``): its JSON config with every
key checked at once, and its safetensors tensors read one at a time; each problem is one line naming the file."""
from __future__ import annotations

import json
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from registry.errors import LaddError, first_line

__all__ = [
    "MAX_CONFIG_BYTES",
    "POSITIVE",
    "Rule",
    "TensorHeader",
    "opened",
    "read_config",
    "read_tensor",
    "tensor_headers",
]

#: a checkpoint's config is a small JSON file: a larger one is refused before it is read
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class Rule:
    """What one key of a checkpoint's config must hold: a test of its value and how a message describes it."""

    holds: Callable[[Any], bool]
    description: str


#: a whole number >= 1 (a size)
POSITIVE = Rule(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a whole number >= 1")


def read_config(path: Path, what: str, rules: Mapping[str, Rule], fix: str) -> dict[str, Any]:
    """The JSON object in ``path`` (a ``what``) whose keys of ``rules`` hold what each rule asks; every key that does
    not (missing or wrong) named in one line, ending in ``fix``."""
    try:
        found = path.stat()
    except OSError as error:
        raise LaddError(f"cannot read {path} ({error.strerror or error}); {fix}") from None
    if not stat.S_ISREG(found.st_mode):  # a device or a pipe would never end (and reports no size)
        raise LaddError(f"{path} is not a regular file (a device, pipe or folder), so it is not {what}; {fix}")
    size = found.st_size
    if size > MAX_CONFIG_BYTES:
        raise LaddError(f"{path} holds {size} bytes, too many to be {what} (at most {MAX_CONFIG_BYTES}); {fix}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise LaddError(f"{path} is nested too deeply to be {what}; {fix}") from None
    except (OSError, ValueError) as error:
        raise LaddError(f"{path} is not valid JSON ({first_line(error)}); {fix}") from None
    if not isinstance(config, dict):
        raise LaddError(f"{path} holds a JSON {type(config).__name__}, not the object {what} is; {fix}")
    wrong = [
        f"{key} is missing (it must be {rule.description})" if key not in config
        else f"{key} is {config[key]!r} (it must be {rule.description})"
        for key, rule in rules.items()
        if key not in config or not rule.holds(config[key])
    ]
    if wrong:
        raise LaddError(f"{path} is not {what}: {'; '.join(wrong)}; {fix}")
    return config


@contextmanager
def opened(path: Path) -> Iterator[Any]:
    """The safetensors file open for reading tensors lazily; a damaged or truncated one is refused in one line."""
    try:
        with safe_open(str(path), "pt") as handle:
            yield handle
    except (SafetensorError, OSError) as error:
        why = first_line(error)
        raise LaddError(f"cannot read {path}: {why}; it is truncated, damaged or not safetensors") from None


@dataclass(frozen=True)
class TensorHeader:
    """A tensor's dtype (safetensors' name: ``F32``, ``F16``, ``BF16``, ...) and shape, read from the file's header."""

    dtype: str
    shape: tuple[int, ...]


def tensor_headers(path: Path) -> dict[str, TensorHeader]:
    """Every tensor of a safetensors file with its dtype and shape, read from the header alone (no tensor is loaded)."""
    with opened(path) as handle:
        return {
            name: TensorHeader(handle.get_slice(name).get_dtype(), tuple(handle.get_slice(name).get_shape()))
            for name in handle.keys()
        }


def read_tensor(path: Path, name: str, rows: tuple[int, int] | None = None) -> torch.Tensor:
    """Tensor ``name`` of a safetensors file (its rows ``rows[0]:rows[1]`` only when given), refused in one line
    unless it holds finite floating-point values.

    The file is mapped for this one tensor: pages read through a mapping count as the process's memory, so
    reading tensors one at a time keeps an import's peak near the model's size.
    """
    with opened(path) as handle:
        tensor = handle.get_tensor(name) if rows is None else handle.get_slice(name)[rows[0] : rows[1]]
    if not tensor.is_floating_point():
        raise LaddError(f"{path}: {name} holds {tensor.dtype} values, not the floating-point weights of a network")
    if not bool(torch.isfinite(tensor).all()):
        raise LaddError(f"{path}: {name} holds NaN or infinite values; the file is damaged")
    return tensor
