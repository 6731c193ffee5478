"""Pure tensor functions that turn per-position hidden states into latents (paper App. D).

``pool`` keeps one latent per position when M = S and otherwise averages contiguous chunks: the
valid position of rank ``r`` among ``L`` valid ones joins chunk ``floor(r * M / L)``, so the chunks
partition the positions in order and their sizes differ by at most one (the same chunks as
``adaptive_avg_pool1d`` when M divides L). ``chunk_mean_eos`` pools all positions but the last
valid one into M - 1 chunks and appends the last one's state (the final EOS of a sequence).

``overlap_weights`` and ``weighted_mean`` carry the states of an encoder's own tokens over to the
data tokens of the same text, by character spans.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "chunk_index",
    "chunk_mean",
    "chunk_mean_eos",
    "last_valid",
    "overlap_weights",
    "pool",
    "token_aligned",
    "weighted_mean",
]


def _all_valid(hidden: Tensor) -> Tensor:
    return torch.ones(hidden.shape[:2], dtype=torch.bool, device=hidden.device)


def chunk_index(valid: Tensor, chunks: int) -> Tensor:
    """``[B, S]``: the chunk of each valid position (``floor(rank * chunks / L)``), -1 at invalid ones."""
    rank = valid.long().cumsum(1) - 1
    count = valid.sum(1, keepdim=True).clamp_min(1)
    return torch.where(valid, rank * chunks // count, -1)


def chunk_mean(hidden: Tensor, chunks: int, valid: Tensor | None = None) -> Tensor:
    """``[B, chunks, d]``: means of ``hidden [B, S, d]`` over contiguous chunks of the valid positions (zero if
    empty)."""
    valid = _all_valid(hidden) if valid is None else valid
    if chunks == 0:
        return hidden.new_zeros(hidden.shape[0], 0, hidden.shape[2])
    members = F.one_hot(chunk_index(valid, chunks).clamp_min(0), chunks).to(hidden.dtype) * valid[..., None]
    sums = members.transpose(1, 2) @ hidden.masked_fill(~valid[..., None], 0.0)
    return sums / members.sum(1)[..., None].clamp_min(1.0)


def last_valid(valid: Tensor) -> Tensor:
    """``[B, S]`` boolean: True at the last valid position of each row."""
    return valid & (valid.long().cumsum(1) == valid.sum(1, keepdim=True))


def chunk_mean_eos(hidden: Tensor, latents: int, valid: Tensor | None = None) -> Tensor:
    """``[B, latents, d]``: ``latents - 1`` chunk means of the valid positions before the last one, then the last one's
    state."""
    valid = _all_valid(hidden) if valid is None else valid
    last = last_valid(valid)
    final = hidden.masked_fill(~last[..., None], 0.0).sum(1, keepdim=True)
    return torch.cat([chunk_mean(hidden, latents - 1, valid & ~last), final], dim=1)


def token_aligned(hidden: Tensor, valid: Tensor | None = None) -> Tensor:
    """One latent per position: ``hidden`` itself, zero at invalid positions."""
    return hidden if valid is None else hidden.masked_fill(~valid[..., None], 0.0)


POOLINGS: dict[str, Callable[[Tensor, int, Tensor | None], Tensor]] = {
    "chunk_mean": chunk_mean,
    "chunk_mean_eos": chunk_mean_eos,
}


def pool(hidden: Tensor, latents: int, pooling: str, valid: Tensor | None = None) -> Tensor:
    """``[B, latents, d]`` from ``hidden [B, S, d]``: token-aligned when ``latents == S``, else the named pooling."""
    if latents == hidden.shape[1]:
        return token_aligned(hidden, valid)
    return POOLINGS[pooling](hidden, latents, valid)


def overlap_weights(data_spans: Tensor, encoder_spans: Tensor, data_valid: Tensor) -> Tensor:
    """``[B, S, T]`` boolean: the encoder tokens whose states each data token averages.

    Spans are ``[start, end)`` character offsets into one text per row (``[B, S, 2]`` and ``[B, T, 2]``).
    A data token takes every encoder token whose span overlaps its own (for a data token of no
    characters, the one strictly around it); failing that, the nearest encoder token by character gap,
    the earliest on ties. Encoder tokens with empty spans (special tokens, padding) are never taken,
    and invalid data positions take none.
    """
    start, end = data_spans[..., 0, None], data_spans[..., 1, None]
    enc_start, enc_end = encoder_spans[:, None, :, 0], encoder_spans[:, None, :, 1]
    real = enc_end > enc_start
    overlap = (enc_start < end) & (start < enc_end) & real
    gap = torch.maximum(enc_start - end, start - enc_end).clamp_min(0).masked_fill(~real, torch.iinfo(torch.long).max)
    nearest = F.one_hot(gap.argmin(-1), encoder_spans.shape[1]).bool() & real.any(-1, keepdim=True)
    return torch.where(overlap.any(-1, keepdim=True), overlap, nearest) & data_valid[..., None]


def weighted_mean(states: Tensor, weights: Tensor) -> Tensor:
    """``[B, S, d]``: for each data token, the mean of the encoder ``states [B, T, d]`` its ``weights [B, S, T]``
    select."""
    # states no data token selects (padding) are zeroed, so a non-finite value there cannot leak into the product
    states = states.masked_fill(~weights.any(1)[..., None], 0.0)
    selected = weights.to(states.dtype)
    return (selected @ states) / selected.sum(-1, keepdim=True).clamp_min(1.0)
