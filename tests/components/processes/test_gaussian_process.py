"""The VP Gaussian process against independent Gaussian computations: marginals, DDIM, ELBO weights."""
from __future__ import annotations

import math

import pytest
import torch

from ladd_plugins.processes.vp import VPGaussianProcess, VPProcessConfig
from ladd_plugins.schedules.closed_form import (
    LinearSchedule,
    ScheduleConfig,
    VPCosineSchedule,
    VPCosineScheduleConfig,
    VPSqrtSchedule,
)

# abar^2 as independent closed forms
ABAR2 = {
    "vp-linear": (LinearSchedule(ScheduleConfig()), lambda t: 1 - t),
    "vp-sqrt": (VPSqrtSchedule(ScheduleConfig()), lambda t: math.sqrt(1 - t)),
    "vp-cosine": (
        VPCosineSchedule(VPCosineScheduleConfig()),
        lambda t: math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2,
    ),
}


def make(name: str = "vp-sqrt", **options: object) -> VPGaussianProcess:
    return VPGaussianProcess(VPProcessConfig(**options), ABAR2[name][0])


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def bridge(a2: float, s: float, t: float) -> tuple[float, float, float]:
    """q(y_s | y_t, y0) by conditioning the joint Gaussian of (y_s, y_t) given y0.

    Returns the coefficients (c_y0, c_yt, var) of mean = c_y0 y0 + c_yt y_t and the variance.
    """
    abar_s, abar_t = math.sqrt(a2(s)), math.sqrt(a2(t))
    var_s, var_t = 1 - a2(s), 1 - a2(t)
    cov = abar_t / abar_s * var_s
    gain = cov / var_t
    return abar_s - gain * abar_t, gain, var_s - cov * gain


def test_invalid_options_are_refused() -> None:
    with pytest.raises(ValueError, match="^weighting='snr' is not valid: it must be one of elbo, constant$"):
        make(weighting="snr")
    with pytest.raises(ValueError, match="eta"):
        make(eta=1.5)
    with pytest.raises(ValueError, match="^feature_reduction='max' is not valid: it must be one of mean, sum$"):
        make(feature_reduction="max")


def test_prior_is_standard_normal() -> None:
    draw = make().prior((4, 2, 25000), torch.device("cpu"), gen())
    assert abs(draw.mean().item()) < 0.01 and abs(draw.var().item() - 1) < 0.01


@pytest.mark.parametrize("name", ABAR2)
def test_corrupt_matches_marginal(name: str) -> None:
    process, a2 = make(name), ABAR2[name][1]
    taus = [0.1, 0.5, 0.9]
    y0 = torch.linspace(-1, 1, 50000, dtype=torch.float64).expand(len(taus), 1, -1)
    y_t = process.corrupt(y0, torch.tensor(taus, dtype=torch.float64), gen(1))
    for row, tau in enumerate(taus):
        residual = y_t[row] - math.sqrt(a2(tau)) * y0[row]
        assert abs(residual.mean().item()) < 0.02
        assert residual.var().item() == pytest.approx(1 - a2(tau), rel=0.03)


@pytest.mark.parametrize("name", ABAR2)
def test_ddim_eta_one_is_the_gaussian_bridge(name: str) -> None:
    process, a2 = make(name, eta=1.0), ABAR2[name][1]
    pairs = [(0.9, 0.6), (0.5, 0.45), (0.2, 0.05)]
    d = 100000
    y0 = torch.randn(len(pairs), 1, d, generator=gen(2), dtype=torch.float64)
    y_t = torch.randn(len(pairs), 1, d, generator=gen(3), dtype=torch.float64)
    tau_t = torch.tensor([t for t, _ in pairs], dtype=torch.float64)
    tau_s = torch.tensor([s for _, s in pairs], dtype=torch.float64)
    y_s = process.step(y_t, y0, tau_t, tau_s, gen(4))
    for row, (t, s) in enumerate(pairs):
        c_y0, c_yt, var = bridge(a2, s, t)
        residual = y_s[row] - (c_y0 * y0[row] + c_yt * y_t[row])
        assert abs(residual.mean().item()) < 5 * math.sqrt(var / d)
        assert residual.var().item() == pytest.approx(var, rel=0.03)


def col(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).view(-1, 1, 1)


@pytest.mark.parametrize("name", ABAR2)
def test_ddim_eta_zero_preserves_the_marginal_path(name: str) -> None:
    process, a2 = make(name, eta=0.0), ABAR2[name][1]
    y0 = torch.randn(3, 4, 8, generator=gen(5), dtype=torch.float64)
    eps = torch.randn(3, 4, 8, generator=gen(6), dtype=torch.float64)
    t, s = [0.95, 0.5, 0.3], [0.7, 0.2, 0.01]
    y_t = col([math.sqrt(a2(v)) for v in t]) * y0 + col([math.sqrt(1 - a2(v)) for v in t]) * eps
    y_s = process.step(y_t, y0, torch.tensor(t, dtype=torch.float64), torch.tensor(s, dtype=torch.float64))
    expected = col([math.sqrt(a2(v)) for v in s]) * y0 + col([math.sqrt(1 - a2(v)) for v in s]) * eps
    torch.testing.assert_close(y_s, expected, rtol=1e-10, atol=1e-10)


def test_final_step_returns_the_prediction_in_input_dtype() -> None:
    process = make(eta=1.0)
    y_t, y0_hat = torch.randn(2, 1, 4), torch.randn(2, 1, 4)
    y_s = process.step(y_t, y0_hat, torch.tensor([0.01, 0.3]), torch.tensor([0.0, 0.1]), gen(7))
    assert y_s.dtype == torch.float32
    assert torch.equal(y_s[0], y0_hat[0]) and not torch.equal(y_s[1], y0_hat[1])


@pytest.mark.parametrize("name", ABAR2)
@pytest.mark.parametrize("t", [2, 3, 40, 1000, 3999, 4000])
def test_elbo_loss_is_T_times_the_bridge_kl(name: str, t: int) -> None:
    horizon = 4000
    process, a2 = make(name, horizon=horizon, weighting="elbo", feature_reduction="sum"), ABAR2[name][1]
    y0 = torch.randn(1, 1, 6, generator=gen(8), dtype=torch.float64)
    y0_hat = y0 + 0.1 * torch.randn(1, 1, 6, generator=gen(9), dtype=torch.float64)
    # KL between two Gaussians of equal covariance var I: ||mu1 - mu2||^2 / (2 var)
    c_y0, _, var = bridge(a2, (t - 1) / horizon, t / horizon)
    kl = (c_y0 * (y0 - y0_hat)).square().sum().item() / (2 * var)
    tau = torch.tensor([t / horizon], dtype=torch.float64)
    loss = process.loss(y0_hat, y0, torch.zeros_like(y0), tau)
    assert loss.item() == pytest.approx(horizon * kl, rel=1e-5)


def test_elbo_weight_vanishes_at_the_first_step() -> None:
    process = make(weighting="elbo", horizon=4000)
    assert process.weight(torch.tensor([1 / 4000])).item() == 0.0
    assert process.weight(torch.tensor([1 / 4000], dtype=torch.float64)).item() == 0.0
    assert process.weight(torch.tensor([2 / 4000])).item() > 0.0


def test_constant_loss_averages_over_positions_and_features_by_default() -> None:
    y0 = torch.zeros(2, 3, 2)
    prediction = torch.tensor([[[1.0, 2.0], [0.0, 0.0], [3.0, 0.0]], [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]])
    loss = make().loss(prediction, y0, y0, torch.tensor([0.3, 0.9]))
    # the authors' L^y: the mean squared error over the M x d_l entries of each row
    torch.testing.assert_close(loss, torch.tensor([(1.0 + 4.0 + 0.0 + 0.0 + 9.0 + 0.0) / 6, 1.0]))


def test_sum_reduction_sums_features_and_averages_positions() -> None:
    y0 = torch.zeros(2, 3, 2)
    prediction = torch.tensor([[[1.0, 2.0], [0.0, 0.0], [3.0, 0.0]], [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]])
    loss = make(feature_reduction="sum").loss(prediction, y0, y0, torch.tensor([0.3, 0.9]))
    torch.testing.assert_close(loss, torch.tensor([(5.0 + 0.0 + 9.0) / 3, 2.0]))
