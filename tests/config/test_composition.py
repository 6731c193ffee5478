"""Presets that compose: another component selected on top of any preset, stages keyed by name, run folders of list
stages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support import TINY, run_ladd

import ladd_configs
import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.loading import load_run
from registry.engine.runs import RECORD_FILE, RunFolder
from registry.errors import IncompatibleComponentsError, InvalidConfigError
from registry.training.loop import train

EXPERIMENTS = Path(ladd_configs.__file__).parent / "experiment"
PRESETS = sorted(str(path.relative_to(EXPERIMENTS).with_suffix("")) for path in EXPERIMENTS.rglob("*.yaml"))


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_every_latent_can_be_selected_on_top_of_every_preset(preset, reg):
    for latent in reg.names("latent"):
        cfg = compose([f"experiment={preset}", f"latent={latent}"], reg).plain()
        assert cfg["latent"]["name"] == latent
        assert set(cfg["latent"]) - {"name"} <= set(reg.get("latent", latent).option_names())


def test_options_of_the_replaced_component_drop_out_with_a_note(reg, capsys):
    kept = compose(
        ["experiment=lm1b/diladd_32", "latent=continuous", "latent_process=vp", "latent_schedule=vp_sqrt"], reg
    ).plain()
    assert kept["latent"]["name"] == "continuous" and "decay" not in kept["latent"]
    assert (kept["latent"]["length"], kept["latent"]["width"]) == (1, 32), "continuous's defaults, not the preset's"
    note = capsys.readouterr().err
    assert note.count("\n") == 1 and "latent.decay" in note and "latent.length" in note and "latent.width" not in note
    compose(["experiment=lm1b/diladd_32"], reg).plain()
    assert capsys.readouterr().err == "", "a preset used as it is drops nothing"
    swapped = compose(
        ["experiment=lm1b/coladd_32", "latent=fsq", "latent_process=masked", "latent_schedule=linear"], reg
    ).plain()
    assert (
        swapped["latent"]["name"] == "fsq"
        and "std" not in swapped["latent"]
        and "latent.std" in capsys.readouterr().err
    )


def test_an_option_typed_for_a_component_that_lacks_it_is_an_error_naming_it(reg):
    with pytest.raises(
        InvalidConfigError,
        match=r"^latent\.codebook_size: latent 'continuous' has no option 'codebook_size'.* valid options: length, "
            r"width",
    ):
        compose(["experiment=binsaw/diladd_joint_cpu", "latent=continuous", "latent.codebook_size=8"], reg)
    with pytest.raises(InvalidConfigError, match=r"^latent\.std: latent 'discrete' has no option 'std'"):
        compose(["experiment=binsaw/diladd_joint_cpu", "latent.std=0.1"], reg)
    with pytest.raises(
        InvalidConfigError, match=r"^encoder\.hidden: no encoder is selected; choose one with encoder=NAME"
    ):
        compose(["experiment=binsaw/coladd_joint_cpu", "~encoder", "encoder.hidden=8"], reg)


def test_an_emptied_optional_slot_drops_what_presets_set_in_it(reg):
    emptied = ["~encoder", "latent=null", "latent_process=null", "latent_schedule=null"]
    cfg = compose(["experiment=binsaw/coladd_joint_cpu", *emptied, "backbone=dit", "sampler=ancestral"], reg).plain()
    assert cfg["encoder"] is None


def test_stages_are_keyed_by_name_so_overlays_change_one(reg):
    stages = compose(["experiment=binsaw/diladd_joint_cpu", "train.stages.stage2.steps=7"], reg).plain()["train"][
        "stages"
    ]
    assert list(stages) == ["stage1", "stage2"]
    assert (stages["stage1"]["steps"], stages["stage2"]["steps"], stages["stage2"]["freeze_encoder"]) == (500, 7, True)
    one = compose(["experiment=binsaw/diladd_joint_cpu", "train.stages.stage2=null"], reg).plain()["train"]["stages"]
    assert list(one) == ["stage1"]
    mdlm = compose(["experiment=binsaw/mdlm_cpu"], reg).plain()["train"]["stages"]
    assert list(mdlm) == ["stage1"] and mdlm["stage1"]["steps"] == 1000
    replaced = compose(
        ["experiment=binsaw/diladd_joint_cpu", "train.stages=[{steps:2},{steps:3,lambda_latent:1.0}]"], reg
    ).plain()
    assert replaced["train"]["stages"] == {
        "stage1": {"steps": 2, "lambda_latent": 0.0, "freeze_encoder": False, "max_minutes": None},
        "stage2": {"steps": 3, "lambda_latent": 1.0, "freeze_encoder": False, "max_minutes": None},
    }
    with pytest.raises(InvalidConfigError, match=r"^train\.stages\.stage2\.steps=0 is out of range"):
        compose(["experiment=binsaw/diladd_joint_cpu", "train.stages.stage2.steps=0"], reg)


def test_a_preset_of_list_stages_is_refused_with_the_form_to_write(reg, tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "old.yaml").write_text(
        "# @package _global_\ndefaults:\n  - /experiment/binsaw/mdlm_cpu\n  - _self_\ntrain:\n  stages:\n    - {steps: "
        "3}\n"
    )
    with pytest.raises(
        InvalidConfigError,
        match=r"^In 'experiment/old': a list where .* train\.stages is a mapping of named stages: write `stages: "
            r"\{stage1",
    ):
        compose(["experiment=old"], reg, searchpath=[f"file://{tmp_path}"])


@pytest.mark.slow
def test_a_run_folder_saved_with_list_stages_loads_and_resumes(reg, tmp_path):
    run = tmp_path / "run"
    train(compose([*TINY, "train.stages=[{steps:2},{steps:2}]"], reg), run, reg)
    config, record = yaml.safe_load((run / "config.yaml").read_text()), json.loads((run / RECORD_FILE).read_text())
    assert list(config["train"]["stages"]) == ["stage1", "stage2"]
    for saved in (config, record["settings"]):
        saved["train"]["stages"] = list(saved["train"]["stages"].values())  # as ladd wrote them before stages had names
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (run / RECORD_FILE).write_text(json.dumps(record))
    experiment, settings = load_run(run, reg)
    assert list(settings.train.stages_to_run()) == ["stage1", "stage2"]
    assert RunFolder(run).check(settings.plain()) == [], "the same settings, whichever form recorded them"
    train(settings, run, reg)  # the finished run, trained again into its folder: accepted, nothing retrained


@pytest.mark.slow
def test_ladd_train_selects_another_latent_on_top_of_a_preset(tmp_path):
    run = tmp_path / "run"
    out = run_ladd(
        "train",
        "experiment=binsaw/diladd_joint_cpu",
        "latent=fsq",
        *TINY,
        "train.stages.stage1.steps=2",
        "train.stages.stage2.steps=2",
        f"run_dir={run}",
    )
    assert out.returncode == 0, out.stderr
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["latent"]["name"] == "fsq" and "codebook_size" not in saved["latent"]
    assert [s["steps"] for s in saved["train"]["stages"].values()] == [2, 2]
    typed = run_ladd(
        "train",
        "experiment=binsaw/diladd_joint_cpu",
        "latent=continuous",
        "latent.codebook_size=8",
        f"run_dir={tmp_path / 'no'}",
    )
    assert typed.returncode == 2
    assert "latent.codebook_size: latent 'continuous' has no option 'codebook_size'" in typed.stderr
    assert not (tmp_path / "no").exists()


def test_no_latent_on_top_of_a_ladd_preset_empties_its_latent_channel(reg, capsys):
    cfg = compose(
        ["experiment=binsaw/coladd_joint_cpu", "latent=null", "backbone=dit", "sampler=ancestral"], reg
    ).plain()
    assert [cfg[slot] for slot in ("latent", "latent_schedule", "latent_process", "encoder")] == [None] * 4
    assert "latent=null removes: latent_schedule, latent_process, encoder" in capsys.readouterr().err
    assert not build_experiment(cfg, reg).model.has_latent
    typed = compose(
        ["experiment=binsaw/coladd_joint_cpu", "latent=null", "latent_process=vp", "backbone=dit", "sampler=ancestral"],
        reg,
    ).plain()
    with pytest.raises(IncompatibleComponentsError, match="^latent_process is set but there is no latent channel"):
        build_experiment(typed, reg)


@pytest.mark.parametrize("override", [
    "train.stages.stage2.steps=20", "train.stages.stage2={steps:20}", "train.stages.stage3.steps=20",
    "+train.stages.stage3.steps=20", "+train.stages.stage3={steps:20}",
])
def test_a_stage_the_experiment_does_not_have_is_one_line_naming_its_stages(reg, override):
    with pytest.raises(InvalidConfigError) as refused:
        compose(["experiment=binsaw/mdlm_cpu", override], reg)
    name = override.lstrip("+").split(".")[2].split("=")[0]
    assert str(refused.value) == (
        f"{override}: this experiment has no stage {name!r} (its stages: stage1); to add one, give every stage: "
        f"train.stages=[{{steps:...}},{{steps:...}}]"
    )
