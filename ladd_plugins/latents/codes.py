"""Latents whose ``y`` is one code id per position from a quantiser, for a process on ``ids`` (Di-LADD)."""
from __future__ import annotations

from abc import abstractmethod

import torch
from torch import Tensor, nn

from registry.interfaces import IDS, Latent, LatentCode, mask_id

__all__ = ["CodeLatent", "Quantized"]

#: a quantiser's output: straight-through vectors ``[B, M, d_l]``, code ids ``[B, M]`` (int64) and its auxiliary loss
Quantized = tuple[Tensor, Tensor, Tensor | None]


class CodeLatent(Latent):
    """Codes ``y0 in {0..values-1}^M``; code ``values`` is the mask, embedded as a learned vector.

    A subclass sets ``length``, ``width`` and ``values``, builds ``self.quantizer``, then calls ``_add_mask_vector``
    (that order fixes the initial weights drawn from the global RNG), and supplies ``quantize`` and ``vectors``.
    """

    produces = IDS
    values: int  # a subclass sets it: the number of real codes
    null_is_target = False  # the null latent is all mask ids, which no cross-entropy can target

    def _add_mask_vector(self) -> None:
        self.mask_vector = nn.Parameter(torch.randn(self.width) / self.width**0.5)

    @abstractmethod
    def quantize(self, features: Tensor) -> Quantized:
        """Straight-through vectors, code ids and the auxiliary loss of ``features`` ``[B, M, d_l]``."""

    @abstractmethod
    def vectors(self, codes: Tensor) -> Tensor:
        """The vectors ``[B, M, d_l]`` of real code ids ``[B, M]``."""

    def encode(self, features: Tensor) -> LatentCode:
        """Codes of ``features``, their straight-through vectors and, in train mode, the auxiliary loss."""
        quantized, codes, aux = self.quantize(features)
        return LatentCode(y0=codes, aux_loss=aux if self.training else None, embedding=quantized)

    def backbone_input(self, y_t: Tensor, code: LatentCode | None = None) -> Tensor:
        """Code vectors at revealed positions (straight-through ones in training), the learnable mask vector
        elsewhere."""
        masked = y_t.eq(mask_id(self.values))
        if code is not None and code.embedding is not None:
            vectors = code.embedding
        else:
            vectors = self.vectors(y_t.masked_fill(masked, 0))
        return torch.where(masked[..., None], self.mask_vector.to(vectors.dtype), vectors)

    def posterior_entropy(self, features: Tensor) -> Tensor:
        """0: the codes are a function of the features (a point mass under the counting measure)."""
        return torch.zeros(features.shape[0], dtype=torch.float64, device=features.device)

    def null(self, batch: int, device: torch.device) -> Tensor:
        return torch.full((batch, self.length), mask_id(self.values), dtype=torch.long, device=device)

    def input_layer(self, width: int) -> nn.Module:
        """A projection of the code (or mask) vectors given by :meth:`backbone_input`."""
        return nn.Linear(self.width, width)

    def output_layer(self, width: int) -> nn.Module:
        """Logits over the real codes."""
        return nn.Linear(width, self.values)
