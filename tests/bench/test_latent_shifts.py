"""On the binary sawtooth, whose data model is known, samples drawn like a reference keep the reference's shift.

The estimator (``bench/latent_shifts.py``) is checked against closed forms first. The models are the CPU presets
trained as they say (shorter training does not learn the conditional: at 250 + 250 steps Co-LADD's samples err 3.7
times as much as exact draws, and at S = 16 with 500 + 500 steps 2.5 times), measured on 100 references with 4
samples each, where ``results/latents/`` measures 200 with 5.
"""
from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

import pytest
import torch
from support import ROOT

import registry
from registry.config.composition import compose
from registry.training.loop import train

BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))  # the script imports its neighbour, as it does when run from the command line
shifts = runpy.run_path(str(BENCH / "latent_shifts.py"))
REFERENCES, SAMPLES = 100, 4


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
        train(compose([f"experiment=binsaw/{name}", "train.progress=false"], reg), root / name, reg)
    return {name: root / name for name in ("coladd_seq_cpu", "diladd_seq_cpu")}


def _errors(run: Path, tmp_path: Path) -> dict[str, float]:
    dataset = shifts["sawtooth"](run)
    generator = torch.Generator().manual_seed(0)
    tokens, truth = dataset.sample(REFERENCES, generator)
    references = tmp_path / "references.txt"
    shifts["write_ids"](references, tokens)
    settings = argparse.Namespace(num=SAMPLES, steps=32, seed=0)
    rows = shifts["measure"](shifts["Run"]("run", run), references, truth, settings, tmp_path)
    exact = shifts["ml_shifts"](dataset, shifts["exact_draws"](dataset, truth, SAMPLES, generator))
    rows.append(shifts["row"]("data", "exact", exact, truth.repeat_interleave(SAMPLES), 0.5, None))
    return {r["samples"]: r["mean_error"] for r in rows}


@pytest.mark.slow
@pytest.mark.bench
def test_coladd_samples_like_a_reference_keep_its_shift(runs, tmp_path):
    errors = _errors(runs["coladd_seq_cpu"], tmp_path)
    assert errors["like"] <= 2 * errors["exact"], errors
    assert errors["like"] <= 0.5 * errors["unconditioned"], errors


@pytest.mark.slow
@pytest.mark.bench
def test_diladd_samples_like_a_reference_are_nearer_its_shift_than_unconditioned_ones(runs, tmp_path):
    errors = _errors(runs["diladd_seq_cpu"], tmp_path)
    assert errors["like"] < errors["unconditioned"], errors


def test_latent_agreement_is_the_cosine_of_vectors_and_the_share_of_equal_codes():
    agreement = runpy.run_path(str(BENCH / "latent_agreement.py"))["own_and_others"]
    references = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
    samples = torch.tensor([[[2.0, 0.0]], [[1.0, 1.0]], [[0.0, 3.0]], [[0.0, -1.0]]])
    own, others = agreement(references, samples, 2)
    assert abs(own - (1 + 0.5**0.5 + 1 - 1) / 4) < 1e-9 and abs(others - (0 + 0.5**0.5 + 0 + 0) / 4) < 1e-9
    assert agreement(torch.tensor([[3], [5]]), torch.tensor([[3], [4], [3], [5]]), 2) == (0.5, 0.25)
