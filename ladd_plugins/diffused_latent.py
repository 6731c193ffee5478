"""Shared base of latents whose diffusion is one existing process (Gaussian or masked) on the latent."""
from __future__ import annotations

import torch
from torch import Tensor

from registry.interfaces import Latent, Process


class DiffusedLatent(Latent):
    """Delegates prior, forward marginal, loss and reverse step to ``self.process``."""

    process: Process

    def prior(self, shape: tuple[int, ...], device: torch.device, generator: torch.Generator | None = None) -> Tensor:
        return self.process.prior(shape, device, generator)

    def corrupt(self, x0: Tensor, tau: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return self.process.corrupt(x0, tau, generator)

    def loss(self, prediction: Tensor, x0: Tensor, x_t: Tensor, tau: Tensor) -> Tensor:
        return self.process.loss(prediction, x0, x_t, tau)

    def step(self, x_t: Tensor, prediction: Tensor, tau_t: Tensor, tau_s: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return self.process.step(x_t, prediction, tau_t, tau_s, generator)
