"""Options of the token and latent processes (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass

from registry.ranges import check_choice
from registry.toolkit.options import check_weighting

#: How the squared error is reduced over the d_l features of each latent vector (the M vectors are always averaged).
FEATURE_REDUCTIONS = ("mean", "sum")


@dataclass
class MaskedProcessConfig:
    """Training horizon T and the loss weighting (``elbo``: T * lambda_t, ``constant``: 1)."""

    horizon: int = 4000  # training horizon T: times are drawn on the grid 1/T, ..., 1
    weighting: str = "elbo"  # loss weights: elbo (T * lambda_t) or constant (1)

    def __post_init__(self) -> None:
        check_weighting(self.weighting)
        if self.horizon < 1:
            raise ValueError(f"horizon={self.horizon} must be at least 1")


@dataclass
class VPProcessConfig:
    """Training horizon T, loss weighting, DDIM stochasticity and the reduction over a vector's features."""

    horizon: int = 4000  # training horizon T: times are drawn on the grid 1/T, ..., 1
    weighting: str = "constant"  # loss weights: constant or elbo
    eta: float = 0.0  # DDIM stochasticity: 0 deterministic, 1 ancestral
    # mean: the loss is a mean over M x d_l, as the authors train Co-LADD (lambda_latent = 1 weighs it as in the paper);
    # sum: summed over d_l (d_l times larger; with weighting=elbo, the Gaussian ELBO's own scale)
    feature_reduction: str = "mean"

    def __post_init__(self) -> None:
        if self.horizon < 1:
            raise ValueError(f"horizon={self.horizon} must be at least 1")
        if not 0.0 <= self.eta <= 1.0:
            raise ValueError(f"DDIM eta={self.eta} must lie in [0, 1]")
        check_weighting(self.weighting)
        check_choice("feature_reduction", self.feature_reduction, FEATURE_REDUCTIONS)
