"""An RL run killed between the steps that share a batch of rollouts resumes to exactly the uninterrupted run: the
same rollouts (their rewards and the records of them), the same losses, KL and clip fractions, the same weights."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from support import TESTS, run_ladd

pytestmark = pytest.mark.slow  # kills and restarts training subprocesses

STEPS = 6
ARGS = [
    "train",
    "experiment=demo/arith_grpo",
    "train.init_from=null",  # the seeded initialisation: no SFT run needed
    "backbone.hidden=16", "backbone.layers=1", "backbone.heads=2", "backbone.mlp_hidden=32",
    "train.lora.rank=4",
    "train.batch_size=2", "train.warmup_steps=1", "train.log_every=1", "train.checkpoint_every=1",
    "train.progress=false", f"train.stages.stage1.steps={STEPS}",
    "loss.group=3", "loss.steps=4", "loss.iterations=2", "loss.rollout_batch=2", "loss.record_every=4",
    # an untrained network answers no question: a reward its random text meets about half the time
    "loss.reward=format", "loss.reward_options.pattern='.*[0-9][0-9].*'",
    "seed=3",
]


def _rows(path):
    with path.open(newline="") as handle:
        return [{k: v for k, v in row.items() if k != "seconds"} for row in csv.DictReader(handle)]


def test_rl_run_killed_inside_a_batch_of_rollouts_resumes_bitwise(tmp_path):
    reference = run_ladd(*ARGS, f"run_dir={tmp_path / 'reference'}")
    assert reference.returncode == 0, reference.stderr
    expected = _rows(tmp_path / "reference" / "metrics.csv")
    assert [row["step"] for row in expected] == [str(step) for step in range(1, STEPS + 1)]
    assert len({row["reward"] for row in expected}) > 1, "the rollouts vary: the check is not vacuous"
    rl_terms = ["policy", "kl", "clip", "reward", "reward_std", "flat", "length"]
    assert all(row[term] != "" for row in expected for term in rl_terms), "every step reports the rollouts' record"
    logged = (tmp_path / "reference" / "logs" / "stage1" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {f"train/{term}" for term in rl_terms} <= set(logged), "and every logger gets them"
    # rollouts are drawn at steps 0, 2, 4 (mu = 2) and written at those that are multiples of record_every (0, 4),
    # each with the record_groups first prompts and their groups, after the step that drew them
    records = [json.loads(line) for line in (tmp_path / "reference" / "rollouts.jsonl").read_text().splitlines()]
    assert [record["step"] for record in records] == [1, 1, 5, 5]
    assert all(len(r["completions"]) == len(r["rewards"]) == len(r["advantages"]) == 3 for r in records)

    # killed right after the third checkpoint: step 3 reuses the rollouts step 2 made, which only the checkpoint holds
    run_dir = tmp_path / "killed"
    killed = subprocess.run(
        [sys.executable, str(TESTS / "kill_switch.py"), "SIGKILL:after:3:checkpoints/stage1/last.ckpt", *ARGS,
         f"run_dir={run_dir}"],
        capture_output=True, text=True, env=os.environ.copy(), timeout=600,
    )
    assert killed.returncode == -9, killed.stderr
    assert len(_rows(run_dir / "metrics.csv")) == 3

    resumed = run_ladd(*ARGS, f"run_dir={run_dir}")
    assert resumed.returncode == 0, resumed.stderr
    assert _rows(run_dir / "metrics.csv") == expected
    assert (run_dir / "rollouts.jsonl").read_text() == (tmp_path / "reference" / "rollouts.jsonl").read_text()
    weights, again = (load_file(folder / "model.safetensors") for folder in (run_dir, tmp_path / "reference"))
    assert weights.keys() == again.keys() and all(torch.equal(weights[name], again[name]) for name in weights)
