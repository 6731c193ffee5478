"""diffu-GRPO (d1: Zhao et al., 2025): GRPO for masked diffusion language models.

For each prompt, ``group`` completions are drawn and scored; each completion's advantage is its reward minus its
group's mean (divided by the group's standard deviation with ``scale_rewards``). The per-token log-probability of a
completion is estimated in one forward pass: every position after the prompt masked, each prompt id masked with
probability ``p_mask_prompt``, a fresh prompt mask for each of the ``iterations`` (mu) optimisation steps that reuse a
batch of rollouts. The loss is d1's, per action (token or code of a LADD plan) ``-min(r A, clip(r, 1 - eps, 1 + eps)
A) + beta KL``, with ``r`` the ratio to the log-probabilities when the rollouts were made (1 with one iteration) and
``KL = exp(ref - logp) - (ref - logp) - 1`` to the frozen base under LoRA, summed over the batch's actions and divided
by their number.
"""
from __future__ import annotations

import torch
from torch import Tensor

from registry.interfaces import Dataset, Reward, Sampler, TrainableModel, mask_id

from .config import GRPOConfig
from .policy import PolicyObjective, RolloutBatch, code_logps, masked_prompt, token_logps


def one_pass_logps(model: TrainableModel, batch: RolloutBatch, rows: Tensor, seed: int, p_mask_prompt: float) -> Tensor:
    """d1's estimate ``[n, A]`` for ``rows``: the completion fully masked, the prompt masked at ``p_mask_prompt`` (the
    masks drawn from ``seed``), one pass, given the clean plan of a LADD model; the plan's codes, when credited, from
    the fully masked latent."""
    tokens, context = batch.tokens[rows], batch.context[rows]
    masked = masked_prompt(context, ~context, rows, seed, p_mask_prompt)
    inputs = torch.where(masked, torch.full_like(tokens, mask_id(model.vocab_size)), tokens)
    ones = torch.ones(tokens.shape[0], device=tokens.device)
    latent = None if batch.latent is None else batch.latent[rows]
    logps = token_logps(model, tokens, inputs, batch.completion[rows], ones, latent)
    if latent is None or not batch.credited:
        return logps
    return torch.cat([logps, code_logps(model, inputs, latent, model.latent_prior(tokens.shape[0]), ones)], dim=1)


def clipped_terms(
    logps: Tensor, old: Tensor, reference: Tensor | None, advantages: Tensor, epsilon: float
) -> tuple[Tensor, Tensor | None, Tensor]:
    """Per action: the clipped surrogate's loss ``-min(r A, clip(r) A)``, the KL estimate to the reference (None
    without one) and whether the clipped term was the smaller (d1's clip count)."""
    ratio = torch.exp(logps - old)
    gain = advantages.unsqueeze(1)
    unclipped, clipped = ratio * gain, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * gain
    kl = None if reference is None else torch.exp(reference - logps) - (reference - logps) - 1
    return -torch.min(unclipped, clipped), kl, (unclipped < clipped).float()


class DiffuGRPO(PolicyObjective):
    """d1's diffu-GRPO over the experiment's sampler and the reward its option names (module docstring)."""

    terms = ("policy", "kl", "clip", *PolicyObjective.ROLLOUT_TERMS)
    needs_old = True

    def __init__(self, config: GRPOConfig, dataset: Dataset, sampler: Sampler, reward: Reward) -> None:
        super().__init__(config, dataset, sampler, reward)
        self.grpo = config
        self.needs_frozen_base = config.beta > 0

    def estimate(self, model: TrainableModel, batch: RolloutBatch, rows: Tensor, iteration: int) -> Tensor:
        return one_pass_logps(model, batch, rows, int(batch.seeds[iteration]), self.grpo.p_mask_prompt)

    def surrogate(
        self, model: TrainableModel, batch: RolloutBatch, rows: Tensor, iteration: int, world: int
    ) -> dict[str, Tensor]:
        logps = self.estimate(model, batch, rows, iteration)
        old = logps.detach() if batch.old is None else batch.old[iteration][rows]
        reference = None if batch.reference is None else batch.reference[iteration][rows]
        policy, kl, clipped = clipped_terms(logps, old, reference, batch.advantages[rows], self.grpo.epsilon)
        actions = batch.actions(rows).float()
        scale = world / batch.actions(torch.arange(batch.tokens.shape[0], device=rows.device)).sum()
        terms = {"policy": (policy * actions).sum() * scale, "clip": (clipped * actions).sum() * scale}
        loss = terms["policy"]
        if kl is not None:
            terms["kl"] = (kl * actions).sum() * scale
            loss = loss + self.grpo.beta * terms["kl"]
        return {"loss": loss, **terms}
