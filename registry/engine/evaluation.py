"""Generic evaluation: held-out token loss L^x and a sample metric against sampling budgets."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from registry.config.settings import EvalConfig
from registry.distributed import gather_rows, share
from registry.errors import IncompatibleComponentsError
from registry.interfaces import mask_id, padding_of
from registry.storage.results import BudgetScore, EvalResult, mean_and_spread
from registry.toolkit.progress import progress as shown

from .batches import checked_batches
from .likelihood import bound
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
    clean = experiment.sampler.conditions_on_clean_latent

    def batch_loss(index: int, batch: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        generator = torch.Generator(device=model.device).manual_seed(seed + index * CHUNK_SEED_STRIDE)
        keep_out = {} if padding is None else {"padding": padding.to(model.device)}
        with inference_precision(model.device, precision):
            return model.token_loss(batch.to(model.device), clean, generator, **keep_out).float().mean()

    return _held_out_mean(experiment, batches, batch_size, seed, batch_loss)


@torch.no_grad()
def bound_per_token(
    experiment: Experiment, batches: int, batch_size: int, seed: int, draws: int, precision: str = "auto"
) -> float:
    """The full variational bound on ``-log p`` of held-out data, in nats per real token (the same rows as L^x).

    Each row is scored with ``draws`` draws of :func:`registry.engine.likelihood.bound`, its padding positions
    left unknown (masked, summed out); the model is scored as the run's sampler uses it.
    """
    model = experiment.model.eval()
    clean = experiment.sampler.conditions_on_clean_latent
    unknown = mask_id(model.vocab_size)

    def batch_bound(index: int, batch: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        scored = torch.ones_like(batch, dtype=torch.bool) if padding is None else ~padding
        rows = batch.masked_fill(~scored, unknown)
        estimates = bound(model, rows, scored, draws, seed, clean, batch_size * draws, precision)
        return estimates.mean(dim=1).sum() / scored.sum()

    return _held_out_mean(experiment, batches, batch_size, seed, batch_bound)


def _held_out_mean(
    experiment: Experiment,
    batches: int,
    batch_size: int,
    seed: int,
    score: Callable[[int, torch.Tensor, torch.Tensor | None], torch.Tensor],
) -> float:
    """The mean over held-out real positions of ``score(index, batch, padding)``, each batch's mean over its real
    positions; every rank scores its share of the batches and the result is the one-process mean."""
    stream = checked_batches(experiment.dataset, batch_size, seed, "validation")
    mine = share(batches)
    losses, real_positions, padded = [], [], False
    for index in range(batches):
        batch = next(stream)  # every rank walks the same stream and scores only its own batches
        padding = padding_of(experiment.dataset, batch)
        padded = padded or padding is not None
        if index in mine:
            losses.append(score(index, batch, padding))
            real_positions.append(batch.numel() if padding is None else int((~padding).sum()))
    local = torch.stack(losses).double().cpu() if losses else torch.zeros(0, dtype=torch.float64)
    if not padded:
        return float(gather_rows(local).mean())
    # each batch's mean is over its real positions: weighted by their number, the mean over all of them
    weights = gather_rows(torch.tensor(real_positions, dtype=torch.float64))
    return float((gather_rows(local) * weights).sum() / weights.sum())


def evaluate(
    experiment: Experiment, method: str, settings: EvalConfig, progress: bool = True, bound_draws: int | None = 0
) -> EvalResult:
    """L^x on held-out data and the metric at every budget of ``settings.budgets``, with the FLOPs per sample spent;
    with ``bound_draws``, the full variational bound on the same held-out rows, that many draws per row (None: one
    draw where the model's components give a bound, else the bound left out and ``no_bound`` saying why).

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
    draws = 1 if bound_draws is None else bound_draws
    if draws:
        try:
            result.bound = bound_per_token(
                experiment, settings.loss_batches, settings.batch_size, seeds[0], draws, precision
            )
            result.bound_draws = draws
        except IncompatibleComponentsError as why:
            if bound_draws is not None:
                raise
            result.no_bound = str(why)
    references = [next(checked_batches(experiment.dataset, n, seed, "test")) for seed in seeds]
    floors = [
        experiment.metric(next(checked_batches(experiment.dataset, n, seed, "floor")), ref)
        for seed, ref in zip(seeds[:floor_draws], references, strict=False)  # references: one per repeat or floor draw
    ]
    result.data_floor, result.data_floor_spread = mean_and_spread(floors)
    for steps in shown(settings.budgets, f"evaluating {method}", progress, name=lambda steps: f"{steps} steps"):
        measured, flops = [], []
        for seed, reference in zip(seeds[:repeats], references, strict=False):
            samples, cost = sample_with_cost(
                experiment, n, int(steps), settings.batch_size, seed + int(steps), precision=precision
            )
            measured.append(experiment.metric(samples, reference))
            flops.append(cost.flops)
        scores, spread = mean_and_spread(measured)
        result.scores.append(BudgetScore(int(steps), cost.network_calls, scores, spread, sum(flops) / len(flops)))
    return result
