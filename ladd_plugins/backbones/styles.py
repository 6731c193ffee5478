"""What the DiT and MM-DiT options choose of their layers: the block style and the token time embedding."""
from __future__ import annotations

import torch
from torch import Tensor

from registry.toolkit.layers import BlockStyle, TimestepEmbedder

from .config import DiTConfig


def block_style(config: DiTConfig) -> BlockStyle:
    """The LayerNorm and attention-bias variant the options select."""
    return BlockStyle(norm_eps=config.norm_eps, norm_weight=config.norm_weight, attention_bias=config.attention_bias)


class SigmaEmbedder(TimestepEmbedder):
    """Timestep embedding of MDLM's total noise ``sigma = -log(1 - (1 - eps) tau)`` (log-linear schedule), unscaled."""

    def __init__(self, dim: int, eps: float):
        super().__init__(dim, scale=1.0)
        self.eps = eps

    def forward(self, tau: Tensor) -> Tensor:
        return super().forward(-torch.log1p(-(1.0 - self.eps) * tau.float()))


def token_time_embedder(config: DiTConfig) -> TimestepEmbedder:
    """The embedding of the token time ``tau_x`` that ``time_input`` selects."""
    if config.time_input == "sigma":
        return SigmaEmbedder(config.cond_dim, config.sigma_eps)
    return TimestepEmbedder(config.cond_dim)
