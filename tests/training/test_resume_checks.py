"""A resume checks what it finds: a checkpoint past its stage, a cut or damaged metrics.csv, temporary files."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from subprocess import CompletedProcess

import pytest
import torch
from run_state import NUMBERS, logged
from safetensors.torch import load_file
from support import TESTS, TINY, run_ladd

pytestmark = pytest.mark.slow  # trains in subprocesses and kills them

STEPS, CHECKPOINT = 8, 5
ARGS = ["experiment=binsaw/mdlm_cpu", *TINY, "train.checkpoint_every=5", "seed=3"]
KILL_SWITCH = TESTS / "kill_switch.py"
HEADER = ",".join((*NUMBERS, "seconds"))


def _arguments(run_dir: Path, steps: int = STEPS) -> list[str]:
    return [*ARGS, f"train.stages=[{{steps:{steps}}}]", f"run_dir={run_dir}"]


def _train(run_dir: Path, steps: int = STEPS, *flags: str, env: dict[str, str] | None = None) -> CompletedProcess:
    return run_ladd("train", *flags, *_arguments(run_dir, steps), env=env)


def _killed(run_dir: Path, spec: str, env: dict[str, str] | None = None) -> CompletedProcess:
    command = [sys.executable, str(KILL_SWITCH), spec, "train", *_arguments(run_dir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def _files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file())  # (torch makes an empty folder in $TMPDIR)


def _contents(run_dir: Path) -> dict[str, bytes]:
    return {path.relative_to(run_dir).as_posix(): path.read_bytes() for path in _files(run_dir)}


@pytest.fixture(scope="module")
def stopped_at_five(tmp_path_factory) -> Path:
    """A run killed just after its checkpoint at step 5 of 8 was written."""
    run_dir = tmp_path_factory.mktemp("killed") / "run"
    killed = _killed(run_dir, "SIGKILL:after:1:stage1/last.ckpt")
    assert killed.returncode == -9, killed.stderr
    assert torch.load(run_dir / "checkpoints/stage1/last.ckpt", weights_only=True)["global_step"] == CHECKPOINT
    return run_dir


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    assert _train(run_dir).returncode == 0
    return run_dir


def _assert_refused(run_dir: Path, message: str, steps: int = STEPS, *flags: str) -> None:
    """Training ``run_dir`` again exits 2 with ``message`` and leaves every file of the folder as it was."""
    before = _contents(run_dir)
    refused = _train(run_dir, steps, *flags)
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == f"ladd: error: {message}"
    assert _contents(run_dir) == before


@pytest.fixture
def run_dir(stopped_at_five, tmp_path) -> Path:
    shutil.copytree(stopped_at_five, tmp_path / "run")
    return tmp_path / "run"


def test_fewer_steps_than_the_checkpoint_took_are_refused(run_dir):
    message = (
        f"cannot resume from {run_dir}/checkpoints/stage1/last.ckpt: it is at step 5, past the 3 steps of stage 1 "
        f"(train.stages.stage1.steps=3); continue it with train.stages.stage1.steps=5 or more, or delete it to "
        f"restart the stage"
    )
    _assert_refused(run_dir, message, 3, "--allow-changes")

    # the fix the message names: the stage is then finished, with the checkpoint's EMA weights
    finished = _train(run_dir, CHECKPOINT, "--allow-changes")
    assert finished.returncode == 0, finished.stderr
    ema = torch.load(run_dir / "checkpoints/stage1/last.ckpt", weights_only=True)["state_dict"]
    model = load_file(run_dir / "model.safetensors")
    assert model.keys() == {name.removeprefix("model.") for name in ema}
    assert all(torch.equal(model[name.removeprefix("model.")], tensor) for name, tensor in ema.items())


def test_a_checkpoint_past_its_stage_is_refused(run_dir):
    last = run_dir / "checkpoints/stage1/last.ckpt"
    checkpoint = torch.load(last, weights_only=True)
    checkpoint["global_step"] = 10**12
    torch.save(checkpoint, last)
    _assert_refused(run_dir, (
        f"cannot resume from {last}: it is at step 1000000000000, past the 8 steps of stage 1 "
        f"(train.stages.stage1.steps=8); continue it with train.stages.stage1.steps=1000000000000 or more, or delete "
        f"it to restart the stage"
    ))


def test_a_metrics_file_cut_before_the_checkpoint_is_refused(run_dir):
    metrics = run_dir / "metrics.csv"
    text = metrics.read_text()
    metrics.write_text(text[: text.index("\n1,3,") + 8])  # cut in the middle of step 3's row
    _assert_refused(run_dir, (
        f"{metrics} lacks rows logged before {run_dir}/checkpoints/stage1/last.ckpt (up to step 5 of stage 1; its "
        f"last row is step 2 of stage 1): it was cut or edited, and resuming would lose them; restore it from a copy, "
        f"or move it away to continue this run with a new one"
    ))

    metrics.rename(run_dir.parent / "metrics.moved.csv")  # the fix the message names
    assert _train(run_dir).returncode == 0
    assert [row[:2] for row in logged(run_dir)] == [("1", str(step)) for step in range(CHECKPOINT + 1, STEPS + 1)]


def test_a_damaged_row_is_refused(run_dir):
    metrics = run_dir / "metrics.csv"
    lines = metrics.read_text().splitlines(keepends=True)
    lines[3] = lines[3].replace(",", ",x", 1)
    metrics.write_text("".join(lines))
    _assert_refused(run_dir, (
        f"{metrics} is damaged (line 4 is not a whole row of {HEADER}); restore it from a copy, or move it away to "
        f"continue this run with a new one"
    ))


def test_a_last_row_cut_by_a_kill_is_dropped_and_logged_again(run_dir, reference):
    metrics = run_dir / "metrics.csv"
    with metrics.open("a") as handle:
        handle.write("1,6,0.52")  # the append of step 6's row, cut short
    resumed = _train(run_dir)
    assert resumed.returncode == 0, resumed.stderr
    assert logged(run_dir) == logged(reference)
    written = metrics.read_bytes()
    assert written.count(b"\r\n") == STEPS + 1 == len(written.splitlines())  # the header and whole rows


def test_checkpoints_are_staged_in_the_run_folder_where_a_resume_clears_them(tmp_path, reference):
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {"TMPDIR": str(temporary)}
    # killed at the first file made in $TMPDIR, if training makes one: none is made, so the run finishes
    run_dir = tmp_path / "run"
    finished = _killed(run_dir, "SIGKILL:mkstemp:1", env)
    assert finished.returncode == 0, finished.stderr
    assert _files(temporary) == []

    run_dir = tmp_path / "killed"
    killed = _killed(run_dir, "SIGKILL:before:1:stage1/last.ckpt", env)  # the checkpoint written in full, not renamed
    assert killed.returncode == -9
    assert [path.name.endswith(".partial") for path in (run_dir / "checkpoints/stage1").iterdir()] == [True]
    resumed = _train(run_dir, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert not list(run_dir.rglob("*.partial")) and _files(temporary) == []
    assert logged(run_dir) == logged(reference)
