"""Residual-MLP denoiser for the latent channel alone (the sequential Co-LADD latent model).

The ``M`` embedded latent vectors are flattened into one vector, processed by adaLN-Zero MLP blocks
conditioned on ``tau_y``, and mapped back to ``M`` hidden vectors for the latent's output layer.
"""
from __future__ import annotations

from collections.abc import Iterable

from torch import Tensor, nn

from registry.errors import IncompatibleComponentsError
from registry.interfaces import Backbone, Channels, Denoised
from registry.toolkit.layers import FinalLayer, MLPBlock, TimestepEmbedder

from .config import MLPDenoiserConfig

__all__ = ["MLPDenoiser", "MLPDenoiserConfig"]


class MLPDenoiser(Backbone):
    """Latent-only denoiser: residual MLP over the flattened latent, conditioned on ``tau_y``."""

    def __init__(self, config: MLPDenoiserConfig, channels: Channels):
        super().__init__()
        if channels.tokens or channels.latent is None:
            raise IncompatibleComponentsError(
                "backbone 'mlp' denoises a latent channel alone; for tokens use 'dit', for tokens plus a latent 'mmdit'"
            )
        self.length, hidden = channels.latent.length, config.hidden
        self.embed = channels.latent.input_layer(hidden)
        self.time_embed = TimestepEmbedder(config.cond_dim)
        self.proj_in = nn.Linear(self.length * hidden, hidden)
        self.blocks = nn.ModuleList(
            MLPBlock(hidden, config.cond_dim, config.mlp_ratio, config.dropout) for _ in range(config.layers)
        )
        self.final = FinalLayer(hidden, config.cond_dim, nn.Linear(hidden, self.length * hidden))
        self.head = channels.latent.output_layer(hidden)

    def forward(
        self,
        x_t: Tensor | None,
        tau_x: Tensor | None,
        y_t: Tensor | None,
        tau_y: Tensor | None,
        rows: Tensor | None = None,
    ) -> Denoised:
        c = self.time_embed(tau_y)  # [B, C]
        # one position holding all M latent vectors, the shape the shared adaLN blocks expect
        h = self.proj_in(self.embed(y_t).flatten(1)).unsqueeze(1)  # [B, M, D] -> [B, M * D] -> [B, 1, D]
        for block in self.blocks:
            h = block(h, c)  # [B, 1, D]
        h = self.final(h, c).unflatten(-1, (self.length, -1)).squeeze(1)  # [B, 1, M * D] -> [B, M, D]
        return Denoised(latent=self.head(h))  # [B, M, d_l] (or code logits)

    def layers(self) -> Iterable[nn.Module]:
        return self.blocks

    def adapter_targets(self) -> tuple[str, ...]:
        return ("blocks.*.mlp.0", "blocks.*.mlp.2")
