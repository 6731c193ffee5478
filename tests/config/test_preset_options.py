"""Options a preset set for the component it selected apply to that component, not to another one selected on top."""

from __future__ import annotations

import pytest
import yaml
from support import TINY, fake_distribution, run_ladd

import registry
from registry.config.composition import compose

PATIENT = """
    from dataclasses import dataclass

    from ladd_plugins.processes.masked import MaskedProcess
    from registry import ComponentSpec, hookimpl


    @dataclass
    class PatientConfig:
        horizon: int = 100  # training horizon T
        weighting: str = "constant"  # loss weights


    @hookimpl
    def ladd_components():
        return [ComponentSpec("process", "patient", MaskedProcess, PatientConfig, "the masked process, other defaults")]
"""
NOTE = "ladd: note: left out options that presets set for other components than the ones selected: "


@pytest.fixture(scope="module")
def patient(tmp_path_factory) -> str:
    return fake_distribution(tmp_path_factory.mktemp("patient"), "patient_plugin", PATIENT)


@pytest.fixture
def reg(patient, monkeypatch):
    monkeypatch.syspath_prepend(patient)
    yield registry.load(reload=True)
    monkeypatch.undo()
    registry.load(reload=True)


def test_a_component_selected_on_top_of_a_preset_gets_its_defaults_not_the_presets_values(reg, capsys):
    cfg = compose(["experiment=binsaw/mdlm_cpu", "process=patient"], reg).plain()
    assert cfg["process"] == {
        "horizon": 100,
        "weighting": "constant",
        "name": "patient",
    }  # not the preset's 4000 and elbo
    assert capsys.readouterr().err == f"{NOTE}process.horizon, process.weighting\n"
    typed = compose(["experiment=binsaw/mdlm_cpu", "process=patient", "process.horizon=50"], reg).plain()
    assert typed["process"]["horizon"] == 50 and capsys.readouterr().err == f"{NOTE}process.weighting\n"
    network = compose(["experiment=binsaw/mdlm_cpu", "backbone=mmdit"], reg).plain()["backbone"]
    assert (
        network["layers"] == 4 and capsys.readouterr().err == f"{NOTE}backbone.layers\n"
    )  # setup/binsaw_cpu's 2 was for dit


def test_the_component_the_preset_selected_keeps_its_values_when_typed_again(reg, capsys):
    preset = compose(["experiment=binsaw/diladd_seq_cpu", "run_dir=r"], reg).plain()
    again = compose(
        ["experiment=binsaw/diladd_seq_cpu", "run_dir=r", "sampler=sequential", "process=masked"], reg
    ).plain()
    assert (preset["sampler"]["name"], preset["process"]["name"]) == ("builtin:sequential", "builtin:masked")
    for slot in ("sampler", "process"):  # typed bare, the preset's component (ladd's presets name theirs qualified)
        assert reg.get(slot, again[slot].pop("name")) is reg.get(slot, preset[slot].pop("name"))
    assert again == preset and again["sampler"]["latent_steps"] == 8 and again["process"]["horizon"] == 4000
    assert capsys.readouterr().err == ""
    other = compose(["experiment=binsaw/diladd_seq_cpu", "sampler=joint"], reg).plain()
    assert other["sampler"] == {
        "guidance": 1.0, "fast": True, "token_decoder": "ancestral", "token_decoder_options": {}, "name": "joint"
    }


def test_what_an_interpolation_reads_is_the_selected_components_value(reg, tmp_path, capsys):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "three_codes.yaml").write_text(
        "# @package _global_\ndefaults:\n  - /experiment/binsaw/diladd_joint_cpu\n  - _self_\nlatent:\n  length: 3\n"
    )
    searchpath = [f"file://{tmp_path}"]
    same = compose(["experiment=three_codes", "latent=discrete"], reg, searchpath).plain()
    assert (same["latent"]["length"], same["encoder"]["length"]) == (3, 3)
    other = compose(["experiment=three_codes", "latent=fsq"], reg, searchpath).plain()
    assert (other["latent"]["length"], other["encoder"]["length"]) == (1, 1)  # the encoder's ${latent.length} follows
    assert capsys.readouterr().err == f"{NOTE}latent.length\n"


@pytest.mark.slow
def test_ladd_train_gives_a_plugin_process_its_own_horizon(patient, tmp_path):
    out = run_ladd(
        "train",
        "process=patient",
        *TINY,
        "train.stages=[{steps:2}]",
        f"run_dir={tmp_path}",
        env={"PYTHONPATH": patient},
    )
    assert out.returncode == 0, out.stderr
    assert f"{NOTE}process.horizon, process.weighting" in out.stderr.splitlines()
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["process"] == {
        "horizon": 100,
        "weighting": "constant",
        "name": "patient",
    }
