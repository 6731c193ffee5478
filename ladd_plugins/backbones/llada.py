"""LLaDA's network (GSAI-ML/LLaDA-8B-Base and -Instruct): a LLaMA-style transformer without the causal mask.

Each block is ``x + attn(norm(x))`` then ``x + ffn(norm(x))``: RMSNorm with a weight and no bias, attention with
rotary embeddings (rotate-half, base ``rope_theta``) and no biases, a SwiGLU feed-forward
``down(silu(gate(x)) * up(x))``; then a final RMSNorm and an output head untied from the embedding. The network is
not told the time (``token_time_conditioned = False``). A published table holds more ids than the data's tokens
and a mask id of its own inside it (LLaDA: 126,336 of 126,464): ladd's mask K is fed as that id, the logits are
those of the K real tokens, and the network's own mask, where it is one of them, gets no probability (SUBS), or, with
``mask_logit`` (an imported LLaDA or Dream, whose tokenizer covers the whole table), keeps its logit as their code
keeps it: the backbone declares that column (``mask_column``).
Options give the variants of Dream-7B (Qwen2's layout): grouped-query attention, biases on q, k and v, and logits
shifted by one position (``shift_logits``: a network adapted from a causal LM predicts position i at i - 1).

Given a latent channel (LADD on top of LLaDA), latent slots join every block's attention as in MM-DiT: their own
DiT blocks (adaLN-Zero on the latent time) at positions ``S..S+M-1``, the token stream unchanged and under the same
names as without a latent, so a warm start from an imported LLaDA (``train.init_from``) fills it whole.

It keeps Fast-dLLM's approximate key-value cache (``CachingBackbone``) over the joint sequence, tokens then latent
slots, as MM-DiT does. With ``shift_logits`` a window's first position is predicted from the position before it,
so a windowed pass also recomputes that one (and refreshes its keys and values); the compute meter, which counts
the window's positions, leaves that one position per pass out.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from registry.errors import IncompatibleComponentsError
from registry.interfaces import CachingBackbone, Channels, Denoised, TransformerShape
from registry.toolkit.layers import DiTBlock, FinalLayer, Rotary, TimestepEmbedder, apply_rotary, attention, rotary

from .config import LLaDAConfig

__all__ = ["LLaDA", "LLaDAConfig"]

_INIT_STD = 0.02


class RMSNorm(nn.Module):
    """``x / rms(x) * weight``, normalised in float32 whatever the input's precision."""

    def __init__(self, width: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: Tensor) -> Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight


class Attention(nn.Module):
    """Bidirectional attention with rotary queries and keys; grouped-query when there are fewer key/value heads."""

    def __init__(self, config: LLaDAConfig):
        super().__init__()
        self.heads = config.heads
        self.kv_heads = config.kv_heads or config.heads
        head_dim = config.hidden // config.heads
        self.q = nn.Linear(config.hidden, config.heads * head_dim, bias=config.qkv_bias)
        self.k = nn.Linear(config.hidden, self.kv_heads * head_dim, bias=config.qkv_bias)
        self.v = nn.Linear(config.hidden, self.kv_heads * head_dim, bias=config.qkv_bias)
        self.out = nn.Linear(config.heads * head_dim, config.hidden, bias=False)

    def qkv(self, x: Tensor, rope: Rotary) -> tuple[Tensor, Tensor, Tensor]:
        """Rotated queries and keys and the values, ``[B, L, heads, head_dim]`` each (key/value heads repeated)."""
        q = self.q(x).unflatten(-1, (self.heads, -1))
        k = self.k(x).unflatten(-1, (self.kv_heads, -1))
        v = self.v(x).unflatten(-1, (self.kv_heads, -1))
        group = self.heads // self.kv_heads
        return apply_rotary(q, rope), apply_rotary(k, rope).repeat_interleave(group, 2), v.repeat_interleave(group, 2)


class SwiGLU(nn.Module):
    """``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: LLaDAConfig):
        super().__init__()
        self.gate = nn.Linear(config.hidden, config.mlp_hidden, bias=False)
        self.up = nn.Linear(config.hidden, config.mlp_hidden, bias=False)
        self.down = nn.Linear(config.mlp_hidden, config.hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """Pre-norm attention and feed-forward residual branches, split around attention for the joint stream."""

    def __init__(self, config: LLaDAConfig):
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden, config.norm_eps)
        self.attn = Attention(config)
        self.ff_norm = RMSNorm(config.hidden, config.norm_eps)
        self.ff = SwiGLU(config)

    def pre_attention(self, x: Tensor, rope: Rotary) -> tuple[Tensor, Tensor, Tensor]:
        return self.attn.qkv(self.attn_norm(x), rope)

    def post_attention(self, x: Tensor, attended: Tensor) -> Tensor:
        x = x + self.attn.out(attended)
        return x + self.ff(self.ff_norm(x))

    def forward(
        self, x: Tensor, rope: Rotary, cache: Any = None, layer: int = 0, window: slice | None = None
    ) -> Tensor:
        q, k, v = self.pre_attention(x, rope)
        return self.post_attention(x, attention(q, k, v) if cache is None else cache.attend(layer, q, k, v, window))


class LatentStream(nn.Module):
    """The latent slots' own input layer, DiT blocks (one per token block), final layer and time embedding."""

    def __init__(self, config: LLaDAConfig, channels: Channels):
        super().__init__()
        latent = channels.latent
        assert latent is not None  # built only with a latent channel
        self.embed = latent.input_layer(config.hidden)
        self.time = TimestepEmbedder(config.cond_dim)
        block = (config.hidden, config.heads, config.cond_dim, config.latent_mlp_ratio, 0.0)
        self.blocks = nn.ModuleList(DiTBlock(*block) for _ in range(config.layers))
        self.final = FinalLayer(config.hidden, config.cond_dim, latent.output_layer(config.hidden))


class LLaDA(CachingBackbone):
    """Token logits ``[B, S, K]`` of a LLaMA-style bidirectional transformer, untimed; a latent joins its attention."""

    token_time_conditioned = False

    def __init__(self, config: LLaDAConfig, channels: Channels):
        super().__init__()
        if not channels.tokens:
            raise IncompatibleComponentsError(
                "backbone 'llada' denoises tokens (and a latent beside them); for a latent alone use 'dit' or 'mlp'"
            )
        rows = config.vocab_rows or channels.vocab_size + 1
        own_mask = channels.vocab_size if config.mask_id is None else config.mask_id
        if channels.vocab_size > rows or own_mask >= rows:
            raise IncompatibleComponentsError(
                f"backbone.vocab_rows={rows} holds fewer ids than the data's {channels.vocab_size} tokens (and the "
                f"mask): the data's tokenizer is not the network's"
            )
        if config.mask_logit and (own_mask >= channels.vocab_size or rows > channels.vocab_size):
            raise IncompatibleComponentsError(
                f"backbone.mask_logit=true scores over the network's whole output, but its table holds {rows} ids and "
                f"the data's tokenizer {channels.vocab_size}: use the tokenizer ladd import carries, which covers the "
                f"table, or mask_logit=false"
            )
        self.vocab_size, self.mask, self.own_mask = channels.vocab_size, channels.vocab_size, own_mask
        self.mask_column = own_mask if config.mask_logit else None
        self.head_dim, self.theta, self.shift = config.hidden // config.heads, config.rope_theta, config.shift_logits
        self.embed = nn.Embedding(rows, config.hidden)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = RMSNorm(config.hidden, config.norm_eps)
        self.head = nn.Linear(config.hidden, rows, bias=False)
        self.apply(_initialise)
        self.latent = None if channels.latent is None else LatentStream(config, channels)
        length = channels.seq_len + (0 if channels.latent is None else channels.latent.length)
        # a SwiGLU's three matrices cost what a two-matrix MLP of 1.5 times its width does
        mlp_ratio = 1.5 * config.mlp_hidden / config.hidden
        self._shape = TransformerShape(
            config.layers, length, config.hidden, mlp_ratio, channels.seq_len, channels.vocab_size
        )

    def forward(
        self,
        x_t: Tensor | None,
        tau_x: Tensor | None,
        y_t: Tensor | None,
        tau_y: Tensor | None,
        rows: Tensor | None = None,
        cache: Any = None,
        window: slice | None = None,
    ) -> Denoised:
        if x_t is None:
            raise ValueError("backbone 'llada' predicts tokens: it needs x_t")
        seq_len = x_t.shape[1]
        start, stop = (0, None) if window is None else (window.start or 0, window.stop)
        lead = start - 1 if self.shift and start > 0 else start  # a shifted head reads the position before
        computed = slice(lead, stop)  # the token positions run through the network
        with_latent = window is None or window.stop is None  # a window ending inside the tokens leaves the latent
        ids = x_t[:, computed]
        x = self.embed(torch.where(ids == self.mask, self.own_mask, ids))  # [B, W, D]: ladd's mask as the network's
        positions = torch.arange(seq_len + (0 if y_t is None else y_t.shape[1]), device=x.device)
        rope_x = rotary(positions[:seq_len][computed], self.head_dim, self.theta)
        kept = None if window is None else slice(lead, None)  # what the cache is told this pass covers
        rows = None if rows is None else rows[:, start:stop]
        if self.latent is None:
            for layer, block in enumerate(self.blocks):
                x = block(x, rope_x, cache, layer, kept)
            return Denoised(tokens=self._logits(x, rows, lead < start))
        if y_t is None or tau_y is None:
            raise ValueError("backbone 'llada' with a latent channel needs the noisy latent y_t and its time tau_y")
        c = self.latent.time(tau_y)  # [B, C]
        y = self.latent.embed(y_t) if with_latent else None  # [B, M, D]
        rope_y = rotary(positions[seq_len:], self.head_dim, self.theta)
        width = x.shape[1]
        pairs = zip(cast(list[Block], self.blocks), cast(list[DiTBlock], self.latent.blocks), strict=True)
        for layer, (block, latent_block) in enumerate(pairs):
            q, k, v = block.pre_attention(x, rope_x)  # [B, W, H, D/H]
            if y is not None:
                qy, ky, vy, gate = latent_block.pre_attention(y, c, rope_y)  # [B, M, H, D/H]
                q, k, v = torch.cat([q, qy], 1), torch.cat([k, ky], 1), torch.cat([v, vy], 1)
            attended = attention(q, k, v) if cache is None else cache.attend(layer, q, k, v, kept)
            x = block.post_attention(x, attended[:, :width])  # [B, W, D]
            if y is not None:
                y = latent_block.post_attention(y, attended[:, width:], gate, c)  # [B, M, D]
        latent = None if y is None else self.latent.final(y, c)
        return Denoised(tokens=self._logits(x, rows, lead < start), latent=latent)

    def _logits(self, x: Tensor, rows: Tensor | None, led: bool = False) -> Tensor:
        """Logits of the K real tokens (``[B, W, K]``, or ``[N, K]`` at ``rows``); the network's own mask gets none
        unless the backbone keeps its column.

        ``led``: ``x`` starts one position before the positions predicted (a shifted head's window)."""
        if self.shift:  # position i read at i - 1 (position 0 at itself)
            x = x[:, :-1] if led else torch.cat([x[:, :1], x[:, :-1]], dim=1)
        features = self.norm(x if rows is None else x[rows])
        logits = F.linear(features, self.head.weight[: self.vocab_size])
        if self.own_mask < self.vocab_size and self.mask_column is None:
            logits[..., self.own_mask] = float("-inf")
        return logits

    def transformer_shape(self) -> TransformerShape:
        return self._shape

    def layers(self) -> Iterable[nn.Module]:
        # with a latent stream the blocks run in halves around the joint attention, never called whole
        return self.blocks if self.latent is None else ()

    def adapter_targets(self) -> tuple[str, ...]:
        """Attention's four projections, as LoRA fine-tunes of LLaDA adapt them."""
        return ("blocks.*.attn.q", "blocks.*.attn.k", "blocks.*.attn.v", "blocks.*.attn.out")


def _initialise(module: nn.Module) -> None:
    """Normal(0, 0.02) weights and zero biases for a network trained from scratch; an import overwrites them."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=_INIT_STD)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
