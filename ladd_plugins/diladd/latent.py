"""Di-LADD's discrete latent channel: vector quantisation (App. C.1), then a masked process on the codes."""
from __future__ import annotations

import os

import torch
from torch import Tensor, nn
from vector_quantize_pytorch import VectorQuantize

from registry.interfaces import LatentCode, Schedule, mask_id

from ..diffused_latent import DiffusedLatent
from ..mdlm.masked_process import MaskedProcess, MaskedProcessConfig
from .config import DiscreteLatentConfig

__all__ = ["DiscreteLatent", "DiscreteLatentConfig"]


class DiscreteLatent(DiffusedLatent):
    """Codes ``y0 in {0..C-1}^M`` from a cosine-distance EMA vector quantiser; code ``C`` is the mask."""

    null_is_target = False  # the null latent is all mask ids, which no cross-entropy can target

    def __init__(self, config: DiscreteLatentConfig, schedule: Schedule) -> None:
        super().__init__()
        self.config = config
        self.length = config.length
        self.width = config.width
        self.horizon = config.horizon
        self.codebook_size = config.codebook_size
        # rotation_trick=False: the library's default gradient estimator is not the paper's straight-through one
        self.quantizer = VectorQuantize(
            dim=config.width,
            codebook_size=config.codebook_size,
            decay=config.decay,
            commitment_weight=config.commitment,
            use_cosine_sim=True,
            threshold_ema_dead_code=config.dead_code_threshold,
            rotation_trick=False,
            # decided here because the library's default looks for a process group, which Lightning creates later
            sync_codebook=config.sync_codebook if config.sync_codebook is not None else int(os.environ.get("WORLD_SIZE", "1")) > 1,
        )
        self.mask_vector = nn.Parameter(torch.randn(config.width) / config.width**0.5)
        self.process = MaskedProcess(
            MaskedProcessConfig(horizon=config.horizon, weighting=config.weighting),
            schedule=schedule,
            vocab_size=config.codebook_size,
        )

    def encode(self, features: Tensor) -> LatentCode:
        """Nearest codes of ``features``, their straight-through vectors and, in train mode, the weighted commitment loss."""
        quantized, codes, commitment = self.quantizer(features)
        # The library hands out its shared `zero` buffer as a loss and it ends up attached to autograd;
        # a buffer in the graph makes the model impossible to deep-copy (the EMA copy of Stage 2 failed on GPU).
        self.quantizer.zero = torch.zeros_like(self.quantizer.zero)
        return LatentCode(y0=codes, aux_loss=commitment if self.training else None, embedding=quantized)

    def backbone_input(self, y_t: Tensor, code: LatentCode | None = None) -> Tensor:
        """Code vectors at revealed positions (straight-through ones in training), the learnable mask vector elsewhere."""
        masked = y_t == mask_id(self.codebook_size)
        vectors = self.quantizer.codebook[y_t.masked_fill(masked, 0)]
        if code is not None and code.embedding is not None:
            vectors = code.embedding
        return torch.where(masked[..., None], self.mask_vector.to(vectors.dtype), vectors)

    def null(self, batch: int, device: torch.device) -> Tensor:
        return torch.full((batch, self.length), mask_id(self.codebook_size), dtype=torch.long, device=device)

    def input_layer(self, width: int) -> nn.Module:
        """A projection of the code (or mask) vectors given by :meth:`backbone_input`."""
        return nn.Linear(self.width, width)

    def output_layer(self, width: int) -> nn.Module:
        """Logits over the ``C`` real codes."""
        return nn.Linear(width, self.codebook_size)
