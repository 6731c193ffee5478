"""Every binary-sawtooth variant assembled from config, trained through both stages, sampled and scored."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch
from support import TINY, TWO_STAGES

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.evaluation import evaluate, token_loss
from registry.engine.loading import load_run
from registry.training.loop import train

VARIANTS = ["mdlm", "coladd_joint", "coladd_seq", "diladd_joint", "diladd_seq"]


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_trains_both_stages_samples_and_scores(variant, reg, tmp_path):
    cfg = compose([f"experiment=binsaw/{variant}_cpu", *TINY, TWO_STAGES], reg)
    experiment = train(cfg, tmp_path, reg)
    result = evaluate(experiment, variant, cfg.eval, progress=False)
    assert result.method == variant
    assert math.isfinite(result.token_loss) and 0 < result.token_loss < 5
    assert result.metric == "swd" and [steps for steps, _ in result.curve()] == [1, 4]
    assert all(score >= 0 for _, score in result.curve())
    reloaded, _ = load_run(tmp_path, reg)
    for a, b in zip(experiment.model.state_dict().values(), reloaded.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_stage_two_freezes_the_encoder(reg, tmp_path):
    cfg = compose(
        [
            "experiment=binsaw/coladd_joint_cpu",
            *TINY,
            "train.stages=[{steps:2},{steps:3,lambda_latent:1.0,freeze_encoder:true}]",
        ],
        reg,
    )
    experiment = train(cfg, tmp_path, reg)
    stage1 = torch.load(tmp_path / "checkpoints" / "stage1" / "last.ckpt", weights_only=False)["state_dict"]
    for name, value in experiment.model.encoder.state_dict().items():
        assert torch.equal(value, stage1[f"model.encoder.{name}"]), name
    assert not any(p.requires_grad for p in experiment.model.encoder.parameters())


@pytest.mark.slow
def test_one_diladd_model_serves_joint_and_sequential_sampling(reg, tmp_path):
    cfg = compose(["experiment=binsaw/diladd_joint_cpu", *TINY, TWO_STAGES], reg)
    experiment = train(cfg, tmp_path, reg)
    sequential = reg.build("sampler", "sequential", {"latent_steps": 3})
    generator = torch.Generator().manual_seed(0)
    for sampler in (experiment.sampler, sequential):
        out = sampler.sample(experiment.model.eval(), 8, 4, generator)
        assert out.tokens.shape == (8, 16) and int(out.tokens.max()) <= 1
        assert out.latent.shape == (8, 1) and int(out.latent.max()) < 2048, "every code is revealed"
    experiment.sampler = sequential
    assert math.isfinite(token_loss(experiment, 1, 32, 0))


def _compared_strings(tree: ast.AST):
    """String constants that a comparison or a match case tests against (branching on a value)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        else:
            continue
        for operand in operands:
            items = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            yield from (i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str))


def test_core_never_branches_on_a_component_name():
    names = {c.name for c in registry.load()}
    core = Path(registry.__file__).parent
    offenders = [
        (path.name, value)
        for path in core.rglob("*.py")
        for value in _compared_strings(ast.parse(path.read_text()))
        if value in names
    ]
    assert offenders == []
    planted = ast.parse("if sampler_name == 'joint' or kind in ('x', 'sequential'):\n    pass")
    assert {"joint", "sequential"} <= set(_compared_strings(planted)), "the check must see planted branches"


def test_incompatible_encoder_and_latent_sizes_are_rejected(reg):
    cfg = compose(["experiment=binsaw/coladd_joint_cpu", "encoder.width=16"], reg).plain()
    with pytest.raises(registry.IncompatibleComponentsError, match="16"):
        build_experiment(cfg, reg)


def test_latent_repeats_give_the_latent_denoiser_several_noise_draws_per_latent(reg):
    cfg = compose(["experiment=binsaw/coladd_seq_cpu", *TINY, "objective.latent_repeats=4"], reg).plain()
    model = build_experiment(cfg, reg).model
    model.lambda_latent = 1.0
    seen = []
    model.latent_backbone.register_forward_hook(lambda module, args, out: seen.append(args[2].shape[0]))
    terms = model.loss(torch.randint(2, (6, 16)))
    assert seen == [24] and torch.isfinite(terms["latent"])
