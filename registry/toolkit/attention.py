"""Attention and the key-value cache that backbones keep between calls.

``attention(q, k, v, causal, mask)`` is multi-head attention over ``[B, L, H, D]`` inputs (flash-attn on CUDA
in half precision when installed, else PyTorch's ``scaled_dot_product_attention``). ``KVCache`` holds each
layer's keys and values over a whole sequence: a full pass writes them, a pass over a window of positions
recomputes the window's, writes them in place and attends over the whole cached sequence. With full
(bidirectional) attention that is Fast-dLLM's approximate cache, since positions outside the window may have
changed since they were cached; a network whose attention never reads positions that change later (block-causal
attention over committed blocks) gets the exact result from the same cache.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from registry.errors import LaddError

try:
    from flash_attn import flash_attn_func
except ImportError:
    flash_attn_func = None

__all__ = ["KVCache", "attention"]


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, mask: Tensor | None = None) -> Tensor:
    """Multi-head attention of queries ``[B, Lq, H, D]`` over keys and values ``[B, Lk, H, D]``, returning
    ``[B, Lq, H * D]``; ``causal``: position i sees j <= i; ``mask`` (bool ``[Lq, Lk]``, True: may attend)."""
    if mask is None and flash_attn_func is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        out = flash_attn_func(q, k, v, causal=causal)
    else:
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, is_causal=causal
        ).transpose(1, 2)
    return out.flatten(2)


class KVCache:
    """Keys and values of every layer at every position of a batch of sequences, kept between forward passes."""

    def __init__(self) -> None:
        self._keys: dict[int, Tensor] = {}
        self._values: dict[int, Tensor] = {}

    def attend(
        self, layer: int, q: Tensor, k: Tensor, v: Tensor, window: slice | None = None, mask: Tensor | None = None
    ) -> Tensor:
        """Attention of ``layer``'s queries over the cached sequence.

        ``window`` None: ``q``, ``k``, ``v`` cover the whole sequence and are cached. Otherwise they cover the
        positions of ``window`` only: those are written into the cache, and the queries attend over every cached
        position (``mask``: bool ``[window length, sequence length]``, True where a query may attend).
        """
        if window is None:
            self._keys[layer], self._values[layer] = k.clone(), v.clone()  # owned: windowed passes write into them
            return attention(q, k, v, mask=mask)
        if layer not in self._keys:
            raise LaddError("a pass over a window of positions reads a key-value cache that no full pass has filled")
        keys, values = self._keys[layer], self._values[layer]
        if keys.shape[0] != k.shape[0]:
            raise LaddError(f"a key-value cache of {keys.shape[0]} sequences was given a batch of {k.shape[0]}")
        keys[:, window], values[:, window] = k, v
        return attention(q, keys, values, mask=mask)

    @property
    def length(self) -> int:
        """The number of positions cached (0 before the first full pass)."""
        return next(iter(self._keys.values())).shape[1] if self._keys else 0
