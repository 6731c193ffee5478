"""The token cache: packed rows of a split saved once as a flat binary file and memory-mapped afterwards.

A cache entry is the folder ``LABEL-KEY`` holding ``tokens.bin`` (rows x seq_len ids) and ``meta.json``;
KEY hashes a fingerprint of everything that decides the rows (source and its files, split, tokenizer,
sequence length, packing, detokeniser, text field). An entry is written under a temporary name and
renamed when complete, so a folder that exists is whole, and concurrent builders do not clash.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from registry.errors import LaddError

FORMAT_VERSION = 1
TOKENS, META = "tokens.bin", "meta.json"
_WRITE_ROWS = 4096


def default_dir() -> Path:
    """``$LADD_CACHE_DIR/text``, else ``$XDG_CACHE_HOME/ladd/text``, else ``~/.cache/ladd/text``."""
    if os.environ.get("LADD_CACHE_DIR"):
        return Path(os.environ["LADD_CACHE_DIR"]).expanduser() / "text"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ladd" / "text"


def cache_key(fingerprint: dict[str, Any]) -> str:
    """A stable hash of a JSON-serialisable fingerprint."""
    text = json.dumps({"format": FORMAT_VERSION, **fingerprint}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def id_dtype(num_ids: int) -> np.dtype:
    """The smallest unsigned dtype holding ids ``0..num_ids-1``."""
    return np.dtype(np.uint16 if num_ids <= 1 << 16 else np.uint32)


def entry(directory: Path, label: str, fingerprint: dict[str, Any]) -> Path:
    """The folder of the cache entry for ``fingerprint``."""
    return Path(directory) / f"{label}-{cache_key(fingerprint)}"


def load_or_build(
    folder: Path, fingerprint: dict[str, Any], rows: Callable[[], Iterable[Sequence[int]]], seq_len: int, dtype: np.dtype
) -> np.ndarray:
    """The cached rows at ``folder`` (read-only memmap ``[N, seq_len]``), building them from ``rows()`` if absent.

    An empty result (N = 0) is returned as an empty array and not cached.
    """
    if not (folder / META).is_file():
        count = _write(folder, fingerprint, rows(), seq_len, dtype)
        if count == 0:
            return np.zeros((0, seq_len), dtype=dtype)
    return _open(folder, seq_len)


def _open(folder: Path, seq_len: int) -> np.ndarray:
    """The entry's rows, after checking its description against its token file."""
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
        rows, dtype = int(meta["rows"]), np.dtype(meta["dtype"])
        expected = rows * seq_len * dtype.itemsize
        size = (folder / TOKENS).stat().st_size
        if meta["seq_len"] != seq_len or size != expected:
            raise ValueError(f"{TOKENS} holds {size} bytes where {META} describes {expected}")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise LaddError(
            f"token cache entry {folder} is damaged ({error}); delete it to rebuild it from the source: rm -r '{folder}'"
        ) from None
    return np.memmap(folder / TOKENS, dtype=dtype, mode="r", shape=(rows, seq_len))


def _write(folder: Path, fingerprint: dict[str, Any], rows: Iterable[Sequence[int]], seq_len: int, dtype: np.dtype) -> int:
    folder.parent.mkdir(parents=True, exist_ok=True)
    temporary = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    try:
        count = 0
        iterator = iter(rows)
        with (temporary / TOKENS).open("wb") as handle:
            while chunk := list(islice(iterator, _WRITE_ROWS)):
                handle.write(np.asarray(chunk, dtype=dtype).reshape(-1, seq_len).tobytes())
                count += len(chunk)
        if count:
            meta = {"rows": count, "seq_len": seq_len, "dtype": np.dtype(dtype).name, "fingerprint": fingerprint}
            (temporary / META).write_text(json.dumps(meta, indent=1, sort_keys=True))
            try:
                temporary.rename(folder)
            except OSError:
                if not (folder / META).is_file():  # not another process publishing the same entry first
                    raise
        return count
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
