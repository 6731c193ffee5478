"""Options of the learned encoders (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass

from ..backbones.config import TransformerConfig


@dataclass
class DiTEncoderConfig(TransformerConfig):
    """A DiT encoder read at the M rightmost positions, projected to d_l, with encoder-input dropout."""

    length: int = 1  # M
    width: int = 32  # d_l
    input_dropout_max: float = 0.0  # p_r ~ U[0, input_dropout_max]; the paper uses 0.9 when enabled
