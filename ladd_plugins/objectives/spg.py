"""SPG, the sandwiched policy gradient (Wang et al., 2025): a successor of diffu-GRPO whose estimate of a completion's
log-likelihood is a bound of it.

For a completion of positive advantage SPG maximises a Monte Carlo estimate of the evidence lower bound: in each of
``draws`` passes, ``n`` of the completion's ``L`` actions are masked (``n`` uniform between ``min_fraction L`` and
``max_fraction L``, at least 1), the positions after its end always, each prompt id with probability
``p_mask_prompt``; the masked actions' log-probabilities summed and scaled by ``L / n`` are an unbiased estimate of the
masked-diffusion ELBO, the bound the model was trained with. Pushing a lower bound down for completions of negative
advantage would not push the likelihood down, so for those SPG minimises an upper bound (``negative=eubo``): per
action, ``(1/beta) log E[p^beta 1(masked) / t]`` over the draws (``t = n / L``), or a mixture of both bounds
(``negative=mix``, weight ``mix_weight`` on the upper one). The loss is ``-sum_i A_i L_i s_i / sum_i L_i`` with
``s_i`` the bound per action (SPG's code has no ratio and no KL penalty). A LADD plan's codes are more actions: their
bound terms come from their own draws of masked codes, the tokens' given the clean plan (a chain rule of two bounds).
"""
from __future__ import annotations

import torch
from torch import Tensor

from registry.interfaces import Dataset, Reward, Sampler, TrainableModel, mask_id
from registry.toolkit.rollouts import row_seed

from .config import SPGConfig
from .policy import PolicyObjective, RolloutBatch, code_logps, masked_prompt, token_logps


def hidden_in_row(positions: Tensor, low: float, high: float, generator: torch.Generator) -> Tensor:
    """Bool like the row ``positions``: ``n`` of them chosen uniformly, ``n`` uniform between ``max(int(L low), 1)`` and
    ``min(int(L high), L)`` inclusive for ``L`` positions (SPG's range)."""
    where = positions.nonzero().squeeze(1)
    size = where.numel()
    first = max(int(size * low), 1)
    last = max(min(int(size * high), size), first)
    count = int(torch.randint(first, last + 1, (), generator=generator, device=generator.device))
    order = torch.randperm(size, generator=generator, device=generator.device)
    hidden = torch.zeros_like(positions)
    hidden[where[order[:count].to(where.device)]] = True
    return hidden


def hidden_actions(positions: Tensor, rows: Tensor, seed: int, config: SPGConfig) -> Tensor:
    """Bool like ``positions`` ``[n, L]``: each row's hidden positions of one draw, from a generator of its own."""
    hidden = torch.zeros_like(positions)
    for index, row in enumerate(rows.tolist()):
        generator = torch.Generator(device=positions.device).manual_seed(row_seed(seed, row))
        hidden[index] = hidden_in_row(positions[index], config.min_fraction, config.max_fraction, generator)
    return hidden


def bound_draws(
    model: TrainableModel, batch: RolloutBatch, rows: Tensor, seed: int, config: SPGConfig
) -> tuple[Tensor, Tensor, Tensor]:
    """``draws`` passes over ``rows``: the log-probabilities ``[D, n, A]``, whether each action was masked ``[D, n, A]``
    and the draw's masked fraction of the action's part (completion or plan) ``[D, n, A]``."""
    tokens, context, completion = batch.tokens[rows], batch.context[rows], batch.completion[rows]
    latent = None if batch.latent is None else batch.latent[rows]
    after = ~context & ~completion  # past the completion's end: always hidden, never scored
    logps, masks, fractions = [], [], []
    for draw in range(config.draws):
        hidden = hidden_actions(completion, rows, row_seed(seed, draw, 0), config)
        prompt = masked_prompt(context, after | hidden, rows, row_seed(seed, draw, 1), config.p_mask_prompt)
        inputs = torch.where(prompt, torch.full_like(tokens, mask_id(model.vocab_size)), tokens)
        tau = hidden.sum(dim=1).float() / completion.sum(dim=1).clamp(min=1).float()
        parts = [token_logps(model, tokens, inputs, hidden, tau, latent)]
        masked, fraction = [hidden], [tau.unsqueeze(1).expand_as(hidden)]
        if latent is not None and batch.credited:
            codes = torch.ones_like(latent, dtype=torch.bool)
            hidden_y = hidden_actions(codes, rows, row_seed(seed, draw, 2), config)
            noisy = torch.where(hidden_y, model.latent_prior(latent.shape[0]), latent)
            tau_y = hidden_y.sum(dim=1).float() / codes.sum(dim=1).float()
            parts.append(torch.where(hidden_y, code_logps(model, inputs, latent, noisy, tau_y), 0.0))
            masked.append(hidden_y)
            fraction.append(tau_y.unsqueeze(1).expand_as(hidden_y))
        logps.append(torch.cat(parts, dim=1))
        masks.append(torch.cat(masked, dim=1))
        fractions.append(torch.cat(fraction, dim=1))
    return torch.stack(logps), torch.stack(masks), torch.stack(fractions)


def lower_bound(logps: Tensor, masked: Tensor) -> Tensor:
    """``[n]``: the ELBO per action: in each draw the masked actions' mean log-probability, averaged over the draws
    (times the row's action count, the unbiased ``L / n`` estimate of the bound)."""
    per_draw = (logps * masked).sum(dim=2) / masked.sum(dim=2).clamp(min=1)
    return per_draw.mean(dim=0)


def upper_bound(logps: Tensor, masked: Tensor, fractions: Tensor, beta: float) -> Tensor:
    """``[n]``: SPG's upper bound per action: ``(1/beta) log`` of the draws' mean of ``p^beta 1(masked) / t``, averaged
    over the actions some draw masked."""
    mean = (torch.exp(beta * logps) * masked / fractions.clamp(min=1e-8)).mean(dim=0)
    seen = mean > 0
    logged = torch.where(seen, mean, torch.ones_like(mean)).log()
    return (logged * seen).sum(dim=1) / seen.sum(dim=1).clamp(min=1) / beta


class SPG(PolicyObjective):
    """SPG over the experiment's sampler and the reward its option names (module docstring)."""

    terms = ("policy", *PolicyObjective.ROLLOUT_TERMS)

    def __init__(self, config: SPGConfig, dataset: Dataset, sampler: Sampler, reward: Reward) -> None:
        super().__init__(config, dataset, sampler, reward)
        self.spg = config

    def estimate(self, model: TrainableModel, batch: RolloutBatch, rows: Tensor, iteration: int) -> Tensor:
        """``[n]``: each row's bound per action, the lower one for positive advantages, the chosen one otherwise."""
        logps, masked, fractions = bound_draws(model, batch, rows, int(batch.seeds[iteration]), self.spg)
        lower = lower_bound(logps, masked)
        if self.spg.negative == "elbo":
            negative = lower
        else:
            upper = upper_bound(logps, masked, fractions, self.spg.eubo_beta)
            weight = 1.0 if self.spg.negative == "eubo" else self.spg.mix_weight
            negative = weight * upper + (1 - weight) * lower
        return torch.where(batch.advantages[rows] > 0, lower, negative)

    def surrogate(
        self, model: TrainableModel, batch: RolloutBatch, rows: Tensor, iteration: int, world: int
    ) -> dict[str, Tensor]:
        bound = self.estimate(model, batch, rows, iteration)
        sizes = batch.actions(rows).sum(dim=1).float()
        total = batch.actions(torch.arange(batch.tokens.shape[0], device=rows.device)).sum()
        policy = -(batch.advantages[rows] * bound * sizes).sum() * world / total
        return {"loss": policy, "policy": policy}
