"""diffu-GRPO (d1: Zhao et al., 2025): GRPO for masked diffusion language models.

For each prompt, ``group`` completions are drawn and scored; each completion's advantage is its reward minus its
group's mean (divided by the group's standard deviation with ``scale_rewards``). The per-token log-probability of a
completion is estimated in one forward pass: every position after the prompt masked, each prompt id masked with
probability ``p_mask_prompt``, a fresh prompt mask for each of the ``iterations`` (mu) optimisation steps that reuse a
batch of rollouts. With ``passes`` > 1 the estimate follows the rollout's trajectory instead (TraceRL: Wang et al.,
2025): the sampler's steps are cut into ``passes`` spans, and one pass per span scores the tokens written in it given
those the sampler had written before it, so each token is scored in (or near) the state it was decided in.

The loss is d1's, per action (token or code of a LADD plan) ``-min(r A, clip(r, 1 - eps, 1 + eps) A) + beta KL``,
with ``r`` the ratio to the log-probabilities when the rollouts were made (1 with one iteration) and
``KL = exp(ref - logp) - (ref - logp) - 1`` to the frozen base under LoRA, summed over the batch's actions and divided
by their number.
"""
from __future__ import annotations

import torch
from torch import Tensor

from registry.errors import LaddError
from registry.interfaces import Dataset, Reward, Sampler, TrainableModel, mask_id

from .config import GRPOConfig
from .policy import PolicyObjective, RolloutBatch, code_logps, masked_prompt, token_logps


def spans(batch: RolloutBatch, rows: Tensor, passes: int, steps: int) -> Tensor:
    """``[n, S]``: the pass that scores each position after the prompt of ``rows`` (the sampler's ``steps`` steps cut
    into ``passes`` spans of consecutive steps; all 0 with one pass), -1 in the prompt."""
    free = ~batch.context[rows]
    if passes == 1:
        return torch.where(free, 0, -1)
    order = batch.order
    if order is None or bool((order[rows][free] < 0).any()):
        raise LaddError(
            f"loss.passes={passes} scores each token in the state the sampler wrote it in, but the sampler did not "
            f"say which step wrote each position (SampleOutput.order): use a sampler that does (ancestral, confidence, "
            f"the LADD samplers) or loss.passes=1"
        )
    span = torch.clamp(order[rows] * passes // steps, max=passes - 1)
    return torch.where(free, span, -1)


def pass_logps(
    model: TrainableModel, batch: RolloutBatch, rows: Tensor, seed: int, p_mask_prompt: float, passes: int, steps: int
) -> Tensor:
    """The estimate ``[n, A]`` for ``rows``, given the clean plan of a LADD model. Each pass masks every position
    written in its span of the sampler's steps or later (all of the completion with one pass: d1's) and each prompt id
    at ``p_mask_prompt`` (the same prompt mask in every pass, drawn from ``seed``), and scores the completion's ids of
    its span, at the token time of the fraction it masks. The plan's codes, when credited, from the fully masked
    latent given the first pass's ids."""
    tokens, context, completion = batch.tokens[rows], batch.context[rows], batch.completion[rows]
    span = spans(batch, rows, passes, steps)
    prompt = masked_prompt(context, torch.zeros_like(context), rows, seed, p_mask_prompt)
    latent = None if batch.latent is None else batch.latent[rows]
    masks = torch.full_like(tokens, mask_id(model.vocab_size))
    logps = torch.zeros(tokens.shape, device=tokens.device)
    for index in range(passes):
        scored = completion & (span == index)
        if index > 0 and not bool(scored.any()):
            continue
        later = span >= index
        tau = later.sum(dim=1) / (~context).sum(dim=1)
        logps = logps + token_logps(model, tokens, torch.where(prompt | later, masks, tokens), scored, tau, latent)
    if latent is None or not batch.credited:
        return logps
    first = torch.where(prompt | ~context, masks, tokens)
    ones = torch.ones(tokens.shape[0], device=tokens.device)
    return torch.cat([logps, code_logps(model, first, latent, model.latent_prior(tokens.shape[0]), ones)], dim=1)


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
        grpo = self.grpo
        return pass_logps(model, batch, rows, int(batch.seeds[iteration]), grpo.p_mask_prompt, grpo.passes, grpo.steps)

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
