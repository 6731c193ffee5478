"""Weights and checkpoints on disk: written atomically with a checksum, verified and type-checked when read.

Safetensors files written by ladd carry in their metadata (``ladd.file_sha256``) the SHA-256 of the whole
file, header included (its own digest counted as zeros): reading one recomputes it, so a flipped bit in
the data or an edited header (two tensors' offsets swapped) is refused instead of loaded. Files of older
ladd versions carry the digest of the tensor data alone (``ladd.sha256``), still checked. Loaded weights
must be finite and fit the model tensor by tensor, and every refusal names the tensor. Lightning
checkpoints are zip archives whose records carry CRC-32s, checked before a run resumes.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import struct
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, load_model, save_file, save_model

from registry.errors import LaddError, first_line

from .files import replacing, scratch_folder

FILE_DIGEST_KEY = "ladd.file_sha256"
DATA_DIGEST_KEY = "ladd.sha256"  # written by older versions: the tensor data alone
_PLACEHOLDER = "0" * 64
_CHUNK = 1 << 24
_OTHER_MODEL = "the file holds the weights of another configuration, or was edited"
_OTHER_NETWORK = "the saved weights belong to another network: train into a new run_dir"


class CorruptFileError(LaddError):
    """A weights or checkpoint file whose bytes are not those ladd wrote."""


def save_weights(model: torch.nn.Module, path: str | Path) -> Path:
    """The model's state as safetensors with the checksum of the whole file, written atomically."""
    with replacing(path) as partial:
        write_weights(model, partial)
    return Path(path)


def write_weights(model: torch.nn.Module, path: Path) -> None:
    """The model's state as safetensors with the checksum of the whole file, written to a fresh file that replaces
    ``path`` (safetensors' own temporary file lies in a marked scratch folder, so a kill leaves nothing unmarked)."""
    with scratch_folder(path) as scratch:
        written = scratch / path.name
        with _system_errors():
            save_model(model, str(written), metadata={FILE_DIGEST_KEY: _PLACEHOLDER})
        _write_digest(written)
        os.replace(written, path)


def save_tensors(tensors: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str]) -> Path:
    """Tensors as safetensors with ``metadata`` and the checksum of the whole file, written atomically."""
    with replacing(path) as partial:
        write_tensors(tensors, partial, metadata)
    return Path(path)


def write_tensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    """Tensors as safetensors with ``metadata`` and the checksum of the whole file, written in place (to a fresh
    file)."""
    with _system_errors():
        save_file(tensors, str(path), metadata={**metadata, FILE_DIGEST_KEY: _PLACEHOLDER})
    _write_digest(path)


@contextmanager
def _system_errors() -> Iterator[None]:
    """A full disk surfaces as safetensors' own error: report it as the system's."""
    try:
        yield
    except SafetensorError as error:
        found = re.search(r"os error (\d+)", str(error))
        if found is None:
            raise
        code = int(found[1])
        raise OSError(code, os.strerror(code)) from error


def state_digest(module: torch.nn.Module) -> str:
    """The SHA-256 of a module's state (names, dtypes, shapes, values): equal for equal weights, wherever they live."""
    return tensors_digest(module.state_dict())


def tensors_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """The SHA-256 of named tensors (names, dtypes, shapes, values), in the order of their names."""
    digest = hashlib.sha256()
    for name, tensor in sorted(tensors.items()):
        value = tensor.detach().cpu()
        digest.update(f"{name}|{value.dtype}|{tuple(value.shape)}|".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().data)  # the bytes, read in place
    return digest.hexdigest()


def _digest_entry(value: str) -> bytes:
    """The digest's entry as it appears in a header (safetensors writes compact JSON)."""
    return f"{json.dumps(FILE_DIGEST_KEY)}:{json.dumps(value)}".encode()


def _write_digest(path: Path) -> None:
    """Fill the placeholder in the header with the file's digest: same length, so nothing moves."""
    with path.open("r+b") as handle:
        start, header = _header(handle)
        digest = _file_digest(handle, start, header)
        entry = _digest_entry(_PLACEHOLDER)
        handle.seek(8 + header.index(entry) + len(entry) - len(_PLACEHOLDER) - 1)
        handle.write(digest.encode())


def _header(handle: BinaryIO) -> tuple[int, bytes]:
    """The offset of the tensor data and the raw JSON header of an open safetensors file."""
    (length,) = struct.unpack("<Q", handle.read(8))
    return 8 + length, handle.read(length)


def _file_digest(handle: BinaryIO, start: int, header: bytes) -> str:
    """The SHA-256 of the header (holding the placeholder where the digest goes) and the tensor data."""
    return _data_digest(handle, start, hashlib.sha256(struct.pack("<Q", len(header)) + header))


def _data_digest(handle: BinaryIO, start: int, digest: Any = None) -> str:
    """The SHA-256 of the bytes from ``start`` on, continuing ``digest`` when given."""
    handle.seek(start)
    digest = digest or hashlib.sha256()
    while chunk := handle.read(_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a whole file, read in chunks (what records of a file's origin name it by)."""
    with Path(path).open("rb") as handle:
        return _data_digest(handle, 0)


def verify_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, after checking its header and (when recorded) its checksum."""
    return read_tensors(path)[0]


def read_tensors(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata of a safetensors file, after checking its header and (when recorded) its checksum."""
    path = Path(path)
    try:
        with safe_open(str(path), "pt") as opened:
            metadata = opened.metadata() or {}
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise CorruptFileError(f"cannot read {path}: corrupt file, or not safetensors; restore it from a "
            "copy") from error
    if not _matches_checksum(path, metadata):
        raise CorruptFileError(
            f"{path} is corrupt: its header or tensor data does not match the checksum written with it (bit rot or "
            f"an edited file); restore it from a copy (a stage's weights in a run folder: delete them to train again)"
        )
    return tensors, metadata


def _matches_checksum(path: Path, metadata: dict[str, str]) -> bool:
    """Whether the file's recorded digest (of the file, or older versions' of the data) matches; True without one."""
    with path.open("rb") as handle:
        start, header = _header(handle)
        declared = metadata.get(FILE_DIGEST_KEY)
        if declared is not None:
            blanked = header.replace(_digest_entry(declared), _digest_entry(_PLACEHOLDER), 1)
            return blanked != header and _file_digest(handle, start, blanked) == declared
        declared = metadata.get(DATA_DIGEST_KEY)
        return declared is None or _data_digest(handle, start) == declared


def load_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Load safetensors (verified) or a tensors-only torch file into ``model``, each tensor checked; no pickles."""
    path = Path(path)
    safetensors = path.suffix == ".safetensors"
    tensors = verify_weights(path) if safetensors else _torch_tensors(path)
    check_dtypes(model, tensors, path)
    check_shapes(model, {name: tuple(tensor.shape) for name, tensor in tensors.items()}, path, _OTHER_MODEL)
    check_finite(tensors, path)
    try:
        if safetensors:
            missing, _ = load_model(model, str(path), strict=False)
        else:
            missing, _ = model.load_state_dict(tensors, strict=False)
    except (SafetensorError, RuntimeError) as error:
        raise LaddError(f"cannot load {path} into this model: {first_line(error)}; {_OTHER_MODEL}") from None
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise LaddError(f"{path} lacks {sorted(missing)[0]}{more}, which this model holds; {_OTHER_MODEL}")


def _torch_tensors(path: Path) -> dict[str, torch.Tensor]:
    """The state dict of a torch file holding only tensors (a checkpoint's ``state_dict``); anything else is refused."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise LaddError(
            f"refusing to load {path}: it holds objects other than tensors, and unpickling them can run code. "
            f'If you trust its author, convert it once to safetensors with: python -c "import torch; '
            f"from safetensors.torch import save_file; s = torch.load('{path}', weights_only=False); "
            f"s = s.get('state_dict', s); save_file({{k: v.contiguous() for k, v in s.items()}}, "
            f"'{path.with_suffix('.safetensors')}')\""
        ) from None
    state = state.get("state_dict", state) if isinstance(state, dict) else state
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise LaddError(f"{path} is not a state dict (a mapping of tensor names to tensors); {_OTHER_MODEL}")
    return state


def first_non_finite(tensors: Mapping[str, torch.Tensor]) -> str | None:
    """The name of the first floating-point tensor holding NaN or infinity, or None."""
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return name
    return None


def check_finite(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Refuse weights holding NaN or infinity: a model loaded from them samples nothing (or crashes while sampling)."""
    name = first_non_finite(tensors)
    if name is not None:
        raise LaddError(
            f"{path} holds non-finite values (NaN or inf) in {name}: the weights are damaged, or come from a run "
            f"that diverged; restore them from a copy, or train the model again"
        )


def check_dtypes(model: torch.nn.Module, tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Refuse stored tensors whose dtype differs from the model's (loading would convert them silently)."""
    own = model.state_dict()
    for name, tensor in tensors.items():
        if name in own and tensor.dtype != own[name].dtype:
            raise LaddError(
                f"{path} stores {name} as {tensor.dtype} but this model holds it as {own[name].dtype}: the file "
                f"was not written by this model's ladd export (converted or edited)"
            )


def check_shapes(
    model: torch.nn.Module, shapes: dict[str, tuple[int, ...]], path: Path, fix: str = _OTHER_NETWORK
) -> None:
    """Refuse stored tensors that ``model`` lacks or holds in another shape, naming the tensor and ending in ``fix``."""
    own = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    for name, shape in shapes.items():
        if own.get(name) != shape:
            needed = "does not have it" if name not in own else f"needs {list(own[name])}"
            raise LaddError(
                f"{path} holds {name} of shape {list(shape)} but the model of these settings {needed}; {fix}"
            )


def check_checkpoint(path: str | Path) -> None:
    """Refuse a checkpoint whose records fail their CRC-32 or that cannot be read as plain tensors and containers."""
    path = Path(path)
    advice = "delete it to restart this stage from its beginning"
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError) as error:
        raise CorruptFileError(
            f"cannot resume from {path}: the checkpoint is corrupt or not a ladd checkpoint ({error}); {advice}"
        ) from None
    if damaged is not None:
        raise CorruptFileError(
            f"cannot resume from {path}: the checkpoint is corrupt (record {damaged} fails its CRC-32 check); {advice}"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # noqa: BLE001 - whatever fails to read, the file is unusable
        raise CorruptFileError(
            f"cannot resume from {path}: the checkpoint is corrupt or not a ladd checkpoint ({type(error).__name__}); "
            f"{advice}"
        ) from None
    state = checkpoint.get("state_dict") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict) or not all(isinstance(tensor, torch.Tensor) for tensor in state.values()):
        raise CorruptFileError(
            f"cannot resume from {path}: it is not a ladd checkpoint (it has no state_dict of tensors); {advice}"
        )
