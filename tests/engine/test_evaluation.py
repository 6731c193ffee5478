"""Evaluation repeats: scores and the data floor as means over independent draws, with their spread, in tables and
plots."""

from __future__ import annotations

import csv
import dataclasses
import statistics

import pytest
import torch
from support import TINY

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.evaluation import _REPEAT_SEED_STRIDE, evaluate
from registry.engine.sampling import sample
from registry.paper.report import format_table, write_report
from registry.storage.results import EvalResult, mean_and_spread


@pytest.fixture(scope="module")
def mdlm():
    reg = registry.load()
    settings = compose(["experiment=binsaw/mdlm_cpu", *TINY, "eval.budgets=[2]"], reg)
    torch.manual_seed(0)
    return build_experiment(settings, reg), settings.eval


def test_mean_and_spread_are_the_sample_mean_and_standard_deviation():
    draws = [{"a": 1.0, "b": 4.0}, {"a": 2.0, "b": 4.0}, {"a": 4.5, "b": 4.0}]
    mean, spread = mean_and_spread(draws)
    assert mean["a"] == pytest.approx(statistics.mean([1.0, 2.0, 4.5])) and mean["b"] == 4.0
    assert spread["a"] == pytest.approx(statistics.stdev([1.0, 2.0, 4.5])) and spread["b"] == 0.0
    assert mean_and_spread([{"a": 3.0}]) == ({"a": 3.0}, {})


def test_repeats_and_floor_draws_against_independent_draws(mdlm):
    experiment, eval_cfg = mdlm
    n, seed, metric = eval_cfg.num_samples, eval_cfg.seed, experiment.metric
    result = evaluate(experiment, "mdlm", dataclasses.replace(eval_cfg, repeats=2, floor_draws=3), progress=False)
    seeds = [seed + r * _REPEAT_SEED_STRIDE for r in range(3)]
    references = [next(experiment.dataset.batches(n, s, "test")) for s in seeds]
    floors = [
        metric(next(experiment.dataset.batches(n, s, "floor")), ref)["swd"]
        for s, ref in zip(seeds, references, strict=True)
    ]
    assert result.data_floor["swd"] == pytest.approx(statistics.mean(floors))
    assert result.data_floor_spread["swd"] == pytest.approx(statistics.stdev(floors))
    scores = [
        metric(sample(experiment, n, 2, eval_cfg.batch_size, s + 2)[0], ref)["swd"]
        for s, ref in zip(seeds[:2], references, strict=False)
    ]
    (budget,) = result.scores
    assert budget.scores["swd"] == pytest.approx(statistics.mean(scores))
    assert budget.spread["swd"] == pytest.approx(statistics.stdev(scores)) and budget.spread["swd"] > 0

    single = evaluate(experiment, "mdlm", dataclasses.replace(eval_cfg, repeats=1, floor_draws=1), progress=False)
    assert single.scores[0].scores["swd"] == pytest.approx(scores[0]) and single.scores[0].spread == {}
    assert single.data_floor["swd"] == pytest.approx(floors[0]) and single.data_floor_spread == {}


def test_reports_show_the_spread_and_the_floor_band(mdlm, tmp_path):
    experiment, eval_cfg = mdlm
    result = evaluate(experiment, "mdlm", dataclasses.replace(eval_cfg, repeats=2, floor_draws=3), progress=False)
    path = result.save(tmp_path / "eval_mdlm.json")
    loaded = EvalResult.load(path)
    assert loaded.scores[0].spread == result.scores[0].spread and loaded.floor_draws == 3

    table = format_table([loaded])
    assert "mean±std over 2 evaluation seeds" in table and "(3 draws)" in table
    assert f"{result.scores[0].scores['swd']:.4f}±{result.scores[0].spread['swd']:.4f}" in table
    write_report([loaded], tmp_path / "report")
    with (tmp_path / "report" / "swd.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [row["method"] for row in rows] == ["mdlm", "data"]
    assert float(rows[1]["swd"]) == pytest.approx(result.data_floor["swd"], abs=1e-5)
    assert float(rows[1]["swd_std"]) == pytest.approx(result.data_floor_spread["swd"], abs=1e-5)
    assert float(rows[0]["swd_std"]) == pytest.approx(result.scores[0].spread["swd"], abs=1e-5)
    assert (tmp_path / "report" / "swd.png").stat().st_size > 1000
