"""A two-stage run killed at a stage's end (its last checkpoint written, its EMA weights not yet) resumes bitwise."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from run_state import assert_same_run
from support import TESTS, TINY, run_ladd

pytestmark = pytest.mark.slow  # trains in subprocesses and kills them

STEPS = 3
ARGS = [
    *TINY, f"train.stages=[{{steps:{STEPS}}},{{steps:{STEPS},lambda_latent:1.0,freeze_encoder:true}}]",
    "train.checkpoint_every=1", "seed=5",
]
KILL_SWITCH = TESTS / "kill_switch.py"
#: (method, the write the kill comes at): `after` a rename the file is in place, `before` it is written but not in place
KILLS = [
    ("diladd_joint", f"after:{STEPS}:stage1/last.ckpt"),  # Stage 1's last step checkpointed, its EMA weights not saved
    ("diladd_joint", "before:1:stage1/final.safetensors"),  # while Stage 1's EMA weights are written
    ("diladd_joint", "after:1:stage1/final.safetensors"),  # handed over, Stage 2 not begun
    ("diladd_joint", f"after:{STEPS}:stage2/last.ckpt"),
    ("diladd_joint", "before:1:/model.safetensors"),
    ("coladd_joint", f"after:{STEPS}:stage1/last.ckpt"),
]


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """Uninterrupted runs, one per method, trained when first needed."""
    made: dict[str, Path] = {}

    def reference(method: str) -> Path:
        if method not in made:
            made[method] = tmp_path_factory.mktemp(method) / "run"
            done = run_ladd("train", f"experiment=binsaw/{method}_cpu", *ARGS, f"run_dir={made[method]}")
            assert done.returncode == 0, done.stderr
        return made[method]

    return reference


@pytest.mark.parametrize("method, kill", KILLS)
def test_a_kill_around_a_stage_end_resumes_to_the_uninterrupted_run(references, tmp_path, method, kill):
    reference, run_dir = references(method), tmp_path / "run"
    train = ["train", f"experiment=binsaw/{method}_cpu", *ARGS, f"run_dir={run_dir}"]
    command = [sys.executable, str(KILL_SWITCH), f"SIGKILL:{kill}", *train]
    killed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr
    assert not (run_dir / "model.safetensors").is_file()
    resumed = run_ladd(*train)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(reference, run_dir)
