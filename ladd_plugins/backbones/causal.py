"""Causal transformer for the autoregressive baseline: the logits at position i depend on tokens < i only.

The input is shifted inside the network: a learned start embedding takes position 0 and token i - 1
position i, so output position i predicts token i (the layout the ``autoregressive`` process and the
samplers' ``rows`` expect). DiT blocks with causal attention and RoPE; there is no time input, so the
adaLN conditioning is a learned constant. It keeps an exact key-value cache (``CachingBackbone``): a position's keys
and values depend on the tokens before it only, so once those are final a pass over later positions reads them.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from registry.errors import IncompatibleComponentsError
from registry.interfaces import AttentionPattern, CachingBackbone, Channels, Denoised, TransformerShape
from registry.toolkit.layers import DiTTrunk, FinalLayer, TokenHead, learned_condition
from registry.toolkit.options import TransformerConfig

__all__ = ["CausalTransformer"]

#: causal attention as a pattern: blocks of one position, each seeing itself and every position before it
_CAUSAL = AttentionPattern(block=1)


class CausalTransformer(CachingBackbone):
    """Next-token predictor over the token channel: logits ``[B, S, K]``, position i conditioned on tokens < i.

    With a cache and a ``window`` of positions, only those are embedded and run (each reading the cached keys and values
    of the positions before it): the same logits as the full pass once the tokens before the window are final.
    """

    token_time_conditioned = False
    cache_exact = True

    def __init__(self, config: TransformerConfig, channels: Channels):
        super().__init__()
        if not channels.tokens or channels.latent is not None:
            raise IncompatibleComponentsError(
                "backbone 'causal' predicts tokens alone (the autoregressive baseline); for a latent use 'mmdit' or "
                "'mlp'"
            )
        # the mask id gets an embedding too: samplers pass partly masked sequences, masks only right of the predicted
        # rows
        self.embed = nn.Embedding(channels.vocab_size + 1, config.hidden)
        self.start = nn.Parameter(0.02 * torch.randn(config.hidden))
        self.condition = learned_condition(config.hidden)
        self.trunk = DiTTrunk(
            config.hidden, config.layers, config.heads, config.hidden, config.mlp_ratio, config.dropout, causal=True
        )
        self.final = FinalLayer(config.hidden, config.hidden, TokenHead(config.hidden, channels.vocab_size))
        self._shape = TransformerShape(
            config.layers, channels.seq_len, config.hidden, config.mlp_ratio, channels.seq_len, channels.vocab_size
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
            raise ValueError("backbone 'causal' predicts tokens: it needs x_t")
        batch, length = x_t.shape  # x_t ids [B, S]
        start, stop, _ = (window or slice(None)).indices(length)
        # position i sees a start vector and the tokens before i: [B, W, D] over the window's positions
        h = self.embed(x_t[:, max(start - 1, 0) : stop - 1])
        if start == 0:
            h = torch.cat([self.start.expand(batch, 1, -1), h], dim=1)
        c = self.condition.expand(batch, -1)  # [B, C]: a learned constant, no time input
        if window is not None and rows is not None:
            rows = rows[:, start:stop]
        pattern = None if cache is None else _CAUSAL
        h = self.trunk(h, c, cache, None if window is None else slice(start, stop), pattern=pattern)
        return Denoised(tokens=self.final(h, c, rows))  # logits [B, W, K] ([N, K] at the N rows)

    def transformer_shape(self) -> TransformerShape:
        return self._shape

    def layers(self) -> Iterable[nn.Module]:
        return self.trunk.blocks

    def adapter_targets(self) -> tuple[str, ...]:
        return ("blocks.*.qkv", "blocks.*.proj")
