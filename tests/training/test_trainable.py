"""Each training stage trains exactly the parameters its loss reaches, so DDP runs without searching for unused ones."""
from __future__ import annotations

import pytest
import torch
from support import TINY, TWO_STAGES, assert_trainable_set_is_exact

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.training.loop import train
from registry.training.trainable import unreached_parameters

LADD = ["binsaw/coladd_joint_cpu", "binsaw/coladd_seq_cpu", "binsaw/diladd_joint_cpu", "binsaw/diladd_seq_cpu"]


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def _stages(reg, preset):
    """The experiment in the state of each of the preset's stages in turn, set as training sets it."""
    torch.manual_seed(0)
    settings = compose([f"experiment={preset}", "dataset.seq_len=16"], reg)
    experiment = build_experiment(settings, reg)
    for stage in settings.train.stages.values():
        experiment.model.begin_stage(stage)
        yield experiment


@pytest.mark.parametrize("preset", [*LADD, "binsaw/mdlm_cpu", "binsaw/ar_cpu"])
def test_the_probe_finds_what_backward_leaves_without_gradient_in_every_stage(preset, reg):
    for experiment in _stages(reg, preset):
        assert_trainable_set_is_exact(experiment.model, next(experiment.dataset.batches(8, 0)))


def _names(model, parameters):
    ids = {id(p) for p in parameters}
    return {name for name, p in model.named_parameters() if id(p) in ids}


def test_stage_one_rests_the_latent_side_and_stage_two_the_frozen_encoder(reg):
    """Sequential Co-LADD: with lambda_latent = 0 the latent denoiser and the token network's latent outputs
    get no gradient; in Stage 2 the latent denoiser learns, the token network's latent outputs still do not."""
    stage_one, stage_two = (
        _names(e.model, unreached_parameters(e.model)) for e in _stages(reg, "binsaw/coladd_seq_cpu")
    )
    model = next(_stages(reg, "binsaw/coladd_seq_cpu")).model
    denoiser = {f"latent_backbone.{name}" for name, _ in model.latent_backbone.named_parameters()}
    assert denoiser <= stage_one and not denoiser & stage_two
    assert stage_two and stage_two == stage_one - denoiser
    last_block = (
        f"backbone.blocks.{len(model.backbone.blocks) - 1}.latent."  # the latent stream after the last attention
    )
    assert all(name.startswith((last_block, "backbone.final_y.")) for name in stage_two)


def test_the_probe_leaves_weights_buffers_and_random_streams_alone(reg):
    """Di-LADD's EMA codebook is updated by every forward pass in training mode."""
    model = next(_stages(reg, "binsaw/diladd_joint_cpu")).model.eval()
    before = {name: t.clone() for name, t in model.state_dict().items()}
    rng = torch.get_rng_state()
    assert unreached_parameters(model)
    assert torch.equal(torch.get_rng_state(), rng) and not model.training
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name


@pytest.mark.slow
def test_each_stage_optimises_its_own_trainable_set_and_training_restores_the_flags(reg, tmp_path):
    cfg = compose(["experiment=binsaw/coladd_seq_cpu", *TINY, TWO_STAGES], reg)
    experiment = train(cfg, tmp_path, reg)
    model = experiment.model
    counts = []
    for stage in (1, 2):
        checkpoint = torch.load(tmp_path / "checkpoints" / f"stage{stage}" / "last.ckpt", weights_only=True)
        counts.append(sum(len(group["params"]) for group in checkpoint["optimizer_states"][0]["param_groups"]))
    stage_two = sum(1 for p in model.parameters() if p.requires_grad) - len(unreached_parameters(model))
    model.encoder.requires_grad_(True)
    model.latent.requires_grad_(True)
    model.lambda_latent = 0.0
    stage_one = sum(1 for p in model.parameters()) - len(
        unreached_parameters(model)
    )  # Stage 1: encoder unfrozen, lambda 0
    assert counts == [stage_one, stage_two] and stage_one != stage_two
    assert all(p.requires_grad for p in experiment.model.backbone.parameters()), "the rested parameters learn again"
