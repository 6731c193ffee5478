"""Options of the closed-form noise schedules (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ScheduleConfig:
    """Options of a schedule without parameters (linear, cosine, VP-sqrt)."""


@dataclass
class PolynomialScheduleConfig:
    """``1 - tau**power``."""

    power: float = 2.0  # signal 1 - tau**power

    def __post_init__(self) -> None:
        if self.power <= 0:
            raise ValueError(f"polynomial schedule power={self.power} must be positive")


@dataclass
class GeometricScheduleConfig:
    """``exp(-beta_min**(1-tau) * beta_max**tau)``."""

    beta_min: float = 1e-5  # rate at tau = 0
    beta_max: float = 20.0  # rate at tau = 1

    def __post_init__(self) -> None:
        if not 0 < self.beta_min < self.beta_max:
            raise ValueError(f"geometric schedule needs 0 < beta_min < beta_max, got {self.beta_min}, {self.beta_max}")


@dataclass
class LogLinearScheduleConfig:
    """``1 - (1 - eps) * tau`` (MDLM's log-linear schedule, whose signal stays above 0)."""

    eps: float = 1e-3  # the signal left at tau = 1

    def __post_init__(self) -> None:
        if not 0 <= self.eps < 1:
            raise ValueError(f"log-linear schedule eps={self.eps} must lie in [0, 1)")


@dataclass
class VPCosineScheduleConfig:
    """``abar**2 = cos**2(((tau + s) / (1 + s)) * pi / 2)``."""

    s: float = 0.008  # time offset that keeps the first steps from being too small

    def __post_init__(self) -> None:
        if self.s < 0:
            raise ValueError(f"VP-cosine offset s={self.s} must be non-negative")
