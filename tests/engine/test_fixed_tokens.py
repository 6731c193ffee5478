"""Prompts and infills with a token process that is not masking: every process's step is given the known tokens."""

from __future__ import annotations

import json

import pytest
import torch
from support import fake_distribution, run_ladd

import registry
from registry import contract
from registry.errors import LaddError
from registry.toolkit.sampling import reverse_step

pytestmark = pytest.mark.slow  # the ladd command in subprocesses, and tiny training runs

UNIFORM = """
    from dataclasses import dataclass

    import torch

    from registry import ComponentSpec, hookimpl
    from registry.interfaces import Process
    from registry.toolkit.tokens import cross_entropy, mask_id, per_sample


    @dataclass
    class UniformConfig:
        horizon: int = 100  # training horizon T


    class Uniform(Process):
        \"\"\"Each position is replaced by a uniformly drawn token with probability 1 - signal(tau).\"\"\"

        def __init__(self, config, schedule, vocab_size):
            self.horizon, self.schedule, self.vocab_size = config.horizon, schedule, vocab_size

        def prior(self, shape, device, generator=None):
            return torch.randint(self.vocab_size, shape, device=device, generator=generator)

        def corrupt(self, x0, tau, generator=None):
            signal = per_sample(self.schedule.signal(tau), x0)
            keep = torch.rand(x0.shape, generator=generator, device=x0.device) < signal
            return torch.where(keep, x0, self.prior(x0.shape, x0.device, generator))

        def loss(self, prediction, x0, x_t, tau):
            return cross_entropy(prediction.flatten(0, -2), x0.flatten()).view(x0.shape).mean(dim=1)

        def redraw(self, x_t, prediction, tau_t, tau_s, generator):
            probabilities = prediction.flatten(0, -2).double().softmax(-1)
            draw = torch.multinomial(probabilities, 1, generator=generator).view(x_t.shape)
            signal_t, signal_s = self.schedule.signal(tau_t), self.schedule.signal(tau_s)
            gain = torch.where(tau_s <= 0, 1.0, (signal_s - signal_t) / (1 - signal_t).clamp(min=1e-9))
            change = torch.rand(x_t.shape, generator=generator, device=x_t.device) < per_sample(gain, x_t)
            return torch.where(change, draw, x_t)


    class KeepsKnown(Uniform):
        def step(self, x_t, prediction, tau_t, tau_s, generator=None, fixed=None):
            x_s = self.redraw(x_t, prediction, tau_t, tau_s, generator)
            return x_s if fixed is None else torch.where(fixed == mask_id(self.vocab_size), x_s, fixed)


    class OlderSignature(Uniform):
        takes_fixed = False

        def step(self, x_t, prediction, tau_t, tau_s, generator=None):
            return self.redraw(x_t, prediction, tau_t, tau_s, generator)


    class Undeclared(Uniform):
        def step(self, x_t, prediction, tau_t, tau_s, generator=None):
            return self.redraw(x_t, prediction, tau_t, tau_s, generator)


    class Deaf(Uniform):
        def step(self, x_t, prediction, tau_t, tau_s, generator=None, fixed=None):
            return self.redraw(x_t, prediction, tau_t, tau_s, generator)


    @hookimpl
    def ladd_components():
        return [
            ComponentSpec("process", "uniform", KeepsKnown, UniformConfig, "uniform noise, keeping fixed tokens"),
            ComponentSpec("process", "uniform_old", OlderSignature, UniformConfig, "its step without fixed"),
            ComponentSpec("process", "uniform_deaf", Deaf, UniformConfig, "takes fixed tokens and changes them"),
            ComponentSpec("process", "uniform_undeclared", Undeclared, UniformConfig, "no fixed, not declared"),
        ]
"""
TEXT = [
    "experiment=demo/mdlm",
    "dataset.seq_len=16",
    "train.batch_size=4",
    "train.progress=false",
    "train.stages=[{steps:2}]",
]


@pytest.fixture(scope="module")
def uniform(tmp_path_factory) -> dict[str, str]:
    return {"PYTHONPATH": fake_distribution(tmp_path_factory.mktemp("uniform"), "uniform_plugin", UNIFORM)}


UNDECLARED_LINE = (
    "token process Undeclared (uniform_plugin) has a step() without the `fixed` keyword and does not declare "
    "`takes_fixed = False`, which plugin contract 3 deprecated and contract 5 refuses: declare `takes_fixed = False` "
    "on the process, or take `fixed` in step() and keep the known tokens (docs/contract.md, contract 3)"
)


def test_plugin_check_sees_a_step_that_takes_known_tokens_and_changes_them(uniform):
    out = run_ladd("plugins", "check", "uniform_plugin", env=uniform)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"ladd: deprecated: {UNDECLARED_LINE}",
        "ladd: error: plugin 'uniform_plugin' has 1 problem(s):",
        "  process 'uniform_plugin:uniform_deaf': breaks Process.step(..., fixed=...) (the known tokens kept): "
        "step(..., fixed=...) changed known tokens at tau=0.875",
    ], "the step written without `fixed` works, deprecated, for one more contract"


def test_a_step_without_fixed_that_does_not_declare_it_samples_deprecated_and_is_refused_from_contract_5(
    uniform, tmp_path, monkeypatch
):
    run = tmp_path / "run"
    trained = run_ladd("train", *TEXT, "process=uniform_undeclared", f"run_dir={run}", env=uniform)
    assert trained.returncode == 0, trained.stderr
    prompted = run_ladd(
        "sample", str(run), "--prompt", "ROMEO:", "--num", "2", "--steps", "4", "--out", str(tmp_path / "p.jsonl"),
        env=uniform,
    )
    assert prompted.returncode == 2 and prompted.stderr.splitlines()[0] == f"ladd: deprecated: {UNDECLARED_LINE}"
    assert prompted.stderr.strip().splitlines()[-1] == (
        "ladd: error: token process Undeclared changed tokens given in `fixed` (a prompt or an infill): its step must "
        "take them (step(..., fixed=None)), keep them and not declare takes_fixed = False"
    ), "called without `fixed`, as if it declared takes_fixed = False, it is refused where it changes the prompt"
    monkeypatch.syspath_prepend(uniform["PYTHONPATH"])
    from uniform_plugin import Undeclared, UniformConfig

    monkeypatch.setattr(contract, "CONTRACT_VERSION", 5)
    process = Undeclared(UniformConfig(), registry.build("schedule", "linear"), 5)
    x = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(LaddError) as refused:
        reverse_step(process, x, torch.zeros(1, 4, 5), torch.ones(1), torch.zeros(1), torch.Generator(), x)
    assert str(refused.value) == UNDECLARED_LINE.replace(
        "which plugin contract 3 deprecated and contract 5 refuses",
        "which plugin contract 5 refuses (this ladd implements contract 5)",
    )


def test_a_uniform_noise_process_keeps_a_prompt_and_an_infills_context(uniform, tmp_path):
    run = tmp_path / "run"
    trained = run_ladd("train", *TEXT, "process=uniform", f"run_dir={run}", env=uniform)
    assert trained.returncode == 0, trained.stderr
    out = tmp_path / "infill.jsonl"
    sampled = run_ladd(
        "sample",
        str(run),
        "--prompt",
        "ROMEO:",
        "--suffix",
        "my lord",
        "--num",
        "4",
        "--steps",
        "4",
        "--out",
        str(out),
        env=uniform,
    )
    assert sampled.returncode == 0, sampled.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and len({tuple(r["ids"][:2] + r["ids"][-2:]) for r in rows}) == 1
    assert all(r["text"].startswith("romeo :") and r["text"].endswith("my lord") for r in rows)
    assert len({tuple(r["ids"]) for r in rows}) > 1, "the free positions are sampled"


def test_a_process_written_before_known_tokens_were_passed_still_samples_and_refuses_a_prompt(uniform, tmp_path):
    run = tmp_path / "run"
    trained = run_ladd("train", *TEXT, "process=uniform_old", f"run_dir={run}", env=uniform)
    assert trained.returncode == 0, trained.stderr
    free = run_ladd(
        "sample", str(run), "--num", "2", "--steps", "4", "--out", str(tmp_path / "free.jsonl"), env=uniform
    )
    assert free.returncode == 0, free.stderr
    prompted = run_ladd(
        "sample",
        str(run),
        "--prompt",
        "ROMEO:",
        "--num",
        "2",
        "--steps",
        "4",
        "--out",
        str(tmp_path / "p.jsonl"),
        env=uniform,
    )
    assert prompted.returncode == 2
    assert prompted.stderr.strip().splitlines()[-1] == (
        "ladd: error: token process OlderSignature changed tokens given in `fixed` (a prompt or an infill): "
        "its step must take them (step(..., fixed=None)), keep them and not declare takes_fixed = False"
    )
    assert not (tmp_path / "p.jsonl").exists()
