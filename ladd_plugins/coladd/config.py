"""Options of Co-LADD's continuous latent (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass

from registry.toolkit.options import check_weighting

#: How the squared error is reduced over the d_l features of each latent vector (the M vectors are always averaged).
FEATURE_REDUCTIONS = ("mean", "sum")


def check_feature_reduction(reduction: str) -> None:
    """Refuse an unknown reduction of the squared error over a latent's features."""
    if reduction not in FEATURE_REDUCTIONS:
        raise ValueError(f"feature_reduction={reduction!r}; valid: {', '.join(FEATURE_REDUCTIONS)}")


@dataclass
class ContinuousLatentConfig:
    """Latent length M, width d_l, encoder std sigma_lat, and the latent process's options."""

    length: int = 1  # M: latent vectors per sequence
    width: int = 32  # d_l: width of each latent vector
    std: float = 0.01  # sigma_lat^2 = 1e-4 (Sec. 3.1)
    horizon: int = 4000  # training horizon T of the latent process
    weighting: str = "constant"  # latent loss weights: constant or elbo
    eta: float = 0.0  # DDIM stochasticity: 0 deterministic, 1 ancestral
    # mean: L^y is a mean over M x d_l, as the authors train it (lambda_latent = 1 weighs it as in the paper);
    # sum: summed over d_l (d_l times larger; with weighting=elbo, the Gaussian ELBO's own scale)
    feature_reduction: str = "mean"

    def __post_init__(self) -> None:
        if self.length < 1 or self.width < 1:
            raise ValueError(f"continuous latent needs length >= 1 and width >= 1, got {self.length}, {self.width}")
        if self.std < 0:
            raise ValueError(f"continuous latent std={self.std} must be non-negative")
        if not 0.0 <= self.eta <= 1.0:
            raise ValueError(f"DDIM eta={self.eta} must lie in [0, 1]")
        check_weighting(self.weighting)
        check_feature_reduction(self.feature_reduction)
