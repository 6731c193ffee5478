"""Each term of the LADD bound (App. C.1) against closed forms written here: Co-LADD's Gaussian posterior and VP
latent process, Di-LADD's codes and masked code process, the token chain's endpoints."""
from __future__ import annotations

import math

import pytest
import torch

from ladd_plugins.latents.config import DiscreteLatentConfig
from ladd_plugins.latents.continuous import ContinuousLatent, ContinuousLatentConfig
from ladd_plugins.latents.quantizers import VQLatent
from ladd_plugins.processes.config import MaskedProcessConfig, VPProcessConfig
from ladd_plugins.processes.masked import MaskedProcess
from ladd_plugins.processes.vp import VPGaussianProcess
from ladd_plugins.schedules.closed_form import (
    LinearSchedule,
    LogLinearSchedule,
    LogLinearScheduleConfig,
    VPSqrtSchedule,
)
from ladd_plugins.schedules.config import ScheduleConfig
from registry.interfaces import BoundDraw

HORIZON = 200


def vp(horizon: int = HORIZON) -> VPGaussianProcess:
    return VPGaussianProcess(VPProcessConfig(horizon=horizon), VPSqrtSchedule(ScheduleConfig()))


def alpha_bar2(tau: float) -> float:
    """VP-sqrt (Table noise_schedules): abar^2 = sqrt(1 - tau)."""
    return math.sqrt(1.0 - tau)


def gaussian_kl(mean_q: torch.Tensor, var_q: float, mean_p: torch.Tensor, var_p: float) -> float:
    """KL(N(mean_q, var_q I) || N(mean_p, var_p I)), written out."""
    d = mean_q.numel()
    return 0.5 * (d * var_q / var_p + float((mean_q - mean_p).square().sum()) / var_p - d + d * math.log(var_p / var_q))


@pytest.mark.parametrize("step", [2, 3, 50, HORIZON])
def test_a_latent_step_term_is_the_kl_of_the_bridge_to_the_model_s_gaussian_step(step):
    """L_{t-1} = KL(q(y_s | y_t, y0) || p(y_s | y_t)), both Gaussians of the bridge variance (eq. app_bridge_params)."""
    generator = torch.Generator().manual_seed(step)
    y0, y_t, y0_hat = (torch.randn(1, 2, 3, generator=generator, dtype=torch.float64) for _ in range(3))
    t, s = step / HORIZON, (step - 1) / HORIZON
    a2_t, a2_s = alpha_bar2(t), alpha_bar2(s)
    s2_t, s2_s = 1 - a2_t, 1 - a2_s
    alpha2_ts = a2_t / a2_s
    sigma2_ts = s2_t - alpha2_ts * s2_s
    bridge_var = sigma2_ts * s2_s / s2_t

    def bridge_mean(clean: torch.Tensor) -> torch.Tensor:
        return math.sqrt(alpha2_ts) * s2_s / s2_t * y_t + math.sqrt(a2_s) * sigma2_ts / s2_t * clean

    expected = gaussian_kl(bridge_mean(y0), bridge_var, bridge_mean(y0_hat), bridge_var)
    draw = BoundDraw(y_t, torch.tensor([t], dtype=torch.float64), torch.ones(1, dtype=torch.float64))
    assert float(vp().bound_terms(y0_hat, y0, draw)) == pytest.approx(expected, rel=1e-9)


def test_the_first_latent_step_is_a_gaussian_reconstruction_of_the_noise_of_y1():
    generator = torch.Generator().manual_seed(1)
    y0, y0_hat = (torch.randn(1, 2, 3, generator=generator, dtype=torch.float64) for _ in range(2))
    a2 = alpha_bar2(1 / HORIZON)
    variance = (1 - a2) / a2  # sbar_1^2 / abar_1^2
    expected = float(-torch.distributions.Normal(y0_hat, math.sqrt(variance)).log_prob(y0).sum())
    draw = BoundDraw(y0, torch.tensor([1 / HORIZON], dtype=torch.float64), torch.ones(1, dtype=torch.float64))
    assert float(vp().bound_terms(y0_hat, y0, draw)) == pytest.approx(expected, rel=1e-12)


def test_the_latent_prior_term_is_the_kl_of_the_last_marginal_to_the_standard_normal():
    process = VPGaussianProcess(VPProcessConfig(horizon=HORIZON), LinearSchedule(ScheduleConfig()))
    y0 = torch.randn(2, 1, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert process.prior_bound(y0, None).abs().max() < 1e-12  # VP-linear ends at abar = 0: the prior itself
    shrunk = VPGaussianProcess(VPProcessConfig(horizon=HORIZON), LogLinearSchedule(LogLinearScheduleConfig(eps=0.1)))
    a2 = 0.1  # this schedule's signal at tau = 1
    expected = [gaussian_kl(math.sqrt(a2) * row, 1 - a2, torch.zeros_like(row), 1.0) for row in y0]
    assert shrunk.prior_bound(y0, None).tolist() == pytest.approx(expected, rel=1e-12)


def test_for_standard_normal_latents_and_their_optimal_denoiser_the_bound_sums_to_its_closed_form_above_the_entropy():
    """y0 ~ N(0, I): E[y0 | y_t] = abar_t y_t, whose error has variance sbar_t^2 per feature. Every term at that error
    summed over the grid is a closed form: sum_t lambda_t d sbar_t^2 + the reconstruction + L_T, which must bound
    -E log N(y0; 0, I) = (d / 2) log(2 pi e)."""
    d, process = 4, vp(1000)
    tau = torch.arange(1, 1001, dtype=torch.float64) / 1000
    noise = (1 - torch.sqrt(1 - tau)).sqrt()  # sbar_t
    y0 = torch.zeros(1000, 1, d, dtype=torch.float64)
    draw = BoundDraw(y0, tau, torch.ones(1000, dtype=torch.float64))
    total = float(process.bound_terms(y0 - noise[:, None, None], y0, draw).sum() + process.prior_bound(y0[:1], None))
    expected, previous = 0.0, 1.0
    for k in range(1, 1001):
        a2 = math.sqrt(1 - k / 1000)
        if k == 1:
            variance = (1 - a2) / a2
            expected += 0.5 * d * math.log(2 * math.pi * variance) + d * (1 - a2) / (2 * variance)
        else:
            sigma2 = (1 - a2) - a2 / previous * (1 - previous)
            expected += previous * sigma2 / (2 * (1 - previous) * (1 - a2)) * d * (1 - a2)
        previous = a2
    entropy = 0.5 * d * math.log(2 * math.pi * math.e)
    assert total == pytest.approx(expected, rel=1e-9)
    assert entropy < total < entropy + 0.5 * d  # a bound, within (d/2) Euler's gamma of the continuous limit


def test_the_importance_drawn_latent_bound_estimates_the_expected_terms_without_bias():
    process, n, d = vp(1000), 20000, 4
    generator = torch.Generator().manual_seed(3)
    y0 = torch.randn(n, 1, d, generator=generator, dtype=torch.float64)
    u = (torch.rand((), generator=generator, dtype=torch.float64) + torch.arange(n)) / n
    draw = process.bound_draw(y0, None, u, generator)
    optimal = process.schedule.signal(draw.tau).sqrt()[:, None, None] * draw.state
    estimates = process.bound_terms(optimal, y0, draw) + process.prior_bound(y0, None)
    tau = torch.arange(1, 1001, dtype=torch.float64) / 1000
    exact = process.bound_terms(
        -(1 - torch.sqrt(1 - tau)).sqrt()[:, None, None].expand(-1, 1, d), torch.zeros(1000, 1, d, dtype=torch.float64),
        BoundDraw(torch.zeros(1000, 1, d), tau, torch.ones(1000, dtype=torch.float64)),
    ).sum()
    error = float(estimates.std()) / math.sqrt(n)
    assert abs(float(estimates.mean()) - float(exact)) < 4 * error


def test_the_gaussian_posterior_s_entropy_is_the_encoder_term():
    latent = ContinuousLatent(ContinuousLatentConfig(length=3, width=5, std=0.01))
    features = torch.randn(2, 3, 5)
    one = 0.5 * math.log(2 * math.pi * math.e * 0.01**2)
    assert latent.posterior_entropy(features).tolist() == pytest.approx([15 * one] * 2, rel=1e-12)
    draws = torch.stack([latent.encode(features).y0 for _ in range(4000)])
    # the entropy is that of the draws encode makes: their spread is std around the features
    assert float((draws - features).std()) == pytest.approx(0.01, rel=0.02)


def test_a_vector_quantiser_s_codes_have_no_encoder_term():
    latent = VQLatent(DiscreteLatentConfig(length=2, width=8, codebook_size=16)).eval()
    assert latent.posterior_entropy(torch.randn(3, 2, 8)).tolist() == [0.0, 0.0, 0.0]


def test_one_masked_code_is_scored_by_its_cross_entropy_and_the_token_chain_s_endpoints_vanish():
    """Di-LADD's code process with one code per sequence (M = 1): every draw masks it, weight 1; the chain starts
    all-masked (m_T = 1) and its last step reveals everything (r_1 = 1), even where gbar(1) > 0."""
    process = MaskedProcess(MaskedProcessConfig(horizon=HORIZON), LogLinearSchedule(LogLinearScheduleConfig()), 16)
    reveal, masked = process.chain()
    assert float(masked[-1]) == 1.0 and float(reveal[0]) == 1.0
    assert float((reveal * masked).sum()) == pytest.approx(1.0, abs=1e-12)  # a position reveals exactly once
    codes = torch.tensor([[5], [11]])
    generator = torch.Generator().manual_seed(4)
    draw = process.bound_draw(codes, None, torch.tensor([0.3, 0.8], dtype=torch.float64), generator)
    assert draw.state.tolist() == [[16], [16]] and draw.weight.tolist() == pytest.approx([1.0, 1.0], abs=1e-12)
    logits = torch.randn(2, 16, generator=generator, dtype=torch.float64)
    expected = -logits.log_softmax(-1).gather(1, codes).squeeze(1)
    assert process.bound_terms(logits, codes, draw).tolist() == pytest.approx(expected.tolist(), rel=1e-12)
    assert process.prior_bound(codes, None).tolist() == [0.0, 0.0]
