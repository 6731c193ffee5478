"""Noise schedules against their closed forms (Table noise_schedules): values, endpoints, monotonicity."""
from __future__ import annotations

import math

import pytest
import torch

from ladd_plugins.schedules.closed_form import (
    CosineSchedule,
    GeometricSchedule,
    GeometricScheduleConfig,
    LinearSchedule,
    LogLinearSchedule,
    LogLinearScheduleConfig,
    PolynomialSchedule,
    PolynomialScheduleConfig,
    ScheduleConfig,
    VPCosineSchedule,
    VPCosineScheduleConfig,
    VPSqrtSchedule,
)

TAUS = [0.0, 1e-3, 0.1, 0.37, 0.5, 0.9, 0.999, 1.0]

CASES = {
    "linear": (LinearSchedule(ScheduleConfig()), lambda t: 1 - t),
    "polynomial": (PolynomialSchedule(PolynomialScheduleConfig()), lambda t: 1 - t**2),
    "polynomial-3": (PolynomialSchedule(PolynomialScheduleConfig(power=3.0)), lambda t: 1 - t**3),
    "geometric": (GeometricSchedule(GeometricScheduleConfig()), lambda t: math.exp(-(1e-5 ** (1 - t)) * 20.0**t)),
    "cosine": (CosineSchedule(ScheduleConfig()), lambda t: math.cos(math.pi * t / 2)),
    "loglinear": (LogLinearSchedule(LogLinearScheduleConfig()), lambda t: 1 - (1 - 1e-3) * t),
    "vp-cosine": (
        VPCosineSchedule(VPCosineScheduleConfig()),
        lambda t: math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2,
    ),
    "vp-sqrt": (VPSqrtSchedule(ScheduleConfig()), lambda t: math.sqrt(1 - t)),
}


@pytest.mark.parametrize("name", CASES)
def test_matches_closed_form(name: str) -> None:
    schedule, formula = CASES[name]
    got = schedule.signal(torch.tensor(TAUS, dtype=torch.float64))
    expected = torch.tensor([min(max(formula(t), 0.0), 1.0) for t in TAUS], dtype=torch.float64)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", CASES)
def test_decreasing_within_unit_interval(name: str) -> None:
    schedule, _ = CASES[name]
    signal = schedule.signal(torch.linspace(0, 1, 2001, dtype=torch.float64))
    assert signal.min() >= 0 and signal.max() <= 1
    assert (signal[1:] <= signal[:-1]).all()
    assert signal[0] > 0.999 and signal[-1] < 2e-3


@pytest.mark.parametrize("name", ["linear", "polynomial", "cosine", "loglinear", "vp-sqrt"])
def test_exact_clean_endpoint(name: str) -> None:
    schedule, _ = CASES[name]
    assert schedule.signal(torch.zeros(1, dtype=torch.float64)).item() == 1.0


def test_keeps_shape_and_dtype() -> None:
    schedule = LinearSchedule(ScheduleConfig())
    for dtype in (torch.float32, torch.float64):
        tau = torch.rand(3, 5, dtype=dtype)
        out = schedule.signal(tau)
        assert out.shape == tau.shape and out.dtype == dtype


def test_invalid_options_are_refused() -> None:
    with pytest.raises(ValueError, match="power"):
        PolynomialScheduleConfig(power=0.0)
    with pytest.raises(ValueError, match="beta_min"):
        GeometricScheduleConfig(beta_min=30.0, beta_max=20.0)
    with pytest.raises(ValueError, match="eps"):
        LogLinearScheduleConfig(eps=1.0)
