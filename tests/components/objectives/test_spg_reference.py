"""SPG against its formulas written here: the ELBO (the masked tokens' mean log-probability per draw, averaged over the
draws, times the completion's length in the loss), the upper bound ((1/beta) log of the draws' mean of p^beta
1(masked) / t per token, averaged over the tokens some draw masked), the mixture, the choice by the advantage's sign,
and the loss; the masks SPG draws (counts in its range, the prompt masked at p_mask_prompt, everything past the end)."""
from __future__ import annotations

import pytest
import torch

import registry
from ladd_plugins.objectives.spg import bound_draws, lower_bound, upper_bound
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.interfaces import ObjectiveStep, context_of

TINY_NET = ["backbone.hidden=16", "backbone.layers=1", "backbone.heads=2", "backbone.mlp_hidden=32"]


def spg_per_sequence(per_token_logps, perturb_mask, completion_mask, positive, beta, weight, estimation):
    """SPG's _get_per_seq_logps for one iteration: ``[batch, num_t, length]`` inputs, ``[batch]`` out."""
    completion = completion_mask.unsqueeze(1).expand_as(perturb_mask).float()
    masked = perturb_mask.float()
    denominator = (completion * masked).sum(dim=2).clamp(min=1e-8)
    per_draw = (per_token_logps * completion * masked).sum(dim=2) / denominator
    lower = per_draw.mean(dim=1)
    empirical_t = (completion * masked).sum(dim=2) / completion.sum(dim=2)
    averaged = (per_token_logps.exp().pow(beta) * masked * completion / empirical_t.unsqueeze(2).clamp(min=1e-8))
    averaged = averaged.mean(dim=1)
    dezero = averaged.clone()
    dezero[dezero == 0] = 1
    loss_mask = averaged > 0
    upper = (dezero.log() * loss_mask).sum(dim=1) / loss_mask.sum(dim=1).clamp(min=1e-8) / beta
    negative = {"eubo": upper, "elbo": lower, "mix": weight * upper + (1 - weight) * lower}[estimation]
    return torch.where(positive, lower, negative)


@pytest.mark.parametrize("estimation", ["eubo", "elbo", "mix"])
def test_the_bounds_are_spgs(estimation):
    generator = torch.Generator().manual_seed(0)
    logps = -torch.rand(3, 4, 7, generator=generator) * 3  # [draws, rows, length]
    completion = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    completion = torch.cat([completion, completion[:1]])
    masked = (torch.rand(3, 4, 7, generator=generator) < 0.5) & completion
    masked[:, :, 0] |= True  # every draw masks something
    fractions = masked.sum(dim=2, keepdim=True).float() / completion.sum(dim=1).float().unsqueeze(1)
    fractions = fractions.expand_as(masked)
    positive = torch.tensor([True, False, False, True])
    beta, weight = 1.5, 0.3
    expected = spg_per_sequence(
        logps.permute(1, 0, 2), masked.permute(1, 0, 2), completion, positive, beta, weight, estimation
    )
    lower = lower_bound(logps, masked)
    upper = upper_bound(logps, masked, fractions, beta)
    negative = {"eubo": upper, "elbo": lower, "mix": weight * upper + (1 - weight) * lower}[estimation]
    assert torch.allclose(torch.where(positive, lower, negative), expected, atol=1e-6)


def test_spgs_masks_and_loss_on_a_fixed_draw():
    reg = registry.load()
    cfg = compose(
        [
            "experiment=demo/arith_grpo", "train.init_from=null", *TINY_NET, "train.lora.rank=4", "loss=spg",
            "loss.group=3", "loss.steps=4", "loss.draws=3", "loss.min_fraction=0.2", "loss.max_fraction=0.6",
            "loss.p_mask_prompt=0.3", "loss.reward=format", "loss.reward_options.pattern='.*[0-9][0-9].*'",
        ],
        reg,
    )
    torch.manual_seed(0)
    experiment = build_experiment(cfg, reg)
    model, objective, dataset = experiment.model.train(), experiment.objective, experiment.dataset
    batch = next(dataset.batches(2, 1))
    terms = objective.loss(model, batch, ObjectiveStep(1, 0, 10, None, None, context_of(dataset, batch)))
    rollouts = objective.batch
    rows = torch.arange(rollouts.tokens.shape[0])
    logps, masked, fractions = bound_draws(model, rollouts, rows, int(rollouts.seeds[0]), objective.spg)
    sizes = rollouts.completion.sum(dim=1)
    counts = masked.sum(dim=2)  # [draws, rows]
    low, high = (sizes * 0.2).long().clamp(min=1), (sizes * 0.6).long().clamp(min=1)
    assert bool((counts >= low).all() and (counts <= high).all())
    assert not bool((masked & ~rollouts.completion).any()), "only completion tokens are scored"
    assert torch.allclose(fractions, (counts.float() / sizes.float()).unsqueeze(2).expand_as(fractions))
    # the log-probabilities at the masked tokens are the network's for that masked input
    bound = spg_per_sequence(
        logps.permute(1, 0, 2), masked.permute(1, 0, 2), rollouts.completion, rollouts.advantages > 0, 1.5, 0.5, "mix"
    )
    expected = -(rollouts.advantages * bound * sizes).sum() / sizes.sum()
    assert torch.allclose(terms["loss"], expected, atol=1e-6)
    assert float(rollouts.advantages.abs().sum()) > 0, "a draw with something to learn"
