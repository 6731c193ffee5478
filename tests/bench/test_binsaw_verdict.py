"""The sawtooth verdict: per-seed results grouped by variant, spreads over training seeds, each claim judged."""
from __future__ import annotations

import csv
import runpy
import sys
from pathlib import Path

import pytest
import yaml
from support import ROOT

from registry.storage.results import BudgetScore, EvalResult

SCRIPT = ROOT / "bench" / "binsaw_verdict.py"
ORACLE = 0.5096
#: L^x per training seed, and SWD at one token step per training seed
LX = {
    "mdlm": [0.58],
    "coladd_joint": [0.55, 0.53],
    "coladd_seq": [0.30],
    "diladd_joint": [0.514, 0.512],
    "diladd_seq": [0.48, 0.50],
}
SWD1 = {
    "mdlm": [0.32],
    "coladd_joint": [0.31, 0.33],
    "coladd_seq": [0.16],
    "diladd_joint": [0.3, 0.3],
    "diladd_seq": [0.2, 0.22],
}


def write_results(folder: Path) -> list[Path]:
    paths = []
    for variant, losses in LX.items():
        for seed, loss in enumerate(losses):
            run = folder / f"{variant}_s{seed}"
            run.mkdir(parents=True)
            config = {"seed": seed, "train": {"batch_size": 64, "stages": {"stage1": {"steps": 20}}}}
            config |= {"dataset": {"seq_len": 128}, "backbone": {"hidden": 64, "layers": 4}}
            (run / "config.yaml").write_text(yaml.safe_dump(config))
            scores = [BudgetScore(1, 1, {"swd": SWD1[variant][seed]}, {"swd": 0.01}), BudgetScore(4, 4, {"swd": 0.17})]
            floor, floor_spread = {"swd": 0.158}, {"swd": 0.011}
            result = EvalResult(f"{variant}_s{seed}", "swd", loss, scores, floor, floor_spread, ORACLE, repeats=3)
            paths.append(result.save(run / f"eval_{variant}_s{seed}.json"))
    return paths


def run_script(monkeypatch, *args: str) -> None:
    """Run the script as its command line would."""
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *args])
    runpy.run_path(str(SCRIPT), run_name="__main__")


def test_claims_are_judged_against_the_spread_over_training_seeds(tmp_path, monkeypatch):
    paths = write_results(tmp_path / "runs")
    out = tmp_path / "out"
    run_script(monkeypatch, *map(str, paths), "--out", str(out), "--command", "x")
    with (out / "verdict.csv").open() as handle:
        verdicts = {row["claim"]: (row["difference"], row["spread"], row["verdict"]) for row in csv.DictReader(handle)}
    # Co-LADD joint: 0.54 ± 0.0141 over two seeds, 0.0304 above the exact oracle: more than two standard deviations
    assert verdicts["Co-LADD joint below the oracle"] == ("+0.0304", "0.0141", "does not hold")
    # one seed of Co-LADD seq: its L^x spread is the pooled one of the variants with two seeds
    pooled = ((0.02**2 / 2 + 0.002**2 / 2 + 0.02**2 / 2) / 3) ** 0.5
    difference, spread, verdict = verdicts["Co-LADD seq below Co-LADD joint"]
    assert (difference, verdict) == ("-0.2400", "holds")
    assert float(spread) == round((0.02**2 / 2 + pooled**2) ** 0.5, 4)
    assert verdicts["Di-LADD joint about the oracle"][2] == "holds"  # 0.513 is within 0.01 of 0.5096
    assert verdicts["Di-LADD seq about the oracle"] == ("-0.0196", "0.0141", "holds")  # within 0.01 + 2 x 0.0141
    assert verdicts["MDLM above the oracle"][2] == "holds"
    with (out / "verdict.csv").open() as handle:
        compared = {row["claim"]: row["compared"] for row in csv.DictReader(handle)}
    assert compared["MDLM above the oracle"] == "oracle - mdlm"  # the lower side first: negative supports the claim
    # SWD at one step: Di-LADD seq 0.21 ± 0.0141 against MDLM's 0.32 ± 0.01 (its evaluation seeds)
    assert verdicts["Di-LADD seq below MDLM at one token step (SWD)"] == ("-0.1100", "0.0173", "holds")
    assert verdicts["Co-LADD seq at the data floor at one token step (SWD)"] == ("+0.0020", "0.0149", "holds")
    readme = (out / "README.md").read_text()
    assert "| coladd_joint | 0.5500, 0.5300 | 0.5400 ± 0.0141 | 0.4109 |" in readme
    assert "| Co-LADD joint below the oracle | coladd_joint - oracle | +0.0304 | 0.0141 | does not hold |" in readme
    assert "E|u| = 11.29" in readme


def test_a_method_without_a_seed_label_is_refused(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    path = EvalResult("coladd_joint", "swd", 0.5, [BudgetScore(1, 1, {"swd": 0.3})]).save(run / "eval.json")
    refusal = "method 'coladd_joint' is not VARIANT_sSEED with a variant of " + ", ".join(LX)
    with pytest.raises(SystemExit, match=f"^{refusal}$"):
        run_script(monkeypatch, str(path), "--out", str(tmp_path / "out"))
