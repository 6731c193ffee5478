"""Options of the rounding latent (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RoundingConfig:
    """Latent length M, feature width d_l, and the code grid: ``dims`` coordinates of ``levels`` values each."""

    length: int = 1  # M: codes per sequence (match encoder.length)
    width: int = 32  # d_l: width of the encoder features (match encoder.width)
    dims: int = 3  # coordinates each feature vector is projected to
    levels: int = 5  # values per coordinate: levels ** dims codes

    def __post_init__(self) -> None:
        if self.length < 1 or self.width < 1 or self.dims < 1 or self.levels < 2:
            raise ValueError(f"rounding latent needs length, width, dims >= 1 and levels >= 2; got {self}")
