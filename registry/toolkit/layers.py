"""Transformer building blocks for backbones and encoders (ladd's DiT, MM-DiT, MLP denoisers and DiT encoder use them).

DiT blocks (Peebles & Xie, 2023) with adaLN-Zero conditioning, bidirectional (or causal) attention and
rotary position embeddings (RoPE) whose positions the caller passes in; the timestep embedding, the
zero-initialised vocabulary head and the adaLN-modulated final layer (which applies its head at rows only).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from registry.interfaces import AttentionPattern

from .attention import attention
from .tokens import at_rows

__all__ = [
    "AdaLN",
    "BlockStyle",
    "DiTBlock",
    "DiTTrunk",
    "FinalLayer",
    "MLPBlock",
    "Rotary",
    "TimestepEmbedder",
    "TokenHead",
    "apply_rotary",
    "attention",
    "learned_condition",
    "modulate",
    "rotary",
    "zero_linear",
]

Rotary = tuple[Tensor, Tensor]


class TimestepEmbedder(nn.Module):
    """Sinusoidal features of ``tau`` in [0, 1] followed by a two-layer MLP, giving ``[B, dim]``."""

    def __init__(self, dim: int, frequency_dim: int = 256, scale: float = 1000.0, max_period: float = 10_000.0):
        super().__init__()
        self.frequency_dim = frequency_dim
        # with tau in [0, 1] most frequencies would barely turn; DiT's integer-step range (x1000) spreads them
        self.scale = scale
        self.max_period = max_period
        self.mlp = nn.Sequential(nn.Linear(frequency_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, tau: Tensor) -> Tensor:
        half = self.frequency_dim // 2
        freqs = torch.exp(
            -math.log(self.max_period) * torch.arange(half, device=tau.device, dtype=torch.float32) / half
        )
        args = (tau.float() * self.scale)[:, None] * freqs
        features = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return self.mlp(features.to(cast(nn.Linear, self.mlp[0]).weight.dtype))


def rotary(positions: Tensor, head_dim: int, base: float = 10_000.0) -> Rotary:
    """RoPE cosines and sines ``[L, 1, head_dim / 2]`` for integer ``positions`` ``[L]``."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions.float()[:, None] * inv_freq
    return angles.cos()[:, None], angles.sin()[:, None]


def apply_rotary(x: Tensor, rope: Rotary) -> Tensor:
    """Rotate ``x`` ``[B, L, H, D]`` by its positions' angles (rotate-half convention)."""
    cos, sin = rope
    dtype = x.dtype
    x = x.to(torch.promote_types(dtype, cos.dtype))
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(dtype)


def zero_linear(fan_in: int, fan_out: int) -> nn.Linear:
    """A linear layer initialised to output zeros (adaLN-Zero output heads)."""
    layer = nn.Linear(fan_in, fan_out)
    nn.init.zeros_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


class TokenHead(nn.Linear):
    """Zero-initialised output head over the vocabulary.

    On CUDA the product is computed ``ALIGN``-padded and narrowed: with a row length that is not a
    multiple of 8 elements (Qwen3's 151,670 tokens), cuBLAS falls back to slower matmul kernels.
    Parameters, outputs and gradients are those of the plain layer.
    """

    ALIGN = 64

    def __init__(self, hidden: int, vocab_size: int):
        super().__init__(hidden, vocab_size)
        nn.init.zeros_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        pad = -self.out_features % self.ALIGN
        if pad == 0 or not x.is_cuda:
            return super().forward(x)
        out = F.linear(x, F.pad(self.weight, (0, 0, 0, pad)), F.pad(self.bias, (0, pad)))
        return out[..., : self.out_features]


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """adaLN modulation of normalised hidden states."""
    return x * (1 + scale) + shift


class AdaLN(nn.Module):
    """adaLN-Zero: ``n`` modulation vectors ``[B, 1, hidden]`` from the conditioning, all zero at initialisation."""

    def __init__(self, cond_dim: int, hidden: int, n: int):
        super().__init__()
        self.n = n
        self.proj = zero_linear(cond_dim, n * hidden)

    def forward(self, c: Tensor) -> tuple[Tensor, ...]:
        return self.proj(F.silu(c)).unsqueeze(1).chunk(self.n, dim=-1)


@dataclass(frozen=True)
class BlockStyle:
    """Variants of the DiT layers found in published networks; the defaults are ladd's own layers."""

    norm_eps: float = 1e-6  # epsilon of every LayerNorm
    norm_weight: bool = False  # LayerNorms scale by a learned weight (without a bias), as MDLM's do
    attention_bias: bool = True  # the attention's qkv and output projections have biases

    def norm(self, hidden: int) -> nn.LayerNorm:
        """A LayerNorm of this style over ``hidden`` features."""
        return nn.LayerNorm(hidden, eps=self.norm_eps, elementwise_affine=self.norm_weight, bias=False)


LADD_STYLE = BlockStyle()


class MLPBlock(nn.Module):
    """Pre-norm MLP residual branch with adaLN-Zero shift, scale and gate."""

    def __init__(self, hidden: int, cond_dim: int, mlp_ratio: float, dropout: float, style: BlockStyle = LADD_STYLE):
        super().__init__()
        inner = int(hidden * mlp_ratio)
        self.norm = style.norm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, inner), nn.GELU(approximate="tanh"), nn.Linear(inner, hidden))
        self.adaln = AdaLN(cond_dim, hidden, 3)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        shift, scale, gate = self.adaln(c)
        return x + gate * self.dropout(self.mlp(modulate(self.norm(x), shift, scale)))


class DiTBlock(nn.Module):
    """A DiT block, split around attention so that MM-DiT can attend jointly across modalities."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        cond_dim: int,
        mlp_ratio: float,
        dropout: float,
        causal: bool = False,
        style: BlockStyle = LADD_STYLE,
    ):
        super().__init__()
        self.causal = causal
        if hidden % heads or (hidden // heads) % 2:
            raise ValueError(f"hidden {hidden} must split into {heads} heads of even width (for RoPE)")
        self.heads = heads
        self.norm = style.norm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=style.attention_bias)
        self.proj = nn.Linear(hidden, hidden, bias=style.attention_bias)
        self.adaln = AdaLN(cond_dim, hidden, 3)
        self.dropout = nn.Dropout(dropout)
        self.mlp = MLPBlock(hidden, cond_dim, mlp_ratio, dropout, style)

    def pre_attention(self, x: Tensor, c: Tensor, rope: Rotary) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Rotated queries and keys, values ``[B, L, H, D]`` and the attention gate."""
        shift, scale, gate = self.adaln(c)
        q, k, v = self.qkv(modulate(self.norm(x), shift, scale)).unflatten(-1, (3, self.heads, -1)).unbind(2)
        return apply_rotary(q, rope), apply_rotary(k, rope), v, gate

    def post_attention(self, x: Tensor, attn: Tensor, gate: Tensor, c: Tensor) -> Tensor:
        """Residual update from this block's share of the attention output ``[B, L, hidden]``, then the MLP."""
        return self.mlp(x + gate * self.dropout(self.proj(attn)), c)

    def forward(
        self, x: Tensor, c: Tensor, rope: Rotary, cache: Any = None, layer: int = 0, window: slice | None = None,
        mask: Tensor | None = None, pattern: AttentionPattern | None = None,
    ) -> Tensor:
        """The block over ``x``, attending under ``mask`` (bool, True: may attend); with ``cache`` (a ``KVCache``),
        attending through it as this trunk's ``layer`` under ``pattern``, ``x`` holding the positions of ``window``
        only (all when None)."""
        q, k, v, gate = self.pre_attention(x, c, rope)
        if cache is None:
            return self.post_attention(x, attention(q, k, v, self.causal, mask), gate, c)
        if self.causal and (pattern is None or pattern.block != 1):
            raise ValueError("a causal block reads its key-value cache under the causal pattern AttentionPattern(1)")
        return self.post_attention(x, cache.attend(layer, q, k, v, window, pattern), gate, c)


class DiTTrunk(nn.Module):
    """A stack of DiT blocks over one sequence, with RoPE positions ``0..L-1`` (causal attention when asked)."""

    def __init__(
        self,
        hidden: int,
        layers: int,
        heads: int,
        cond_dim: int,
        mlp_ratio: float,
        dropout: float,
        causal: bool = False,
        style: BlockStyle = LADD_STYLE,
    ):
        super().__init__()
        self.head_dim = hidden // heads
        block = (hidden, heads, cond_dim, mlp_ratio, dropout, causal, style)
        self.blocks = nn.ModuleList(DiTBlock(*block) for _ in range(layers))

    def forward(
        self, x: Tensor, c: Tensor, cache: Any = None, window: slice | None = None, *,
        positions: Tensor | None = None, mask: Tensor | None = None, pattern: AttentionPattern | None = None,
    ) -> Tensor:
        """Hidden states of ``x`` ``[B, L, D]`` at RoPE ``positions`` (``0..L-1`` by default), attending under ``mask``
        (bool ``[L, L]``); with ``cache``, ``x`` holds the positions of ``window`` (``window.start`` on), the other
        positions' keys and values come from the cache, and ``pattern`` says which of them each position sees."""
        if positions is None:
            start = 0 if window is None else window.start or 0
            positions = torch.arange(start, start + x.shape[1], device=x.device)
        rope = rotary(positions, self.head_dim)
        for layer, block in enumerate(self.blocks):
            x = block(x, c, rope, cache, layer, window, mask, pattern)
        return x


class FinalLayer(nn.Module):
    """adaLN-modulated final LayerNorm followed by an output head."""

    def __init__(self, hidden: int, cond_dim: int, head: nn.Module, style: BlockStyle = LADD_STYLE):
        super().__init__()
        self.norm = style.norm(hidden)
        self.adaln = AdaLN(cond_dim, hidden, 2)
        self.head = head

    def forward(self, x: Tensor, c: Tensor, rows: Tensor | None = None) -> Tensor:
        """Head outputs ``[B, L, out]``, or ``[N, out]`` at the positions ``rows`` (bool ``[B, L]``) only."""
        shift, scale = self.adaln(c)
        features = modulate(self.norm(x), shift, scale)
        return self.head(at_rows(features, rows))


def learned_condition(cond_dim: int) -> nn.Parameter:
    """A learned constant conditioning vector for networks without timestep input."""
    # non-zero: a zero vector would leave the zero-initialised adaLN layers without gradient
    return nn.Parameter(0.02 * torch.randn(cond_dim))
