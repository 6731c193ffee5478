"""Causal transformer for the autoregressive baseline: the logits at position i depend on tokens < i only.

The input is shifted inside the network: a learned start embedding takes position 0 and token i - 1
position i, so output position i predicts token i (the layout the ``autoregressive`` process and the
samplers' ``rows`` expect). DiT blocks with causal attention and RoPE; there is no time input, so the
adaLN conditioning is a learned constant.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from registry.errors import IncompatibleComponentsError
from registry.interfaces import Backbone, Channels, Denoised, TransformerShape
from registry.toolkit.layers import DiTTrunk, FinalLayer, TokenHead, learned_condition
from registry.toolkit.options import TransformerConfig

__all__ = ["CausalTransformer"]


class CausalTransformer(Backbone):
    """Next-token predictor over the token channel: logits ``[B, S, K]``, position i conditioned on tokens < i."""

    token_time_conditioned = False

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
    ) -> Denoised:
        if x_t is None:
            raise ValueError("backbone 'causal' predicts tokens: it needs x_t")
        batch = x_t.shape[0]  # x_t ids [B, S]
        # position i sees a start vector and the tokens before i: [B, S, D]
        h = torch.cat([self.start.expand(batch, 1, -1), self.embed(x_t[:, :-1])], dim=1)
        c = self.condition.expand(batch, -1)  # [B, C]: a learned constant, no time input
        return Denoised(tokens=self.final(self.trunk(h, c), c, rows))  # logits [B, S, K] ([N, K] at the N rows)

    def transformer_shape(self) -> TransformerShape:
        return self._shape

    def layers(self) -> Iterable[nn.Module]:
        return self.trunk.blocks

    def adapter_targets(self) -> tuple[str, ...]:
        return ("blocks.*.qkv", "blocks.*.proj")
