"""DiT denoiser for a single channel: the token channel (MDLM) or the latent channel alone (sequential LADD).

Token channel: ids ``[B, S]`` (mask id ``K``) to logits ``[B, S, K]`` over the real tokens only, so the
mask gets no probability (SUBS). Following the paper, the token denoiser has no timestep input by
default; its adaLN conditioning is then a learned constant. The latent channel is always conditioned
on ``tau_y``. With ``attention=block_causal`` the token positions form blocks that see themselves and the blocks
before them (BD3-LM): trained in one pass over ``[x_t ; x0]`` (each noisy block given the clean blocks before it),
sampled at any length, block by block, with an exact key-value cache of the committed blocks.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from registry.errors import IncompatibleComponentsError
from registry.interfaces import AttentionPattern, CachingBackbone, Channels, Denoised, TransformerShape
from registry.toolkit.attention import context_mask, pattern_mask
from registry.toolkit.layers import DiTTrunk, FinalLayer, TimestepEmbedder, TokenHead, learned_condition

from .config import DiTConfig
from .styles import block_style, token_time_embedder

__all__ = ["DiT", "DiTConfig"]


class DiT(CachingBackbone):
    """Diffusion Transformer over one channel, with adaLN-Zero conditioning and RoPE.

    Over tokens it keeps a key-value cache (``CachingBackbone``): with ``window`` only those token positions are
    embedded, run through the trunk (the other positions' keys and values read from the cache) and given logits.
    Block-causal attention makes that cache exact: a block's window reads the committed blocks before it.
    """

    def __init__(self, config: DiTConfig, channels: Channels):
        super().__init__()
        latent = channels.latent
        self.denoises_tokens = channels.tokens and latent is None
        self.embed: nn.Module
        head: nn.Module
        if self.denoises_tokens:
            self.embed = nn.Embedding(channels.vocab_size + 1, config.hidden)
            head = TokenHead(config.hidden, channels.vocab_size)
        elif channels.seq_len == 0 and latent is not None:
            self.embed = latent.input_layer(config.hidden)
            head = latent.output_layer(config.hidden)
        else:
            raise IncompatibleComponentsError(
                "backbone 'dit' denoises one channel (tokens, or a latent alone); for tokens plus a latent use 'mmdit'"
            )
        time_conditioned = config.token_time_conditioning or not self.denoises_tokens
        self.token_time_conditioned = time_conditioned
        self.time_embed: nn.Module | None = None
        self.condition: nn.Parameter | None = None
        if time_conditioned:
            self.time_embed = token_time_embedder(config) if self.denoises_tokens else TimestepEmbedder(config.cond_dim)
        else:
            self.condition = learned_condition(config.cond_dim)
        style = block_style(config)
        self.trunk = DiTTrunk(
            config.hidden, config.layers, config.heads, config.cond_dim, config.mlp_ratio, config.dropout, style=style
        )
        self.final = FinalLayer(config.hidden, config.cond_dim, head, style)
        if config.attention == "block_causal":
            self.attention, self.cache_exact = _block_pattern(config, channels, self.denoises_tokens), True
        length = channels.seq_len if latent is None else latent.length
        head_positions = channels.seq_len if self.denoises_tokens else 0
        self._shape = TransformerShape(
            config.layers, length, config.hidden, config.mlp_ratio, head_positions, channels.vocab_size
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
        context: Tensor | None = None,
    ) -> Denoised:
        # one channel, L positions: tokens (L = S, ids [B, S]) or the latent alone (L = M, y_t [B, M, d_l]); a block
        # pattern takes tokens of any length N, and the clean tokens `context` [B, N] in training
        inputs, tau = (x_t, tau_x) if self.denoises_tokens else (y_t, tau_y)
        if inputs is None:
            channel = "tokens (x_t)" if self.denoises_tokens else "a latent (y_t)"
            raise ValueError(f"backbone 'dit' denoises {channel}: it needs them")
        length, pattern = inputs.shape[1], self.attention
        positions, mask = None, None
        if window is not None:  # tokens only: the latent-only network is never given a cache
            inputs = inputs[:, window]  # [B, W]
            rows = None if rows is None else rows[:, window]
        elif cache is None and context is not None and pattern.block is not None and pattern.block < length:
            inputs = torch.cat([inputs, context], dim=1)  # [B, 2N]: the training view [x_t ; x0]
            positions = torch.arange(length, device=inputs.device).repeat(2)  # x_t's and x0's position i share it
            mask = context_mask(pattern, length, inputs.device)
        elif cache is None:
            every = torch.arange(length, device=inputs.device)
            mask = pattern_mask(pattern, every, every)
        h = self.embed(inputs)  # [B, L, D] ([B, W, D] in a window, [B, 2N, D] in the training view)
        if self.time_embed is not None:
            c = self.time_embed(tau)  # [B, C]
        else:
            assert self.condition is not None  # set exactly when time_embed is not
            c = self.condition.expand(h.shape[0], -1)  # [B, C]: a learned constant
        h = self.trunk(h, c, cache, window, positions=positions, mask=mask, pattern=pattern)[:, :length]  # [B, L, D]
        out = self.final(h, c, rows)  # logits [B, S, K] ([N, K] at the N rows) or the latent head's [B, M, d_l]
        return Denoised(tokens=out) if self.denoises_tokens else Denoised(latent=out)

    def transformer_shape(self) -> TransformerShape:
        return self._shape

    def layers(self) -> Iterable[nn.Module]:
        return self.trunk.blocks

    def adapter_targets(self) -> tuple[str, ...]:
        """Attention's input and output projections, as LoRA adapts a transformer."""
        return ("blocks.*.qkv", "blocks.*.proj")


def _block_pattern(config: DiTConfig, channels: Channels, denoises_tokens: bool) -> AttentionPattern:
    """Blocks of ``block_size`` token positions, each seeing the blocks of the model's length up to its own."""
    block, length = config.block_size, channels.seq_len
    assert block is not None  # the config requires it with block_causal attention
    if not denoises_tokens:
        raise IncompatibleComponentsError(
            "backbone 'dit' has block_causal attention over token blocks, but here it denoises a latent alone; "
            "set attention=bidirectional for a latent denoiser"
        )
    if length % block:
        divisors = [str(d) for d in range(1, length + 1) if length % d == 0]
        raise IncompatibleComponentsError(
            f"backbone.block_size={block} must divide the model's length {length} (dataset.seq_len); valid: "
            f"{', '.join(divisors)}"
        )
    return AttentionPattern(block, span=length)
