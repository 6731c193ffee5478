"""``ladd train`` before its first step: a signal while it starts up ends in a ladd line, and every job of a sweep,
its warm-start source included, is checked before the first job trains."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import TINY, run_ladd

pytestmark = pytest.mark.slow  # each test runs the ladd command

ARGS = ["train", "experiment=binsaw/mdlm_cpu", *TINY, "train.stages=[{steps:2}]"]


def _catches(pid: int, number: int) -> bool:
    """Whether process ``pid`` has a handler of its own for signal ``number`` (Linux's SigCgt mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.MULTILINE)[1], 16)
    return bool(caught >> (number - 1) & 1)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads signal handlers from Linux's /proc")
def test_sigterm_while_train_starts_up_ends_with_a_ladd_line_and_143(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "registry.cli", *ARGS, f"run_dir={run_dir}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
    )
    deadline = time.monotonic() + 120
    while process.poll() is None and not _catches(process.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.01)
    early = "libtorch" not in Path(f"/proc/{process.pid}/maps").read_text()
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert err.splitlines()[-1] == "ladd: stopped by SIGTERM; run the same command to resume", err
    assert early, "ladd installs its handler as it starts, before it loads torch and Lightning (seconds)"
    assert not run_dir.exists()


def test_a_sweeps_second_warm_start_source_is_checked_before_the_first_job_trains(tmp_path):
    missing = tmp_path / "no_model"
    done = run_ladd(*ARGS, "-m", f"train.init_from=null,{missing}", f"run_dir={tmp_path / 'sweep'}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"ladd: error: sweep job 1 (train.init_from={missing}): train.init_from={missing} does not exist; set "
        f"train.init_from to a model folder (ladd export, ladd import) or a finished run; no job was trained"
    ]
    assert not (tmp_path / "sweep").exists()
