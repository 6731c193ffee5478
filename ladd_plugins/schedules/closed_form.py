"""Noise schedules (Table ``noise_schedules``): the signal level at time ``tau`` in [0, 1].

The same closed forms serve masked processes (signal = survival probability ``gbar``) and
variance-preserving Gaussian ones (signal = ``abar**2``).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from registry.interfaces import Schedule

from .config import (
    GeometricScheduleConfig,
    LogLinearScheduleConfig,
    PolynomialScheduleConfig,
    ScheduleConfig,
    VPCosineScheduleConfig,
)

__all__ = [
    "CosineSchedule",
    "GeometricSchedule",
    "GeometricScheduleConfig",
    "LinearSchedule",
    "LogLinearSchedule",
    "LogLinearScheduleConfig",
    "PolynomialSchedule",
    "PolynomialScheduleConfig",
    "ScheduleConfig",
    "VPCosineSchedule",
    "VPCosineScheduleConfig",
    "VPSqrtSchedule",
]


def _unit(signal: Tensor) -> Tensor:
    return signal.clamp(0.0, 1.0)


class _ConfiguredSchedule(Schedule):
    """A schedule built as ``Cls(config)`` from its options dataclass."""

    def __init__(self, config: object) -> None:
        self.config = config


class LinearSchedule(_ConfiguredSchedule):
    """``1 - tau``: the discrete "linear" and the Gaussian "VP-linear" schedule."""

    config: ScheduleConfig

    def signal(self, tau: Tensor) -> Tensor:
        return _unit(1.0 - tau)


class PolynomialSchedule(_ConfiguredSchedule):
    """``1 - tau**power`` (the table's "polynomial" schedule at power 2)."""

    config: PolynomialScheduleConfig

    def signal(self, tau: Tensor) -> Tensor:
        return _unit(1.0 - tau.clamp(min=0.0) ** self.config.power)


class GeometricSchedule(_ConfiguredSchedule):
    """``exp(-beta_min**(1-tau) * beta_max**tau)``; its signal at tau=0 is just below 1."""

    config: GeometricScheduleConfig

    def signal(self, tau: Tensor) -> Tensor:
        log_rate = (1.0 - tau) * math.log(self.config.beta_min) + tau * math.log(self.config.beta_max)
        return _unit(torch.exp(-torch.exp(log_rate)))


class CosineSchedule(_ConfiguredSchedule):
    """``cos(pi * tau / 2)`` (discrete cosine schedule)."""

    config: ScheduleConfig

    def signal(self, tau: Tensor) -> Tensor:
        return _unit(torch.cos(0.5 * math.pi * tau))


class LogLinearSchedule(_ConfiguredSchedule):
    """``1 - (1 - eps) * tau`` (MDLM)."""

    config: LogLinearScheduleConfig

    def signal(self, tau: Tensor) -> Tensor:
        return _unit(1.0 - (1.0 - self.config.eps) * tau)


class VPCosineSchedule(_ConfiguredSchedule):
    """``abar**2 = cos**2(((tau + s) / (1 + s)) * pi / 2)``, unnormalised as in the paper's table."""

    config: VPCosineScheduleConfig

    def signal(self, tau: Tensor) -> Tensor:
        s = self.config.s
        return _unit(torch.cos((tau + s) / (1.0 + s) * (0.5 * math.pi)) ** 2)


class VPSqrtSchedule(_ConfiguredSchedule):
    """``abar**2 = sqrt(1 - tau)`` (Co-LADD's latent default: latents are denoised slightly faster)."""

    config: ScheduleConfig

    def signal(self, tau: Tensor) -> Tensor:
        return _unit(torch.sqrt((1.0 - tau).clamp(min=0.0)))
