"""Options of the token and latent processes (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass

from registry.errors import InvalidConfigError
from registry.ranges import check_choice, check_range
from registry.toolkit.options import check_weighting

#: How the squared error is reduced over the d_l features of each latent vector (the M vectors are always averaged).
FEATURE_REDUCTIONS = ("mean", "sum")


#: The likelihood bound of the masked process: that of the T-step chain, or its limit as T grows (continuous time)
BOUNDS = ("chain", "continuous")


@dataclass
class MaskedProcessConfig:
    """Training horizon T, the loss weighting (``elbo``: T * lambda_t, ``constant``: 1) and the likelihood bound."""

    horizon: int = 4000  # training horizon T: times are drawn on the grid 1/T, ..., 1
    weighting: str = "elbo"  # loss weights: elbo (T * lambda_t) or constant (1)
    # chain: the bound of the T-step reverse chain; continuous: its limit as T grows, LLaDA's and Dream's estimators
    # (a draw masking l of L scored tokens weighs L / l)
    bound: str = "chain"
    # continuous: the masked share of a draw lies in [bound_floor, 1] (Dream's evaluator: its sampling_eps, 1e-3)
    bound_floor: float = 0.0

    def __post_init__(self) -> None:
        check_weighting(self.weighting)
        if self.horizon < 1:
            raise ValueError(f"horizon={self.horizon} must be at least 1")
        check_choice("bound", self.bound, BOUNDS)
        check_range("bound_floor", self.bound_floor, 0, 1, high_open=True)
        if self.bound_floor and self.bound != "continuous":
            raise InvalidConfigError(
                f"bound_floor={self.bound_floor} bounds the masked share of the continuous-time bound; set "
                f"bound=continuous, or bound_floor=0"
            )


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
