"""Options of the learned encoders (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DiTEncoderConfig:
    hidden: int = 64
    layers: int = 4
    heads: int = 4
    mlp_ratio: float = 4.0
    dropout: float = 0.1
    length: int = 1  # M
    width: int = 32  # d_l
    input_dropout_max: float = 0.0  # the paper uses 0.9 when enabled
