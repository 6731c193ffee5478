"""MM-DiT denoiser for tokens plus a latent (Esser et al., 2024), as used by LADD.

The ``S`` token positions and ``M`` latent positions form one sequence of length ``S + M`` with full
bidirectional attention, but every weight is modality-specific: input embeddings, LayerNorms, adaLN
modulations, qkv and output projections, MLPs, final layers and heads. RoPE positions are ``0..S-1``
for tokens and ``S..S+M-1`` for the latent slots, i.e. the positions of the concatenated sequence.

The conditioning vector embeds ``tau_y``, plus ``tau_x`` when ``token_time_conditioning`` is set (off
by default, following the paper's token denoiser without explicit timestep conditioning).

A warm start (``train.init_from``) from the single-channel ``dit`` of the same width and depth (an imported
MDLM) fills the token stream whole under the DiT's names (:meth:`MMDiT.warm_start_names`); the latent stream
and the latent time embedding, which conditions both streams, start from their initialisation.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from registry.errors import IncompatibleComponentsError
from registry.interfaces import CachingBackbone, Channels, Denoised, TransformerShape
from registry.toolkit.attention import attention
from registry.toolkit.layers import DiTBlock, FinalLayer, Rotary, TimestepEmbedder, TokenHead, rotary

from .config import DiTConfig
from .styles import block_style, token_time_embedder

__all__ = ["MMDiT"]


class MMDiTBlock(nn.Module):
    """A token DiT block and a latent DiT block whose attention runs jointly over both sequences."""

    def __init__(self, config: DiTConfig):
        super().__init__()
        args = (config.hidden, config.heads, config.cond_dim, config.mlp_ratio, config.dropout)
        self.tokens = DiTBlock(*args, style=block_style(config))
        self.latent = DiTBlock(*args, style=block_style(config))

    def forward(
        self, x: Tensor, y: Tensor | None, c: Tensor, rope_x: Rotary, rope_y: Rotary,
        cache: Any = None, layer: int = 0, window: slice | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Both streams through joint attention; with ``cache``, ``x`` holds the token positions of ``window`` and
        ``y`` the latent slots (None when the window leaves them to the cache)."""
        # x [B, S, D] ([B, W, D] in a window), y [B, M, D], c [B, C]
        qx, kx, vx, gate_x = self.tokens.pre_attention(x, c, rope_x)  # q, k, v [B, S, H, D/H]
        q, k, v = qx, kx, vx
        if y is not None:
            qy, ky, vy, gate_y = self.latent.pre_attention(y, c, rope_y)  # q, k, v [B, M, H, D/H]
            q, k, v = torch.cat([qx, qy], 1), torch.cat([kx, ky], 1), torch.cat([vx, vy], 1)
        attn = attention(q, k, v) if cache is None else cache.attend(layer, q, k, v, window)  # [B, S + M, D]
        seq_len = x.shape[1]
        x = self.tokens.post_attention(x, attn[:, :seq_len], gate_x, c)  # [B, S, D]
        if y is not None:
            y = self.latent.post_attention(y, attn[:, seq_len:], gate_y, c)  # [B, M, D]
        return x, y


class MMDiT(CachingBackbone):
    """Joint token and latent denoiser: logits ``[B, S, K]`` and the latent head's output.

    Its key-value cache (``CachingBackbone``) covers the joint sequence, tokens then latent slots: a window ending
    inside the tokens leaves the latent to the cache (no latent prediction), an open-ended one recomputes it.
    """

    def __init__(self, config: DiTConfig, channels: Channels):
        super().__init__()
        if not channels.tokens or channels.latent is None:
            raise IncompatibleComponentsError(
                "backbone 'mmdit' denoises tokens plus a latent; for a single channel use 'dit' (or 'mlp' for a latent)"
            )
        if config.attention != "bidirectional":
            raise IncompatibleComponentsError(
                f"backbone 'mmdit' attends bidirectionally over tokens and latent, not attention={config.attention}; "
                "set attention=bidirectional (block_causal attention: backbone 'dit')"
            )
        self.token_time_conditioned = config.token_time_conditioning
        self.head_dim = config.hidden // config.heads
        self.embed_x = nn.Embedding(channels.vocab_size + 1, config.hidden)
        self.embed_y = channels.latent.input_layer(config.hidden)
        self.time_embed_y = TimestepEmbedder(config.cond_dim)
        self.time_embed_x = token_time_embedder(config) if config.token_time_conditioning else None
        self.blocks = nn.ModuleList(MMDiTBlock(config) for _ in range(config.layers))
        style = block_style(config)
        self.final_x = FinalLayer(config.hidden, config.cond_dim, TokenHead(config.hidden, channels.vocab_size), style)
        self.final_y = FinalLayer(config.hidden, config.cond_dim, channels.latent.output_layer(config.hidden), style)
        self._shape = TransformerShape(
            config.layers, channels.seq_len + channels.latent.length, config.hidden, config.mlp_ratio,
            channels.seq_len, channels.vocab_size,
        )

    def forward(
        self, x_t: Tensor | None, tau_x: Tensor | None, y_t: Tensor | None, tau_y: Tensor | None,
        rows: Tensor | None = None,
        cache: Any = None,
        window: slice | None = None,
    ) -> Denoised:
        # x_t ids [B, S] (mask id K), y_t [B, M, d_l] (or code ids [B, M]), tau_x and tau_y [B]
        if x_t is None or y_t is None:
            raise ValueError("backbone 'mmdit' denoises tokens and a latent together: it needs x_t and y_t")
        seq_len, length = x_t.shape[1], y_t.shape[1]
        positions = torch.arange(seq_len + length, device=x_t.device)  # [S + M]: the joint sequence's positions
        tokens = slice(0, seq_len) if window is None else slice(window.start, window.stop)
        with_latent = window is None or window.stop is None  # a window ending inside the tokens leaves the latent
        x = self.embed_x(x_t[:, tokens])  # [B, S, D] ([B, W, D] in a window)
        y = self.embed_y(y_t) if with_latent else None  # [B, M, D]
        c = self.time_embed_y(tau_y)  # [B, C]
        if self.time_embed_x is not None:
            c = c + self.time_embed_x(tau_x)  # [B, C]
        rope_x = rotary(positions[:seq_len][tokens], self.head_dim)
        rope_y = rotary(positions[seq_len:], self.head_dim)
        for layer, block in enumerate(self.blocks):
            x, y = block(x, y, c, rope_x, rope_y, cache, layer, window)  # [B, S, D], [B, M, D]
        rows = None if rows is None else rows[:, tokens]
        # logits [B, S, K] ([N, K] at the N rows) and the latent head's output [B, M, d_l] (or code logits)
        return Denoised(tokens=self.final_x(x, c, rows), latent=None if y is None else self.final_y(y, c))

    def transformer_shape(self) -> TransformerShape:
        return self._shape

    def layers(self) -> Iterable[nn.Module]:
        return self.blocks

    def adapter_targets(self) -> tuple[str, ...]:
        """Attention's projections in both streams."""
        return tuple(f"blocks.*.{stream}.{layer}" for stream in ("tokens", "latent") for layer in ("qkv", "proj"))

    def warm_start_names(self) -> dict[str, str]:
        """The token stream under the single-channel ``dit``'s names: an MDLM DiT of the same sizes fills it whole
        (its embedding, every block's token half, its final layer and head, and a timed DiT's time embedding)."""
        names = {"embed_x.": "embed.", "final_x.": "final."}
        names.update({f"blocks.{index}.tokens.": f"trunk.blocks.{index}." for index in range(len(self.blocks))})
        if self.time_embed_x is not None:
            names["time_embed_x."] = "time_embed."
        return names
