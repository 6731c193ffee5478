"""Options of the masked token process (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass

from registry.toolkit.options import check_weighting


@dataclass
class MaskedProcessConfig:
    """Training horizon T and the loss weighting (``elbo``: T * lambda_t, ``constant``: 1)."""

    horizon: int = 4000  # training horizon T: times are drawn on the grid 1/T, ..., 1
    weighting: str = "elbo"  # loss weights: elbo (T * lambda_t) or constant (1)

    def __post_init__(self) -> None:
        check_weighting(self.weighting)
        if self.horizon < 1:
            raise ValueError(f"horizon={self.horizon} must be at least 1")
