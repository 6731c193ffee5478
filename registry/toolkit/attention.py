"""Attention, the masks of attention patterns, and the key-value cache that backbones keep between calls.

``attention(q, k, v, causal, mask)`` is multi-head attention over ``[B, L, H, D]`` inputs (flash-attn on CUDA
in half precision when installed, else PyTorch's ``scaled_dot_product_attention``). ``pattern_mask`` gives the
positions an ``AttentionPattern`` lets each query see, and ``context_mask`` the same pattern over a training
view ``[x_t ; x0]`` (noisy blocks given the clean blocks before them). ``KVCache`` holds each layer's keys and
values over a run of positions: a full pass writes them, a pass over a window of positions recomputes the window's,
writes them in place (or after the last cached position: the cache grows) and attends over the cached positions.
With full (bidirectional) attention that is Fast-dLLM's approximate cache, since positions outside the window may
have changed since they were cached; a network whose attention never reads positions that change later
(block-causal attention over committed blocks) gets the exact result from the same cache.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from registry.errors import LaddError

if TYPE_CHECKING:  # the contract's interfaces import this module (a backbone's new cache): no import back at run time
    from registry.interfaces import AttentionPattern

try:
    from flash_attn import flash_attn_func
except ImportError:
    flash_attn_func = None

__all__ = ["KVCache", "attention", "context_mask", "pattern_mask"]


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


def pattern_mask(pattern: AttentionPattern | None, queries: Tensor, keys: Tensor) -> Tensor | None:
    """Bool ``[Q, K]``: which of the positions ``keys`` each of the positions ``queries`` sees under ``pattern``;
    None when it sees every one (bidirectional, also ``pattern`` None)."""
    if pattern is None or pattern.block is None:
        return None
    own = queries // pattern.block
    seen = keys[None, :] // pattern.block <= own[:, None]
    if pattern.span is not None:
        seen &= keys[None, :] >= (own * pattern.block + pattern.block - pattern.span)[:, None]
    return seen


def context_mask(pattern: AttentionPattern, length: int, device: torch.device | str = "cpu") -> Tensor:
    """Bool ``[2L, 2L]`` over the training view ``[x_t ; x0]`` of ``length`` positions each, under a block pattern.

    A noisy position sees the noisy positions of its own block and the clean blocks before it that ``pattern`` lets
    it see; a clean position sees the clean positions ``pattern`` lets it see; no clean position sees a noisy one.
    So the noisy half computes each block's prediction given the clean blocks before it, in one pass.
    """
    if pattern.block is None:
        raise ValueError("the training view with clean context needs a block attention pattern")
    positions = torch.arange(length, device=device)
    clean = pattern_mask(pattern, positions, positions)
    assert clean is not None  # a block pattern
    own = positions[:, None] // pattern.block == positions[None, :] // pattern.block
    noisy = torch.cat([own, clean & ~own], dim=1)
    return torch.cat([noisy, torch.cat([torch.zeros_like(own), clean], dim=1)], dim=0)


class KVCache:
    """Keys and values of every layer over a run of positions of a batch of sequences, kept between forward passes.

    A pass over a window of positions writes the window's keys and values (over cached ones, or right after the
    last cached position, growing the cache) and attends over every cached position ``pattern`` lets it see;
    positions that no later query sees (before ``pattern.first_seen`` of the window) are dropped first.
    """

    def __init__(self) -> None:
        self._keys: dict[int, Tensor] = {}
        self._values: dict[int, Tensor] = {}
        self._first: dict[int, int] = {}  # each layer's first cached position

    def attend(
        self, layer: int, q: Tensor, k: Tensor, v: Tensor, window: slice | None = None,
        pattern: AttentionPattern | None = None,
    ) -> Tensor:
        """Attention of ``layer``'s queries over the cached sequence, under ``pattern`` (None: bidirectional).

        ``window`` None: ``q``, ``k``, ``v`` cover the whole sequence from position 0 and are cached. Otherwise they
        cover the positions of ``window`` only (from ``window.start``): those are written into the cache, and the
        queries attend over every cached position they see.
        """
        if window is None:
            self._keys[layer], self._values[layer] = k.clone(), v.clone()  # owned: windowed passes write into them
            self._first[layer] = 0
            positions = torch.arange(k.shape[1], device=q.device)
            return attention(q, k, v, mask=pattern_mask(pattern, positions, positions))
        start, width = window.start or 0, k.shape[1]
        keys, values = self._keys.get(layer), self._values.get(layer)
        first = self._first.get(layer, 0)
        end = first + (0 if keys is None else keys.shape[1])
        if not first <= start <= end:
            held = "none" if keys is None else f"{first} to {end - 1}"
            raise LaddError(
                f"a pass over positions {start} to {start + width - 1} reads a key-value cache that no pass has filled "
                f"there (it holds positions {held}): a window starts within the cached positions or right after them"
            )
        if keys is None or values is None:
            keys, values = k.clone(), v.clone()
        elif keys.shape[0] != k.shape[0]:
            raise LaddError(f"a key-value cache of {keys.shape[0]} sequences was given a batch of {k.shape[0]}")
        elif start + width <= end:
            keys[:, start - first : start + width - first], values[:, start - first : start + width - first] = k, v
        else:
            keys = torch.cat([keys[:, : start - first], k], dim=1)
            values = torch.cat([values[:, : start - first], v], dim=1)
        drop = 0 if pattern is None else max(pattern.first_seen(start) - first, 0)
        keys, values, first = keys[:, drop:], values[:, drop:], first + drop
        self._keys[layer], self._values[layer], self._first[layer] = keys, values, first
        queries = torch.arange(start, start + width, device=q.device)
        held_positions = torch.arange(first, first + keys.shape[1], device=q.device)
        return attention(q, keys, values, mask=pattern_mask(pattern, queries, held_positions))

    @property
    def length(self) -> int:
        """The position after the last one cached (0 before the first pass)."""
        if not self._keys:
            return 0
        layer = next(iter(self._keys))
        return self._first[layer] + self._keys[layer].shape[1]
