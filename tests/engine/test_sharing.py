"""Sharing models safely: export and import, refusing pickles that run code and configs that import by path."""
from __future__ import annotations

import json
import os
import pathlib
import stat

import pytest
import torch
import yaml
from support import TINY, TWO_STAGES, run_ladd

import registry
from registry.config.composition import compose
from registry.config.safety import UnsafeConfigError
from registry.engine.loading import load_run
from registry.engine.sampling import sample
from registry.errors import LaddError
from registry.storage.weights import load_weights
from registry.training.loop import train


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    reg = registry.load()
    run_dir = tmp_path_factory.mktemp("run")
    cfg = compose(["experiment=binsaw/coladd_joint_cpu", *TINY, TWO_STAGES], reg)
    return train(cfg, run_dir, reg), run_dir


@pytest.mark.slow
def test_export_then_import_samples_identically(trained, tmp_path):
    experiment, run_dir = trained
    out = run_ladd("export", str(run_dir), str(tmp_path / "model"))
    assert out.returncode == 0, out.stderr
    assert {p.name for p in (tmp_path / "model").iterdir()} == {"config.json", "model.safetensors", "README.md"}
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "model" / "model.safetensors").stat().st_mode) == 0o666 & ~umask
    document = json.loads((tmp_path / "model" / "config.json").read_text())
    assert document["components"]["latent"]["name"] == "continuous" and document["components"]["latent"]["version"]

    loaded = registry.from_pretrained(tmp_path / "model")
    original, _ = sample(experiment, 32, 4, 32, seed=7)
    again, _ = sample(loaded, 32, 4, 32, seed=7)
    assert torch.equal(original, again)

    sampled = run_ladd(
        "sample",
        "--model",
        str(tmp_path / "model"),
        "--steps",
        "4",
        "--num",
        "32",
        "--batch-size",
        "32",
        "--seed",
        "7",
        cwd=tmp_path,
    )
    assert sampled.returncode == 0, sampled.stderr
    assert not (tmp_path / "model" / "samples_4steps.txt").exists(), "a shared model folder is never written to"
    rows = (tmp_path / "samples_4steps.txt").read_text().split()
    assert torch.equal(torch.tensor([int(v) for v in rows]).view(32, -1), original)


class _Evil:
    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


@pytest.mark.slow
def test_a_pickle_that_would_run_code_is_refused(trained, tmp_path):
    experiment, _ = trained
    marker = tmp_path / "code_ran"
    torch.save({"state_dict": _Evil(marker)}, tmp_path / "evil.pt")
    with pytest.raises(LaddError, match="refusing to load .*evil.pt.*safetensors"):
        load_weights(experiment.model, tmp_path / "evil.pt")
    assert not marker.exists()

    torch.save(experiment.model.state_dict(), tmp_path / "plain.pt")
    load_weights(experiment.model, tmp_path / "plain.pt")


@pytest.mark.slow
def test_configs_that_import_by_path_or_evaluate_are_refused(trained, tmp_path):
    _, run_dir = trained
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    (tmp_path / "model.safetensors").write_bytes((run_dir / "model.safetensors").read_bytes())

    cfg["backbone"]["_target_"] = "os.system"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(UnsafeConfigError, match="backbone._target_.*registry name"):
        load_run(tmp_path, registry.load())

    del cfg["backbone"]["_target_"]
    cfg["train"]["lr"] = '${eval:\'__import__("os").system("touch pwned")\'}'
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(UnsafeConfigError, match="train.lr holds the expression"):
        load_run(tmp_path, registry.load())

    out = run_ladd("train", "+backbone._target_=os.system", *TINY, f"run_dir={tmp_path / 'cli'}")
    assert out.returncode == 2 and "_target_" in out.stderr and "registry name" in out.stderr


@pytest.mark.slow
def test_exported_model_naming_a_missing_plugin_is_refused_by_name(trained, tmp_path):
    _, run_dir = trained
    assert run_ladd("export", str(run_dir), str(tmp_path)).returncode == 0
    document = json.loads((tmp_path / "config.json").read_text())
    document["components"]["backbone"].update(
        name="fancy", plugin="fancy_models", distribution="fancy-ladd", version="2.0"
    )
    document["config"]["backbone"]["name"] = "fancy"
    (tmp_path / "config.json").write_text(json.dumps(document))
    missing = (
        "backbone is backbone 'fancy' from plugin 'fancy_models'.*fancy-ladd 2.0.*not installed: "
        "pip install 'fancy-ladd==2.0'"
    )
    with pytest.raises(LaddError, match=missing):
        registry.from_pretrained(tmp_path)
