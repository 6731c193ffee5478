"""The token cache: packed rows of a split saved once as a flat binary file and memory-mapped afterwards.

A cache entry is the folder ``LABEL-KEY`` holding ``tokens.bin`` (rows x seq_len ids) and ``meta.json``;
KEY hashes the format version and a fingerprint of everything that decides the rows (source and its
files, split, tokenizer, sequence length, packing, detokeniser, text field). An entry is built in a
folder beside it (``build``) and renamed into place when whole, so a folder that exists is whole. An
entry whose ``meta.json`` names another format or fingerprint is built again, never read.

``meta.json`` records the CRC-32 of ``tokens.bin``, which :func:`verify` checks before the rows are read
(once per process and file): rows changed in place, even to other valid ids, are refused, not trained on.
A CRC is enough to catch a change (``meta.json`` could be edited too, so no hash would stop a deliberate
one) and costs a fraction of a cryptographic hash: it reads the file once (``bench/RESULTS.md``).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import zlib
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from registry.errors import LaddError

KEY_VERSION = 1  # of what decides the rows: part of every entry's name
FORMAT_VERSION = 2  # of meta.json (2: with the checksum); an entry of another is built again in its folder
TOKENS, META = "tokens.bin", "meta.json"
_CHUNK = 1 << 20
_VERIFIED: dict[Path, tuple[int, int, int, str]] = {}  # entries verified by this process: their file's identity
_LEGACY_AGE_SECONDS = 3600.0  # a legacy builder's folder untouched this long, its process gone: abandoned


def default_dir() -> Path:
    """``$LADD_CACHE_DIR/text``, else ``$XDG_CACHE_HOME/ladd/text``, else ``~/.cache/ladd/text``."""
    if os.environ.get("LADD_CACHE_DIR"):
        return Path(os.environ["LADD_CACHE_DIR"]).expanduser() / "text"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ladd" / "text"


def cache_key(fingerprint: dict[str, Any]) -> str:
    """A stable hash of a JSON-serialisable fingerprint."""
    text = json.dumps({"format": KEY_VERSION, **fingerprint}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def id_dtype(num_ids: int) -> np.dtype:
    """The smallest unsigned dtype holding ids ``0..num_ids-1``."""
    return np.dtype(np.uint16 if num_ids <= 1 << 16 else np.uint32)


def entry(directory: Path, label: str, fingerprint: dict[str, Any]) -> Path:
    """The folder of the cache entry for ``fingerprint``."""
    return Path(directory) / f"{label}-{cache_key(fingerprint)}"


def describe(
    rows: int, seq_len: int, dtype: npt.DTypeLike, fingerprint: dict[str, Any], crc32: str, **counts: int
) -> dict[str, Any]:
    """The ``meta.json`` of an entry of ``rows`` rows whose ``tokens.bin`` has the checksum ``crc32``; ``counts`` add
    what preparing it counted (documents, padding)."""
    version = _version()
    return {
        "format": FORMAT_VERSION, "ladd": version, "rows": rows, "seq_len": seq_len, "dtype": np.dtype(dtype).name,
        "tokens": rows * seq_len, "fingerprint": fingerprint, "crc32": crc32, **counts,
    }


def checksum(handle: BinaryIO) -> str:
    """The CRC-32 of an open file (8 hex digits), read from its start in chunks."""
    handle.seek(0)
    crc = 0
    while block := handle.read(_CHUNK):
        crc = zlib.crc32(block, crc)
    return f"{crc:08x}"


def verify(folder: Path, meta: dict[str, Any]) -> None:
    """Refuse an entry whose ``tokens.bin`` no longer hashes to the checksum its ``meta.json`` records.

    A file this process verified is not read again while its size, modification time and inode stay the same.
    """
    path = folder / TOKENS
    with path.open("rb") as handle:
        stat = os.fstat(handle.fileno())
        identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns, str(meta.get("crc32")))
        if _VERIFIED.get(path) == identity:
            return
        if checksum(handle) != meta.get("crc32"):
            raise LaddError(
                f"token cache entry {folder} has changed since it was built ({TOKENS} does not match the checksum "
                f"in its {META}); ladd does not train on it: delete it to rebuild it from the source: rm -r '{folder}'"
            )
    _VERIFIED[path] = identity


def current(folder: Path, fingerprint: dict[str, Any]) -> dict[str, Any] | None:
    """The description of the entry at ``folder`` when it holds the rows of ``fingerprint``; None when there is no
    entry or it was built in another format or from other data (it is then built again)."""
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise _damaged(folder, error) from None
    if not isinstance(meta, dict) or meta.get("format", 1) != FORMAT_VERSION:
        return None
    if meta.get("fingerprint") != _plain(fingerprint):
        return None
    try:
        expected = int(meta["rows"]) * int(meta["seq_len"]) * np.dtype(meta["dtype"]).itemsize
        size = (folder / TOKENS).stat().st_size
        if size != expected:
            raise ValueError(f"{TOKENS} holds {size} bytes where {META} describes {expected}")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise _damaged(folder, error) from None
    return meta


def open_rows(folder: Path, meta: dict[str, Any]) -> np.ndarray:
    """The entry's rows, ``[rows, seq_len]`` memory-mapped read-only."""
    shape = (int(meta["rows"]), int(meta["seq_len"]))
    return np.memmap(folder / TOKENS, dtype=np.dtype(meta["dtype"]), mode="r", shape=shape)


def sweep_legacy(folder: Path) -> None:
    """Remove what builders of earlier ladd versions left of this entry when killed (``.NAME.PID.tmp``).

    Only a folder whose process is gone from this machine and which nothing wrote to for an hour: a live
    builder, even on another machine sharing the folder, keeps writing to its own.
    """
    for leftover in folder.parent.glob(f".{folder.name}.*.tmp"):
        pid = leftover.name[len(folder.name) + 2 : -len(".tmp")]
        files = [leftover, *leftover.iterdir()] if leftover.is_dir() else [leftover]
        idle = time.time() - max(f.stat().st_mtime for f in files)
        if pid.isdigit() and not _alive(int(pid)) and idle > _LEGACY_AGE_SECONDS:
            shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _plain(fingerprint: dict[str, Any]) -> Any:
    """``fingerprint`` as it reads back from JSON (lists for tuples)."""
    return json.loads(json.dumps(fingerprint))


def _damaged(folder: Path, error: Exception) -> LaddError:
    return LaddError(
        f"token cache entry {folder} is damaged ({error}); delete it to rebuild it from the source: rm -r '{folder}'"
    )


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ladd")
    except PackageNotFoundError:
        return None
