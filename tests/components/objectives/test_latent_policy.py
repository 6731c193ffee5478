"""LADD's plan in the policy: its codes are actions of the ratio (their log-probabilities the latent head's, from the
fully masked latent given the prompt), the tokens are scored given the clean plan, and token-only GRPO on the same model
leaves the plan's head out of the loss."""
from __future__ import annotations

import pytest
import torch

import registry
from ladd_plugins.objectives.policy import masked_prompt
from registry.config.composition import compose
from registry.engine.adapters import adapt
from registry.engine.assembly import build_experiment
from registry.interfaces import ObjectiveStep, context_of, mask_id

LADD = [
    "experiment=demo/arith_diladd_grpo", "train.init_from=null", "backbone.hidden=16", "backbone.layers=1",
    "backbone.heads=2", "backbone.mlp_hidden=32", "backbone.cond_dim=16", "encoder.hidden=16", "encoder.layers=1",
    "encoder.heads=2", "loss.group=3", "loss.steps=4", "loss.iterations=2", "loss.rollout_batch=2",
    "loss.reward=format", "loss.reward_options.pattern='.*[0-9][0-9].*'", "loss.p_mask_prompt=0.15",
]


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def _step(reg, *overrides):
    cfg = compose([*LADD, *overrides], reg)
    torch.manual_seed(0)
    experiment = build_experiment(cfg, reg)
    adapt(experiment.model, cfg.train)
    model, objective, dataset = experiment.model.train(), experiment.objective, experiment.dataset
    batch = next(dataset.batches(2, 2))
    context = context_of(dataset, batch)
    objective.loss(model, batch, ObjectiveStep(1, 0, 4, None, None, context))
    return model, objective, batch, context


def _second(model, objective, batch, context):
    return objective.loss(model, batch, ObjectiveStep(1, 1, 5, None, None, context))["loss"]


def _shift_the_plan_head(model):
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "latent.final" in name and "lora_A" in name:
                parameter.add_(0.5)
            if "latent.final" in name and "lora_B" in name:
                parameter.add_(0.5)


def test_the_plan_is_an_action_whose_log_probability_is_the_latent_heads(reg):
    model, objective, batch, context = _step(reg)
    rollouts = objective.batch
    assert rollouts.latent is not None and rollouts.latent.shape == (6, 1)
    actions = rollouts.actions(torch.arange(6))
    assert actions.shape == (6, rollouts.tokens.shape[1] + 1) and bool(actions[:, -1].all())
    # iteration 1's pass: the prompt masked as that iteration masks it, the completion all masked; the code's
    # log-probability is the latent head's from the masked latent, the tokens' the token head's given the clean plan
    rows = torch.arange(6)
    hidden = masked_prompt(rollouts.context, ~rollouts.context, rows, int(rollouts.seeds[1]), 0.15)
    inputs = torch.where(hidden, mask_id(model.vocab_size), rollouts.tokens)
    with torch.no_grad():
        estimate = objective.estimate(model, rollouts, rows, 1)
        masked_latent = torch.full_like(rollouts.latent, mask_id(model.latent.values))
        head = model.predict(inputs, None, masked_latent, torch.ones(6)).latent
        codes = torch.log_softmax(head.float(), dim=-1).gather(-1, rollouts.latent.unsqueeze(-1)).squeeze(-1)
        logits = model.predict(inputs, torch.ones(6), rollouts.latent, torch.zeros(6)).tokens
        tokens = torch.log_softmax(logits.float(), dim=-1).gather(-1, rollouts.tokens.unsqueeze(-1)).squeeze(-1)
    completion = rollouts.completion
    assert torch.allclose(estimate[:, -1:], codes, atol=1e-6)
    assert torch.allclose(estimate[:, :-1][completion], tokens[completion], atol=1e-5)
    assert torch.allclose(rollouts.old[1], estimate), "the old log-probabilities are this pass before any update"
    # the plan's column moves with the latent head, the tokens' do not
    before = estimate.clone()
    _shift_the_plan_head(model)
    with torch.no_grad():
        after = objective.estimate(model, rollouts, rows, 1)
    assert not torch.allclose(after[:, -1], before[:, -1]) and torch.allclose(after[:, :-1], before[:, :-1])


@pytest.mark.parametrize("in_policy", [True, False])
def test_only_a_plan_in_the_policy_puts_the_latent_head_in_the_loss(reg, in_policy):
    model, objective, batch, context = _step(reg, f"loss.latent_in_policy={str(in_policy).lower()}")
    assert objective.batch.latent is not None and objective.batch.credited == in_policy
    assert float(objective.batch.advantages.abs().sum()) > 0, "a draw with something to learn"
    with torch.no_grad():
        before = _second(model, objective, batch, context)
    _shift_the_plan_head(model)
    with torch.no_grad():
        after = _second(model, objective, batch, context)
    assert (not torch.allclose(before, after)) == in_policy
