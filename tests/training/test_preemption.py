"""Preemption: SIGTERM, SIGINT or SIGUSR1 stops ``ladd train`` at a checkpointed step, and it resumes bitwise."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from run_state import assert_same_run, logged
from support import TESTS, TINY, run_ladd

pytestmark = pytest.mark.slow  # trains in subprocesses and signals them

STEPS = 8
# checkpoint_every past the stages: the stop writes the only checkpoint there is
ARGS = [
    "train", "experiment=binsaw/diladd_joint_cpu", *TINY, "train.checkpoint_every=1000", "seed=7",
    f"train.stages=[{{steps:{STEPS}}},{{steps:{STEPS},lambda_latent:1.0,freeze_encoder:true}}]",
]
STOPPED = re.compile(r"ladd: stopped at step (\d+) of stage (\d+) by (SIG\w+); run the same command to resume")


def _start(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "registry.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})}, cwd=cwd,
    )


def _checkpoint_step(run_dir: Path, stage: int = 1) -> int:
    return torch.load(run_dir / "checkpoints" / f"stage{stage}" / "last.ckpt", weights_only=True)["global_step"]


def _signal_after_rows(process: subprocess.Popen, metrics: Path, rows: int, number: int) -> tuple[str, str]:
    """Send ``number`` once ``metrics`` holds ``rows`` rows, then wait for the process to end."""
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        if metrics.is_file() and len(metrics.read_text().splitlines()) - 1 >= rows:
            break
        time.sleep(0.02)
    process.send_signal(number)
    return process.communicate(timeout=300)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    done = run_ladd(*ARGS, f"run_dir={run_dir}")
    assert done.returncode == 0, done.stderr
    return run_dir


@pytest.mark.parametrize(
    "name, status, rows",
    [("SIGTERM", 143, 2), ("SIGINT", 130, STEPS + 2), ("SIGUSR1", 128 + signal.SIGUSR1, 3)],
)
def test_a_signal_checkpoints_the_step_reached_and_the_run_resumes_bitwise(reference, tmp_path, name, status, rows):
    run_dir = tmp_path / "run"
    process = _start(*ARGS, f"run_dir={run_dir}")
    _, stderr = _signal_after_rows(process, run_dir / "metrics.csv", rows, getattr(signal, name))
    assert process.returncode == status, stderr
    stopped = STOPPED.fullmatch(stderr.strip().splitlines()[-1])
    assert stopped, stderr
    step, stage = int(stopped[1]), int(stopped[2])
    assert stopped[3] == name and (stage - 1) * STEPS + step >= rows and 0 < step < STEPS
    assert _checkpoint_step(run_dir, stage) == step
    assert logged(run_dir) == logged(reference)[: (stage - 1) * STEPS + step]  # every step up to the stop, no more
    assert not (run_dir / "model.safetensors").exists()

    resumed = run_ladd(*ARGS, f"run_dir={run_dir}")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(reference, run_dir)


def test_a_signal_at_a_stages_last_step_ends_the_stage_as_uninterrupted_then_stops(tmp_path):
    # checkpoint_every one short of the stage: the signal comes as step 7's checkpoint is in place, so step 8, the
    # last, is the first that sees it; the stage's end writes no checkpoint of its own then (Lightning's last.ckpt
    # is step 7's), and a stop that wrote one at step 8 would leave a run unlike the uninterrupted one
    args = [
        "train", "experiment=binsaw/mdlm_cpu", *TINY, "train.checkpoint_every=7", "train.stages=[{steps:8}]", "seed=7",
    ]
    reference = run_ladd(*args, f"run_dir={tmp_path / 'reference'}")
    assert reference.returncode == 0, reference.stderr
    run_dir = tmp_path / "run"
    stopped = subprocess.run(
        [sys.executable, str(TESTS / "kill_switch.py"), "SIGUSR1:after:1:checkpoints/stage1/last.ckpt", *args,
         f"run_dir={run_dir}"], capture_output=True, text=True, timeout=600,
    )
    assert stopped.returncode == 128 + signal.SIGUSR1, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1] == (
        "ladd: stopped at the end of stage 1 by SIGUSR1; run the same command to resume"
    )
    assert (run_dir / "checkpoints/stage1/final.safetensors").is_file()
    assert not (run_dir / "model.safetensors").exists()
    resumed = run_ladd(*args, f"run_dir={run_dir}")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(tmp_path / "reference", run_dir)


def test_compare_stops_at_once_while_evaluating(tmp_path):
    runs = tmp_path / "runs"
    args = [
        "compare", "--experiments", "binsaw/mdlm_cpu", "--runs-dir", str(runs), "--out", str(tmp_path / "out"),
        *[option for option in TINY if not option.startswith("eval.")], "train.stages=[{steps:2}]",
        "eval.num_samples=100000", "eval.batch_size=100000", "eval.budgets=[64]", "eval.loss_batches=1",
    ]
    process = _start(*args)
    weights, deadline = runs / "binsaw_mdlm_cpu" / "model.safetensors", time.monotonic() + 300
    while not weights.is_file() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)
    assert process.poll() is None, "the evaluation ended before it could be stopped"
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    stderr = ""
    for line in process.stderr:  # the line comes before the interpreter's own shutdown
        stderr += line
        if line.startswith("ladd: stopped"):
            break
    seconds = time.monotonic() - sent
    process.communicate(timeout=120)
    assert process.returncode == 143
    assert stderr.splitlines()[-1] == "ladd: stopped while evaluating mdlm by SIGTERM; run the same command to resume"
    assert seconds < 5, f"{seconds:.1f} s from the signal to the line"
    assert not (tmp_path / "out").exists() and not list(runs.glob("*/eval_*.json"))


def test_two_processes_stop_at_the_same_step_and_resume_bitwise(tmp_path):
    # Lightning's launcher starts the second process; the signal goes to the first only, as `timeout` sends it
    args = [
        "train", "experiment=binsaw/mdlm_cpu", *TINY, "train.accelerator=cpu", "train.devices=2",
        "train.checkpoint_every=1000", "train.stages=[{steps:12}]", "seed=7",
    ]
    one_thread = {"OMP_NUM_THREADS": "1"}  # the two processes share the cores
    reference = run_ladd(*args, f"run_dir={tmp_path / 'reference'}", env=one_thread)
    assert reference.returncode == 0, reference.stderr
    run_dir = tmp_path / "run"
    process = _start(*args, f"run_dir={run_dir}", env=one_thread)
    # times out if the processes deadlock
    _, stderr = _signal_after_rows(process, run_dir / "metrics.csv", 3, signal.SIGTERM)
    assert process.returncode == 143, stderr
    stopped = STOPPED.fullmatch(stderr.strip().splitlines()[-1])
    assert stopped and stopped[2] == "1", stderr
    assert _checkpoint_step(run_dir) == int(stopped[1]) >= 3

    resumed = run_ladd(*args, f"run_dir={run_dir}", env=one_thread)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(tmp_path / "reference", run_dir)


#: what SLURM sets for a one-task job (no `srun` needed to take Lightning into its SLURM mode)
SLURM_JOB = {
    "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "1", "SLURM_JOB_NAME": "ladd-test",
    "SLURM_JOB_ID": "4242", "SLURM_NODELIST": "localhost", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
}


def test_under_slurm_the_warning_signal_stops_with_ladds_checkpoint_only(tmp_path):
    stray = tmp_path / "hpc_ckpt_1.ckpt"  # Lightning's requeue checkpoint name, in the working folder
    stray.write_text("not this run's")
    args = ["train", "experiment=binsaw/mdlm_cpu", *TINY, "train.checkpoint_every=1000", "train.stages=[{steps:8}]"]
    process = _start(*args, "run_dir=run", env=SLURM_JOB, cwd=tmp_path)
    _, stderr = _signal_after_rows(process, tmp_path / "run" / "metrics.csv", 2, signal.SIGUSR1)
    assert process.returncode == 138, stderr
    stopped = STOPPED.fullmatch(stderr.strip().splitlines()[-1])
    assert stopped and stopped[3] == "SIGUSR1", stderr
    assert "requeu" not in stderr.lower()  # Lightning neither requeued the job nor said it would
    assert sorted(path.name for path in tmp_path.iterdir()) == ["hpc_ckpt_1.ckpt", "run"]
    assert stray.read_text() == "not this run's"
    assert _checkpoint_step(tmp_path / "run") == int(stopped[1])
