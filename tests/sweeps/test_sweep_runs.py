"""Sweeps that train: each job trains then evaluates (the experiment's metric and every --metric), an invalid
combination fails alone, a sweep run again continues; the local launcher runs its workers' jobs at once, each with its
share of the cores, and a signal to ladd stops every job at a checkpoint, from which the sweep resumes bitwise; a
second ladd on a sweep being launched is refused and starts nothing."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_state import assert_same_run
from support import TINY, run_ladd
from timed_job import TimedJob

import registry
from registry.sweeps.folder import SweepFolder

pytestmark = pytest.mark.slow  # trains, in subprocesses

SMALL_EVAL = ["eval.repeats=1", "eval.floor_draws=1"]
TWO_STAGES = "train.stages=[{steps:2},{steps:2,lambda_latent:1.0,freeze_encoder:true}]"
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_each_job_trains_and_evaluates_an_invalid_one_fails_alone_and_the_same_command_continues(tmp_path):
    sweep = tmp_path / "sweep"
    args = [
        "train", "-m", "experiment=binsaw/diladd_joint_cpu", "latent=discrete,continuous", *TINY, *SMALL_EVAL,
        TWO_STAGES, "--metric", "entropy", f"hydra.sweep.dir={sweep}",
    ]
    done = run_ladd(*args, env=ONE_THREAD)
    assert done.returncode == 2, done.stderr
    assert _lines(done.stderr)[-1] == (
        f"ladd: error: 1 job of 2 did not finish (1 failed); `ladd sweep status {sweep}` shows why; run the same "
        f"command to continue the sweep"
    )
    assert sorted(p.name for p in (sweep / "0").glob("eval_*.json")) == [
        "eval_diladd_joint.json", "eval_diladd_joint_entropy.json"
    ]
    assert not (sweep / "1").exists(), "the invalid combination left no run folder"
    status = run_ladd("sweep", "status", str(sweep))
    assert status.returncode == 0, status.stderr
    lines = _lines(status.stdout)
    assert lines[0] == f"sweep {sweep}: 2 jobs: 1 finished, 1 failed"
    assert lines[2].split()[:3] == ["0", "finished", "1"] and lines[3].split()[:3] == ["1", "failed", "1"]
    assert lines[-1] == (
        "job 1 failed: latent_process 'masked' diffuses ids but latent 'continuous' holds vectors; valid pairings: "
        "latents producing vectors (continuous) with processes vp; latents producing ids (discrete, fsq, lfq, rvq) "
        "with processes masked"
    )
    manifest = json.loads((sweep / "sweep.json").read_text())
    assert [(j["state"], j["exit_status"], j["launcher"]) for j in manifest["jobs"]] == [
        ("finished", 0, "serial"), ("failed", 2, "serial")
    ]

    weights = (sweep / "0" / "model.safetensors").stat().st_mtime_ns
    again = run_ladd(*args, "--retries", "1", env=ONE_THREAD)
    assert again.returncode == 2
    assert "running 1 job of 2 with launcher 'serial'" in again.stdout, "the finished job is skipped"
    assert (sweep / "0" / "model.safetensors").stat().st_mtime_ns == weights
    given_up = run_ladd(*args, "--retries", "1", env=ONE_THREAD)
    assert given_up.returncode == 2
    assert "running" not in given_up.stdout, "failed twice, more than one retry: not tried again"
    assert (
        "job 1 (latent=continuous): failed 2 times, more than --retries 1, and is not tried again; its last error: "
        "latent_process 'masked' diffuses ids" in given_up.stderr
    )


def test_the_local_launcher_runs_its_workers_jobs_at_once_each_with_its_share_of_the_cores(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # the jobs' processes import timed_job
    marks = [tmp_path / f"job{index}.json" for index in range(3)]
    launcher = registry.load().build("launcher", "local", {"workers": 2})
    started: dict[int, str] = {}
    launcher.launch([TimedJob(mark, 4.0) for mark in marks], tmp_path / "launcher", started.__setitem__)
    runs = [json.loads(mark.read_text()) for mark in marks]
    share = str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert [(run["omp"], str(run["torch"])) for run in runs] == [(share, share)] * 3
    assert runs[1]["start"] < runs[0]["end"] and runs[0]["start"] < runs[1]["end"], "two workers: jobs 0 and 1 at once"
    assert runs[2]["start"] >= min(runs[0]["end"], runs[1]["end"]), "the third waits for a worker"
    assert sorted(started) == [0, 1, 2] and len(set(started.values())) == 3
    assert launcher.alive(list(started.values()), tmp_path / "launcher") == set()


def test_a_signal_stops_the_local_sweeps_jobs_at_a_checkpoint_and_the_sweep_resumes_bitwise(tmp_path):
    common = [*TINY, *SMALL_EVAL, "train.checkpoint_every=1000", "train.stages=[{steps:40}]", "seed=0,1"]
    reference = run_ladd("train", "-m", *common, f"hydra.sweep.dir={tmp_path / 'reference'}", env=ONE_THREAD)
    assert reference.returncode == 0, reference.stderr
    sweep = tmp_path / "sweep"
    args = ["train", "-m", *common, "launcher=local", "launcher.workers=2", f"hydra.sweep.dir={sweep}"]
    process = subprocess.Popen(
        [sys.executable, "-m", "registry.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    metrics = [sweep / str(index) / "metrics.csv" for index in (0, 1)]
    while process.poll() is None and time.monotonic() < deadline:  # both jobs past their third step
        if all(m.is_file() and len(m.read_text().splitlines()) > 3 for m in metrics):
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 143, stderr
    assert _lines(stderr)[-1] == "ladd: stopped by SIGTERM; run the same command to resume"
    folder = SweepFolder(sweep)
    records = [folder.record(index) for index in (0, 1)]
    assert [(r.state, r.exit_status) for r in records] == [("stopped", 143)] * 2
    assert all(r.error.startswith("stopped at step ") and r.error.endswith("of stage 1 by SIGTERM; run the same "
                                                                         "command to resume") for r in records)
    assert not any((sweep / str(index) / "model.safetensors").exists() for index in (0, 1))

    resumed = run_ladd(*args, env=ONE_THREAD)
    assert resumed.returncode == 0, resumed.stderr
    for index in (0, 1):
        assert_same_run(tmp_path / "reference" / str(index), sweep / str(index))
        assert folder.record(index).starts == 2


def test_jobs_that_outlive_a_killed_ladd_are_not_started_twice(tmp_path):
    sweep = tmp_path / "sweep"
    args = [
        "train", "-m", *TINY, *SMALL_EVAL, "train.stages=[{steps:40}]", "seed=0,1", "launcher=local",
        "launcher.workers=2", f"hydra.sweep.dir={sweep}",
    ]
    process = subprocess.Popen([sys.executable, "-m", "registry.cli", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    metrics = [sweep / str(index) / "metrics.csv" for index in (0, 1)]
    deadline = time.monotonic() + 300
    while not all(m.is_file() for m in metrics) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.kill()  # ladd alone, without warning: its jobs' processes go on
    process.wait()
    again = run_ladd(*args)
    assert again.returncode == 2, again.stderr
    assert "2 jobs still queued or running from an earlier launch: left to it" in again.stdout
    assert "with launcher 'local'" not in again.stdout, "no job launched again"
    folder = SweepFolder(sweep)
    deadline = time.monotonic() + 600
    while not all(folder.record(i) and folder.record(i).state == "finished" for i in (0, 1)):
        assert time.monotonic() < deadline, "the jobs did not finish"
        time.sleep(0.5)
    assert [folder.record(index).starts for index in (0, 1)] == [1, 1], "each job started once"
    done = run_ladd(*args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"sweep {sweep}: 2 jobs: 2 finished"


def test_a_second_ladd_on_a_sweep_being_launched_is_refused_in_one_line_and_starts_nothing(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["train", "-m", *TINY, "train.stages=[{steps:100000}]", "seed=0,1", f"hydra.sweep.dir={sweep}"]
    first = subprocess.Popen([sys.executable, "-m", "registry.cli", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, **ONE_THREAD})
    metrics = sweep / "0" / "metrics.csv"
    deadline = time.monotonic() + 300
    while first.poll() is None and not metrics.is_file():  # the serial launcher is training the first job
        assert time.monotonic() < deadline, "the first job did not start"
        time.sleep(0.05)
    second = run_ladd(*args, env=ONE_THREAD)
    assert first.poll() is None, "the first ladd still launches the sweep"
    assert second.returncode == 2, second.stderr
    assert _lines(second.stderr) == [
        f"ladd: error: {sweep} is being launched by another `ladd train -m` (it holds sweep.lock); wait for it to end, "
        f"or give this sweep another hydra.sweep.dir"
    ]
    first.send_signal(signal.SIGTERM)
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 143, stderr
    folder = SweepFolder(sweep)
    assert (folder.record(0).state, folder.record(0).starts) == ("stopped", 1), "the first job started once"
    assert folder.record(1) is None, "the second job never started"
