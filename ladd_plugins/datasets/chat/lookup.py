"""Which positions of a row are its prompt, found from the row's ids alone.

The objective asks a dataset for the context of a batch it made (``Dataset.context(batch)``), with nothing but the
ids. Every row's prompt length is stored beside it, keyed by a hash of the row: a sum of the ids times fixed odd
64-bit multipliers, wrapping modulo 2**64 alike in numpy and torch. The keys sit sorted on the batch's device,
so finding a batch's prompts is a sum and a binary search there, plus one read of whether all rows were found.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from registry.errors import LaddError

_SEED = 0x1ADD  # the multipliers are part of the cache format: changing them needs a new format version
_CHUNK = 4096  # rows hashed at a time


def multipliers(seq_len: int) -> np.ndarray:
    """The fixed odd 64-bit multiplier of each position."""
    draws = np.random.default_rng(_SEED).integers(0, 2**64, size=seq_len, dtype=np.uint64, endpoint=False)
    return (draws | np.uint64(1)).view(np.int64)


def row_keys(rows: np.ndarray) -> np.ndarray:
    """The key of each row of ``rows`` ``[N, S]``."""
    factors = multipliers(rows.shape[1])
    starts = range(0, len(rows), _CHUNK)
    keys = [(rows[start : start + _CHUNK].astype(np.int64) * factors).sum(axis=1) for start in starts]
    return np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)


class RowIndex:
    """Prompt lengths of known rows by their keys; ``context(batch)`` marks the prompt positions of a batch."""

    def __init__(self, seq_len: int) -> None:
        self.seq_len = seq_len
        self.keys = np.zeros(0, dtype=np.int64)
        self.lengths = np.zeros(0, dtype=np.int64)
        self._on: dict[torch.device, tuple[Tensor, Tensor, Tensor]] = {}

    def add(self, rows: np.ndarray, prompts: np.ndarray, what: str) -> None:
        """Index ``rows`` with their prompt lengths; identical rows with other prompt lengths are refused."""
        keys = np.concatenate([self.keys, row_keys(rows)])
        lengths = np.concatenate([self.lengths, prompts.astype(np.int64)])
        order = np.argsort(keys, kind="stable")
        keys, lengths = keys[order], lengths[order]
        same = keys[1:] == keys[:-1]
        if (lengths[1:][same] != lengths[:-1][same]).any():
            raise LaddError(
                f"{what} holds the same ids twice with the prompt ending at different positions (a prompt and response "
                f"split differently that tokenise alike), so the prompt of such a row is not known; remove one of them"
            )
        kept = np.concatenate([[True], ~same])
        self.keys, self.lengths = keys[kept], lengths[kept]
        self._on.clear()

    def context(self, batch: Tensor) -> Tensor:
        """Bool ``[B, S]``: the prompt positions of each row of ``batch`` (rows this index holds)."""
        keys, lengths, factors = self._tables(batch.device)
        wanted = (batch.long() * factors).sum(dim=1)
        found = torch.searchsorted(keys, wanted).clamp(max=max(len(keys) - 1, 0))
        if len(keys) == 0 or not bool((keys[found] == wanted).all()):
            raise LaddError(
                "the batch holds a row this chat dataset did not make, so its prompt is not known; the context of "
                "a batch comes from the dataset whose batches it is"
            )
        positions = torch.arange(batch.shape[1], device=batch.device)
        return positions < lengths[found][:, None]

    def _tables(self, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        if device not in self._on:
            self._on[device] = (
                torch.from_numpy(self.keys).to(device),
                torch.from_numpy(self.lengths).to(device),
                torch.from_numpy(multipliers(self.seq_len)).to(device),
            )
        return self._on[device]
