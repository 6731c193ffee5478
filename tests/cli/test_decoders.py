"""The field's decoders from the command line: ``ladd sample`` and ``ladd eval`` with a confidence decoder, sequential
LADD decoding its latent (``--like``) with one, FLOPs per sample in every result, and bad options refused in one line
before anything runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import TINY
from support import ladd_in_process as ladd

import registry
from registry.config.composition import compose
from registry.training.loop import train

pytestmark = pytest.mark.slow  # tiny training runs

CONFIDENCE = ["--sampler", "confidence", "--sampler-option", "remasking=margin", "--sampler-option", "block_length=8"]
DECODE_LATENT = [
    "--sampler", "sequential", "--sampler-option", "latent_steps=2", "--sampler-option", "token_decoder=confidence",
    "--sampler-option", "token_decoder_options={block_length: 4, cache: prefix}",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root, reg = tmp_path_factory.mktemp("runs"), registry.load()
    chosen = {
        "mdlm": ["experiment=binsaw/mdlm_cpu", *TINY, "train.stages=[{steps:1}]"],
        "coladd_seq": ["experiment=binsaw/coladd_seq_cpu", *TINY, "train.stages=[{steps:1},{steps:1,lambda_latent:1}]"],
    }
    for name, overrides in chosen.items():
        train(compose(overrides, reg), root / name, reg)
    return {name: root / name for name in chosen}


def test_sample_and_eval_with_a_confidence_decoder_report_flops_per_sample(runs, tmp_path, capsys):
    out = tmp_path / "samples.txt"
    status, printed, _ = ladd(capsys, "sample", runs["mdlm"], *CONFIDENCE, "--steps", 4, "--num", 3, "--out", out)
    assert status == 0 and "3 samples, 4 token steps, 4 network calls and " in printed and "GFLOPs each" in printed
    assert len(out.read_text().splitlines()) == 3
    result = tmp_path / "eval_confidence.json"
    status, printed, err = ladd(
        capsys, "eval", runs["mdlm"], *CONFIDENCE, "--budgets", "2,4", "--num-samples", 16, "--repeats", 1,
        "--floor-draws", 1, "--loss-batches", 1, "--method", "confidence", "--out", result,
    )
    assert status == 0 and "GFLOPs per sample spent" in printed, err
    scores = json.loads(result.read_text())["scores"]
    assert [s["steps"] for s in scores] == [2, 4] and all(s["flops_per_sample"] > 0 for s in scores)
    assert scores[1]["flops_per_sample"] == pytest.approx(2 * scores[0]["flops_per_sample"], rel=0.05)
    report = tmp_path / "report"
    assert ladd(capsys, "report", result, "--out", report)[0] == 0
    assert (report / "swd_flops.png").stat().st_size > 10_000
    assert "gflops_per_sample" in (report / "swd.csv").read_text().splitlines()[0]


def test_sequential_ladd_decodes_like_references_with_a_confidence_decoder(runs, tmp_path, capsys):
    references, out = tmp_path / "refs.txt", tmp_path / "like.txt"
    references.write_text("0 1 1 0 1 0 0 1 1 1 0 0 1 0 1 1\n1 1 1 1 0 0 0 0 1 1 1 1 0 0 0 0\n")
    status, printed, err = ladd(
        capsys, "sample", runs["coladd_seq"], "--like", references, *DECODE_LATENT, "--steps", 4, "--num", 2,
        "--out", out,
    )
    assert status == 0, err
    assert "4 samples (2 per reference, 2 references), 4 token steps, 4 network calls" in printed


@pytest.mark.parametrize(
    ("run", "options", "line"),
    [
        ("mdlm", ["--sampler-option", "remasking=best"], "remasking='best' is not valid: it must be one of "
         "low_confidence, random, margin, entropy"),
        ("mdlm", ["--sampler-option", "threshold=2"], "threshold=2.0 is out of range: it must be in (0, 1]"),
        ("mdlm", ["--sampler-option", "block_length=5"], "block_length=5 must divide the 16 free positions"),
        ("mdlm", ["--sampler-option", "block_length=2"], "steps=4 is fewer than the 8 blocks"),
        ("mdlm", ["--length", "32"], "--length 32: sampler 'confidence' of plugin 'builtin'"),
        ("coladd_seq", [], "sampler 'confidence' needs a model without a latent channel"),
    ],
)
def test_bad_decoder_options_are_refused_in_one_line(runs, tmp_path, capsys, run, options, line):
    out = tmp_path / "samples.txt"
    status, _, err = ladd(capsys, "sample", runs[run], "--sampler", "confidence", *options, "--steps", 4, "--out", out)
    assert status != 0 and line in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
