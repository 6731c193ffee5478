"""The typed settings: a command checks its config once, where it starts, and passes the settings down."""
from __future__ import annotations

import pytest
from support import TINY

from registry.cli import main
from registry.config import settings as settings_module
from registry.config.settings import Settings, checked
from registry.errors import InvalidConfigError


def test_checked_settings_read_as_attributes_and_plain_data_round_trips():
    plain = {"dataset": {"name": "binsaw"}, "train": {"stages": [{"steps": 3}, {"steps": 2, "lambda_latent": 1.0}]}}
    settings = checked(plain)
    assert isinstance(settings, Settings) and settings.selection("dataset") == {"name": "binsaw"}
    assert [(name, stage.steps, stage.lambda_latent) for name, stage in settings.train.stages.items()] == [
        ("stage1", 3, 0.0), ("stage2", 2, 1.0)
    ]
    assert settings.selection("latent") is None and settings.run_dir.startswith("runs/")
    assert checked(settings.plain()) == settings


def test_a_bad_value_is_refused_naming_its_key():
    with pytest.raises(InvalidConfigError, match=r"^train.lr=-1.0 is out of range"):
        checked({"train": {"lr": -1, "stages": {"stage1": {"steps": 1}}}})
    with pytest.raises(InvalidConfigError, match=r"^train.bogus: no such option"):
        checked({"train": {"bogus": 1, "stages": {"stage1": {"steps": 1}}}})


@pytest.mark.slow
def test_each_command_checks_its_config_once(tmp_path, monkeypatch):
    checks: list[int] = []
    typed = settings_module._typed
    monkeypatch.setattr(settings_module, "_typed", lambda cfg: checks.append(1) or typed(cfg))
    run, model = tmp_path / "run", tmp_path / "model"
    sample = ["--num", "2", "--steps", "2"]
    commands = [
        ["train", "experiment=binsaw/coladd_seq_cpu", *TINY, "train.stages=[{steps:2},{steps:2}]", f"run_dir={run}"],
        ["sample", str(run), *sample, "--out", str(tmp_path / "a.txt")],
        ["eval", str(run), "--num-samples", "8", "--batch-size", "8", "--budgets", "1", "--loss-batches", "1"],
        ["export", str(run), str(model)],
        ["sample", "--model", str(model), *sample, "--out", str(tmp_path / "b.txt")],
        ["flops", "experiment=binsaw/coladd_seq_cpu"],
    ]
    for command in commands:
        checks.clear()
        assert main(command) == 0
        assert len(checks) == 1, command
