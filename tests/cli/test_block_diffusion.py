"""Block diffusion from the command line: a block-causal run sampled at 4x its length with and without the cache
(the same samples), evaluated, counted by ``ladd flops``, and bad lengths refused in one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import TINY
from support import ladd_in_process as ladd

import registry
from registry.config.composition import compose
from registry.training.loop import train

pytestmark = pytest.mark.slow  # a tiny training run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    folder, reg = tmp_path_factory.mktemp("bd3lm") / "run", registry.load()
    train(compose(["experiment=binsaw/bd3lm_cpu", *TINY, "train.stages=[{steps:2}]"], reg), folder, reg)
    return folder


def test_samples_at_four_times_the_length_are_the_same_with_and_without_the_cache(run, tmp_path, capsys):
    cached, plain = tmp_path / "cached.txt", tmp_path / "plain.txt"
    status, printed, err = ladd(capsys, "sample", run, "--length", 64, "--num", 3, "--steps", 2, "--out", cached)
    assert status == 0 and "3 samples of 64 tokens, 2 token steps" in printed, err
    no_cache = ["--sampler", "blockwise", "--sampler-option", "cache=false", "--out", plain]
    status, printed, err = ladd(capsys, "sample", run, "--length", 64, "--num", 3, "--steps", 2, *no_cache)
    assert status == 0, err
    rows = cached.read_text().splitlines()
    assert len(rows) == 3 and all(len(row.split()) == 64 for row in rows)
    assert cached.read_text() == plain.read_text()


def test_eval_and_flops_of_a_block_causal_model(run, tmp_path, capsys):
    result = tmp_path / "eval.json"
    status, printed, err = ladd(
        capsys, "eval", run, "--budgets", "1,2", "--num-samples", 8, "--repeats", 1, "--floor-draws", 1,
        "--loss-batches", 1, "--out", result,
    )
    assert status == 0 and result.is_file(), err
    assert "note: no bound on -log p: the token backbone attends in blocks of 4" in printed  # its NELBO is L^x
    assert json.loads(result.read_text())["bound"] is None
    status, printed, _ = ladd(capsys, "flops", "experiment=binsaw/bd3lm_cpu")
    assert status == 0 and "block step with cache, mean (1 op per MAC)" in printed


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--length", "0"], "'0' is not a whole number >= 1"),
        (["--length", "40", "--sampler", "ancestral"], "needs a token backbone that attends without blocks"),
        (["--length", "40", "--sampler", "blockwise", "--sampler-option", "token_decoder=confidence",
          "--sampler-option", "token_decoder_options={cache: dual}"], "keeps a key-value cache of its own"),
    ],
)
def test_bad_requests_are_refused_in_one_line(run, tmp_path, capsys, args, line):
    status, printed, err = ladd(capsys, "sample", run, *args, "--out", tmp_path / "never.txt")
    assert status != 0 and line in err and err.count("\n") == 1, err
    assert not (tmp_path / "never.txt").exists()
