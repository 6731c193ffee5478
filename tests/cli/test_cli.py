"""The command line: listing, config errors, training, multirun sweeps, sampling and evaluation."""
from __future__ import annotations

import json
import os
import re
import stat

import pytest
import yaml
from support import TINY, run_ladd

from registry import KINDS

pytestmark = pytest.mark.slow  # every test runs the ladd command in a subprocess


def test_list_components_table_shows_the_distribution():
    out = run_ladd("list-components", "--kind", "schedule")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split() == ["kind", "name", "plugin", "distribution", "version", "description"]
    assert rows and all(row.split()[2:4] == ["builtin", "ladd"] for row in rows)


def test_show_prints_every_option_with_type_default_and_help():
    out = run_ladd("show", "latent", "discrete")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "latent 'discrete' of plugin 'builtin' (ladd 0.1.0)"
    assert "factory: ladd_plugins.latents.quantizers:VQLatent" in out.stdout
    assert "implements: registry.interfaces.Latent" in out.stdout
    commitment = next(line.split(maxsplit=3) for line in lines if line.split()[:1] == ["commitment"])
    assert commitment == ["commitment", "float", "0.1", "beta: the auxiliary loss is beta * L_VQ"]
    sync = next(line.split(maxsplit=4) for line in lines if line.split()[:1] == ["sync_codebook"])
    assert sync[1:4] == ["bool", "|", "None"] and sync[4].startswith("null")
    assert "options (latent.OPTION=VALUE):" in lines
    unknown = run_ladd("show", "latent", "discret")
    assert unknown.returncode == 2 and "did you mean 'discrete'" in unknown.stderr


def test_show_names_every_slot_a_component_can_fill():
    out = run_ladd("show", "process", "vp")  # a token process or the latent channel's
    assert "options (process.OPTION=VALUE or latent_process.OPTION=VALUE):" in out.stdout.splitlines(), out.stdout


def test_list_components_json_covers_every_kind_with_origin():
    out = run_ladd("list-components", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["kind"] for r in rows} == set(KINDS)
    for row in rows:
        assert row["plugin"] and row["distribution"] == "ladd" and row["version"]
    only = json.loads(run_ladd("list-components", "--kind", "latent", "--json").stdout)
    assert {r["name"] for r in only} == {"continuous", "discrete", "rvq", "fsq", "lfq"}


def test_bad_overrides_give_one_clear_message_and_nonzero_exit(tmp_path):
    unknown = run_ladd("train", "backbone=transformerx", f"run_dir={tmp_path}/a")
    assert unknown.returncode != 0
    assert "transformerx" in unknown.stderr and "dit" in unknown.stderr and "mmdit" in unknown.stderr
    assert "Traceback" not in unknown.stderr

    wrong_type = run_ladd("train", "train.batch_size=many", f"run_dir={tmp_path}/b")
    assert wrong_type.returncode != 0 and "many" in wrong_type.stderr and "Traceback" not in wrong_type.stderr

    unknown_key = run_ladd("train", "train.batchsize=3", f"run_dir={tmp_path}/c")
    assert unknown_key.returncode != 0 and "batchsize" in unknown_key.stderr

    bad_field = run_ladd("train", "backbone.depth=3", f"run_dir={tmp_path}/d")
    assert bad_field.returncode != 0 and "depth" in bad_field.stderr

    bad_value = run_ladd("train", "dataset.floor=0.7", f"run_dir={tmp_path}/e")
    assert bad_value.returncode == 2 and "dataset 'binsaw'" in bad_value.stderr and "0.7" in bad_value.stderr
    assert "Traceback" not in bad_value.stderr

    missing = run_ladd("eval", str(tmp_path / "no_such_run"))
    assert missing.returncode == 2 and "no_such_run" in missing.stderr and "Traceback" not in missing.stderr


def test_incompatible_components_are_rejected_before_training(tmp_path):
    out = run_ladd("train", "sampler=joint", *TINY, "train.stages=[{steps:2}]", f"run_dir={tmp_path}")
    assert out.returncode == 2
    assert "sampler 'joint'" in out.stderr and "latent=null" in out.stderr
    assert not (tmp_path / "model.safetensors").exists()


def test_a_latent_process_that_cannot_diffuse_the_latent_is_one_line_before_training(tmp_path):
    out = run_ladd(
        "train", "experiment=binsaw/diladd_joint_cpu", "latent=fsq", "latent_process=vp", f"run_dir={tmp_path / 'run'}"
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith(
        "ladd: error: latent_process 'vp' diffuses vectors but latent 'fsq' holds ids; valid pairings: "
    )
    assert not (tmp_path / "run").exists()


def test_train_sample_eval_round_trip(tmp_path):
    run = tmp_path / "run"
    out = run_ladd("train", *TINY, "train.progress=true", "train.stages=[{steps:4}]", f"run_dir={run}")
    assert out.returncode == 0, out.stderr
    # stdout is a pipe here: the progress is a line per logged step (tests/training/test_progress_lines.py has the bar)
    assert "stage 1: step 4/4" in out.stdout and "Epoch" not in out.stdout
    assert "v_num" not in out.stdout and "loss=" in out.stdout.rsplit("4/4", 1)[1], "the last line shows the loss terms"
    noise = [line for line in out.stderr.splitlines() if any(w in line.lower() for w in ("warn", "deprecat", "tip:"))]
    assert noise == []
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((run / "model.safetensors").stat().st_mode) == 0o666 & ~umask
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["backbone"]["name"] == "builtin:dit" and config["dataset"]["seq_len"] == 16  # as the preset names it
    origins = json.loads((run / "components.json").read_text())
    assert origins["backbone"]["plugin"] == "builtin" and origins["backbone"]["distribution"] == "ladd"
    metrics = (run / "logs" / "stage1" / "metrics.csv").read_text()
    assert "train/loss" in metrics

    sampled = run_ladd("sample", str(run), "--steps", "4", "--num", "5", cwd=tmp_path)
    assert sampled.returncode == 0, sampled.stderr
    assert "\r" not in sampled.stderr
    assert re.search(r"^sampling 4 steps: 1/1, chunk 1 done \([\d.]+ s\)$", sampled.stderr, re.M), sampled.stderr
    rows = (tmp_path / "samples_4steps.txt").read_text().split("\n")[:5]
    assert all(len(r.split()) == 16 and set(r.split()) <= {"0", "1"} for r in rows)

    evaluated = run_ladd("eval", str(run), "--budgets", "1,2")
    assert evaluated.returncode == 0, evaluated.stderr
    result = json.loads((run / "eval_mdlm.json").read_text())
    assert [s["steps"] for s in result["scores"]] == [1, 2]
    assert result["token_loss"] > 0 and "swd" in evaluated.stdout
    # stderr is a pipe too: a line per budget, not a bar's carriage returns
    shown = [line for line in evaluated.stderr.splitlines() if line.startswith("evaluating mdlm")]
    assert "\r" not in evaluated.stderr and len(shown) == 2, evaluated.stderr
    assert re.fullmatch(r"evaluating mdlm: 2/2, 2 steps done \([\d.]+ s\)", shown[1]), shown

    reported = run_ladd("report", str(run / "eval_mdlm.json"), "--out", str(tmp_path / "report"))
    assert reported.returncode == 0, reported.stderr
    rows = (tmp_path / "report" / "reconstruction.csv").read_text().splitlines()
    assert rows[0] == "method,lx" and rows[1].startswith("oracle,0.50") and rows[2].startswith("mdlm,")
    assert (tmp_path / "report" / "swd.png").stat().st_size > 1000


def test_multirun_sweeps_over_components(tmp_path):
    out = run_ladd(
        "train", "-m", "schedule=linear,cosine", *TINY, "train.stages=[{steps:2}]", f"hydra.sweep.dir={tmp_path}"
    )
    assert out.returncode == 0, out.stderr
    chosen = sorted(
        yaml.safe_load((tmp_path / str(job) / "config.yaml").read_text())["schedule"]["name"] for job in (0, 1)
    )
    assert chosen == ["cosine", "linear"]
    assert all((tmp_path / str(job) / "components.json").is_file() for job in (0, 1))
