"""What components declare they need (a latent channel or none, a revealing token process) is checked before anything
trains, and again when `ladd sample` or `ladd eval` choose another sampler for a trained model."""

from __future__ import annotations

import math

import pytest
import torch
from support import TINY, fake_distribution, run_ladd

pytestmark = pytest.mark.slow  # the ladd command in subprocesses, and tiny training runs

SHORT = [*TINY, "train.stages=[{steps:2}]"]
TWO_SHORT_STAGES = [*TINY, "train.stages.stage1.steps=2", "train.stages.stage2.steps=2"]

CONFIDENCE = """
    import torch

    from registry import ComponentSpec, hookimpl
    from registry.interfaces import IDS, Needs, Process, RevealingProcess, SampleOutput, Sampler
    from registry.toolkit.sampling import start_tokens, time_grid, times
    from registry.toolkit.tokens import cross_entropy, mask_id


    class Confidence(Sampler):
        \"\"\"Reveals the most confident masked positions, as many per step as the token schedule's signal gains.\"\"\"

        needs = Needs(latent=False, token_process=RevealingProcess)

        def __init__(self, config=None):
            pass

        @torch.no_grad()
        def sample(self, model, num_samples, steps, generator, fixed=None):
            if model.schedule is None:
                raise RuntimeError("the sampler was not given the token schedule")
            x = start_tokens(model, num_samples, model.device, generator, fixed)
            for tau_t, tau_s in time_grid(steps):
                t, s = times(num_samples, tau_t, model.device), times(num_samples, tau_s, model.device)
                masked = x == mask_id(model.vocab_size)
                signal_t, signal_s = model.schedule.signal(t), model.schedule.signal(s)
                gain = (signal_s - signal_t) / (1 - signal_t).clamp(min=1e-9)
                count = torch.where(s <= 0, masked.sum(1), (masked.sum(1) * gain).round().long())
                confidence = model.predict(x, t, None, None).tokens.softmax(-1).amax(-1).masked_fill(~masked, -1.0)
                rank = confidence.argsort(dim=1, descending=True).argsort(dim=1)
                reveal = masked & (rank < count[:, None])
                x = model.process.fill(x, reveal, model.predict(x, t, None, None, reveal).tokens, generator)
            return SampleOutput(x, None, steps)


    class Still(Process):
        \"\"\"Uniform noise on ids; it reveals nothing before predicting.\"\"\"

        diffuses = IDS

        def __init__(self, config=None, schedule=None, vocab_size=None):
            self.horizon, self.vocab_size = 10, vocab_size

        def prior(self, shape, device, generator=None):
            return torch.randint(self.vocab_size, shape, device=device, generator=generator)

        def corrupt(self, x0, tau, generator=None):
            return x0

        def loss(self, prediction, x0, x_t, tau):
            return cross_entropy(prediction.flatten(0, -2), x0.flatten()).view(x0.shape).mean(dim=1)

        def step(self, x_t, prediction, tau_t, tau_s, generator=None, fixed=None):
            return x_t


    @hookimpl
    def ladd_components():
        return [
            ComponentSpec("sampler", "paced", Confidence, None, "most confident first, paced by the schedule"),
            ComponentSpec("process", "still", Still, None, "a process that is no RevealingProcess"),
        ]
"""


@pytest.fixture(scope="module")
def confidence(tmp_path_factory) -> dict[str, str]:
    return {"PYTHONPATH": fake_distribution(tmp_path_factory.mktemp("confidence"), "confidence_plugin", CONFIDENCE)}


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (
            ["experiment=binsaw/coladd_joint_cpu", "sampler=paced"],
            "sampler 'paced' needs a model without a latent channel, but latent 'continuous' is selected; "
            "set latent=null "
            "or choose another sampler",
        ),
        (
            ["sampler=paced", "process=still"],
            "sampler 'paced' needs a token process that is a registry.interfaces.RevealingProcess, but process "
            "'still' is "
            "not one; choose another process or choose another sampler",
        ),
        (
            ["sampler=joint"],
            "sampler 'joint' needs a latent channel, but there is none (latent=null); choose a latent or choose "
            "another sampler",
        ),
        (
            ["experiment=binsaw/diladd_joint_cpu", "sampler=ancestral"],
            "sampler 'ancestral' needs a model without a latent channel, but latent 'discrete' is selected; "
            "set latent=null or "
            "choose another sampler",
        ),
    ],
)
def test_an_unmet_need_is_refused_in_one_line_before_anything_trains(confidence, tmp_path, overrides, line):
    out = run_ladd("train", *overrides, *TINY, f"run_dir={tmp_path / 'run'}", env=confidence)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == f"ladd: error: {line}"
    assert "Trainer" not in out.stderr and not (tmp_path / "run").exists()


def test_a_sampler_is_given_the_token_schedule(confidence, tmp_path, monkeypatch):
    checked = run_ladd("plugins", "check", "confidence_plugin", env=confidence)
    assert checked.returncode == 0, checked.stderr  # the check's model gives the sampler a schedule too
    run = tmp_path / "run"
    trained = run_ladd("train", "sampler=paced", "schedule=cosine", *SHORT, f"run_dir={run}", env=confidence)
    assert trained.returncode == 0, trained.stderr
    sampled = run_ladd(
        "sample", str(run), "--steps", "4", "--num", "3", "--out", str(tmp_path / "s.txt"), env=confidence
    )
    assert sampled.returncode == 0, sampled.stderr
    rows = [[int(v) for v in line.split()] for line in (tmp_path / "s.txt").read_text().splitlines()]
    assert len(rows) == 3 and all(len(row) == 16 and set(row) <= {0, 1} for row in rows)

    import registry
    from registry.engine.loading import load_run

    monkeypatch.syspath_prepend(confidence["PYTHONPATH"])
    try:
        model = load_run(run, registry.load(reload=True))[0].model
    finally:
        monkeypatch.undo()
        registry.load(reload=True)
    tau = torch.tensor([0.0, 0.25, 0.5, 1.0])
    assert torch.allclose(model.schedule.signal(tau).double(), torch.cos(math.pi * tau.double() / 2), atol=1e-6)


@pytest.fixture(scope="module")
def diladd_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "diladd"
    out = run_ladd("train", "experiment=binsaw/diladd_joint_cpu", *TWO_SHORT_STAGES, f"run_dir={run}")
    assert out.returncode == 0, out.stderr
    return run


def test_sample_chooses_a_sampler_and_its_options_as_eval_does(diladd_run, tmp_path):
    import registry
    from registry.engine.loading import load_run
    from registry.engine.sampling import sample

    arguments = ["--steps", "4", "--num", "5", "--seed", "3"]
    chosen = run_ladd(
        "sample",
        str(diladd_run),
        *arguments,
        "--sampler",
        "sequential",
        "--sampler-option",
        "latent_steps=2",
        "--out",
        str(tmp_path / "sequential.txt"),
    )
    assert chosen.returncode == 0, chosen.stderr
    own = run_ladd("sample", str(diladd_run), *arguments, "--out", str(tmp_path / "joint.txt"))
    assert own.returncode == 0, own.stderr

    experiment = load_run(diladd_run, registry.load())[0]
    experiment.sampler = registry.build("sampler", "sequential", {"latent_steps": 2})
    tokens, _ = sample(experiment, 5, 4, 1000, 3)
    expected = "".join(" ".join(map(str, row.tolist())) + "\n" for row in tokens)
    assert (tmp_path / "sequential.txt").read_text() == expected
    assert (tmp_path / "joint.txt").read_text() != expected


@pytest.mark.parametrize("command", ["sample", "eval"])
def test_a_sampler_the_trained_model_cannot_serve_is_refused(diladd_run, tmp_path, command):
    out = run_ladd(command, str(diladd_run), "--sampler", "ancestral", "--out", str(tmp_path / "out"))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "ladd: error: sampler 'ancestral' needs a model without a latent channel, but latent 'discrete' is selected; "
        "choose another sampler for this model"
    ]
    alone = run_ladd(command, str(diladd_run), "--sampler-option", "latent_steps=2", "--out", str(tmp_path / "out"))
    assert alone.returncode == 2
    assert alone.stderr.strip().splitlines() == [
        "ladd: error: --sampler-option sets an option of --sampler NAME: give the sampler too, e.g. --sampler joint "
        "--sampler-option guidance=2"
    ]
    assert not (tmp_path / "out").exists()
