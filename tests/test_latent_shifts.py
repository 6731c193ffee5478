"""On the binary sawtooth, whose data model is known, samples drawn like a reference keep the reference's shift.

The estimator (``bench/latent_shifts.py``) is checked against closed forms first; the trained models are the CPU
presets at reduced training length (``results/latents/`` holds the same measurement at the presets' length).
"""
from __future__ import annotations

import argparse
import runpy
from pathlib import Path

import pytest
import torch

import registry
from registry.config.composition import compose
from registry.training.loop import train

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "latent_shifts.py"
shifts = runpy.run_path(str(SCRIPT))
#: training steps per stage of the reduced presets (the presets train 500 + 500)
REDUCED = ["train.stages.stage1.steps=250", "train.stages.stage2.steps=250", "train.progress=false"]


def _sawtooth(seq_len: int, periods: int = 2):
    return registry.build("dataset", "binsaw", {"seq_len": seq_len, "periods": periods})


def test_circular_error_is_the_distance_on_the_circle_of_one_period():
    error = shifts["circular_error"](torch.tensor([0.49, 0.01, 0.30]), torch.tensor([0.01, 0.49, 1.05]), 0.5)
    assert torch.allclose(error, torch.tensor([0.02, 0.02, 0.25], dtype=error.dtype))
    uniform = torch.rand(200_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mean = float(shifts["circular_error"](uniform, torch.zeros_like(uniform), 0.5).mean())
    assert abs(mean - 0.125) < 1e-3, "an estimate unrelated to the shift errs by 1/(4P) on average"


def test_the_maximum_likelihood_shift_recovers_the_shift_of_long_sequences():
    dataset = _sawtooth(seq_len=4096, periods=2)
    tokens, truth = dataset.sample(20, torch.Generator().manual_seed(0))
    error = shifts["circular_error"](shifts["ml_shifts"](dataset, tokens), truth, 0.5)
    assert float(error.mean()) < 2e-3 and float(error.max()) < 6e-3


def test_exact_draws_follow_the_conditional_of_their_shift():
    dataset = _sawtooth(seq_len=32)
    given = torch.tensor([0.1, 0.37])
    draws = shifts["exact_draws"](dataset, given, 20_000, torch.Generator().manual_seed(0))
    positions = torch.arange(1, 33, dtype=torch.float64)
    for row, shift in enumerate(given):
        frequency = draws[row * 20_000 : (row + 1) * 20_000].double().mean(0)
        assert torch.allclose(frequency, dataset.omega(positions, shift.double()), atol=0.015)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root, reg = tmp_path_factory.mktemp("shift_runs"), registry.load()
    for name in ("coladd_seq_cpu", "diladd_seq_cpu"):
        train(compose([f"experiment=binsaw/{name}", *REDUCED], reg), root / name, reg)
    return {name: root / name for name in ("coladd_seq_cpu", "diladd_seq_cpu")}


def _errors(run: Path, tmp_path: Path) -> dict[str, float]:
    dataset = shifts["sawtooth"](run)
    generator = torch.Generator().manual_seed(0)
    tokens, truth = dataset.sample(200, generator)
    references = tmp_path / "references.txt"
    shifts["write_ids"](references, tokens)
    settings = argparse.Namespace(num=5, steps=32, seed=0)
    rows = shifts["measure"](shifts["Run"]("run", run), references, truth, settings, tmp_path)
    exact = shifts["ml_shifts"](dataset, shifts["exact_draws"](dataset, truth, 5, generator))
    rows.append(shifts["row"]("data", "exact", exact, truth.repeat_interleave(5), 0.5, None))
    return {r["samples"]: r["mean_error"] for r in rows}


@pytest.mark.slow
def test_coladd_samples_like_a_reference_keep_its_shift(runs, tmp_path):
    errors = _errors(runs["coladd_seq_cpu"], tmp_path)
    assert errors["like"] <= 2 * errors["exact"], errors
    assert errors["like"] <= 0.5 * errors["unconditioned"], errors


@pytest.mark.slow
def test_diladd_samples_like_a_reference_are_nearer_its_shift_than_unconditioned_ones(runs, tmp_path):
    errors = _errors(runs["diladd_seq_cpu"], tmp_path)
    assert errors["like"] < errors["unconditioned"], errors
