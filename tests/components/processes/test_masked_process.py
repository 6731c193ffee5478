"""The masked process against closed forms: Bayes reveal probabilities, ELBO weights, CE, sampling rates."""
from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import chi2

from ladd_plugins.processes.masked import MaskedProcess, MaskedProcessConfig
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
)

K = 5
MASK = K

# each schedule with an independent closed form of gbar
GBARS = {
    "linear": (LinearSchedule(ScheduleConfig()), lambda t: 1 - t),
    "polynomial": (PolynomialSchedule(PolynomialScheduleConfig()), lambda t: 1 - t**2),
    "geometric": (GeometricSchedule(GeometricScheduleConfig()), lambda t: math.exp(-(1e-5 ** (1 - t)) * 20.0**t)),
    "cosine": (CosineSchedule(ScheduleConfig()), lambda t: math.cos(math.pi * t / 2)),
    "loglinear": (LogLinearSchedule(LogLinearScheduleConfig()), lambda t: 1 - (1 - 1e-3) * t),
}


def make(schedule: str = "linear", horizon: int = 4000, weighting: str = "elbo", vocab: int = K) -> MaskedProcess:
    return MaskedProcess(
        MaskedProcessConfig(horizon=horizon, weighting=weighting), schedule=GBARS[schedule][0], vocab_size=vocab
    )


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def binomial_ok(hits: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(hits - n * p) <= sigmas * math.sqrt(n * p * (1 - p)) + 1e-9


def test_unknown_weighting_names_the_choices() -> None:
    with pytest.raises(ValueError, match="elbo.*constant"):
        MaskedProcessConfig(weighting="snr")


def test_prior_is_all_mask() -> None:
    prior = make().prior((3, 7), torch.device("cpu"))
    assert prior.dtype == torch.long and (prior == MASK).all()


@pytest.mark.parametrize("name", GBARS)
def test_reveal_probability_is_bayes_from_marginals(name: str) -> None:
    process, gbar = make(name), GBARS[name][1]
    pairs = [(1.0, 0.5), (0.7, 0.69), (0.3, 0.1), (0.05, 0.01), (0.9, 0.0)]
    tau_t = torch.tensor([t for t, _ in pairs], dtype=torch.float64)
    tau_s = torch.tensor([s for _, s in pairs], dtype=torch.float64)
    # P(masked at s | masked at t) = P(masked at s) / P(masked at t), since masking is absorbing
    stays = [(1 - gbar(s)) / (1 - gbar(t)) if s > 0 else 0.0 for t, s in pairs]
    expected = torch.tensor([1 - p for p in stays], dtype=torch.float64)
    torch.testing.assert_close(process.reveal_probability(tau_t, tau_s), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", GBARS)
@pytest.mark.parametrize("horizon", [50, 4000])
def test_elbo_weights_telescope(name: str, horizon: int) -> None:
    # sum_t lambda_t (1 - gbar_t) = gbar_0 - gbar_T: every token is masked exactly once
    process, gbar = make(name, horizon=horizon), GBARS[name][1]
    tau = torch.arange(1, horizon + 1, dtype=torch.float64) / horizon
    survival = torch.tensor([gbar(t) for t in tau.tolist()], dtype=torch.float64)
    total = (process.weight(tau) * (1 - survival)).sum() / horizon
    assert total.item() == pytest.approx(gbar(0.0) - gbar(1.0), rel=1e-9)


def test_linear_elbo_weight_is_T_over_t() -> None:
    horizon = 4000
    t = torch.arange(1, horizon + 1, dtype=torch.float64)
    process = make(horizon=horizon)
    torch.testing.assert_close(process.weight(t / horizon), horizon / t, rtol=1e-9, atol=0)
    # float32 grid times, as training draws them
    torch.testing.assert_close(process.weight((t / horizon).float()), (horizon / t).float(), rtol=1e-4, atol=0)


def test_constant_weight_is_one() -> None:
    tau = torch.tensor([0.1, 0.5, 1.0])
    assert (make(weighting="constant").weight(tau) == 1).all()


def test_loss_is_hand_computed_cross_entropy() -> None:
    logits = torch.tensor(
        [[[2.0, 0.0, -1.0], [0.5, 0.5, 0.5], [1.0, 3.0, 0.0]], [[0.0, 0.0, 4.0], [-2.0, 1.0, 0.0], [0.3, 0.2, 0.1]]]
    )
    x0 = torch.tensor([[0, 2, 1], [2, 1, 0]])
    x_t = torch.tensor([[3, 2, 3], [3, 3, 0]])  # mask id 3
    tau = torch.tensor([0.5, 0.25])
    process = MaskedProcess(MaskedProcessConfig(horizon=4), schedule=GBARS["linear"][0], vocab_size=3)

    def nll(row: list[float], target: int) -> float:
        return -(row[target] - math.log(sum(math.exp(v) for v in row)))

    rows = logits.tolist()
    ce0 = nll(rows[0][0], 0) + nll(rows[0][2], 1)
    ce1 = nll(rows[1][0], 2) + nll(rows[1][1], 1)
    # linear schedule, T = 4: weight T/t with t = 2 and t = 1
    expected = torch.tensor([2.0 * ce0 / 3, 4.0 * ce1 / 3])
    torch.testing.assert_close(process.loss(logits, x0, x_t, tau), expected)
    constant = MaskedProcess(
        MaskedProcessConfig(horizon=4, weighting="constant"), schedule=GBARS["linear"][0], vocab_size=3
    )
    torch.testing.assert_close(constant.loss(logits, x0, x_t, tau), torch.tensor([ce0 / 3, ce1 / 3]))


def test_loss_ignores_unmasked_positions() -> None:
    logits = torch.randn(2, 6, K, requires_grad=True)
    x0 = torch.randint(0, K, (2, 6))
    x_t = x0.clone()
    x_t[:, :2] = MASK
    make().loss(logits, x0, x_t, torch.tensor([0.5, 0.9])).sum().backward()
    assert (logits.grad[:, 2:] == 0).all() and (logits.grad[:, :2] != 0).any()
    assert (make().loss(logits, x0, x0, torch.tensor([0.5, 0.9])) == 0).all()


def test_loss_accepts_bfloat16_logits() -> None:
    logits = torch.randn(2, 8, K)
    x0 = torch.randint(0, K, (2, 8))
    x_t = torch.where(torch.rand(2, 8, generator=gen()) < 0.5, MASK, x0)
    tau = torch.tensor([0.5, 0.75])
    full = make().loss(logits, x0, x_t, tau)
    half = make().loss(logits.bfloat16(), x0, x_t, tau)
    assert half.dtype == torch.float32
    torch.testing.assert_close(half, full, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("name", ["linear", "geometric", "cosine"])
def test_corrupt_masks_at_rate_one_minus_gbar(name: str) -> None:
    process, gbar = make(name), GBARS[name][1]
    taus = [0.05, 0.3, 0.6, 0.95]
    n = 20000
    x0 = torch.randint(0, K, (len(taus), n), generator=gen(1))
    x_t = process.corrupt(x0, torch.tensor(taus), gen(2))
    masked = x_t == MASK
    assert (x_t[~masked] == x0[~masked]).all()
    for row, tau in enumerate(taus):
        assert binomial_ok(int(masked[row].sum()), n, 1 - gbar(tau))


def test_step_keeps_unmasked_reveals_at_rate_and_samples_prediction() -> None:
    process = make("cosine")
    n = 40000
    x_t = torch.randint(0, K, (2, n), generator=gen(3))
    x_t[:, : n // 2] = MASK
    probs = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03], dtype=torch.float64)
    logits = probs.log().float().expand(2, n, K)
    tau_t, tau_s = torch.tensor([0.8, 0.4]), torch.tensor([0.6, 0.1])
    x_s = process.step(x_t, logits, tau_t, tau_s, gen(4))

    assert (x_s[:, n // 2 :] == x_t[:, n // 2 :]).all()
    gbar = GBARS["cosine"][1]
    revealed = x_s[:, : n // 2] != MASK
    for row in range(2):
        t, s = tau_t[row].item(), tau_s[row].item()
        assert binomial_ok(int(revealed[row].sum()), n // 2, (gbar(s) - gbar(t)) / (1 - gbar(t)))

    tokens = x_s[:, : n // 2][revealed]
    counts = torch.bincount(tokens, minlength=K).double()
    expected = probs * tokens.numel()
    statistic = ((counts - expected) ** 2 / expected).sum().item()
    assert statistic < chi2.ppf(0.999, K - 1)


@pytest.mark.parametrize("name", ["linear", "geometric", "loglinear"])
def test_final_step_leaves_no_mask(name: str) -> None:
    process = make(name)
    x_t = torch.full((3, 50), MASK)
    x_t[:, ::3] = 1
    x_s = process.step(x_t, torch.randn(3, 50, K), torch.full((3,), 0.02), torch.zeros(3), gen(5))
    assert not (x_s == MASK).any()
    assert (x_s[:, ::3] == 1).all()


def test_step_with_clean_prediction_preserves_forward_marginal() -> None:
    # bridge(x_t -> x_s | x0) applied to x_t ~ q(.|x0) gives x_s ~ q(.|x0): the forward marginal at s
    process, gbar = make("polynomial"), GBARS["polynomial"][1]
    n = 40000
    x0 = torch.randint(0, K, (1, n), generator=gen(6))
    x_t = process.corrupt(x0, torch.tensor([0.9]), gen(7))
    confident = torch.nn.functional.one_hot(x0, K).float() * 50.0
    x_s = process.step(x_t, confident, torch.tensor([0.9]), torch.tensor([0.45]), gen(8))
    masked = x_s == MASK
    assert (x_s[~masked] == x0[~masked]).all()
    assert binomial_ok(int(masked.sum()), n, 1 - gbar(0.45))


def test_step_is_reproducible_with_a_generator() -> None:
    process = make()
    x_t = torch.full((2, 30), MASK)
    logits = torch.randn(2, 30, K)
    tau_t, tau_s = torch.tensor([0.5, 0.5]), torch.tensor([0.25, 0.25])
    assert torch.equal(process.step(x_t, logits, tau_t, tau_s, gen(9)), process.step(x_t, logits, tau_t, tau_s, gen(9)))


@pytest.mark.parametrize("floor", [0.0, 1e-3, 0.3])
def test_the_continuous_bound_weighs_a_masked_set_by_its_integral_over_the_masked_share(floor: float) -> None:
    from scipy.integrate import quad

    process = MaskedProcess(MaskedProcessConfig(bound="continuous", bound_floor=floor), GBARS["linear"][0], K)
    for free, count in [(1, 1), (6, 1), (6, 3), (6, 6), (40, 17)]:
        integral = quad(lambda p, c=count, n=free: p ** (c - 1) * (1 - p) ** (n - c), floor, 1, epsrel=1e-12)[0]
        assert process.subset_weight(free, count) == pytest.approx(integral / (1 - floor), rel=1e-9)
    if floor == 0:  # LLaDA's estimator: a draw masking l of L weighs L / l
        weights = process.count_weight(torch.tensor([7, 7, 7]), torch.tensor([1, 3, 7]))
        assert torch.allclose(weights * torch.tensor([1, 3, 7]), torch.ones(3, dtype=torch.float64))


@pytest.mark.parametrize(("schedule", "floor"), [("linear", 0.2), ("cosine", 0.0)])
def test_a_continuous_draw_takes_its_masked_share_from_its_law_given_the_count(schedule: str, floor: float) -> None:
    from scipy.stats import beta, kstest

    process = MaskedProcess(MaskedProcessConfig(bound="continuous", bound_floor=floor), GBARS[schedule][0], K)
    generator = torch.Generator().manual_seed(0)
    x0 = torch.zeros(4000, 6, dtype=torch.long)
    u = torch.full((4000,), 0.4)  # l = floor(0.4 * 6) + 1 = 3 of 6 masked
    draw = process.bound_draw(x0, None, u, generator)
    assert bool((draw.rows.sum(1) == 3).all())
    share = 1 - torch.tensor([GBARS[schedule][1](float(t)) for t in draw.tau])  # gbar(1) = 0 for both
    law = beta(3, 4)
    start = law.cdf(floor)
    assert kstest(share.numpy(), lambda p: (law.cdf(p) - start) / (1 - start)).pvalue > 1e-3
    assert float(share.min()) >= floor


def test_a_floor_belongs_to_the_continuous_bound() -> None:
    with pytest.raises(ValueError, match="bound_floor=0.1 bounds the masked share of the continuous-time bound"):
        MaskedProcessConfig(bound_floor=0.1)
