"""Runs over a frozen base (``train.lora``, ``train.freeze``): what their folders hold, exporting them merged or as an
adapter, resuming them after a kill, and the memory options (activation checkpointing, sharding, the dry run)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from run_state import assert_same_run
from safetensors.torch import load_file
from support import TESTS, TINY

import registry
from ladd_plugins.backbones.dit import DiT, DiTConfig
from registry.cli import main
from registry.config.composition import compose
from registry.config.settings import checked
from registry.engine.assembly import build_experiment
from registry.engine.export import export
from registry.engine.loading import from_pretrained
from registry.errors import IncompatibleComponentsError, InvalidConfigError, LaddError
from registry.host.component import Component, ComponentSpec, Origin
from registry.host.registry import Registry
from registry.storage.weights import save_weights
from registry.training.loop import train
from registry.training.strategy import recompute_blocks

HIDDEN, LAYERS, RANK, ALPHA = 16, 2, 2, 4.0
FULL = [
    "experiment=binsaw/mdlm_cpu", *TINY, f"backbone.hidden={HIDDEN}", f"backbone.layers={LAYERS}", "backbone.heads=2",
    "train.warmup_steps=0", "train.lr=3e-3",
]
#: LoRA of the DiT's attention (its own targets) with dropout, the learned condition trained in full, two stages
LORA = [
    *FULL, f"train.lora.rank={RANK}", f"train.lora.alpha={ALPHA}", "train.lora.dropout=0.1",
    "train.lora.full=[backbone.condition]", "train.checkpoint_every=1", "train.stages=[{steps:3},{steps:3}]",
]


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.fixture(scope="module")
def source(tmp_path_factory, reg) -> Path:
    """A tiny MDLM trained a few steps and exported: the model the adapters are trained over."""
    root = tmp_path_factory.mktemp("source")
    train(compose([*FULL, "train.stages=[{steps:4}]"], reg), root / "run", reg)
    return export(root / "run", root / "model", reg)


@pytest.fixture(scope="module")
def adapted(tmp_path_factory, reg, source) -> tuple[list[str], Path]:
    """The LoRA run over ``source``: its overrides and its folder."""
    overrides = [*LORA, f"train.init_from={source}"]
    run = tmp_path_factory.mktemp("lora") / "run"
    train(compose([*overrides, f"run_dir={run}"], reg), run, reg)
    return overrides, run


def _trained_names() -> set[str]:
    """What the LoRA run trains, named here: each attention projection's two adapter matrices, and the condition."""
    return {
        f"backbone.trunk.blocks.{layer}.{part}.lora_{half}.default.weight"
        for layer in range(LAYERS) for part in ("qkv", "proj") for half in ("A", "B")
    } | {"backbone.condition"}


def _logits(experiment) -> torch.Tensor:
    x_t = torch.randint(0, 3, (4, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return experiment.model.predict(x_t, torch.full((4,), 0.5), None, None).tokens


@pytest.mark.slow
def test_the_run_folder_holds_what_trains_and_no_copy_of_the_frozen_base(reg, source, adapted):
    run = adapted[1]
    trained = _trained_names()
    base = {name: t for name, t in load_file(source / "model.safetensors").items() if name != "backbone.condition"}
    stored: list[torch.Tensor] = []
    for path in sorted(run.rglob("*.safetensors")):
        tensors = load_file(path)
        assert set(tensors) == trained, path
        stored += tensors.values()
    for path in sorted(run.rglob("*.ckpt")):
        checkpoint = torch.load(path, weights_only=True)
        for part in ("state_dict", "current_model_state"):  # the EMA weights and the raw ones
            assert set(checkpoint[part]) == {f"model.{name}" for name in trained}, (path, part)
            stored += checkpoint[part].values()
        moments = [m for s in checkpoint["optimizer_states"][0]["state"].values() for m in s.values() if m.dim()]
        assert len(moments) == 2 * len(trained)  # AdamW's two moments of each trained tensor, nothing else
        stored += moments
    assert len(list(run.rglob("*.ckpt"))) == 2 and len(list(run.rglob("*.safetensors"))) == 3
    copies = [name for name, b in base.items() for t in stored if t.shape == b.shape and torch.equal(t, b)]
    assert copies == [], "a tensor of the frozen base was written into the run folder"
    assert sum(t.numel() for t in stored) < sum(b.numel() for b in base.values())


@pytest.mark.slow
def test_export_merges_each_adapter_as_the_base_plus_its_scaled_product(reg, source, adapted, tmp_path):
    merged = load_file(export(adapted[1], tmp_path / "merged", reg) / "model.safetensors")
    base, trained = load_file(source / "model.safetensors"), load_file(adapted[1] / "model.safetensors")
    assert set(merged) == set(base)
    for layer in range(LAYERS):
        for part in ("qkv", "proj"):
            name = f"backbone.trunk.blocks.{layer}.{part}"
            a, b = (trained[f"{name}.lora_{half}.default.weight"] for half in ("A", "B"))
            expected = base[f"{name}.weight"] + (ALPHA / RANK) * b @ a
            assert (merged[f"{name}.weight"] - expected).abs().max() < 1e-6
            assert not torch.equal(merged[f"{name}.weight"], base[f"{name}.weight"]), "the adapter trained"
            assert torch.equal(merged[f"{name}.bias"], base[f"{name}.bias"])
    assert torch.equal(merged["backbone.condition"], trained["backbone.condition"])


@pytest.mark.slow
def test_an_exported_adapter_loads_onto_its_base_and_is_refused_by_any_other(reg, source, adapted, tmp_path):
    adapter = export(adapted[1], tmp_path / "adapter", reg, adapter=True)
    assert sorted(p.name for p in adapter.iterdir()) == ["README.md", "adapter.json", "adapter.safetensors"]
    merged = export(adapted[1], tmp_path / "merged", reg)
    onto_base = from_pretrained(source, reg, adapter=adapter)
    assert (_logits(onto_base) - _logits(from_pretrained(merged, reg))).abs().max() < 1e-6
    with pytest.raises(LaddError, match=rf"^adapter {adapter} was trained over a base whose frozen weights have "
                                        rf"SHA-256 [0-9a-f]{{16}}\.\.\., but the base here has .*; load it onto the "
                                        rf"model it was trained over \({source.name}\)$"):  # a portable name
        from_pretrained(merged, reg, adapter=adapter)
    with pytest.raises(LaddError, match="trained every weight .* no adapter to export alone"):
        export(source.parent / "run", tmp_path / "none", reg, adapter=True)


@pytest.mark.slow
def test_a_killed_adapter_run_resumes_to_the_uninterrupted_run_bitwise(reg, adapted, tmp_path):
    overrides, reference = adapted
    run = tmp_path / "run"
    # SIGKILL just after stage 2's first checkpoint is in place, the next step under way
    killed = subprocess.run(
        [sys.executable, str(TESTS / "kill_switch.py"), "SIGKILL:after:1:checkpoints/stage2/last.ckpt", "train",
         *overrides, f"run_dir={run}"],
        capture_output=True, text=True, timeout=600,
    )
    assert killed.returncode == -9, killed.stderr
    assert not (run / "model.safetensors").exists() and (run / "checkpoints/stage1/final.safetensors").is_file()
    train(compose([*overrides, f"run_dir={run}"], reg), run, reg)
    assert_same_run(reference, run)


@pytest.mark.slow
def test_a_run_whose_base_changed_is_refused_before_it_writes(reg, source, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(source, model)
    run = tmp_path / "run"
    settings = compose([*FULL, "train.lora.rank=2", f"train.init_from={model}", f"run_dir={run}",
                        "train.checkpoint_every=1", "train.stages=[{steps:2}]"], reg)
    train(settings, run, reg)
    for path in (run / "model.safetensors", run / "checkpoints/stage1/final.safetensors"):
        path.unlink()  # as if killed after its last checkpoint
    changed = from_pretrained(model, reg)
    with torch.no_grad():
        changed.model.backbone.embed.weight[0, 0] += 1.0
    save_weights(changed.model, model / "model.safetensors")
    before = {path: path.stat().st_mtime_ns for path in run.rglob("*")}
    with pytest.raises(LaddError, match=r"last\.ckpt was trained over a base whose frozen weights have SHA-256 "
                                        r".*train\.init_from \(.*\) must hold the weights the run began with"):
        train(settings, run, reg)
    assert {path: path.stat().st_mtime_ns for path in run.rglob("*")} == before


def test_activation_checkpointing_recomputes_the_same_loss_and_gradients(reg):
    settings = compose([*FULL, "backbone.dropout=0.1"], reg)
    torch.manual_seed(0)
    model = build_experiment(settings, reg).model
    with torch.no_grad():
        for parameter in model.parameters():  # away from adaLN-Zero's zeros, so that every block acts
            parameter.normal_(0.0, 0.1)
    x0 = torch.randint(0, 2, (8, 16), generator=torch.Generator().manual_seed(1))
    found = []
    for checkpointing in (False, True):
        if checkpointing:
            recompute_blocks(model)
        model.zero_grad()
        loss = model.loss(x0, torch.Generator().manual_seed(2))["loss"]
        loss.backward()
        found.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    assert torch.equal(found[0][0], found[1][0])
    assert all(torch.equal(a, b) for a, b in zip(found[0][1], found[1][1], strict=True))


class Flat(DiT):
    """A DiT that declares no blocks."""

    def layers(self):
        return ()


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        (["train.strategy=fsdp"], InvalidConfigError,
         r"^train\.strategy=fsdp shards the model over GPUs, but this process has none"),
        (["train.lora.rank=2", "train.frozen_dtype=bfloat16"], InvalidConfigError,
         r"^train\.frozen_dtype=bfloat16 needs a mixed precision, .* set train\.precision=bf16-mixed$"),
        (["train.lora.rank=2", "train.lora.targets=[attn.q]"], InvalidConfigError,
         r"^train\.lora\.targets\[0\]='attn\.q' matches no linear layer or embedding of the model"),
        (["train.activation_checkpointing=true", "backbone=flat"], IncompatibleComponentsError,
         r"^train\.activation_checkpointing=true works block by block, but the backbone \(Flat\) declares no "
         r"blocks \(Backbone\.layers\)"),
    ],
)
def test_options_that_cannot_act_are_refused_in_one_line_before_anything_is_written(
    reg, tmp_path, overrides, error, message
):
    spec = ComponentSpec("backbone", "flat", Flat, DiTConfig)
    with_flat = Registry([*reg, Component(spec, Origin("tests"))], config_dirs=reg.config_dirs)
    plain = compose([*FULL, *[o for o in overrides if not o.startswith("backbone=")]], reg).plain()
    if "backbone=flat" in overrides:
        plain["backbone"]["name"] = "flat"
    with pytest.raises(error, match=message) as refused:
        train(checked(plain), tmp_path / "run", with_flat)
    assert "\n" not in str(refused.value) and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_ladd_train_dry_run_counts_the_adapters_refuses_an_impossible_size_and_writes_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--dry-run", *FULL, f"train.lora.rank={RANK}", "train.activation_checkpointing=true",
                 f"run_dir={run}"]) == 0
    printed = capsys.readouterr().out
    adapters = LAYERS * RANK * ((HIDDEN + 3 * HIDDEN) + (HIDDEN + HIDDEN))  # qkv: d -> 3d, proj: d -> d
    assert f" ({adapters:,} trained, " in printed and ": it fits" in printed
    assert "LoRA rank 2 on 4 modules" in printed and "a block's input per block" in printed
    assert main(["train", "--dry-run", *FULL, "train.batch_size=1000000000", f"run_dir={run}"]) == 2
    printed, error = capsys.readouterr()
    assert ": it does not fit" in printed
    assert re.fullmatch(r"ladd: error: train\.batch_size \(1000000000 sequences per process\) at length 16 needs at "
                        r"least [\d.]+ GiB for one training step .*\n", error)
    assert not run.exists()


def test_an_impossible_lora_rank_is_refused_before_any_adapter_is_allocated(tmp_path, capsys):
    from registry.training.dry_run import dry_run

    reg = registry.load()
    huge = compose([*FULL, "train.lora.rank=1000000000", f"run_dir={tmp_path / 'run'}"], reg)
    with pytest.raises(InvalidConfigError) as estimated:
        dry_run(huge, reg)  # the adapters described on the meta device, their memory estimated
    assert str(estimated.value).startswith("the 192,000,000,000 trained and ")
    assert "train fewer parameters (a smaller train.lora.rank, train.freeze)" in str(estimated.value)
    assert "4 modules" in capsys.readouterr().out
    with pytest.raises(InvalidConfigError) as refused:
        train(huge, tmp_path / "run", reg)
    assert re.fullmatch(
        r"train\.lora\.rank=1000000000 gives the 4 adapted modules 192,000,000,000 values \(715\.3 GiB before their "
        r"gradients and optimiser state\), more than the [\d.]+ GiB cpu has free: choose a smaller train\.lora\.rank "
        r"\(ladd train --dry-run prints one step's memory\)", str(refused.value))
    assert not (tmp_path / "run").exists()
