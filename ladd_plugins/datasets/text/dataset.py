"""The text dataset: documents from a source, detokenised, tokenised, packed into rows, cached, and served
as an endless seeded stream of shuffled batches."""
from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from registry.errors import InvalidConfigError, LaddError
from registry.interfaces import Dataset, PreparedData

from ..seeds import stream_seed
from . import build, cache
from .config import TextDatasetConfig
from .shards import Job
from .sources import Source, SplitSpec, open_source
from .streaming import Stream
from .tokenizer import Encoder, load_tokenizer, vocab_size
from .tokenizer import fingerprint as tokenizer_fingerprint
from .workers import Workers

__all__ = ["TextDataset", "TextDatasetConfig", "shuffled_indices"]


class TextDataset(Dataset):
    """Rows of ``seq_len`` ids over the tokenizer's K real tokens (``tokenizer`` has the mask at id K).

    The corpus is opened when its rows are first read: sampling a trained model needs only the tokenizer,
    so an exported model samples on a machine that does not hold its training data.
    """

    def __init__(self, config: TextDatasetConfig) -> None:
        self.config = config
        self.tokenizer = load_tokenizer(config.tokenizer)
        self.vocab_size = vocab_size(self.tokenizer)
        if config.vocab_size is not None and config.vocab_size != self.vocab_size:
            raise InvalidConfigError(
                f"dataset.vocab_size={config.vocab_size} but tokenizer {config.tokenizer!r} has "
                f"{self.vocab_size} real tokens (len(tokenizer) = {len(self.tokenizer)} with the mask at id "
                f"{self.vocab_size}); set dataset.vocab_size={self.vocab_size} or null"
            )
        self.seq_len = config.seq_len
        self.eos_id: int = self.tokenizer.eos_token_id
        self._rows: dict[Path, np.ndarray] = {}

    @functools.cached_property
    def source(self) -> Source:
        """Where the documents come from, opened on first use."""
        source = open_source(self.config)
        if self.config.streaming and not source.streams:
            source_name = self.config.source
            raise InvalidConfigError(f"dataset.streaming applies to Hugging Face datasets, not to {source_name!r}")
        return source

    @functools.cached_property
    def detokenizer(self) -> str | None:
        """The detokeniser applied to each document (the known source's for ``auto``), or None."""
        name = self.source.detokenizer if self.config.detokenizer == "auto" else self.config.detokenizer
        return None if name == "none" else name

    def split(self, split: str) -> SplitSpec:
        """The source split (and slice) that ladd's ``split`` reads; ``floor`` reads the validation one."""
        mapping = {**self.source.splits, **self.config.split_map}
        if split not in mapping and split == "floor":
            split = "validation"
        if split not in mapping:
            raise InvalidConfigError(
                f"split {split!r} is not in dataset.split_map for source {self.config.source!r} "
                f"(known: {', '.join(mapping)}); add it, e.g. +dataset.split_map.{split}='train[95%:]'"
            )
        return SplitSpec.parse(mapping[split])

    def fingerprint(self, split: str) -> dict:
        """Everything that decides the rows of ``split`` (the token cache's key)."""
        return {
            "source": self.source.fingerprint(self.split(split)),
            "tokenizer": {"spec": self.config.tokenizer, "hash": tokenizer_fingerprint(self.tokenizer)},
            "eos_id": self.eos_id,
            "seq_len": self.seq_len,
            "packing": self.config.packing,
            "detokenizer": self.detokenizer,
        }

    def cache_entry(self, split: str) -> Path:
        """The token-cache folder of ``split`` (shared by ladd splits that read the same source split)."""
        directory = Path(self.config.cache_dir).expanduser() if self.config.cache_dir else cache.default_dir()
        label = re.sub(r"[^A-Za-z0-9_-]+", "_", f"{self.source.label}-{self.split(split)}").strip("_")
        return cache.entry(directory, label, self.fingerprint(split))

    def rows(self, split: str) -> np.ndarray:
        """All packed rows of ``split`` (``[N, seq_len]``), tokenised once and then read from the cache."""
        folder = self.cache_entry(split)
        if folder not in self._rows:
            self.prepare([split])
        return self._rows[folder]

    def prepare(self, splits: Sequence[str]) -> list[PreparedData]:
        """Build the token caches of ``splits`` not built yet, or wait for another process building them.

        Splits that read the same source split share an entry, listed once; a streamed dataset has none.
        """
        if self.config.streaming:
            return []
        prepared: dict[Path, PreparedData] = {}
        with Workers(self.job, self.processes) as workers:
            for split in splits:
                folder, spec = self.cache_entry(split), self.split(split)
                if folder in prepared:
                    continue
                what = f"split {split!r} ({self.source.label} {spec})"
                meta = build.prepare(folder, self.fingerprint(split), spec, workers, self.config.progress, what)
                if meta is None:
                    raise self._empty(split, spec)
                cache.verify(folder, meta)  # rows changed since the build are never read
                self._rows.setdefault(folder, cache.open_rows(folder, meta))
                size = (folder / cache.TOKENS).stat().st_size
                prepared[folder] = PreparedData(split, str(folder), size, meta["tokens"], meta["rows"])
        return list(prepared.values())

    def padding(self, batch: Tensor) -> Tensor | None:
        """With ``packing=pad``, the positions after a row's first EOS (its document's end); None with ``wrap``."""
        if self.config.packing != "pad":
            return None
        ends = batch == self.eos_id
        return (ends.cumsum(dim=1) - ends.long()) > 0

    @property
    def job(self) -> Job:
        """What worker processes make of each part of a split."""
        dtype = cache.id_dtype(len(self.tokenizer)).name
        return Job(self.source, self.encoder, self.eos_id, self.seq_len, self.config.packing, self.detokenizer, dtype)

    @functools.cached_property
    def encoder(self) -> Encoder:
        """The tokenizer in the form worker processes receive."""
        return Encoder.of(self.tokenizer)

    @property
    def processes(self) -> int:
        """Worker processes that tokenise a split: ``dataset.num_proc``, else every core this process may use."""
        if self.config.num_proc is not None:
            return self.config.num_proc
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

    def batches(self, batch_size: int, seed: int, split: str = "train") -> Iterator[Tensor]:
        """An endless stream of ``LongTensor[batch_size, seq_len]``: rows in a fresh seeded order each epoch."""
        return self.batches_from(0, batch_size, seed, split)

    def batches_from(self, start: int, batch_size: int, seed: int, split: str = "train") -> Iterator[Tensor]:
        """The stream from batch ``start`` on, started there directly (a streamed split skips what it can:
        ``streaming``)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if self.config.streaming:
            return self._stream(split, seed).batches(start, batch_size)
        generator = torch.Generator().manual_seed(stream_seed("text", seed, split))
        table = self.rows(split)
        return (
            torch.from_numpy(table[i.numpy()].astype(np.int64))
            for i in shuffled_indices(len(table), batch_size, generator, start)
        )

    def rank_batches(self, start: int, batch_size: int, seed: int, rank: int, world: int) -> Iterator[Tensor] | None:
        """A streamed split packed with ``wrap``: each process makes only the lanes its rows come from.

        Cached rows cost nothing to read; with ``pad``, the loss's weights need every row's padding: whole batches.
        """
        if not self.config.streaming or self.config.packing != "wrap":
            return None
        return self._stream("train", seed).batches(start, batch_size, rank, world)

    def _stream(self, split: str, seed: int) -> Stream:
        """``split`` read on the fly; its index (where each shard's rows begin) lies beside its token cache entry."""
        spec, entry = self.split(split), self.cache_entry(split)
        index = entry.with_name(f"{entry.name}-stream")
        return Stream(self.job, spec, stream_seed("text", seed, split), index, self._empty(split, spec))

    def _empty(self, split: str, spec: SplitSpec) -> LaddError:
        return LaddError(
            f"split {split!r} ({spec}) of source {self.config.source!r} gives no row of {self.seq_len} tokens "
            f"(packing={self.config.packing}: it has no non-blank document"
            + (", or fewer tokens than one row in all" if self.config.packing == "wrap" else "")
            + "); use more text, a larger slice in dataset.split_map, or a smaller dataset.seq_len"
        )


def shuffled_indices(n: int, batch_size: int, generator: torch.Generator, start: int = 0) -> Iterator[Tensor]:
    """Endless batches of indices into ``n`` rows: each epoch a fresh permutation, batches running across epochs.

    The stream is the epochs' permutations end to end, cut into batches; from batch ``start`` on it begins
    at position ``start * batch_size``, after drawing the earlier epochs' permutations to advance ``generator``.
    """
    epochs, offset = divmod(start * batch_size, n)
    for _ in range(epochs):
        torch.randperm(n, generator=generator)
    buffer = torch.randperm(n, generator=generator)[offset:]
    while True:
        while len(buffer) < batch_size:
            buffer = torch.cat([buffer, torch.randperm(n, generator=generator)])
        yield buffer[:batch_size]
        buffer = buffer[batch_size:]
