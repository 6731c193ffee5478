"""Importing MDLM checkpoints: log-probabilities equal MDLM's own forward pass, and bad sources are refused."""
from __future__ import annotations

import json

import pytest
import torch
from mdlm_reference import P, log_probs, write_checkpoint
from safetensors.torch import save_file
from support import import_mdlm

import registry
from registry.errors import LaddError
from registry.interfaces import mask_id

SIZES = {"hidden": 32, "blocks": 2, "heads": 4, "cond": 16}
K = 50257


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def imported(folder, reg):
    """The model ``ladd import mdlm`` writes from ``folder``, read back as any model folder is."""
    out = import_mdlm(str(folder), folder.parent / f"{folder.name}_ladd", [], reg)
    return registry.from_pretrained(out, reg).model


@pytest.mark.parametrize("time_conditioning", [False, True], ids=["published_untimed", "time_conditioned"])
def test_imported_log_probs_equal_mdlm_forward_at_every_masked_position(time_conditioning, reg, tmp_path):
    tensors = write_checkpoint(tmp_path / "mdlm", **SIZES, time_conditioning=time_conditioning, length=24)
    model = imported(tmp_path / "mdlm", reg)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, K, (3, 24), generator=g)
    ids[torch.rand(ids.shape, generator=g) < 0.5] = mask_id(K)
    tau = torch.tensor([0.9, 0.35, 0.02])
    sigma = -torch.log1p(-(1 - 1e-3) * tau)
    reference = log_probs(tensors, SIZES["heads"], ids, sigma, time_conditioning)
    doubled = {name: value.double() for name, value in tensors.items()}
    exact = log_probs(doubled, SIZES["heads"], ids, sigma.double(), time_conditioning)
    with torch.no_grad():
        ours = torch.log_softmax(model.predict(ids, tau, None, None).tokens, dim=-1)
    masked = ids == mask_id(K)
    assert reference[masked][:, K].max() < -1e5, "SUBS: the mask gets no probability"
    error = (ours[masked].double() - exact[masked][:, :K]).abs().max().item()
    rounding = (reference[masked][:, :K].double() - exact[masked][:, :K]).abs().max().item()
    assert error < 1e-5 and error <= 4 * rounding, (error, rounding)
    assert exact[masked][:, :K].exp().sum(-1).sub(1).abs().max() < 1e-9


def _edit(folder, change):
    tensors = write_checkpoint(folder, **SIZES, time_conditioning=False, length=24)
    change(tensors)
    save_file(tensors, str(folder / "model.safetensors"))


def _config(folder, **changes):
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("damage, message", [
    (lambda f: _edit(f, lambda t: t.pop(P + "blocks.1.attn_out.weight")),
     "lacks the tensor backbone.blocks.1.attn_out.weight"),
    (lambda f: _edit(f, lambda t: t.update({P + "blocks.0.attn_qkv.bias": torch.zeros(96)})),
     "holds backbone.blocks.0.attn_qkv.bias"),
    (lambda f: _config(f, hidden_dim=48, n_heads=4), "has shape [50258, 32] but config.json's sizes give [50258, 48]"),
    (lambda f: _config(f, vocab_size=50257), "vocab_size 50257 is not GPT-2's"),
    (lambda f: _config(f, model_type="bert"), "model_type is 'bert' (it must be 'mdlm')"),
    (lambda f: _config(f, n_blocks="two"), "n_blocks is 'two'"),
    (lambda f: (f / "config.json").unlink(), "it has no config.json"),
    (lambda f: _edit(f, lambda t: t[P + "blocks.0.mlp.0.bias"].__setitem__(3, float("nan"))), "NaN or infinite"),
    (lambda f: _edit(f, lambda t: t.update({P + "rotary_emb.inv_freq": torch.ones(4)})), "is not RoPE with base 10000"),
    (lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:-1000]),
     "truncated, damaged"),
])
def test_a_source_that_is_no_mdlm_checkpoint_is_refused_in_one_line_before_writing(damage, message, reg, tmp_path):
    source = tmp_path / "mdlm"
    write_checkpoint(source, **SIZES, time_conditioning=False, length=24)
    damage(source)
    with pytest.raises(LaddError) as refused:
        imported(source, reg)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mdlm"], "nothing written"


def test_the_model_folder_records_its_source_and_is_an_ordinary_export(reg, tmp_path):
    import hashlib

    tensors = write_checkpoint(tmp_path / "mdlm", **SIZES, time_conditioning=False, length=24)
    out = import_mdlm(str(tmp_path / "mdlm"), tmp_path / "out", [], reg)
    document = json.loads((out / "config.json").read_text())
    digest = hashlib.sha256((tmp_path / "mdlm" / "model.safetensors").read_bytes()).hexdigest()
    assert document["source"] == {"importer": "builtin:mdlm", "folder": "mdlm", "files": {"model.safetensors": digest}}
    assert document["config"]["backbone"] | {"name": "builtin:dit"} == document["config"]["backbone"]
    assert (document["config"]["dataset"]["tokenizer"], document["config"]["dataset"]["seq_len"]) == ("gpt2-bpe", 24)
    experiment = registry.from_pretrained(out, reg)
    assert experiment.dataset.tokenizer.mask_token_id == K and len(experiment.dataset.tokenizer) == K + 1
    d, c = SIZES["hidden"], SIZES["cond"]
    sigma_map, mask_row, rotary = c * 256 + c + c * c + c, d + 1, d // SIZES["heads"] // 2
    held = sum(t.numel() for t in tensors.values()) - sigma_map - mask_row - rotary + c  # + the constant condition
    assert sum(p.numel() for p in experiment.model.parameters()) == held
    with pytest.raises(LaddError, match="already exists and is not empty"):
        import_mdlm(str(tmp_path / "mdlm"), out, [], reg)


@pytest.mark.slow
def test_ladd_import_then_sample_eval_and_zero_shot_on_the_folder(ladd, tmp_path):
    write_checkpoint(tmp_path / "mdlm", **SIZES, time_conditioning=True, length=32)
    offline = ["dataset.source=shakespeare", "metric=entropy", "eval.num_samples=4", "eval.batch_size=4",
               "eval.loss_batches=1", "eval.budgets=[2,4]", "eval.repeats=1", "eval.floor_draws=2"]
    done = ladd("import", "mdlm", str(tmp_path / "mdlm"), str(tmp_path / "out"), *offline)
    assert done.returncode == 0, done.stderr
    assert "as a ladd model folder" in done.stdout
    sampled = ladd("sample", str(tmp_path / "out"), "--steps", "4", "--num", "2", cwd=tmp_path)
    assert sampled.returncode == 0, sampled.stderr
    rows = [json.loads(line) for line in (tmp_path / "samples_4steps.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(len(r["ids"]) == 32 and max(r["ids"]) < K for r in rows)
    evaluated = ladd("eval", str(tmp_path / "out"), cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads((tmp_path / "eval_mdlm_published.json").read_text())["token_loss"] > 0
    scored = ladd("zero-shot", str(tmp_path / "out"), "shakespeare", "--batches", "1", "--batch-size", "2",
                  cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr
    assert "shakespeare" in (tmp_path / "zero_shot.csv").read_text()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["README.md", "config.json", "model.safetensors"]
    refused = ladd("import", "mdlm", str(tmp_path / "nowhere"), str(tmp_path / "out2"))
    assert refused.returncode == 2 and refused.stderr.startswith("ladd: error: ") and refused.stderr.count("\n") == 1
    assert not (tmp_path / "out2").exists()
    unknown = ladd("import", "mdlmm", str(tmp_path / "mdlm"), str(tmp_path / "out3"))
    assert unknown.returncode == 2 and "did you mean 'mdlm'" in unknown.stderr


def test_a_hub_id_imports_from_the_hub_cache_and_offline_without_it_says_how_to_fix(reg, tmp_path, monkeypatch):
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--kuleshov-group--mdlm-owt" / "snapshots" / ("a" * 40)
    write_checkpoint(snapshot, **SIZES, time_conditioning=False, length=24)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    out = import_mdlm("kuleshov-group/mdlm-owt", tmp_path / "out", [], reg)
    source = json.loads((out / "config.json").read_text())["source"]
    assert (source["hub"], source["revision"]) == ("kuleshov-group/mdlm-owt", "a" * 40)
    with pytest.raises(LaddError, match="hf download kuleshov-group/mdlm-other") as missing:
        import_mdlm("kuleshov-group/mdlm-other", tmp_path / "other", [], reg)
    assert "\n" not in str(missing.value) and not (tmp_path / "other").exists()


def test_an_absurd_block_count_is_refused_before_the_table_is_built(reg, tmp_path):
    source = tmp_path / "mdlm"
    write_checkpoint(source, **SIZES, time_conditioning=False, length=24)
    _config(source, n_blocks=10**9)
    with pytest.raises(LaddError, match="holds 2 blocks but config.json's n_blocks is 1000000000; the config and the"):
        imported(source, reg)


def test_a_float16_copy_is_refused_as_float16(reg, tmp_path):
    source = tmp_path / "mdlm"
    _edit(source, lambda t: t.update({name: value.half() for name, value in t.items()}))
    with pytest.raises(LaddError) as refused:
        imported(source, reg)
    assert "holds F16 tensors" in str(refused.value) and "import the float32 original" in str(refused.value)


def test_every_bad_key_of_the_checkpoints_config_is_named_at_once(reg, tmp_path):
    source = tmp_path / "mdlm"
    write_checkpoint(source, **SIZES, time_conditioning=False, length=24)
    config = json.loads((source / "config.json").read_text())
    del config["n_heads"]
    (source / "config.json").write_text(json.dumps({**config, "hidden_dim": "wide", "cond_dim": 0}))
    with pytest.raises(LaddError) as refused:
        imported(source, reg)
    assert (
        "hidden_dim is 'wide' (it must be a whole number >= 1); cond_dim is 0 (it must be a whole number >= 1); "
        "n_heads is missing (it must be a whole number >= 1)"
    ) in str(refused.value)


@pytest.fixture(scope="module")
def mdlm_source(tmp_path_factory):
    folder = tmp_path_factory.mktemp("source") / "mdlm"
    write_checkpoint(folder, **SIZES, time_conditioning=False, length=24)
    return folder


@pytest.mark.parametrize("override, message", [
    ("backbone.hidden=64", "backbone.hidden=64: the checkpoint sets backbone.hidden=32 (importer 'mdlm' of plugin "
     "'builtin'"),
    ("backbone=mmdit", "backbone=mmdit would replace the backbone whose weights the checkpoint fills (importer 'mdlm'"),
    ("dataset.seq_len=48", "dataset.seq_len=48: the checkpoint sets dataset.seq_len=24"),
])
def test_an_override_that_changes_the_network_is_refused_naming_it(override, message, reg, mdlm_source, tmp_path):
    with pytest.raises(LaddError) as refused:
        import_mdlm(str(mdlm_source), tmp_path / "out", [override], reg)
    assert str(refused.value).startswith(message) and not (tmp_path / "out").exists()


def test_every_refused_override_is_named_at_once(reg, mdlm_source, tmp_path):
    with pytest.raises(LaddError) as refused:
        import_mdlm(str(mdlm_source), tmp_path / "out", ["eval.budgetz=[1]", "metric=entropy", "train.lrr=2"], reg)
    message = str(refused.value)
    assert message.startswith("overrides refused: eval.budgetz=[1] (") and "; train.lrr=2 (" in message
    assert "metric=entropy" not in message and "\n" not in message


def test_a_model_the_memory_cannot_hold_is_refused_before_it_is_built(reg, mdlm_source, tmp_path, monkeypatch):
    import registry.engine.importing as importing

    original, devices = importing.build_experiment, []

    def recording(*arguments):
        experiment = original(*arguments)
        devices.append(next(experiment.model.parameters()).device.type)
        return experiment

    monkeypatch.setattr(importing, "build_experiment", recording)
    monkeypatch.setattr(importing, "available_bytes", lambda device: 1 << 20)
    refusal = r"holds 1\d\.\d MiB of weights; importing it needs about 2\d\.\d MiB but 1\.0 MiB is free: free memory"
    with pytest.raises(LaddError, match=refusal):
        import_mdlm(str(mdlm_source), tmp_path / "out", [], reg)
    assert devices == ["meta"] and not (tmp_path / "out").exists(), "built once, on the meta device"


def test_the_importer_imports_only_the_plugin_contract():
    import ast
    from pathlib import Path

    import ladd_plugins.importers

    wings = {"host", "storage", "config", "engine", "training", "conformance", "paper", "cli"}
    found = {
        node.module
        for path in Path(ladd_plugins.importers.__file__).parent.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("registry")
    }
    assert found and not [module for module in found if module.split(".")[1:2] and module.split(".")[1] in wings]
