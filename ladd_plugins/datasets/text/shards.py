"""One part of a split made into a shard of the token cache: its documents cleaned, tokenised and packed.

A shard is ``NNNNN.bin`` (the ids) and ``NNNNN.json`` (what it holds). With ``wrap`` packing a shard holds
its documents' ids each followed by EOS, and the rows are cut once the shards are joined in order, so the
rows do not depend on how the split was cut into parts; with ``pad`` it holds finished rows, one per document.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import packing
from .detokenizers import DETOKENIZERS
from .sources import Part, Source
from .tokenizer import Encoder

_BATCH_DOCUMENTS = 1000  # documents tokenised together
_BATCH_CHARS = 1 << 22  # or fewer when they are long: the ids of a batch are held as Python lists


@dataclass(frozen=True)
class Job:
    """What every part of a split becomes: its documents detokenised, tokenised and packed into cache rows."""

    source: Source
    encoder: Encoder
    eos_id: int
    seq_len: int
    packing: str  # wrap or pad
    detokenizer: str | None
    dtype: str  # of the ids in the cache


@dataclass(frozen=True)
class Written:
    """What a finished shard holds."""

    documents: int  # documents read, blank ones included
    tokens: int  # ids written: documents and their EOS (wrap), or whole rows (pad)
    rows: int  # rows written (pad); 0 for wrap, whose rows are cut from the joined shards
    padding: int  # ids that only pad a row (pad)

    @classmethod
    def read(cls, path: Path) -> Written:
        """The description written beside a finished shard."""
        return cls(**json.loads(path.read_text(encoding="utf-8")))


def shard_paths(folder: Path, index: int) -> tuple[Path, Path]:
    """The ids and the description of shard ``index`` in ``folder``."""
    return folder / f"{index:05d}.bin", folder / f"{index:05d}.json"


def write_shard(job: Job, task: tuple[Part, Path, int]) -> Written:
    """Tokenise ``part`` into shard ``index`` of ``folder``: ids under a temporary name, renamed, then the description.

    The description is written last, so a shard is finished exactly when it exists.
    """
    part, folder, index = task
    ids_path, description_path = shard_paths(folder, index)
    partial = ids_path.with_name(f"{ids_path.name}.{os.getpid()}.partial")
    documents = tokens = rows = padding = 0
    try:
        with partial.open("wb") as handle:
            for texts in _batches(job.source.read(part)):
                documents += len(texts)
                ids = job.encoder.ids(clean_documents(texts, job.detokenizer))
                block = _wrapped(ids, job) if job.packing == "wrap" else _padded(ids, job)
                handle.write(block.tobytes())  # an OSError naming its cause (ndarray.tofile's names none)
                tokens += block.size
                if job.packing == "pad":
                    rows += len(block)
                    padding += sum(job.seq_len - 1 - min(len(d), job.seq_len - 1) for d in ids)
    except BaseException:
        partial.unlink(missing_ok=True)  # a full disk gets its space back
        raise
    partial.replace(ids_path)
    written = Written(documents, tokens, rows, padding)
    temporary = description_path.with_name(f"{description_path.name}.{os.getpid()}.partial")
    temporary.write_text(json.dumps(asdict(written)), encoding="utf-8")
    temporary.replace(description_path)
    return written


def count_documents(job: Job, part: Part) -> int:
    """The number of documents in ``part`` (for a slice of the split)."""
    return job.source.count(part)


def _batches(texts: Iterable[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    chars = 0
    for text in texts:
        batch.append(text)
        chars += len(text)
        if len(batch) == _BATCH_DOCUMENTS or chars >= _BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def clean_documents(texts: list[str], detokenizer: str | None) -> list[str]:
    """The detokenised, non-blank documents."""
    if detokenizer is not None:
        texts = [DETOKENIZERS[detokenizer](text) for text in texts]
    return [text for text in texts if text.strip()]


def _wrapped(ids: list[list[int]], job: Job) -> np.ndarray[Any, Any]:
    flat: list[int] = []
    for document in ids:
        flat += document
        flat.append(job.eos_id)
    return np.array(flat, dtype=job.dtype)


def _padded(ids: list[list[int]], job: Job) -> np.ndarray[Any, Any]:
    """One row per document, padded with EOS."""
    rows = [packing.pad(document, job.seq_len, job.eos_id, job.eos_id) for document in ids]
    return np.array(rows, dtype=job.dtype).reshape(-1, job.seq_len)
