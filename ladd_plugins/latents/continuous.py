"""Co-LADD's continuous latent: the encoder's Gaussian posterior ``y0 = features + std * noise``."""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from registry.interfaces import VECTORS, Latent, LatentCode

from .config import ContinuousLatentConfig

__all__ = ["ContinuousLatent", "ContinuousLatentConfig"]


class ContinuousLatent(Latent):
    """``y0 ~ N(features, std^2 I)``, real vectors for a process on ``vectors``; the null latent is 0."""

    produces = VECTORS

    def __init__(self, config: ContinuousLatentConfig) -> None:
        super().__init__()
        self.config = config
        self.length = config.length
        self.width = config.width
        self.noised_null = config.dropped_input == "noised_null"

    def encode(self, features: Tensor) -> LatentCode:
        return LatentCode(y0=features + self.config.std * torch.randn_like(features))

    def mode(self, features: Tensor) -> Tensor:
        """The posterior's mean: the features themselves."""
        return features

    def posterior_entropy(self, features: Tensor) -> Tensor:
        """``(M d_l / 2) log(2 pi e std^2)``: the Gaussian posterior's differential entropy, the same for every row."""
        per_feature = 0.5 * math.log(2.0 * math.pi * math.e * self.config.std**2)
        return torch.full((features.shape[0],), per_feature * self.length * self.width, dtype=torch.float64,
                          device=features.device)

    def null(self, batch: int, device: torch.device) -> Tensor:
        return torch.zeros(batch, self.length, self.width, device=device)

    def input_layer(self, width: int) -> nn.Module:
        return nn.Linear(self.width, width)

    def output_layer(self, width: int) -> nn.Module:
        """A clean-vector estimate (y0-prediction)."""
        return nn.Linear(width, self.width)
