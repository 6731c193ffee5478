"""The built-in code latents: VQ (App. C.1), residual VQ, FSQ and LFQ, all from vector-quantize-pytorch."""
from __future__ import annotations

import math
import os

import torch
from torch import Tensor
from vector_quantize_pytorch import FSQ, LFQ, ResidualVQ, VectorQuantize

from .codes import CodeLatent, Quantized
from .config import DiscreteLatentConfig, FSQLatentConfig, LFQLatentConfig, ResidualVQLatentConfig

__all__ = ["VQLatent", "ResidualVQLatent", "FSQLatent", "LFQLatent"]


def _vq_options(config: DiscreteLatentConfig) -> dict:
    """Keyword arguments of a cosine-distance EMA ``VectorQuantize`` with the paper's straight-through gradient."""
    return dict(
        dim=config.width,
        codebook_size=config.codebook_size,
        decay=config.decay,
        commitment_weight=config.commitment,
        use_cosine_sim=True,
        threshold_ema_dead_code=config.dead_code_threshold,
        # the library's default gradient estimator is not the paper's straight-through one
        rotation_trick=False,
        # decided here because the library's default looks for a process group, which Lightning creates later
        sync_codebook=config.sync_codebook
        if config.sync_codebook is not None
        else int(os.environ.get("WORLD_SIZE", "1")) > 1,
    )


def _release_zero(quantizer: VectorQuantize) -> None:
    # The library hands out its shared `zero` buffer as a loss and it ends up attached to autograd;
    # a buffer in the graph makes the model impossible to deep-copy (the EMA copy of Stage 2 failed on GPU).
    quantizer.zero = torch.zeros_like(quantizer.zero)


class VQLatent(CodeLatent):
    """Codes from a cosine-distance EMA vector quantiser with dead-code restarts and commitment loss."""

    def __init__(self, config: DiscreteLatentConfig) -> None:
        super().__init__()
        self.config = config
        self.length, self.width, self.values = config.length, config.width, config.codebook_size
        self.quantizer = VectorQuantize(**_vq_options(config))
        self._add_mask_vector()

    def quantize(self, features: Tensor) -> Quantized:
        quantized, codes, commitment = self.quantizer(features)
        _release_zero(self.quantizer)
        return quantized, codes, commitment

    def vectors(self, codes: Tensor) -> Tensor:
        return self.quantizer.codebook[codes]


class ResidualVQLatent(CodeLatent):
    """Q residual VQ stages of C codes; a position's id packs its Q codes as base-C digits (C^Q values)."""

    place: Tensor  # C^q for stage q: a buffer

    def __init__(self, config: ResidualVQLatentConfig) -> None:
        super().__init__()
        self.config = config
        self.length, self.width = config.length, config.width
        self.values = config.codebook_size**config.quantizers
        self.quantizer = ResidualVQ(num_quantizers=config.quantizers, **_vq_options(config))
        self.register_buffer("place", config.codebook_size ** torch.arange(config.quantizers), persistent=False)
        self._add_mask_vector()

    def quantize(self, features: Tensor) -> Quantized:
        quantized, digits, commitments = self.quantizer(features)
        for layer in self.quantizer.layers:
            _release_zero(layer)
        return quantized, (digits.long() * self.place).sum(-1), commitments.sum()

    def vectors(self, codes: Tensor) -> Tensor:
        digits = torch.div(codes[..., None], self.place, rounding_mode="floor") % self.config.codebook_size
        return self.quantizer.get_output_from_indices(digits)


class FSQLatent(CodeLatent):
    """Finite scalar quantisation: features projected to ``len(levels)`` bounded dimensions, each rounded to its
    levels."""

    def __init__(self, config: FSQLatentConfig) -> None:
        super().__init__()
        self.config = config
        self.length, self.width, self.values = config.length, config.width, math.prod(config.levels)
        self.quantizer = FSQ(levels=list(config.levels), dim=config.width)
        self._add_mask_vector()

    def quantize(self, features: Tensor) -> Quantized:
        quantized, codes = self.quantizer(features)
        return quantized, codes.long(), None

    def vectors(self, codes: Tensor) -> Tensor:
        return self.quantizer.indices_to_codes(codes)


class LFQLatent(CodeLatent):
    """Lookup-free quantisation: features projected to ``log2(codebook_size)`` dimensions, each kept as its sign."""

    def __init__(self, config: LFQLatentConfig) -> None:
        super().__init__()
        self.config = config
        self.length, self.width, self.values = config.length, config.width, config.codebook_size
        self.quantizer = LFQ(
            dim=config.width,
            codebook_size=config.codebook_size,
            entropy_loss_weight=config.entropy_weight,
            commitment_loss_weight=config.commitment,
        )
        self._add_mask_vector()

    def quantize(self, features: Tensor) -> Quantized:
        quantized, codes, aux = self.quantizer(features)
        return quantized, codes.long(), aux

    def vectors(self, codes: Tensor) -> Tensor:
        return self.quantizer.indices_to_codes(codes)
