"""The sliced Wasserstein metric: exactness against scipy, invariances, and refusal of unequal sets."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import wasserstein_distance

import ladd_plugins.binsaw.swd as swd_module
from ladd_plugins.binsaw.swd import SlicedWasserstein, SlicedWassersteinConfig


def make(directions: int = 1000, seed: int = 0) -> SlicedWasserstein:
    return SlicedWasserstein(SlicedWassersteinConfig(directions=directions, seed=seed))


def bits(n: int, width: int, seed: int, p: float = 0.5) -> torch.Tensor:
    return (torch.rand(n, width, generator=torch.Generator().manual_seed(seed)) < p).long()


def test_identical_sets_have_zero_distance() -> None:
    x = bits(300, 16, seed=0)
    assert make()(x, x.clone()) == {"swd": 0.0}


def test_matches_scipy_per_direction() -> None:
    metric = make(directions=40, seed=5)
    x, y = bits(200, 6, seed=1), bits(200, 6, seed=2, p=0.3)
    u = metric.directions(6).numpy()
    expected = np.mean([wasserstein_distance(x.double().numpy() @ u[:, k], y.double().numpy() @ u[:, k]) for k in range(u.shape[1])])
    assert metric.distance(x, y) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_one_dimension_is_mean_abs_direction_times_w1() -> None:
    metric = make(directions=20_000)
    gen = torch.Generator().manual_seed(3)
    pairs = [(torch.randn(500, 1, generator=gen), torch.randn(500, 1, generator=gen) * 2 + 1) for _ in range(2)]
    ratios = [metric.distance(a, b) / wasserstein_distance(a[:, 0].double().numpy(), b[:, 0].double().numpy()) for a, b in pairs]
    # With S = 1 each direction scales W_1 by |u|, so the ratio is the same E|u| for every pair.
    assert ratios[0] == pytest.approx(ratios[1], rel=1e-10)
    assert ratios[0] == pytest.approx(math.sqrt(2 / math.pi), rel=0.03)


def test_scales_linearly_with_a_shift() -> None:
    metric = make(directions=200)
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
    whole = make(directions=50).distance(x, y)
    monkeypatch.setattr(swd_module, "_CHUNK_ELEMENTS", 64 * 7)
    assert make(directions=50).distance(x, y) == pytest.approx(whole, rel=1e-12)


def test_unequal_sizes_are_refused_with_both_sizes() -> None:
    with pytest.raises(ValueError, match=r"1000 and 999 samples"):
        make()(bits(1000, 4, seed=0), bits(999, 4, seed=1))


def test_mismatched_lengths_and_ranks_are_refused() -> None:
    with pytest.raises(ValueError, match=r"8 and 9 positions"):
        make()(bits(10, 8, seed=0), bits(10, 9, seed=1))
    with pytest.raises(ValueError, match=r"\[N, S\]"):
        make()(torch.zeros(10), torch.zeros(10))


def test_config_rejects_no_directions() -> None:
    with pytest.raises(ValueError, match="directions.*0"):
        SlicedWassersteinConfig(directions=0)
