"""Importing MDLM checkpoints: log-probabilities equal MDLM's own forward pass, and bad sources are refused."""
from __future__ import annotations

import json

import pytest
import torch
from mdlm_reference import P, log_probs, write_checkpoint
from safetensors.torch import save_file

import registry
from ladd_plugins.importers.mdlm import check_weights, fill, model_overrides, opened_weights, read_checkpoint_shape
from registry.config.composition import compose, to_plain
from registry.engine.assembly import build_experiment
from registry.errors import LaddError
from registry.interfaces import mask_id

SIZES = {"hidden": 32, "blocks": 2, "heads": 4, "cond": 16}
K = 50257


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def imported_backbone(folder, reg):
    shape = read_checkpoint_shape(folder)
    cfg = to_plain(compose(model_overrides(shape), reg))
    experiment = build_experiment(cfg, reg)
    with opened_weights(folder / "model.safetensors") as opened:
        check_weights(opened, shape, folder / "model.safetensors")
        fill(experiment.model.backbone, opened, shape, folder / "model.safetensors")
    return experiment.model.eval()


@pytest.mark.parametrize("time_conditioning", [False, True], ids=["published_untimed", "time_conditioned"])
def test_imported_log_probs_equal_mdlm_forward_at_every_masked_position(time_conditioning, reg, tmp_path):
    tensors = write_checkpoint(tmp_path, **SIZES, time_conditioning=time_conditioning, length=24)
    model = imported_backbone(tmp_path, reg)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, K, (3, 24), generator=g)
    ids[torch.rand(ids.shape, generator=g) < 0.5] = mask_id(K)
    tau = torch.tensor([0.9, 0.35, 0.02])
    sigma = -torch.log1p(-(1 - 1e-3) * tau)
    reference = log_probs(tensors, SIZES["heads"], ids, sigma, time_conditioning)
    exact = log_probs({k: v.double() for k, v in tensors.items()}, SIZES["heads"], ids, sigma.double(), time_conditioning)
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
    (lambda f: _edit(f, lambda t: t.pop(P + "blocks.1.attn_out.weight")), "lacks the tensor backbone.blocks.1.attn_out.weight"),
    (lambda f: _edit(f, lambda t: t.update({P + "blocks.0.attn_qkv.bias": torch.zeros(96)})), "holds backbone.blocks.0.attn_qkv.bias"),
    (lambda f: _config(f, hidden_dim=48, n_heads=4), "has shape [50258, 32] but config.json's sizes give [50258, 48]"),
    (lambda f: _config(f, vocab_size=50257), "vocab_size 50257 is not GPT-2's"),
    (lambda f: _config(f, model_type="bert"), "model_type 'bert'"),
    (lambda f: _config(f, n_blocks="two"), "n_blocks is 'two'"),
    (lambda f: (f / "config.json").unlink(), "it has no config.json"),
    (lambda f: _edit(f, lambda t: t[P + "blocks.0.mlp.0.bias"].__setitem__(3, float("nan"))), "NaN or infinite"),
    (lambda f: _edit(f, lambda t: t.update({P + "rotary_emb.inv_freq": torch.ones(4)})), "is not RoPE with base 10000"),
    (lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:-1000]), "truncated, damaged"),
])
def test_a_source_that_is_not_an_mdlm_checkpoint_is_refused_in_one_line(damage, message, reg, tmp_path):
    write_checkpoint(tmp_path, **SIZES, time_conditioning=False, length=24)
    damage(tmp_path)
    with pytest.raises(LaddError) as refused:
        imported_backbone(tmp_path, reg)
    assert message in str(refused.value) and "\n" not in str(refused.value)
