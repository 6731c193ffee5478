"""The instruction dataset: pairs framed by a chat template, one response per row, EOS-padded, cached, and
served as a seeded stream whose rows' prompts the objective keeps clean and unscored (``Dataset.context``)."""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from registry.errors import LaddError
from registry.interfaces import Dataset, PreparedData

from ..seeds import stream_seed
from ..text import cache
from ..text.dataset import shuffled_indices
from ..text.sources import SplitSpec, mapped_split
from ..text.tokenizer import fingerprint as tokenizer_fingerprint
from ..text.tokenizer import load_tokenizer, vocab_size
from . import conversations
from .config import ChatDatasetConfig
from .framing import Framing
from .lookup import RowIndex

__all__ = ["ChatDataset", "ChatDatasetConfig"]

FORMAT = 1
IDS, PROMPTS, META = "ids.npy", "prompts.npy", "meta.json"


@dataclass(frozen=True)
class Prepared:
    """A split's rows ``[N, S]`` and the length of each row's prompt."""

    ids: np.ndarray
    prompts: np.ndarray


class ChatDataset(Dataset):
    """Rows of ``seq_len`` ids: a prompt (clean, unscored), a response, EOS up to the length (scored as response)."""

    def __init__(self, config: ChatDatasetConfig) -> None:
        self.config = config
        self.tokenizer = load_tokenizer(config.tokenizer)
        self.vocab_size = vocab_size(self.tokenizer)
        self.seq_len = config.seq_len
        self.eos_id: int = self.tokenizer.eos_token_id
        self.framing = Framing(self.tokenizer, config.chat_template, config.tokenizer)
        self._splits: dict[Path, Prepared] = {}
        self._index = RowIndex(config.seq_len)

    def split(self, split: str) -> SplitSpec:
        """The source split (and slice) that ladd's ``split`` reads; ``floor`` reads the validation one."""
        return mapped_split(split, {**conversations.DEFAULT_SPLITS, **self.config.split_map}, self.config.source)

    def fingerprint(self, split: str) -> dict:
        """Everything that decides the rows of ``split`` (the cache's key)."""
        return {
            "format": FORMAT,
            "source": conversations.fingerprint(self.config, self.split(split)),
            "tokenizer": {"spec": self.config.tokenizer, "hash": tokenizer_fingerprint(self.tokenizer)},
            "template": self.tokenizer.chat_template if self.framing.templated else None,
            "seq_len": self.seq_len,
            "overflow": self.config.overflow,
        }

    def cache_entry(self, split: str) -> Path:
        """The folder of ``split``'s rows (shared by ladd splits that read the same source slice)."""
        directory = Path(self.config.cache_dir).expanduser() if self.config.cache_dir else cache.default_dir().parent
        label = re.sub(r"[^A-Za-z0-9_-]+", "_", f"chat-{Path(self.config.source).name}-{self.split(split)}")
        return cache.entry(directory / "chat", label.strip("_"), self.fingerprint(split))

    def prepare(self, splits: Sequence[str]) -> list[PreparedData]:
        """Frame and cache the rows of ``splits`` not cached yet; every bad row is refused before anything is kept."""
        prepared = {}
        for split in splits:
            folder = self.cache_entry(split)
            if folder not in prepared:
                rows = self._rows(split, folder)
                size = sum((folder / name).stat().st_size for name in (IDS, PROMPTS))
                prepared[folder] = PreparedData(split, str(folder), size, rows.ids.size, len(rows.ids))
        return list(prepared.values())

    def rows(self, split: str) -> Prepared:
        """All rows of ``split`` with their prompt lengths, framed once and then read from the cache."""
        return self._rows(split, self.cache_entry(split))

    def _rows(self, split: str, folder: Path) -> Prepared:
        if folder not in self._splits:
            if not (folder / META).is_file():
                self._build(split, folder)
            rows = Prepared(np.load(folder / IDS, mmap_mode="r"), np.load(folder / PROMPTS))
            self._index.add(rows.ids, rows.prompts, f"split {split!r} ({self.split(split)})")
            self._splits[folder] = rows
        return self._splits[folder]

    def _build(self, split: str, folder: Path) -> None:
        spec, overflow = self.split(split), self.config.overflow
        if conversations.local_files(self.config.source) is not None:
            for other in self._splits_read():  # a bad row of local files is refused before any split is kept
                if other != split:
                    for _ in conversations.rows(self.config, self.split(other)):
                        pass
        ids, prompts, counts = [], [], {"pairs": 0, "special": 0, "overflow": 0}
        for row in conversations.rows(self.config, spec):
            if self.framing.holds_special_text(row.turns):
                counts["special"] += 1
                continue
            for prompt, response in self.framing.pairs(row.turns, row.where):
                counts["pairs"] += 1
                if len(prompt) >= self.seq_len:
                    raise LaddError(
                        f"{row.where}: the prompt takes {len(prompt)} ids, leaving nothing of dataset.seq_len="
                        f"{self.seq_len} to the response; raise dataset.seq_len or shorten that prompt"
                    )
                if len(prompt) + len(response) > self.seq_len and overflow == "drop":
                    counts["overflow"] += 1
                    continue
                body = (prompt + response)[: self.seq_len]
                ids.append(body + [self.eos_id] * (self.seq_len - len(body)))
                prompts.append(len(prompt))
        if not ids:
            raise LaddError(
                f"split {split!r} ({spec}) of dataset.source={self.config.source!r} gives no row: "
                f"{_counted(counts, self.seq_len)}"
            )
        if counts["special"] or counts["overflow"]:
            print(f"ladd: note: split {split!r} ({spec}): {_counted(counts, self.seq_len)}", file=sys.stderr)
        dtype = cache.id_dtype(len(self.tokenizer))
        _publish(folder, np.asarray(ids, dtype=dtype), np.asarray(prompts, dtype=np.int32), {
            "format": FORMAT, "split": split, "rows": len(ids), **counts, "fingerprint": self.fingerprint(split),
        })

    def _splits_read(self) -> list[str]:
        """ladd's splits of the source: its three, and any other that ``split_map`` names."""
        return list(dict.fromkeys([*conversations.DEFAULT_SPLITS, *self.config.split_map]))

    def context(self, batch: Tensor) -> Tensor:
        """The prompt positions of each row (rows of splits read so far)."""
        return self._index.context(batch)

    def prompt_ids(self, text: str) -> list[int] | None:
        """A user's ``text`` in the chat template, the assistant's turn opened; None without a template."""
        return self.framing.prompt(text)

    def batches(self, batch_size: int, seed: int, split: str = "train") -> Iterator[Tensor]:
        """An endless stream of ``LongTensor[batch_size, seq_len]``: rows in a fresh seeded order each epoch."""
        return self.batches_from(0, batch_size, seed, split)

    def batches_from(self, start: int, batch_size: int, seed: int, split: str = "train") -> Iterator[Tensor]:
        """The stream from batch ``start`` on, started there directly."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        generator = torch.Generator().manual_seed(stream_seed("chat", seed, split))
        table = self.rows(split).ids
        return (
            torch.from_numpy(table[i.numpy()].astype(np.int64))
            for i in shuffled_indices(len(table), batch_size, generator, start)
        )


def _counted(counts: dict[str, int], seq_len: int) -> str:
    parts = [f"{counts['pairs']} pairs"]
    if counts["overflow"]:
        parts.append(
            f"{counts['overflow']} left out as longer than dataset.seq_len={seq_len} (dataset.overflow=truncate "
            f"cuts them instead)"
        )
    if counts["special"]:
        parts.append(f"{counts['special']} rows left out whose text spells a special token of the chat template")
    return ", ".join(parts)


def _publish(folder: Path, ids: np.ndarray, prompts: np.ndarray, meta: dict) -> None:
    """Write the entry beside its place and rename it there whole (another process may have finished first)."""
    work = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    np.save(work / IDS, ids)
    np.save(work / PROMPTS, prompts)
    (work / META).write_text(json.dumps(meta, indent=1), encoding="utf-8")
    try:
        work.rename(folder)
    except OSError:
        if not (folder / META).is_file():
            raise
        shutil.rmtree(work, ignore_errors=True)
