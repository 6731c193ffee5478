"""The binary sawtooth dataset: omega, sampling, seeded streams and the exact oracle loss."""
from __future__ import annotations

import hashlib
import math
from itertools import pairwise

import numpy as np
import pytest
import torch
from scipy.integrate import quad

from ladd_plugins.datasets.binsaw.dataset import BinarySawtooth, BinarySawtoothConfig


def make(**options) -> BinarySawtooth:
    return BinarySawtooth(BinarySawtoothConfig(**options))


def test_omega_at_hand_computed_points() -> None:
    data = make(seq_len=4, periods=1, floor=0.0)
    positions = torch.arange(1, 5, dtype=torch.float64)
    assert data.omega(positions, torch.tensor(0.0, dtype=torch.float64)).tolist() == [0.0, 0.5, 1.0, 0.5]
    # y = 1/8 moves every phase by 1/8: phases 1/8, 3/8, 5/8, 7/8.
    assert data.omega(positions, torch.tensor(0.125, dtype=torch.float64)).tolist() == pytest.approx(
        [0.25, 0.75, 0.75, 0.25]
    )
    floored = make(seq_len=4, periods=2, floor=0.1)
    # phases 0, 1/2, 0, 1/2 under two periods; omega = 0.1 + 0.8 * triangle.
    assert floored.omega(positions, torch.tensor(0.0, dtype=torch.float64)).tolist() == pytest.approx(
        [0.1, 0.9, 0.1, 0.9]
    )


def test_omega_stays_within_floor_and_ceiling() -> None:
    data = make(floor=0.2)
    positions = torch.arange(1, data.seq_len + 1, dtype=torch.float64)
    values = data.omega(positions, torch.rand(500, 1, dtype=torch.float64))
    assert values.min() >= 0.2 - 1e-12 and values.max() <= 0.8 + 1e-12


def test_sample_shapes_and_token_values() -> None:
    data = make(seq_len=16)
    x, y = data.sample(64, torch.Generator().manual_seed(0))
    assert x.shape == (64, 16) and x.dtype == torch.long and y.shape == (64,)
    assert set(x.unique().tolist()) <= {0, 1}
    assert ((y >= 0) & (y <= 1)).all()


def test_each_position_is_marginally_a_fair_coin() -> None:
    n = 20_000
    x, _ = make().sample(n, torch.Generator().manual_seed(1))
    tolerance = 5 * 0.5 / math.sqrt(n)  # five binomial standard deviations
    assert (x.double().mean(dim=0) - 0.5).abs().max() < tolerance


def test_device_stream_starts_anywhere_and_draws_the_same_model() -> None:
    data = make(seq_len=32, draw_on_device=True)
    assert make().device_batches(0, 4, 3, torch.device("cpu")) is None  # the CPU stream unless asked
    stream = data.device_batches(0, 2048, 3, torch.device("cpu"))
    batches = [next(stream) for _ in range(4)]
    resumed = data.device_batches(2, 2048, 3, torch.device("cpu"))
    assert torch.equal(next(resumed), batches[2]) and torch.equal(next(resumed), batches[3])
    assert not torch.equal(batches[0], batches[1]) and batches[0].dtype == torch.long
    assert not torch.equal(next(data.device_batches(0, 2048, 4, torch.device("cpu"))), batches[0])  # another seed
    # the same data model as the CPU stream: a fair coin at every position (five binomial deviations)
    x = torch.cat(batches).double()
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert (x.mean(dim=0) - 0.5).abs().max() < 5 * 0.5 / math.sqrt(len(x))


def test_same_seed_and_split_reproduce_the_stream() -> None:
    data = make(seq_len=8)
    first, second = data.batches(4, seed=3), data.batches(4, seed=3)
    for _ in range(3):
        assert torch.equal(next(first), next(second))


def test_the_stream_is_the_one_published_results_were_trained_on() -> None:
    """A digest of the first batches, recorded before resuming learned to start mid-stream."""
    stream = make(seq_len=16).batches(4, seed=5)
    digest = hashlib.sha256(torch.cat([next(stream) for _ in range(6)]).numpy().tobytes()).hexdigest()
    assert digest == "46bdb30fac501d1ae80e05ff3ec0ca00528c37551e7fc2ffe60f328d0d61098e"


@pytest.mark.parametrize("start", [0, 1, 7, 40])
def test_a_stream_started_at_batch_k_is_the_rest_of_the_stream(start: int) -> None:
    data = make(seq_len=12)
    stream = data.batches(5, seed=2, split="validation")
    expected = [next(stream) for _ in range(start + 3)][start:]
    resumed = data.batches_from(start, 5, seed=2, split="validation")
    for batch in expected:
        assert torch.equal(next(resumed), batch)


def test_splits_and_seeds_give_different_streams() -> None:
    data = make(seq_len=64)
    train = next(data.batches(32, seed=3, split="train"))
    assert not torch.equal(train, next(data.batches(32, seed=3, split="validation")))
    assert not torch.equal(train, next(data.batches(32, seed=3, split="test")))
    assert not torch.equal(train, next(data.batches(32, seed=4, split="train")))


def test_stream_batches_have_the_dataset_shape() -> None:
    batch = next(make(seq_len=10).batches(5, seed=0))
    assert batch.shape == (5, 10) and batch.dtype == torch.long


def _oracle_by_quadrature(data: BinarySawtooth) -> float:
    """E_y of the mean binary entropy of omega(i, y), integrated piecewise between the triangle kinks."""
    c = data.config
    positions = torch.arange(1, c.seq_len + 1, dtype=torch.float64)

    def mean_entropy(y: float) -> float:
        p = data.omega(positions, torch.tensor(y, dtype=torch.float64)).numpy()
        return float(np.mean(-_xlogx(p) - _xlogx(1 - p)))

    offsets = (np.arange(c.seq_len) / c.seq_len)[:, None]
    kinks = (np.arange(2 * c.periods + 1) / (2 * c.periods))[None, :]
    breaks = np.unique(np.concatenate([[0.0, 1.0], ((kinks - offsets) % 1.0).ravel()]))
    return sum(quad(mean_entropy, a, b, epsabs=1e-13, epsrel=1e-12)[0] for a, b in pairwise(breaks))


def _xlogx(p: np.ndarray) -> np.ndarray:
    return np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"seq_len": 5, "periods": 3, "floor": 0.0},
        {"seq_len": 7, "periods": 1, "floor": 0.3},
        {"seq_len": 3, "floor": 0.49},
    ],
)
def test_oracle_closed_form_matches_quadrature(options: dict) -> None:
    data = make(**options)
    assert data.oracle_token_loss() == pytest.approx(_oracle_by_quadrature(data), abs=1e-8)


def test_oracle_default_value_is_below_log_two() -> None:
    oracle = make().oracle_token_loss()
    assert oracle == pytest.approx(0.5095814460728755, abs=1e-12)
    assert oracle < math.log(2)


def test_oracle_edge_floors() -> None:
    assert make(floor=0.0).oracle_token_loss() == pytest.approx(0.5, abs=1e-15)
    assert make(floor=0.5).oracle_token_loss() == pytest.approx(math.log(2), abs=1e-15)


@pytest.mark.parametrize(
    ("options", "bad"),
    [({"seq_len": 0}, "0"), ({"periods": 0}, "0"), ({"floor": -0.1}, "-0.1"), ({"floor": 0.6}, "0.6")],
)
def test_config_rejects_bad_values(options: dict, bad: str) -> None:
    name = next(iter(options))
    with pytest.raises(ValueError, match=f"{name}.*{bad}"):
        BinarySawtoothConfig(**options)


def _exercised(factory) -> None:
    from registry import Component, ComponentSpec, Origin, Registry
    from registry.conformance.exercises import exercise_dataset

    exercise_dataset(Component(ComponentSpec("dataset", "probe", factory), Origin("test")), Registry([]))


def test_plugin_check_exercises_the_device_stream_and_names_a_wrong_start() -> None:
    from registry.conformance.exercises import ExerciseFailure

    _exercised(lambda: make(seq_len=4, draw_on_device=True))

    class Unresumable(BinarySawtooth):
        def device_batches(self, start, batch_size, seed, device):
            return super().device_batches(0, batch_size, seed, device)  # ignores start: resuming replays batch 0

    with pytest.raises(ExerciseFailure, match=r"^device_batches\(2, \.\.\.\) is not the stream's third batch"):
        _exercised(lambda: Unresumable(BinarySawtoothConfig(seq_len=4, draw_on_device=True)))
