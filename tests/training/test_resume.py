"""A run killed with SIGKILL at a random step resumes to exactly the losses of an uninterrupted run."""
from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from support import TINY, run_ladd

pytestmark = pytest.mark.slow  # kills and restarts training subprocesses

STEPS = 8
ARGS = [
    "train",
    "experiment=binsaw/coladd_joint_cpu",
    *TINY,
    f"train.stages=[{{steps:{STEPS}}},{{steps:{STEPS},lambda_latent:1.0,freeze_encoder:true}}]",
    "train.checkpoint_every=1",
    "seed=5",
]


def _rows(path):
    with path.open(newline="") as handle:
        return [(r["stage"], r["step"], r["loss"], r["token"], r["latent"]) for r in csv.DictReader(handle)]


@pytest.mark.parametrize("stream", ["dataset.draw_on_device=false", "dataset.draw_on_device=true"])
def test_sigkill_then_resume_reproduces_every_loss_bitwise(tmp_path, stream):
    args = [*ARGS, stream]  # the CPU stream, or batches drawn where the model trains (the CPU here)
    reference = run_ladd(*args, f"run_dir={tmp_path / 'reference'}")
    assert reference.returncode == 0, reference.stderr
    expected = _rows(tmp_path / "reference" / "metrics.csv")
    assert [(r[0], r[1]) for r in expected] == [(str(s), str(t)) for s in (1, 2) for t in range(1, STEPS + 1)]

    kill_after = random.randint(2, 2 * STEPS - 2)
    run_dir = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, "-m", "registry.cli", *args, f"run_dir={run_dir}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy(),
    )
    metrics, deadline = run_dir / "metrics.csv", time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if metrics.is_file() and len(metrics.read_text().splitlines()) - 1 >= kill_after:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert len(_rows(metrics)) < 2 * STEPS, f"the run finished before the kill after row {kill_after}"

    resumed = run_ladd(*args, f"run_dir={run_dir}")
    assert resumed.returncode == 0, resumed.stderr
    assert _rows(metrics) == expected, f"killed after {kill_after} logged steps"
    assert not list(run_dir.glob("checkpoints/*/*.partial")), "no partial checkpoint is left behind"


def _interrupted_run(tmp_path, registry_):
    """A finished two-stage run turned back into one interrupted inside stage 2."""
    from registry.config.composition import compose
    from registry.training.loop import train

    cfg = compose([a for a in ARGS[1:]], registry_)
    train(cfg, tmp_path, registry_)
    (tmp_path / "checkpoints" / "stage2" / "final.safetensors").unlink()
    return cfg


def test_resume_refuses_a_checkpoint_from_a_missing_plugin(tmp_path):
    import pytest
    import torch

    import registry
    from registry.errors import LaddError
    from registry.training.loop import train

    reg = registry.load()
    cfg = _interrupted_run(tmp_path, reg)
    last = tmp_path / "checkpoints" / "stage2" / "last.ckpt"
    checkpoint = torch.load(last, weights_only=True)
    checkpoint["ladd"]["components"]["backbone"].update(
        name="fancy", plugin="fancy_models", distribution="fancy-ladd", version="2.0"
    )
    torch.save(checkpoint, last)
    with pytest.raises(LaddError, match="plugin 'fancy_models'.*not installed"):
        train(cfg, tmp_path, reg)

    last.write_bytes(b"not a checkpoint")
    with pytest.raises(LaddError, match="corrupt or not a ladd checkpoint.*delete it"):
        train(cfg, tmp_path, reg)


class _Interrupted(Exception):
    """Stands for a kill while the stream is read."""


class _BatchesOnly:
    """A third-party dataset written against the first contract: ``batches`` alone, no ``Dataset`` base."""

    def __init__(self, dataset, interrupt_at=None):
        self.dataset, self.interrupt_at, self.drawn = dataset, interrupt_at, 0
        self.vocab_size, self.seq_len = dataset.vocab_size, dataset.seq_len

    def batches(self, batch_size, seed, split="train"):
        for batch in self.dataset.batches(batch_size, seed, split):
            if self.drawn == self.interrupt_at:
                raise _Interrupted
            self.drawn += 1
            yield batch


def test_a_dataset_without_batches_from_resumes_by_replay(tmp_path, monkeypatch):
    import registry
    from registry.config.composition import compose
    from registry.training import loop as training

    reg = registry.load()
    cfg = compose(["experiment=binsaw/mdlm_cpu", *TINY, "train.stages=[{steps:6}]", "train.checkpoint_every=1"], reg)
    real, datasets = training.build_experiment, []

    def third_party(interrupt_at):
        def build(cfg_, registry_):
            experiment = real(cfg_, registry_)
            experiment.dataset = _BatchesOnly(experiment.dataset, interrupt_at)
            datasets.append(experiment.dataset)
            return experiment

        monkeypatch.setattr(training, "build_experiment", build)

    third_party(None)
    training.train(cfg, tmp_path / "whole", reg)
    third_party(4)
    with pytest.raises(_Interrupted):
        training.train(cfg, tmp_path / "resumed", reg)
    checkpointed = torch.load(tmp_path / "resumed" / "checkpoints" / "stage1" / "last.ckpt", weights_only=True)[
        "global_step"
    ]
    assert 0 < checkpointed < 6
    third_party(None)
    training.train(cfg, tmp_path / "resumed", reg)
    assert _rows(tmp_path / "resumed" / "metrics.csv") == _rows(tmp_path / "whole" / "metrics.csv")
    assert datasets[-1].drawn >= 6, f"the stream was read from its start, past the {checkpointed} batches trained on"
