"""Faults and bad input stop early with one clear message; seeded runs reproduce exactly."""
from __future__ import annotations

import math

import pytest
import torch
from support import TINY

import registry
from registry.config.composition import compose
from registry.engine.loading import load_run
from registry.engine.sampling import sample
from registry.errors import LaddError
from registry.training.loop import train
from registry.training.module import NonFiniteLossError

pytestmark = pytest.mark.slow  # every test trains

ONE_STAGE = "train.stages=[{steps:4}]"


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def _config(reg, *extra):
    return compose(["experiment=binsaw/mdlm_cpu", *TINY, ONE_STAGE, *extra], reg)


def _poison_token_loss(monkeypatch, call: int, factor: float) -> None:
    """Multiply the token loss by ``factor`` at its ``call``-th computation (call 1 is the stage's trainable-set
    probe)."""
    from ladd_plugins.processes.masked import MaskedProcess

    original = MaskedProcess.loss
    calls = {"n": 0}

    def poisoned(self, *args):
        calls["n"] += 1
        value = original(self, *args)
        return value * factor if calls["n"] == call else value

    monkeypatch.setattr(MaskedProcess, "loss", poisoned)


def test_nan_loss_stops_the_run_naming_step_and_term(reg, tmp_path, monkeypatch):
    _poison_token_loss(monkeypatch, 4, math.nan)
    with pytest.raises(NonFiniteLossError, match=r"step 2: offending term\(s\) \['token'\]"):
        train(_config(reg), tmp_path, reg)


def test_nan_between_log_steps_is_named_when_read_and_nothing_is_kept(reg, tmp_path, monkeypatch):
    # The loss is read back only at log steps (and before anything is saved): the bad step is still the one named.
    _poison_token_loss(monkeypatch, 3, math.inf)
    with pytest.raises(NonFiniteLossError, match=r"step 1: offending term\(s\) \['token'\]"):
        train(_config(reg, "train.log_every=1000", "train.checkpoint_every=3"), tmp_path, reg)
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("*.safetensors"))


class _Broken:
    """Wraps a dataset to make its stream misbehave in one way."""

    def __init__(self, dataset, mode):
        self.dataset, self.mode = dataset, mode
        self.vocab_size, self.seq_len = dataset.vocab_size, dataset.seq_len

    def batches(self, batch_size, seed, split="train"):
        if self.mode == "empty":
            return iter(())
        batch = next(self.dataset.batches(batch_size, seed, split))
        if self.mode == "out_of_vocab":
            batch[0, 0] = self.vocab_size + 3
        if self.mode == "short":
            batch = batch[:, :-1]
        return iter([batch] * 1000)


@pytest.mark.parametrize(
    "mode, message",
    [
        ("out_of_vocab", r"token id 5, outside the vocabulary 0\.\.1"),
        ("short", r"shape \(16, 15\).*expected \[batch, 16\]"),
        ("empty", r"stream ended after 0 batch"),
    ],
)
def test_bad_dataset_streams_are_refused(reg, tmp_path, monkeypatch, mode, message):
    from registry.training import loop as training

    real = training.build_experiment

    def with_broken_dataset(cfg, registry_):
        experiment = real(cfg, registry_)
        experiment.dataset = _Broken(experiment.dataset, mode)
        return experiment

    monkeypatch.setattr(training, "build_experiment", with_broken_dataset)
    with pytest.raises(LaddError, match=message):
        train(_config(reg), tmp_path, reg)


def test_corrupt_or_incompatible_weights_are_refused(reg, tmp_path):
    train(_config(reg), tmp_path / "a", reg)
    train(_config(reg, "backbone.hidden=32"), tmp_path / "b", reg)
    (tmp_path / "b" / "model.safetensors").write_bytes((tmp_path / "a" / "model.safetensors").read_bytes())
    with pytest.raises(LaddError, match="weights of another configuration"):
        load_run(tmp_path / "b", reg)
    weights = tmp_path / "a" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(LaddError, match="corrupt file"):
        load_run(tmp_path / "a", reg)


def test_same_seed_reproduces_training_and_sampling_exactly(reg, tmp_path):
    runs = [train(_config(reg, "seed=3"), tmp_path / str(i), reg) for i in range(2)]
    for a, b in zip(runs[0].model.state_dict().values(), runs[1].model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    logs = [(tmp_path / str(i) / "logs" / "stage1" / "metrics.csv").read_text() for i in range(2)]
    assert logs[0] == logs[1]
    assert torch.equal(sample(runs[0], 20, 4, 20, seed=1)[0], sample(runs[1], 20, 4, 20, seed=1)[0])
    other = train(_config(reg, "seed=4"), tmp_path / "other", reg)
    assert not torch.equal(runs[0].model.backbone.embed.weight, other.model.backbone.embed.weight)
