"""Weights and checkpoints on disk: written atomically with a checksum, verified and type-checked when read.

Safetensors files written by ladd carry the SHA-256 of their tensor data in their metadata
(``ladd.sha256``); reading one recomputes it, so a flipped bit is refused instead of loaded. Lightning
checkpoints are zip archives whose records carry CRC-32s, checked before a run resumes.
"""
from __future__ import annotations

import hashlib
import json
import pickle
import struct
import zipfile
from pathlib import Path
from typing import BinaryIO

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, load_model, save_model

from .errors import LaddError, first_line
from .files import replacing

DIGEST_KEY = "ladd.sha256"
_PLACEHOLDER = "0" * 64
_CHUNK = 1 << 24


class CorruptFileError(LaddError):
    """A weights or checkpoint file whose bytes are not those ladd wrote."""


def save_weights(model: torch.nn.Module, path: str | Path) -> Path:
    """The model's state as safetensors with the checksum of its tensor data, written atomically."""
    with replacing(path) as partial:
        save_model(model, str(partial), metadata={DIGEST_KEY: _PLACEHOLDER})
        _write_digest(partial)
    return Path(path)


def _write_digest(path: Path) -> None:
    """Fill the placeholder in the header with the data's digest: same length, so nothing moves."""
    with path.open("r+b") as handle:
        start, header = _header(handle)
        digest = _data_digest(handle, start)
        marker = json.dumps(_PLACEHOLDER).encode()
        handle.seek(8 + header.index(marker) + 1)
        handle.write(digest.encode())


def _header(handle: BinaryIO) -> tuple[int, bytes]:
    """The offset of the tensor data and the raw JSON header of an open safetensors file."""
    (length,) = struct.unpack("<Q", handle.read(8))
    return 8 + length, handle.read(length)


def _data_digest(handle: BinaryIO, start: int) -> str:
    handle.seek(start)
    digest = hashlib.sha256()
    while chunk := handle.read(_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def verify_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, after checking its header and (when recorded) its checksum."""
    path = Path(path)
    try:
        with safe_open(str(path), "pt") as opened:
            declared = (opened.metadata() or {}).get(DIGEST_KEY)
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise CorruptFileError(f"cannot read {path}: corrupt file, or not safetensors; restore it from a copy") from error
    if declared is not None:
        with path.open("rb") as handle:
            actual = _data_digest(handle, _header(handle)[0])
        if actual != declared:
            raise CorruptFileError(
                f"{path} is corrupt: its tensor data does not match the checksum written with it (bit rot or an "
                f"edited file); restore it from a copy, or delete it to train that stage again"
            )
    return tensors


def load_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Load safetensors (verified, dtypes checked) or a tensors-only torch file into ``model``; pickles are refused."""
    path = Path(path)
    if path.suffix == ".safetensors":
        check_dtypes(model, verify_weights(path), path)
        try:
            load_model(model, str(path))
        except (SafetensorError, RuntimeError) as error:
            raise LaddError(f"cannot load {path} into this model (weights of another configuration): {first_line(error)}") from None
        return
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise LaddError(
            f"refusing to load {path}: it holds objects other than tensors, and unpickling them can run code. "
            f"If you trust its author, convert it once to safetensors with: python -c \"import torch; "
            f"from safetensors.torch import save_file; s = torch.load('{path}', weights_only=False); "
            f"s = s.get('state_dict', s); save_file({{k: v.contiguous() for k, v in s.items()}}, "
            f"'{path.with_suffix('.safetensors')}')\""
        ) from None
    state = state.get("state_dict", state)
    check_dtypes(model, state, path)
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise LaddError(f"cannot load {path} into this model (weights of another configuration): {first_line(error)}") from None


def check_dtypes(model: torch.nn.Module, tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Refuse stored tensors whose dtype differs from the model's (loading would convert them silently)."""
    own = model.state_dict()
    for name, tensor in tensors.items():
        if name in own and tensor.dtype != own[name].dtype:
            raise LaddError(
                f"{path} stores {name} as {tensor.dtype} but this model holds it as {own[name].dtype}: the file "
                f"was not written by this model's ladd export (converted or edited)"
            )


def check_shapes(model: torch.nn.Module, shapes: dict[str, tuple[int, ...]], path: Path) -> None:
    """Refuse stored tensors that ``model`` lacks or holds in another shape."""
    own = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    for name, shape in shapes.items():
        if own.get(name) != shape:
            needed = "does not have it" if name not in own else f"needs {list(own[name])}"
            raise LaddError(
                f"{path} holds {name} of shape {list(shape)} but the model of these settings {needed}: the saved "
                f"weights belong to another network; train into a new run_dir"
            )


def check_checkpoint(path: str | Path) -> None:
    """Refuse a checkpoint whose records fail their CRC-32 or that cannot be read as plain tensors and containers."""
    path = Path(path)
    advice = "delete it to restart this stage from its beginning"
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError) as error:
        raise CorruptFileError(f"cannot resume from {path}: the checkpoint is corrupt or not a ladd checkpoint ({error}); {advice}") from None
    if damaged is not None:
        raise CorruptFileError(f"cannot resume from {path}: the checkpoint is corrupt (record {damaged} fails its CRC-32 check); {advice}")
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # noqa: BLE001 - whatever fails to read, the file is unusable
        raise CorruptFileError(
            f"cannot resume from {path}: the checkpoint is corrupt or not a ladd checkpoint ({type(error).__name__}); {advice}"
        ) from None
