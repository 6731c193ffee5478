"""Sweeps and training on a real Slurm: the single-node cluster of ``tests/slurm/cluster.sh start`` on this machine.

A 2 x 2 sweep over 2 seeds as one job array, at most 2 jobs running at once, tabled by ``ladd report``; a job requeued
mid-run with ``scontrol requeue`` and one sent the warning signal both end bitwise equal to uninterrupted runs; an
invalid combination fails alone; Slurm refusing the jobs says so in its own words; two tasks of ``srun`` train as one
process does, Lightning reading Slurm's variables.
"""
from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from run_state import assert_same_run
from support import TINY, run_ladd
from training.test_distributed import COMMON, MDLM, assert_trained_alike

from registry.storage.results import EvalResult
from registry.sweeps.folder import SweepFolder

pytestmark = pytest.mark.slurm

CLUSTER = Path(os.environ.get("LADD_SLURM_DIR", "/tmp/ladd-slurm"))
SMALL_EVAL = ["eval.repeats=1", "eval.floor_draws=1"]
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
#: long enough (about 8 s of training on one idle core) to be frozen mid-run; the stop writes the only checkpoint
#: there is
LONG = [*TINY, *SMALL_EVAL, "train.checkpoint_every=1000", "train.stages=[{steps:600}]", "seed=5,6"]
WAIT_SECONDS = 900


@pytest.fixture(scope="module", autouse=True)
def cluster():
    """Slurm's commands pointed at the test cluster, which must be running."""
    conf = CLUSTER / "slurm.conf"
    os.environ["SLURM_CONF"] = str(conf)
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60)
    if ping.returncode:
        pytest.fail(f"no Slurm cluster answers at {conf}: start one with tests/slurm/cluster.sh start ({ping.stderr})")
    yield
    del os.environ["SLURM_CONF"]


def _slurm(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _queued() -> set[str]:
    return set(_slurm("squeue", "--me", "--noheader", "--array", "--format=%i").split())


def _wait(condition: Callable[[], bool], what: str, seconds: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            queue = _slurm("squeue", "--me", "--array", "--format=%i %T %r")
            pytest.fail(f"waited {seconds:.0f} s for {what}; the queue:\n{queue}")
        time.sleep(0.5)


def _manifest(sweep: Path) -> dict:
    return json.loads((sweep / "sweep.json").read_text())


def _wait_for_the_sweep(sweep: Path) -> None:
    """Until no job of the sweep is queued or running any more."""
    ids = {job["job_id"] for job in _manifest(sweep)["jobs"]}
    _wait(lambda: not ids & _queued(), f"the jobs of {sweep} to end")


def _launch(*args: str) -> subprocess.CompletedProcess:
    done = run_ladd("train", "-m", *args, "launcher=slurm", env=ONE_THREAD)
    assert done.returncode == 0, done.stderr
    return done


def test_a_two_by_two_sweep_over_two_seeds_runs_as_one_job_array_and_reports_one_table(tmp_path):
    sweep = tmp_path / "sweep"
    args = [
        "schedule=linear,cosine", "backbone.dropout=0.0,0.1", "seed=0,1", *TINY, *SMALL_EVAL,
        "train.stages=[{steps:2}]", "launcher.array_parallelism=2", f"hydra.sweep.dir={sweep}",
    ]
    done = _launch(*args)
    assert "queued 8 jobs with launcher 'slurm'" in done.stdout
    ids = [job["job_id"] for job in _manifest(sweep)["jobs"]]
    (array,) = {job_id.split("_")[0] for job_id in ids}
    assert ids == [f"{array}_{task}" for task in range(8)], "one job array, a task per job"
    assert "ArrayTaskThrottle=2" in _slurm("scontrol", "show", "job", ids[0])
    queued = _queued()
    twice = run_ladd("train", "-m", *args, "launcher=slurm")  # while they run: nothing is submitted again
    assert twice.returncode == 0, twice.stderr
    assert "still queued or running from an earlier launch: left to it" in twice.stdout
    assert "queued 8" not in twice.stdout and _queued() <= queued
    _wait_for_the_sweep(sweep)

    status = run_ladd("sweep", "status", str(sweep))
    assert status.stdout.splitlines()[0] == f"sweep {sweep}: 8 jobs: 8 finished", status.stdout
    again = run_ladd("train", "-m", *args, "launcher=slurm")
    assert again.returncode == 0 and "queued" not in again.stdout and again.stdout.startswith(f"sweep {sweep}: 8 jobs")

    report = run_ladd("report", str(sweep), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    with (tmp_path / "report" / "sweep.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["schedule"], r["backbone.dropout"], r["seeds"]) for r in rows] == [
        ("linear", "0.0", "2"), ("linear", "0.1", "2"), ("cosine", "0.0", "2"), ("cosine", "0.1", "2")
    ]
    for row, first in zip(rows, range(0, 8, 2), strict=True):  # jobs 2k and 2k + 1 are its two seeds
        results = [EvalResult.load(sweep / str(first + seed) / "eval_mdlm.json") for seed in (0, 1)]
        for steps in (1, 4):
            scores = [dict(r.curve())[steps] for r in results]
            assert float(row[f"swd@{steps}"]) == pytest.approx(statistics.mean(scores), rel=1e-5)
            assert float(row[f"swd@{steps}_std"]) == pytest.approx(statistics.stdev(scores), rel=1e-5, abs=1e-9)
        assert float(row["lx"]) == pytest.approx(statistics.mean(r.token_loss for r in results), rel=1e-5)
    best = min(range(4), key=lambda i: float(rows[i]["lx"]))
    assert "lx" in rows[best]["best"].split(";")
    assert (tmp_path / "report" / "swd.png").is_file() and (tmp_path / "report" / "sweep.md").is_file()


def _process_state(pid: int) -> str:
    """The state letter of process ``pid`` on this machine (``T``: stopped), as ``ps`` shows it."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _requeued(job_id: str) -> None:
    """Once the job is back in the queue (Slurm holds a requeued job about two minutes), let it start now."""
    _wait(lambda: job_id in _queued() and "JobState=PENDING" in _slurm("scontrol", "show", "job", job_id),
          f"{job_id} to be queued again", 300)
    _slurm("scontrol", "update", f"JobId={job_id}", "StartTime=now")


def test_jobs_requeued_mid_run_or_warned_end_bitwise_equal_to_uninterrupted_runs(tmp_path):
    reference = run_ladd("train", "-m", *LONG, f"hydra.sweep.dir={tmp_path / 'reference'}", env=ONE_THREAD)
    assert reference.returncode == 0, reference.stderr
    sweep = tmp_path / "sweep"
    _launch(*LONG, f"hydra.sweep.dir={sweep}")
    folder = SweepFolder(sweep)
    requeued, warned = (job["job_id"] for job in _manifest(sweep)["jobs"])
    frozen: set[int] = set()

    def freeze_the_trained() -> bool:
        """Each job frozen (SIGSTOP) once past its third step, so that neither ends before its signal comes."""
        for index, job_id in ((0, requeued), (1, warned)):
            metrics = sweep / str(index) / "metrics.csv"
            if index not in frozen and metrics.is_file() and len(metrics.read_text().splitlines()) > 4:
                _slurm("scancel", "--signal=STOP", job_id)
                frozen.add(index)
        return len(frozen) == 2

    _wait(freeze_the_trained, "both jobs to train")
    for index in (0, 1):  # Slurm delivers signals on its own time: a SIGSTOP late would freeze a job being stopped
        _wait(lambda i=index: _process_state(folder.record(i).pid) == "T", f"job {index} to be frozen", 60)
    _slurm("scontrol", "requeue", requeued)  # as an administrator or a preemption does: SIGCONT, SIGTERM, requeued
    _slurm("scancel", "--signal=USR1", warned)  # Slurm's warning before the time limit; submitit requeues the job
    _slurm("scancel", "--signal=CONT", warned)
    for index, job_id in ((0, requeued), (1, warned)):
        _wait(lambda i=index: folder.record(i).state == "stopped", f"job {index} to stop", 300)
        _requeued(job_id)
    stops = [folder.record(index) for index in (0, 1)]
    assert [(r.exit_status, r.error.rsplit(" by ", 1)[1]) for r in stops] == [
        (143, "SIGTERM; run the same command to resume"), (138, "SIGUSR1; run the same command to resume")
    ]
    _wait_for_the_sweep(sweep)
    for index in (0, 1):
        record = folder.record(index)
        assert (record.state, record.starts) == ("finished", 2)
        assert_same_run(tmp_path / "reference" / str(index), sweep / str(index))


def test_an_invalid_combination_fails_alone(tmp_path):
    sweep = tmp_path / "sweep"
    _launch(
        "experiment=binsaw/diladd_joint_cpu", "latent=discrete,continuous", *TINY, *SMALL_EVAL,
        "train.stages=[{steps:2},{steps:2,lambda_latent:1.0,freeze_encoder:true}]", f"hydra.sweep.dir={sweep}",
    )
    _wait_for_the_sweep(sweep)
    status = run_ladd("sweep", "status", str(sweep)).stdout.splitlines()
    assert status[0] == f"sweep {sweep}: 2 jobs: 1 finished, 1 failed"
    assert status[-1].startswith("job 1 failed: latent_process 'masked' diffuses ids but latent 'continuous' holds")
    assert (sweep / "0" / "eval_diladd_joint.json").is_file()
    assert SweepFolder(sweep).record(1).exit_status == 2


def test_slurm_refusing_the_jobs_is_one_line_in_its_own_words_and_nothing_is_queued(tmp_path):
    sweep = tmp_path / "sweep"
    before = _queued()
    done = run_ladd(
        "train", "-m", "seed=0,1", *TINY, "train.stages=[{steps:2}]", "launcher=slurm", "launcher.partition=nope",
        f"hydra.sweep.dir={sweep}",
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "ladd: error: Slurm refused the jobs: sbatch: error: invalid partition specified: nope; sbatch: error: Batch "
        "job submission failed: Invalid partition name specified; none was queued"
    )
    assert _queued() == before
    assert [job["job_id"] for job in _manifest(sweep)["jobs"]] == [None, None]


def test_two_srun_tasks_train_as_one_process_lightning_reading_slurms_variables(tmp_path):
    one = run_ladd("train", *COMMON, *MDLM, f"run_dir={tmp_path / 'one'}", env=ONE_THREAD)
    assert one.returncode == 0, one.stderr
    two = subprocess.run(
        [
            "srun", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1", "--job-name=ladd-ddp", sys.executable,
            "-m", "registry.cli", "train", *COMMON, *MDLM, "train.devices=2", f"run_dir={tmp_path / 'two'}",
        ],
        capture_output=True, text=True, timeout=WAIT_SECONDS, env={**os.environ, **ONE_THREAD},
    )
    assert two.returncode == 0, two.stderr[-4000:]
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in two.stderr
    assert_trained_alike(tmp_path / "two", tmp_path / "one")
