"""The sliced Wasserstein metric: exactness against scipy on both direction scales, the closed-form ratio
between them, invariances, and refusal of unequal sets."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import chi, wasserstein_distance

import ladd_plugins.metrics.swd as swd_module
import registry
from ladd_plugins.metrics.swd import SlicedWasserstein, SlicedWassersteinConfig
from registry.errors import InvalidConfigError


def make(projections: int = 1000, seed: int = 0, directions: str = "gaussian") -> SlicedWasserstein:
    return SlicedWasserstein(SlicedWassersteinConfig(directions=directions, projections=projections, seed=seed))


def bits(n: int, width: int, seed: int, p: float = 0.5) -> torch.Tensor:
    return (torch.rand(n, width, generator=torch.Generator().manual_seed(seed)) < p).long()


def test_identical_sets_have_zero_distance() -> None:
    x = bits(300, 16, seed=0)
    assert make()(x, x.clone()) == {"swd": 0.0}


def test_matches_scipy_per_direction() -> None:
    metric = make(projections=40, seed=5)
    x, y = bits(200, 6, seed=1), bits(200, 6, seed=2, p=0.3)
    u = metric.directions(6).numpy()
    expected = np.mean(
        [wasserstein_distance(x.double().numpy() @ u[:, k], y.double().numpy() @ u[:, k]) for k in range(u.shape[1])]
    )
    assert metric.distance(x, y) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_one_dimension_is_mean_abs_direction_times_w1() -> None:
    metric = make(projections=20_000)
    gen = torch.Generator().manual_seed(3)
    pairs = [(torch.randn(500, 1, generator=gen), torch.randn(500, 1, generator=gen) * 2 + 1) for _ in range(2)]
    ratios = [
        metric.distance(a, b) / wasserstein_distance(a[:, 0].double().numpy(), b[:, 0].double().numpy())
        for a, b in pairs
    ]
    # With S = 1 each direction scales W_1 by |u|, so the ratio is the same E|u| for every pair.
    assert ratios[0] == pytest.approx(ratios[1], rel=1e-10)
    assert ratios[0] == pytest.approx(math.sqrt(2 / math.pi), rel=0.03)


def test_scales_linearly_with_a_shift() -> None:
    metric = make(projections=200)
    x = bits(100, 8, seed=4).double()
    shift = torch.linspace(-1, 1, 8, dtype=torch.float64)
    one, three = metric.distance(x + shift, x), metric.distance(x + 3 * shift, x)
    assert one > 0 and three == pytest.approx(3 * one, rel=1e-12)


def test_is_symmetric_and_deterministic() -> None:
    x, y = bits(150, 10, seed=5), bits(150, 10, seed=6, p=0.7)
    assert make()(x, y)["swd"] == pytest.approx(make()(y, x)["swd"], rel=1e-12)
    assert make()(x, y) == make()(x, y)
    assert make(seed=1)(x, y) != make(seed=2)(x, y)


def test_chunking_does_not_change_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = bits(64, 12, seed=7), bits(64, 12, seed=8, p=0.4)
    whole = make(projections=50).distance(x, y)
    monkeypatch.setattr(swd_module, "_CHUNK_ELEMENTS", 64 * 7)
    assert make(projections=50).distance(x, y) == pytest.approx(whole, rel=1e-12)


def test_unequal_sizes_are_refused_with_both_sizes() -> None:
    with pytest.raises(ValueError, match=r"1000 and 999 samples"):
        make()(bits(1000, 4, seed=0), bits(999, 4, seed=1))


def test_mismatched_lengths_and_ranks_are_refused() -> None:
    with pytest.raises(ValueError, match=r"8 and 9 positions"):
        make()(bits(10, 8, seed=0), bits(10, 9, seed=1))
    with pytest.raises(ValueError, match=r"\[N, S\]"):
        make()(torch.zeros(10), torch.zeros(10))


def test_config_rejects_no_directions_an_unknown_law_and_a_count_where_the_law_goes() -> None:
    with pytest.raises(InvalidConfigError, match=r"^projections=0 is out of range: it must be >= 1$"):
        SlicedWassersteinConfig(projections=0)
    refusal = r"^directions='sphere' is not valid: it must be one of gaussian, unit$"
    with pytest.raises(InvalidConfigError, match=refusal):
        SlicedWassersteinConfig(directions="sphere")
    with pytest.raises(InvalidConfigError) as refused:
        registry.load().build("metric", "swd", {"directions": 1000})
    assert str(refused.value) == (
        "invalid options for metric 'swd': directions='1000' is not valid: directions is the law of the directions "
        "(gaussian or unit) and projections their number; for a run saved by an earlier ladd, write "
        "`directions: gaussian` and `projections: 1000` under metric in its config.yaml"
    )


def _numpy_swd(x: torch.Tensor, y: torch.Tensor, projections: int, seed: int, unit: bool) -> float:
    """SWD_1 from scipy's 1-D W_1 over the documented directions.

    They are ``torch.randn(S, projections)`` from a generator seeded ``seed``, normalised for unit directions.
    """
    u = torch.randn(x.shape[1], projections, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).numpy()
    if unit:
        u = u / np.sqrt((u**2).sum(axis=0, keepdims=True))
    xs, ys = x.double().numpy(), y.double().numpy()
    return float(np.mean([wasserstein_distance(xs @ u[:, k], ys @ u[:, k]) for k in range(projections)]))


@pytest.mark.parametrize("directions", ["gaussian", "unit"])
def test_matches_an_independent_computation_on_both_scales(directions: str) -> None:
    x, y = bits(150, 32, seed=9), bits(150, 32, seed=10, p=0.4)
    expected = _numpy_swd(x, y, projections=60, seed=4, unit=directions == "unit")
    assert make(projections=60, seed=4, directions=directions).distance(x, y) == pytest.approx(expected, rel=1e-12)


def test_unit_directions_are_the_gaussian_ones_scaled_to_norm_one() -> None:
    gaussian, unit = make(directions="gaussian").directions(32), make(directions="unit").directions(32)
    assert torch.allclose(unit.norm(dim=0), torch.ones(1000, dtype=torch.float64), rtol=0, atol=1e-15)
    assert torch.allclose(unit * gaussian.norm(dim=0), gaussian, rtol=1e-15, atol=0)


@pytest.mark.parametrize("width", [32, 128])
def test_gaussian_scores_are_the_unit_ones_times_the_mean_gaussian_norm(width: int) -> None:
    # |u| is independent of u/|u| for u ~ N(0, I_S): the Gaussian score is E|u| times the unit one, with
    # E|u| = sqrt(2) Gamma((S+1)/2) / Gamma(S/2) (11.3 at S=128, 5.6 at S=32). With 20,000 directions the
    # ratio's Monte Carlo error is about 0.06% of it.
    x, y = bits(300, width, seed=11), bits(300, width, seed=12, p=0.35)
    ratio = make(20_000, directions="gaussian").distance(x, y) / make(20_000, directions="unit").distance(x, y)
    mean_norm = math.sqrt(2) * math.exp(math.lgamma((width + 1) / 2) - math.lgamma(width / 2))
    assert mean_norm == pytest.approx(chi(df=width).mean(), rel=1e-12)  # the norm of u is chi-distributed
    assert ratio == pytest.approx(mean_norm, rel=3e-3)


def test_unit_directions_in_one_dimension_give_w1_itself() -> None:
    gen = torch.Generator().manual_seed(13)
    a, b = torch.randn(400, 1, generator=gen), torch.randn(400, 1, generator=gen) * 3 - 1
    expected = wasserstein_distance(a[:, 0].double().numpy(), b[:, 0].double().numpy())
    assert make(50, directions="unit").distance(a, b) == pytest.approx(expected, rel=1e-12)
