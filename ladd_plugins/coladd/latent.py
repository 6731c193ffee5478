"""Co-LADD's continuous latent channel: Gaussian encoder posterior, VP diffusion, DDIM sampling."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from registry.interfaces import LatentCode, Schedule

from ..diffused_latent import DiffusedLatent
from .config import ContinuousLatentConfig
from .gaussian_process import VPGaussianProcess

__all__ = ["ContinuousLatent", "ContinuousLatentConfig"]


class ContinuousLatent(DiffusedLatent):
    """``y0 ~ N(features, std^2 I)`` diffused by a VP Gaussian process; the null latent is 0."""

    def __init__(self, config: ContinuousLatentConfig, schedule: Schedule) -> None:
        super().__init__()
        self.config = config
        self.length = config.length
        self.width = config.width
        self.horizon = config.horizon
        self.process = VPGaussianProcess(
            schedule, horizon=config.horizon, weighting=config.weighting, eta=config.eta, feature_reduction=config.feature_reduction
        )

    def encode(self, features: Tensor) -> LatentCode:
        return LatentCode(y0=features + self.config.std * torch.randn_like(features))

    def null(self, batch: int, device: torch.device) -> Tensor:
        return torch.zeros(batch, self.length, self.width, device=device)

    def input_layer(self, width: int) -> nn.Module:
        return nn.Linear(self.width, width)

    def output_layer(self, width: int) -> nn.Module:
        return nn.Linear(width, self.width)
