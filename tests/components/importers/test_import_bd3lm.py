"""Importing BD3-LM checkpoints: the training view's and the block-causal sequence's log-probabilities equal BD3-LM's
network written out from its facts, the clipped training times are kept, and bad sources and overrides are refused;
block diffusion warm-started from an imported MDLM, as BD3-LM's authors train it."""
from __future__ import annotations

import json

import pytest
import torch
from bd3lm_reference import sampling_log_probs, training_log_probs, write_bd3lm
from mdlm_reference import write_checkpoint
from support import import_mdlm, import_with

import registry
from registry.cli import main
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.warm_start import warm_start
from registry.errors import LaddError
from registry.interfaces import AttentionPattern, mask_id

SIZES = {"hidden": 32, "blocks": 2, "heads": 4, "cond": 16}
K = 50257


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def _close(ours, reference, exact, at):
    """``ours`` equals the exact (float64) reference within 1e-5, and within a few times the float32 reference's own
    rounding, at the positions ``at`` (the mask's logit, which SUBS removes, left out)."""
    error = (ours[at].double() - exact[at][:, :K]).abs().max().item()
    rounding = (reference[at][:, :K].double() - exact[at][:, :K]).abs().max().item()
    assert error < 1e-5 and error <= 4 * rounding + 1e-12, (error, rounding)


@pytest.mark.slow  # seconds: two models built and a folder written
def test_an_imported_bd3lm_gives_its_networks_log_probabilities(reg, tmp_path, capsys):
    tensors = write_bd3lm(tmp_path / "bd3lm", **SIZES, block_size=4, length=16)
    assert main(["import", "bd3lm", str(tmp_path / "bd3lm"), str(tmp_path / "ladd")]) in (0, None)
    assert "imported" in capsys.readouterr().out
    experiment = registry.from_pretrained(tmp_path / "ladd", reg)
    model = experiment.model
    assert model.attention == AttentionPattern(4, span=16)
    assert (model.objective.time_min, model.objective.time_max) == pytest.approx((0.3, 0.8))
    g = torch.Generator().manual_seed(1)
    x0 = torch.randint(0, K, (2, 16), generator=g)
    x_t = torch.where(torch.rand(x0.shape, generator=g) < 0.5, mask_id(K), x0)
    doubled = {name: value.double() for name, value in tensors.items()}
    tau = torch.full((2,), 0.5)
    with torch.no_grad():
        ours = torch.log_softmax(model.backbone(x_t, tau, None, None, context=x0).tokens, dim=-1)
    masked = x_t == mask_id(K)
    reference = training_log_probs(tensors, SIZES["heads"], x_t, x0, 4)
    _close(ours, reference, training_log_probs(doubled, SIZES["heads"], x_t, x0, 4), masked)
    given = torch.cat([x0[:, :8], x_t[:, 8:12]], dim=1)  # two clean blocks, then a noisy one, as sampling sees them
    with torch.no_grad():
        ours = torch.log_softmax(model.predict(given, tau, None, None).tokens, dim=-1)
    at = given == mask_id(K)
    _close(ours, sampling_log_probs(tensors, SIZES["heads"], given, 4),
           sampling_log_probs(doubled, SIZES["heads"], given, 4), at)


@pytest.mark.parametrize(
    ("config", "overrides", "line"),
    [
        ({"block_size": 5}, [], "block_size 5 does not divide model_length 16"),
        ({"block_size": 0}, [], "block_size is 0 \\(it must be a whole number >= 1\\)"),
        ({"time_conditioning": True}, [], "time_conditioning is true"),
        ({"cross_attn": False}, [], "cross_attn is False"),
        ({}, ["backbone.block_size=8"], "backbone.block_size=8: the checkpoint sets backbone.block_size=4"),
        ({}, ["backbone.attention=bidirectional"], "the checkpoint sets backbone.attention=block_causal"),
        ({}, ["dataset.seq_len=32"], "dataset.seq_len=32: the checkpoint sets dataset.seq_len=16"),
        ({"model_type": "mdlm"}, [], "model_type is 'mdlm' \\(it must be 'bd3lm'\\)"),
        ({"sampling_eps_min": 0.9, "sampling_eps_max": 0.2}, [], "config.json: the clipped training times "
         "sampling_eps_min=0.9, sampling_eps_max=0.2 are not a range within \\[0, 1\\]"),
        ({"sampling_eps_min": "0.1"}, [], "config.json: the clipped training times sampling_eps_min='0.1', "
         "sampling_eps_max=1.0 are not"),
    ],
)
def test_bad_checkpoints_and_overrides_are_refused_in_one_line(reg, tmp_path, config, overrides, line):
    write_bd3lm(tmp_path / "bd3lm", **SIZES, length=16, **{"block_size": 4, **config})
    with pytest.raises(LaddError, match=line) as refused:
        import_with("bd3lm", str(tmp_path / "bd3lm"), tmp_path / "ladd", overrides, reg)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "ladd").exists(), "nothing written"


def test_clipped_times_outside_the_unit_range_are_refused(reg, tmp_path):
    write_bd3lm(tmp_path / "bd3lm", **SIZES, block_size=4, length=16, times=(0.9, 0.2))
    with pytest.raises(LaddError, match="are not a range within"):
        import_with("bd3lm", str(tmp_path / "bd3lm"), tmp_path / "ladd", [], reg)
    config = json.loads((tmp_path / "bd3lm" / "config.json").read_text())
    assert config["model_type"] == "bd3lm"


@pytest.mark.slow  # seconds: two models built and a folder written
def test_block_diffusion_warm_starts_from_an_imported_mdlm_with_every_tensor(reg, tmp_path):
    write_checkpoint(tmp_path / "mdlm", hidden=32, blocks=2, heads=4, cond=16, time_conditioning=False, length=16)
    imported = import_mdlm(str(tmp_path / "mdlm"), tmp_path / "imported", [], reg)
    cfg = compose([
        "experiment=owt/bd3lm_4", "dataset.source=shakespeare", "dataset.seq_len=16", "backbone.hidden=32",
        "backbone.layers=2", "backbone.heads=4", "backbone.cond_dim=16", f"train.init_from={imported}",
        "metric=entropy",
    ], reg)
    experiment = build_experiment(cfg, reg)
    report = warm_start(experiment.model, experiment.dataset, imported, reg)
    assert report.new == [] and report.skipped == [] and len(report.loaded) == len(experiment.model.state_dict())
    assert experiment.model.attention == AttentionPattern(4, span=16)
