"""Warm starts (train.init_from): Co-LADD's token stream from an MDLM DiT, an imported MDLM fine-tuned, and refusals."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
from mdlm_reference import write_checkpoint
from support import import_mdlm

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.loading import load_run
from registry.engine.warm_start import match, warm_start
from registry.errors import LaddError
from registry.storage.weights import read_tensors, save_tensors
from registry.training.loop import train

#: a small DiT-family network with MDLM's layer variants, on the offline text demo
SMALL = [
    "dataset.seq_len=32", "train.batch_size=8", "train.warmup_steps=5", "train.progress=false", "train.log_every=1",
    "backbone.hidden=32", "backbone.layers=2", "backbone.heads=2", "backbone.cond_dim=32", "backbone.norm_eps=1e-5",
    "backbone.norm_weight=true", "backbone.attention_bias=false", "train.checkpoint_every=2",
]
COLADD = ["experiment=demo/coladd", *SMALL, "latent.length=4", "encoder.length=4"]


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.fixture(scope="module")
def mdlm_run(tmp_path_factory, reg):
    """A small MDLM trained for 150 steps on the demo corpus: the source of the warm starts."""
    run = tmp_path_factory.mktemp("source") / "mdlm"
    train(compose(["experiment=demo/mdlm", *SMALL, "train.lr=3e-3", "train.stages=[{steps:150}]"], reg), run, reg)
    return run


def token_loss(experiment) -> float:
    """The token loss of one held-out batch under fixed noise draws."""
    x0 = next(experiment.dataset.batches(32, 0, "validation"))
    experiment.model.eval()
    with torch.no_grad():
        return experiment.model.loss(x0, torch.Generator().manual_seed(0))["token"].item()


@pytest.mark.slow
def test_co_ladd_takes_its_whole_token_stream_from_an_mdlm_dit_and_starts_below_random_init(mdlm_run, reg, tmp_path):
    cfg = compose([*COLADD, f"run_dir={tmp_path}"], reg)
    torch.manual_seed(0)
    fresh = build_experiment(cfg, reg)
    torch.manual_seed(0)
    warm = build_experiment(cfg, reg)
    report = warm_start(warm.model, warm.dataset, mdlm_run, reg)
    source = load_run(mdlm_run, reg)[0].model.state_dict()
    ours, initial = warm.model.state_dict(), fresh.model.state_dict()
    stream = {"backbone.embed_x.weight": "backbone.embed.weight"}
    stream |= {name: name.replace("final_x.", "final.") for name in ours if name.startswith("backbone.final_x.")}
    for block in range(2):
        here = f"backbone.blocks.{block}.tokens."
        there = f"backbone.trunk.blocks.{block}."
        stream |= {name: name.replace(here, there) for name in ours if name.startswith(here)}
    assert sorted(report.loaded) == sorted(stream.items())
    assert all(torch.equal(ours[here], source[there]) for here, there in stream.items())
    assert all(torch.equal(ours[name], initial[name]) for name in report.new), "the rest keeps its initialisation"
    assert {name for name, _ in report.skipped} == {"backbone.condition"}, "MDLM's constant condition has no place here"
    assert any(name.startswith("backbone.blocks.0.latent.") for name in report.new)
    row = next(line for line in report.table().splitlines() if "backbone.blocks.N.tokens.qkv.weight" in line)
    assert row.split()[:2] == ["loaded", "2"] and row.endswith("from backbone.trunk.blocks.N.qkv.weight")
    assert token_loss(warm) < token_loss(fresh) - 0.3, (token_loss(warm), token_loss(fresh))


@pytest.mark.slow
def test_a_warm_started_run_trains_samples_and_resumes_without_the_source(mdlm_run, reg, tmp_path, capsys):
    source = tmp_path / "source"
    shutil.copytree(mdlm_run, source)
    stage = "train.stages=[{steps:4,lambda_latent:1.0,freeze_encoder:true}]"
    cfg = compose([*COLADD, stage, f"train.init_from={source}"], reg)
    reference = train(cfg, tmp_path / "reference", reg)
    printed = capsys.readouterr().out
    assert "warm start from" in printed and "newly initialised" in printed and "loaded" in printed
    tokens = reference.sampler.sample(reference.model, 2, 4, torch.Generator().manual_seed(0)).tokens
    assert tokens.shape == (2, 32) and int(tokens.max()) < reference.dataset.vocab_size

    run = tmp_path / "interrupted"
    train(cfg, run, reg)
    capsys.readouterr()
    for done in (run / "checkpoints" / "stage1" / "final.safetensors", run / "model.safetensors"):
        done.unlink()  # as if stopped after its last checkpoint
    shutil.rmtree(source)  # a resume that read the source again would fail
    resumed = train(cfg, run, reg)
    assert "is not read again" in capsys.readouterr().out
    expected = reference.model.state_dict()
    assert all(torch.equal(value, expected[name]) for name, value in resumed.model.state_dict().items())


def test_an_imported_mdlm_fine_tunes_with_every_tensor_loaded(reg, tmp_path, capsys):
    write_checkpoint(tmp_path / "mdlm", hidden=32, blocks=2, heads=4, cond=16, time_conditioning=True, length=24)
    imported = import_mdlm(str(tmp_path / "mdlm"), tmp_path / "imported", [], reg)
    cfg = compose([
        "experiment=owt/mdlm_published", "dataset.source=shakespeare", "dataset.seq_len=24", "backbone.hidden=32",
        "backbone.layers=2", "backbone.heads=4", "backbone.cond_dim=16", "backbone.token_time_conditioning=true",
        "backbone.time_input=sigma", "train.batch_size=2", "train.warmup_steps=1", "train.progress=false",
        "train.stages=[{steps:1}]", f"train.init_from={imported}", "metric=entropy",
    ], reg)
    experiment = build_experiment(cfg, reg)
    report = warm_start(experiment.model, experiment.dataset, imported, reg)
    assert report.new == [] and report.skipped == [] and len(report.loaded) == len(experiment.model.state_dict())
    assert all(here == there for here, there in report.loaded)
    train(cfg, tmp_path / "run", reg)
    assert "0 newly initialised, 0 skipped" in capsys.readouterr().out


def test_a_source_of_another_vocabulary_or_no_model_is_refused_before_anything_is_written(reg, tmp_path):
    write_checkpoint(tmp_path / "mdlm", hidden=32, blocks=2, heads=4, cond=16, time_conditioning=False, length=32)
    imported = import_mdlm(str(tmp_path / "mdlm"), tmp_path / "imported", [], reg)  # GPT-2's tokens
    (tmp_path / "empty").mkdir()
    damaged = Path(shutil.copytree(imported, tmp_path / "damaged"))  # a Hugging Face model imported with a NaN
    tensors, metadata = read_tensors(damaged / "model.safetensors")
    name = sorted(name for name, tensor in tensors.items() if tensor.is_floating_point())[0]
    tensors[name].view(-1)[0] = float("nan")
    save_tensors(tensors, damaged / "model.safetensors", metadata)
    for source, message in (
        (imported, "was trained on another vocabulary (50257 tokens; this experiment's data has 30522)"),
        (tmp_path / "empty", "holds neither config.json nor config.yaml: it is not a ladd model"),
        (tmp_path / "missing", f"train.init_from={tmp_path / 'missing'} does not exist; set train.init_from to"),
        (damaged, f"model.safetensors holds non-finite values (NaN or inf) in {name}: the weights are damaged"),
    ):
        cfg = compose(["experiment=demo/mdlm", *SMALL, "train.stages=[{steps:1}]", f"train.init_from={source}"], reg)
        with pytest.raises(LaddError, match=re.escape(message)):
            train(cfg, tmp_path / "run", reg)
        assert not (tmp_path / "run").exists()


def test_names_and_shapes_decide_what_loads(reg):
    cfg = compose(["experiment=demo/mdlm", *SMALL], reg)
    model = build_experiment(cfg, reg).model
    tensors = {name: torch.zeros_like(value) for name, value in model.state_dict().items()}
    tensors["backbone.embed.weight"] = torch.zeros(3, 32)
    tensors["backbone.spare"] = torch.zeros(1)
    del tensors["backbone.final.head.bias"]
    report = match(model, tensors, Path("src"))
    assert report.new == ["backbone.final.head.bias"]
    assert report.skipped == [
        ("backbone.embed.weight", "shape [3, 32] in the source, [30523, 32] here"),
        ("backbone.spare", "in the source, not in this model"),
    ]
    assert len(report.loaded) == len(tensors) - 2 and report.source == Path("src")


def test_a_run_that_has_begun_resumes_after_its_warm_start_source_is_gone(reg, tmp_path):
    from support import TINY

    from registry.cli.train import TrainCommand
    from registry.engine.runs import RunFolder

    source = tmp_path / "gone"
    for name, extra in (("whole", []), ("lora", ["train.lora.rank=2"])):
        run = tmp_path / name
        args = ["experiment=binsaw/mdlm_cpu", *TINY, *extra, f"train.init_from={source}", f"run_dir={run}"]
        with pytest.raises(LaddError, match=f"train.init_from={source} "):
            TrainCommand.parse(args).prepared(reg)  # a run that begins reads it
        with RunFolder(run).claim(compose(args, reg).plain()):
            pass
        (run / "checkpoints" / "stage1").mkdir(parents=True)
        (run / "checkpoints" / "stage1" / "last.ckpt").write_bytes(b"")  # killed mid-stage
        if extra:  # over a frozen base, which its checkpoints never hold, a resume reads the source again
            with pytest.raises(LaddError, match=f"train.init_from={source} "):
                TrainCommand.parse(args).prepared(reg)
        else:
            assert [job.run_dir for job in TrainCommand.parse(args).prepared(reg)] == [run]


@pytest.mark.slow
def test_ladd_train_resumes_a_warm_started_run_killed_mid_stage_after_its_source_is_deleted(tmp_path, capsys):
    from support import TINY

    from registry.cli import main

    source, run = tmp_path / "source", tmp_path / "run"
    stage = "train.stages.stage1.steps=4"
    assert main(["train", "experiment=binsaw/mdlm_cpu", *TINY, stage, f"run_dir={source}"]) == 0
    args = ["train", "experiment=binsaw/mdlm_cpu", *TINY, stage, "train.checkpoint_every=2",
            f"train.init_from={source}", f"run_dir={run}"]
    assert main(args) == 0
    for done in (run / "checkpoints" / "stage1" / "final.safetensors", run / "model.safetensors"):
        done.unlink()  # as if killed after its step-4 checkpoint, before the stage's end
    shutil.rmtree(source)  # docs/pretrained.md: a resumed run never reads the source again
    capsys.readouterr()
    assert main(args) == 0
    assert f"train.init_from ({source}) started it and is not read again" in capsys.readouterr().out
    assert (run / "model.safetensors").is_file()
