"""Cross-entropy over a large vocabulary without keeping float32 log-probabilities of every position."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

#: float32 elements of log-probabilities alive at once (256 MiB); larger inputs are cut into row chunks
CHUNK_ELEMENTS = 1 << 26


def _rows_ce(logits: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(logits.float(), target, ignore_index=-100, reduction="none")


def cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    """Per-row cross-entropy of ``logits [N, K]`` against ``target [N]`` (-100: ignored, loss 0).

    Above ``CHUNK_ELEMENTS`` the rows are processed in chunks under activation checkpointing, so the
    backward pass recomputes each chunk's float32 softmax instead of storing it for all N rows
    (8,192 x 151,670 x 4 bytes = 5.0 GB for a batch of 64 x 128 LM1B tokens with the Qwen3 vocabulary;
    arithmetic, not yet measured on a GPU). Each row's value is the same either way.
    """
    rows = max(1, CHUNK_ELEMENTS // logits.shape[-1])
    if logits.shape[0] <= rows:
        return _rows_ce(logits, target)
    parts = [
        checkpoint(_rows_ce, logits[start : start + rows], target[start : start + rows], use_reentrant=False)
        for start in range(0, logits.shape[0], rows)
    ]
    return torch.cat(parts)
