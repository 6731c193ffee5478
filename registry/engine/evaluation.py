"""Generic evaluation: held-out token loss L^x and a sample metric against sampling budgets."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from registry.config.settings import EvalConfig
from registry.distributed import gather_rows, share
from registry.interfaces import padding_of
from registry.storage.results import BudgetScore, EvalResult, mean_and_spread
from registry.toolkit.progress import progress as shown

from .batches import checked_batches
from .sampling import CHUNK_SEED_STRIDE, inference_precision, sample_with_cost

if TYPE_CHECKING:  # annotations only
    from .assembly import Experiment

#: Seed distance between evaluation repeats: far beyond the chunks of any sample set.
_REPEAT_SEED_STRIDE = 1_000_000_007


@torch.no_grad()
def token_loss(experiment: Experiment, batches: int, batch_size: int, seed: int, precision: str = "auto") -> float:
    """Mean held-out L^x (nats per token), conditioning on the latent as the run's sampler does.

    Batch ``k`` draws its noise from its own generator, so under several processes each takes its share
    of the batches and the mean over all of them is the one-process mean. Positions the dataset marks as
    padding (``Dataset.padding``) are left out: the mean is over the real positions.
    """
    model = experiment.model.eval()
    stream = checked_batches(experiment.dataset, batch_size, seed, "validation")
    clean = experiment.sampler.conditions_on_clean_latent
    mine = share(batches)
    losses, real_positions, padded = [], [], False
    for index in range(batches):
        batch = next(stream)  # every rank walks the same stream and scores only its own batches
        padding = padding_of(experiment.dataset, batch)
        padded = padded or padding is not None
        if index in mine:
            generator = torch.Generator(device=model.device).manual_seed(seed + index * CHUNK_SEED_STRIDE)
            keep_out = {} if padding is None else {"padding": padding.to(model.device)}
            with inference_precision(model.device, precision):
                losses.append(model.token_loss(batch.to(model.device), clean, generator, **keep_out).float().mean())
            real_positions.append(batch.numel() if padding is None else int((~padding).sum()))
    local = torch.stack(losses).double().cpu() if losses else torch.zeros(0, dtype=torch.float64)
    if not padded:
        return float(gather_rows(local).mean())
    # each batch's mean is over its real positions: weighted by their number, the mean over all of them
    weights = gather_rows(torch.tensor(real_positions, dtype=torch.float64))
    return float((gather_rows(local) * weights).sum() / weights.sum())


def evaluate(experiment: Experiment, method: str, settings: EvalConfig, progress: bool = True) -> EvalResult:
    """L^x on held-out data and the metric at every budget of ``settings.budgets``, with the FLOPs per sample spent.

    Repeat ``r`` (of ``eval.repeats``) draws its reference set and its samples from seeds of its own; the
    data floor compares ``eval.floor_draws`` further data draws with the references of those seeds, so
    the floor and the scores come with their spread over independent draws.
    """
    n, precision, repeats, floor_draws = (
        settings.num_samples,
        settings.precision,
        settings.repeats,
        settings.floor_draws,
    )
    seeds = [settings.seed + r * _REPEAT_SEED_STRIDE for r in range(max(repeats, floor_draws))]
    result = EvalResult(
        method,
        experiment.metric.primary,
        token_loss(experiment, settings.loss_batches, settings.batch_size, seeds[0], precision),
        oracle_token_loss=experiment.dataset.oracle_token_loss(),
        lower_is_better=experiment.metric.lower_is_better,
        repeats=repeats,
        floor_draws=floor_draws,
    )
    references = [next(checked_batches(experiment.dataset, n, seed, "test")) for seed in seeds]
    floors = [
        experiment.metric(next(checked_batches(experiment.dataset, n, seed, "floor")), ref)
        for seed, ref in zip(seeds[:floor_draws], references, strict=False)  # references: one per repeat or floor draw
    ]
    result.data_floor, result.data_floor_spread = mean_and_spread(floors)
    for steps in shown(settings.budgets, f"evaluating {method}", progress, name=lambda steps: f"{steps} steps"):
        draws, flops = [], []
        for seed, reference in zip(seeds[:repeats], references, strict=False):
            samples, cost = sample_with_cost(
                experiment, n, int(steps), settings.batch_size, seed + int(steps), precision=precision
            )
            draws.append(experiment.metric(samples, reference))
            flops.append(cost.flops)
        scores, spread = mean_and_spread(draws)
        result.scores.append(BudgetScore(int(steps), cost.network_calls, scores, spread, sum(flops) / len(flops)))
    return result
