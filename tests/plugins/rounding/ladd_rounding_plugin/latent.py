"""Rounded codes: y is one id per latent position, for a process that diffuses ids (the built-in masked one)."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from registry.interfaces import IDS, Latent, LatentCode, mask_id

from .options import RoundingConfig


class RoundedCodes(Latent):
    """``tanh(W_in features)`` rounded to ``levels`` values per coordinate; the id packs the coordinates in base ``levels``."""

    produces = IDS
    null_is_target = False  # the null latent is all mask ids, which no cross-entropy can target

    def __init__(self, config: RoundingConfig) -> None:
        super().__init__()
        self.length, self.width, self.levels = config.length, config.width, config.levels
        self.values = config.levels**config.dims
        self.project_in = nn.Linear(config.width, config.dims)
        self.project_out = nn.Linear(config.dims, config.width)
        self.mask_vector = nn.Parameter(torch.randn(config.width) / config.width**0.5)
        self.register_buffer("place", config.levels ** torch.arange(config.dims), persistent=False)

    def _grid(self, digits: Tensor) -> Tensor:
        """Coordinates in [-1, 1] of the level indices ``digits``."""
        return digits.float() * (2.0 / (self.levels - 1)) - 1.0

    def encode(self, features: Tensor) -> LatentCode:
        bounded = torch.tanh(self.project_in(features))
        digits = torch.round((bounded + 1.0) * ((self.levels - 1) / 2.0))
        # straight-through: the forward pass uses the grid point, gradients flow as if rounding were the identity
        rounded = bounded + (self._grid(digits) - bounded).detach()
        ids = (digits.long() * self.place).sum(-1)
        return LatentCode(y0=ids, embedding=self.project_out(rounded))

    def vectors(self, ids: Tensor) -> Tensor:
        """The feature-space vectors of real ids ``[B, M]``."""
        digits = torch.div(ids[..., None], self.place, rounding_mode="floor") % self.levels
        return self.project_out(self._grid(digits))

    def backbone_input(self, y_t: Tensor, code: LatentCode | None = None) -> Tensor:
        masked = y_t == mask_id(self.values)
        if code is not None and code.embedding is not None:
            vectors = code.embedding
        else:
            vectors = self.vectors(y_t.masked_fill(masked, 0))
        return torch.where(masked[..., None], self.mask_vector.to(vectors.dtype), vectors)

    def null(self, batch: int, device: torch.device) -> Tensor:
        return torch.full((batch, self.length), mask_id(self.values), dtype=torch.long, device=device)

    def input_layer(self, width: int) -> nn.Module:
        return nn.Linear(self.width, width)

    def output_layer(self, width: int) -> nn.Module:
        return nn.Linear(width, self.values)
