"""``ladd report SWEEP_DIR``: one table keyed by the swept values with the seeds pooled (mean and sample standard
deviation, computed here independently), the step budgets as columns, the best mean of each column marked, cells
from fewer seeds than their row has marked, rows with no finished job kept with their cells missing; one plot per
metric against step budgets and against GFLOPs."""
from __future__ import annotations

import csv
import statistics

import pytest
from support import ladd_in_process

from registry.storage.results import BudgetScore, EvalResult
from registry.sweeps.folder import FINISHED, RUNNING, JobRecord, Manifest, PlannedJob, SweepFolder

#: (schedule, seed) -> (L^x, swd at 1 step, swd at 4 steps); cosine seed 1 has not finished
SCORES = {
    ("linear", 0): (0.70, 0.40, 0.30),
    ("linear", 1): (0.72, 0.44, 0.26),
    ("cosine", 0): (0.60, 0.50, 0.20),
    ("geometric", 0): None,
    ("geometric", 1): None,
}
ENTROPY = {("linear", 0): 3.0, ("linear", 1): 3.5, ("cosine", 0): 4.0}


def _result(method: str, metric: str, lx: float, curve: dict[int, float], lower: bool = True) -> EvalResult:
    scores = [BudgetScore(steps, steps, {metric: value}, {}, 1e6 * steps) for steps, value in curve.items()]
    return EvalResult(method, metric, lx, scores, lower_is_better=lower)


def _sweep(root) -> SweepFolder:
    folder = SweepFolder(root / "sweep")
    folder.path.mkdir()
    jobs = []
    for index, ((schedule, seed), scores) in enumerate(SCORES.items()):
        swept = [f"schedule={schedule}", f"seed={seed}"]
        jobs.append(PlannedJob(index, swept, swept))
        if scores is None:
            folder.write_record(JobRecord(index, RUNNING, 1))
            continue
        (folder.path / str(index)).mkdir()
        lx, one, four = scores
        _result("mdlm", "swd", lx, {1: one, 4: four}).save(folder.path / str(index) / "eval_mdlm.json")
        entropy = _result("mdlm", "entropy", lx, {4: ENTROPY[schedule, seed]}, lower=False)
        entropy.save(folder.path / str(index) / "eval_mdlm_entropy.json")
        folder.write_record(JobRecord(index, FINISHED, 1, results=["eval_mdlm.json", "eval_mdlm_entropy.json"]))
    folder.write(Manifest(jobs, ["entropy"]))
    return folder


def _cell(values: list[float]) -> str:
    mean = statistics.mean(values)
    return f"{mean:.4f}" + (f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else "")


def test_the_sweep_table_pools_seeds_marks_the_best_and_keeps_missing_cells(capsys, tmp_path):
    folder = _sweep(tmp_path)
    status, out, err = ladd_in_process(capsys, "report", folder.path, "--out", tmp_path / "report")
    assert status == 0, err
    table = (tmp_path / "report" / "sweep.md").read_text().split("\n\n")[0].splitlines()
    linear_lx, linear_one, linear_four = ([s[i] for s in (SCORES["linear", 0], SCORES["linear", 1])] for i in range(3))
    linear = (
        f"| linear | 2 | {_cell(linear_lx)} | **{_cell(linear_one)}** | {_cell(linear_four)} | {_cell([3.0, 3.5])} |"
    )
    assert table == [
        "| schedule | seeds | L^x | swd @1 | swd @4 | entropy @4 |",
        "| --- | --- | --- | --- | --- | --- |",
        # best: lowest L^x and swd, highest entropy (higher is better for it)
        linear,
        "| cosine | 1 | **0.6000** | 0.5000 | **0.2000** | **4.0000** |",
        "| geometric | 0 of 2 | — | — | — | — |",
    ]
    assert table[2] == "| linear | 2 | 0.7100 ± 0.0141 | **0.4200 ± 0.0283** | 0.2800 ± 0.0283 | 3.2500 ± 0.3536 |"
    assert out.startswith("| schedule | seeds |")
    with (tmp_path / "report" / "sweep.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["schedule"], r["seeds"], r["swd@4_seeds"], r["best"]) for r in rows] == [
        ("linear", "2", "2", "swd@1"), ("cosine", "1", "1", "lx;swd@4;entropy@4"), ("geometric", "2", "0", "")
    ]
    assert float(rows[0]["swd@1_std"]) == pytest.approx(statistics.stdev([0.40, 0.44]), rel=1e-5)
    assert rows[2]["lx"] == "" and rows[2]["lx_std"] == ""
    for plot in ("swd.png", "swd_flops.png", "entropy.png", "entropy_flops.png"):
        assert (tmp_path / "report" / plot).stat().st_size > 1000, plot


def test_a_cell_from_fewer_seeds_than_its_row_has_is_marked(capsys, tmp_path):
    folder = _sweep(tmp_path)
    manifest = folder.require()
    manifest.jobs.append(PlannedJob(5, ["schedule=cosine", "seed=1"], ["schedule=cosine", "seed=1"]))
    folder.write(manifest)
    status, _, err = ladd_in_process(capsys, "report", folder.path, "--out", tmp_path / "report")
    assert status == 0, err
    row = (tmp_path / "report" / "sweep.md").read_text().splitlines()[3]
    assert row == "| cosine | 1 of 2 | **0.6000**† | 0.5000† | **0.2000**† | **4.0000**† |"


def test_the_report_is_never_written_into_the_sweep(capsys, tmp_path):
    folder = _sweep(tmp_path)
    status, _, err = ladd_in_process(capsys, "report", folder.path, "--out", folder.path / "report")
    assert status == 2 and "--out" in err and len(err.strip().splitlines()) == 1, err
    assert not (folder.path / "report").exists()
