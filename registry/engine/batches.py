"""Token batches from a dataset component, checked before any model sees them (training and evaluation alike)."""
from __future__ import annotations

from collections.abc import Iterator

import torch

from registry.errors import LaddError
from registry.interfaces import Dataset


def check_batch(batch: torch.Tensor, dataset: Dataset, split: str = "train") -> None:
    """Refuse batches of the wrong shape or with token ids outside the vocabulary (mask excluded)."""
    if batch.dim() != 2 or batch.shape[1] != dataset.seq_len or batch.dtype != torch.long:
        raise LaddError(
            f"dataset batch ({split} split) has shape {tuple(batch.shape)} and dtype {batch.dtype}; expected "
            f"[batch, {dataset.seq_len}] token ids of dtype torch.int64"
        )
    low, high = int(batch.min()), int(batch.max())
    if low < 0 or high >= dataset.vocab_size:
        bad = low if low < 0 else high
        raise LaddError(
            f"dataset ({split} split) produced token id {bad}, outside the vocabulary 0..{dataset.vocab_size - 1} "
            f"(the mask id {dataset.vocab_size} is reserved for the diffusion process)"
        )


def checked_batches(dataset: Dataset, batch_size: int, seed: int, split: str) -> Iterator[torch.Tensor]:
    """``dataset.batches`` of one split, each batch checked (held-out data is checked like training data)."""
    for batch in dataset.batches(batch_size, seed, split):
        check_batch(batch, dataset, split)
        yield batch


def stream_ended(produced: int, batch_size: int) -> LaddError:
    """The error for a training stream that ran dry after ``produced`` batches."""
    return LaddError(
        f"the dataset stream ended after {produced} batch(es); training needs an endless stream "
        f"(a dataset with too few sequences for batch size {batch_size}?)"
    )


def first_batch(dataset: Dataset, batch_size: int, seed: int) -> torch.Tensor:
    """The first training batch, checked: data that cannot give one is refused before a run writes anything."""
    batch = next(checked_batches(dataset, batch_size, seed, "train"), None)
    if batch is None:
        raise stream_ended(0, batch_size)
    return batch
