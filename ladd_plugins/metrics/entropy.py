"""Sample entropies: per-sequence unigram entropy (MDLM literature) and positional entropy (App. F)."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from registry.interfaces import Metric

from .detokenize import check_finished

__all__ = ["Entropy", "positional_entropy", "row_entropies", "sample_entropies", "unigram_entropy"]


def row_entropies(values: Tensor) -> Tensor:
    """Entropy in nats (float64, ``0 log 0 = 0``) of the empirical distribution of each row of ``values [R, C]``."""
    ordered = values.sort(dim=1).values
    starts = torch.ones_like(ordered, dtype=torch.bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    run = starts.long().cumsum(dim=1) - 1  # index of each value's run of equal ids within its row
    counts = torch.zeros(ordered.shape, dtype=torch.float64, device=values.device)
    counts.scatter_add_(1, run, torch.ones_like(counts))
    p = counts / values.shape[1]
    return -torch.xlogy(p, p).sum(dim=1)


def unigram_entropy(samples: Tensor) -> float:
    """Mean over samples of the entropy of each sample's token-id histogram (all ``S`` positions)."""
    return float(row_entropies(samples).mean())


def positional_entropy(samples: Tensor) -> float:
    """App. F: mean over positions of the entropy of the token marginal across the ``N`` samples.

    Bounded by ``log N``, so it is comparable only between sample sets of one size.
    """
    return float(row_entropies(samples.T).mean())


def sample_entropies(samples: Tensor) -> dict[str, float]:
    """Both entropies of ``samples [N, S]``, named ``entropy_unigram`` and ``entropy_positional``."""
    if samples.dim() != 2 or samples.numel() == 0:
        raise ValueError(f"entropy expects a non-empty [N, S] sample set, got shape {tuple(samples.shape)}")
    return {"entropy_unigram": unigram_entropy(samples), "entropy_positional": positional_entropy(samples)}


class Entropy(Metric):
    """Sample diversity on token ids (no re-tokenisation); a finished sample must not hold the mask token."""

    primary = "entropy_unigram"
    lower_is_better = False  # collapse lowers entropy; compare against the data's own value

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer

    def __call__(self, samples: Tensor, reference: Tensor) -> dict[str, float]:
        """Entropies of ``samples``; ``reference`` is unused (entropy needs no reference)."""
        check_finished(samples, self.tokenizer)
        return sample_entropies(samples)
