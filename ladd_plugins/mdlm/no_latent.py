"""The empty latent channel of plain MDLM (``M = 0``)."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from registry.errors import IncompatibleComponentsError
from registry.interfaces import Latent, LatentCode, Schedule

__all__ = ["NoLatent"]


class NoLatent(Latent):
    """No latent channel: empty latents, and a clear error wherever a latent process would be needed."""

    length = 0
    width = 0

    def __init__(self, schedule: Schedule | None = None) -> None:
        # schedule is accepted (and unused) so every latent is built the same way
        super().__init__()

    def _refuse(self, what: str) -> IncompatibleComponentsError:
        return IncompatibleComponentsError(
            f"the 'none' latent (plain MDLM) has no latent channel, so it has no {what}; "
            "choose a continuous or discrete latent for LADD components"
        )

    def encode(self, features: Tensor) -> LatentCode:
        return LatentCode(y0=features.new_empty(features.shape[0], 0))

    def null(self, batch: int, device: torch.device) -> Tensor:
        return torch.empty(batch, 0, device=device)

    def prior(self, shape: tuple[int, ...], device: torch.device, generator: torch.Generator | None = None) -> Tensor:
        return torch.empty(shape, device=device)

    def corrupt(self, x0: Tensor, tau: Tensor, generator: torch.Generator | None = None) -> Tensor:
        raise self._refuse("forward process")

    def loss(self, prediction: Tensor, x0: Tensor, x_t: Tensor, tau: Tensor) -> Tensor:
        raise self._refuse("latent loss")

    def step(self, x_t: Tensor, prediction: Tensor, tau_t: Tensor, tau_s: Tensor, generator: torch.Generator | None = None) -> Tensor:
        raise self._refuse("reverse step")

    def input_layer(self, width: int) -> nn.Module:
        raise self._refuse("input layer")

    def output_layer(self, width: int) -> nn.Module:
        raise self._refuse("output layer")
