"""A third-party latent written from docs/plugins.md (FSQ-style rounded codes) selected on top of the built-in
presets."""

from __future__ import annotations

import json

import pytest
import yaml
from support import FIXTURES, TINY, TWO_STAGES, fake_distribution, install_plugin, run_ladd

pytestmark = pytest.mark.slow  # each test runs the ladd command

ROUNDING = FIXTURES / "plugins" / "rounding"


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    return {"PYTHONPATH": install_plugin(ROUNDING, tmp_path_factory.mktemp("site"))}


def test_the_plugin_imports_nothing_of_ladd_but_its_public_registry():
    imported = {
        line.split()[1].split(".")[0]
        for path in ROUNDING.rglob("*.py")
        for line in path.read_text().splitlines()
        if line.startswith(("import ", "from ")) and not line.startswith("from .")
    }
    assert imported == {"__future__", "dataclasses", "registry", "torch"}


def test_plugin_check_passes(plugin_env):
    out = run_ladd("plugins", "check", "rounding", env=plugin_env)
    assert out.returncode == 0, out.stderr
    assert "1 built and ran at a tiny size" in out.stdout


def test_trained_jointly_on_the_diladd_preset_then_sampled(plugin_env, tmp_path):
    run = tmp_path / "joint"
    out = run_ladd(
        "train",
        "experiment=binsaw/diladd_joint_cpu",
        "latent=rounding",
        "latent.levels=4",
        *TINY,
        TWO_STAGES,
        f"run_dir={run}",
        env=plugin_env,
    )
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["latent"] == {"name": "rounding", "length": 1, "width": 32, "dims": 3, "levels": 4}
    assert config["latent_process"]["name"] == "builtin:masked" and config["sampler"]["name"] == "builtin:joint"
    assert json.loads((run / "components.json").read_text())["latent"]["distribution"] == "ladd-rounding-plugin"
    stages = {row.split(",")[0] for row in (run / "metrics.csv").read_text().splitlines()[1:]}
    assert stages == {"1", "2"}
    samples = tmp_path / "samples.txt"
    out = run_ladd("sample", str(run), "--num", "8", "--steps", "4", "--out", str(samples), env=plugin_env)
    assert out.returncode == 0, out.stderr
    rows = [[int(v) for v in line.split()] for line in samples.read_text().splitlines()]
    assert len(rows) == 8 and all(len(row) == 16 and set(row) <= {0, 1} for row in rows)


def test_the_plugin_latent_gets_encode_like_and_interpolation(plugin_env, tmp_path):
    run = tmp_path / "run"
    out = run_ladd(
        "train", "experiment=binsaw/diladd_joint_cpu", "latent=rounding", "latent.levels=4", *TINY, TWO_STAGES,
        f"run_dir={run}", env=plugin_env,
    )
    assert out.returncode == 0, out.stderr
    references = tmp_path / "refs.txt"
    references.write_text("0 1 1 0 1 0 0 1 1 1 0 0 1 0 1 1\n1 1 1 1 0 0 0 0 1 1 1 1 0 0 0 0\n")
    latents, like, given, path = (tmp_path / name for name in ("lat.safetensors", "like.txt", "given.txt", "path.txt"))
    steps = ["--num", "3", "--steps", "4"]
    for args in (
        ("encode", str(run), "--input", str(references), "--out", str(latents)),
        ("sample", str(run), "--like", str(references), *steps, "--out", str(like)),
        ("sample", str(run), "--latents", str(latents), *steps, "--out", str(given)),
        ("sample", str(run), "--interpolate", str(references), "--points", "3", *steps, "--out", str(path)),
    ):
        out = run_ladd(*args, env=plugin_env)
        assert out.returncode == 0, out.stderr
    assert like.read_text() == given.read_text() and len(like.read_text().splitlines()) == 6
    assert len(path.read_text().splitlines()) == 9


def test_trained_for_sequential_sampling_and_evaluated(plugin_env, tmp_path):
    run = tmp_path / "seq"
    out = run_ladd(
        "train",
        "experiment=binsaw/diladd_seq_cpu",
        "latent=rounding",
        *TINY,
        TWO_STAGES,
        f"run_dir={run}",
        env=plugin_env,
    )
    assert out.returncode == 0, out.stderr
    out = run_ladd("eval", str(run), env=plugin_env)
    assert out.returncode == 0, out.stderr
    result = json.loads((run / "eval_diladd_seq.json").read_text())
    assert 0 < result["token_loss"] < 5
    # a latent written without posterior_entropy gives no bound: left out, saying why, unless asked for
    assert result["bound"] is None and "posterior_entropy" in result["no_bound"]
    assert "note: no bound on -log p" in out.stdout
    asked = run_ladd("eval", str(run), "--bound-draws", "1", "--out", str(tmp_path / "e.json"), env=plugin_env)
    assert asked.returncode != 0 and "posterior_entropy" in asked.stderr


FLOW_PLUGIN = """
    from dataclasses import dataclass

    import torch

    from registry import ComponentSpec, hookimpl
    from registry.interfaces import VECTORS, Process


    @dataclass
    class FlowConfig:
        horizon: int = 1000  # training grid of times


    class RectifiedFlow(Process):
        diffuses = VECTORS

        def __init__(self, config, schedule=None, vocab_size=None):
            self.horizon = config.horizon

        def prior(self, shape, device, generator=None):
            return torch.randn(shape, generator=generator, device=device)

        def corrupt(self, x0, tau, generator=None):
            noise = torch.randn(x0.shape, generator=generator, device=x0.device)
            t = tau.view(-1, *([1] * (x0.dim() - 1)))
            return (1 - t) * x0 + t * noise

        def loss(self, prediction, x0, x_t, tau):
            return (prediction - x0).square().flatten(1).mean(dim=1)

        def step(self, x_t, prediction, tau_t, tau_s, generator=None):
            t = tau_t.view(-1, *([1] * (x_t.dim() - 1)))
            s = tau_s.view(-1, *([1] * (x_t.dim() - 1)))
            noise = (x_t - (1 - t) * prediction) / t
            return (1 - s) * prediction + s * noise


    @hookimpl
    def ladd_components():
        return [ComponentSpec("process", "flow", RectifiedFlow, FlowConfig, "rectified flow on vectors")]
"""


def test_a_latent_process_added_by_a_plugin_diffuses_co_ladds_latent(tmp_path):
    path = fake_distribution(tmp_path / "site", "flow_plugin", FLOW_PLUGIN)
    check = run_ladd("plugins", "check", "flow_plugin", env={"PYTHONPATH": path})
    assert check.returncode == 0, check.stderr
    run = tmp_path / "run"
    out = run_ladd(
        "train",
        "experiment=binsaw/coladd_joint_cpu",
        "latent_process=flow",
        *TINY,
        TWO_STAGES,
        f"run_dir={run}",
        env={"PYTHONPATH": path},
    )
    assert out.returncode == 0, out.stderr
    assert json.loads((run / "components.json").read_text())["latent_process"]["plugin"] == "flow_plugin"
    latent_losses = [
        float(row.split(",")[4]) for row in (run / "metrics.csv").read_text().splitlines()[1:] if row.startswith("2,")
    ]
    assert latent_losses and all(loss > 0 for loss in latent_losses)
    overrides = ["latent=fsq", "latent_process=flow", "sampler=joint", f"run_dir={tmp_path / 'no'}"]
    refused = run_ladd("train", *overrides, env={"PYTHONPATH": path})
    assert (
        refused.returncode == 2
        and "latent_process 'flow' diffuses vectors but latent 'fsq' holds ids" in refused.stderr
    )
