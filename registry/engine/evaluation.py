"""Generic evaluation: held-out token loss L^x and a sample metric against sampling budgets."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from registry.config.settings import EvalConfig
from registry.distributed import gather_rows, share
from registry.errors import IncompatibleComponentsError
from registry.interfaces import context_of, mask_id, padding_of
from registry.storage.results import BudgetScore, EvalResult, mean_and_spread
from registry.toolkit.progress import progress as shown

from .batches import checked_batches
from .likelihood import bound
from .sampling import CHUNK_SEED_STRIDE, inference_precision, sample_rows

if TYPE_CHECKING:  # annotations only
    from .assembly import Experiment

#: the slots whose components an evaluation's result records: what drew and scored the samples
SCORED_BY = ("sampler", "metric")
#: Seed distance between evaluation repeats: far beyond the chunks of any sample set.
_REPEAT_SEED_STRIDE = 1_000_000_007
#: a batch's padding or context positions, where the dataset marks some
Mask = torch.Tensor | None


def token_loss_bounds(model: Any) -> bool:
    """Whether held-out ``L^x`` of ``model`` is ``-log p`` or an estimate of an upper bound on it (a model of tokens
    alone whose process declares ELBO weights, ``Process.elbo_weighted``, or an exact likelihood)."""
    return model.latent is None and bool(model.process.elbo_weighted)


def token_loss_meaning(model: Any) -> str:
    """What held-out ``L^x`` is for ``model``, from what its components declare: a bound, an estimate of one, or not."""
    process = model.process
    if model.latent is not None:
        return "the token reconstruction term given the latent its encoder read from the tokens, not a bound on -log p"
    if process.exact_likelihood:
        return "the exact negative log-likelihood"
    if token_loss_bounds(model):
        return "a Monte-Carlo estimate of the token chain's negative ELBO, i.e. of an upper bound on -log p"
    return (
        f"the training loss of process {type(process).__name__}, weighted otherwise than the ELBO (its "
        "elbo_weighted is false), not a bound on -log p"
    )


def token_perplexity_meaning(model: Any) -> str:
    """What ``exp(L^x)``, the validation perplexity the paper reports, is for ``model``."""
    if model.process.exact_likelihood and model.latent is None:
        return "the exact perplexity"
    if token_loss_bounds(model):
        return "an estimate of an upper bound on the perplexity"
    return "the paper's validation PPL, which bounds no perplexity here, as L^x bounds nothing"


def bound_meaning(model: Any, draws: int) -> str:
    """What :func:`bound_per_token` gives for ``model`` at ``draws`` Monte-Carlo draws per row."""
    if model.process.exact_likelihood and model.latent is None:
        return "the exact negative log-likelihood"
    return f"a Monte-Carlo estimate ({draws} draw{'s' if draws > 1 else ''} per row) of an upper bound on -log p"


@torch.no_grad()
def token_loss(experiment: Experiment, batches: int, batch_size: int, seed: int, precision: str = "auto") -> float:
    """Mean held-out L^x (nats per token), conditioning on the latent as the run's sampler does.

    Batch ``k`` draws its noise from its own generator, so under several processes each takes its share
    of the batches and the mean over all of them is the one-process mean. Positions the dataset marks as
    padding (``Dataset.padding``) are left out: the mean is over the real positions. With context
    (``Dataset.context``: prompts, clean and unscored), each row is a mean over its other positions and the
    result the mean over the rows.
    """
    model = experiment.model.eval()
    clean = experiment.sampler.conditions_on_clean_latent

    def batch_loss(index: int, batch: torch.Tensor, padding: Mask, context: Mask) -> tuple[torch.Tensor, int]:
        generator = torch.Generator(device=model.device).manual_seed(seed + index * CHUNK_SEED_STRIDE)
        given = {"padding": padding, "context": context}
        keep_out = {key: mask.to(model.device) for key, mask in given.items() if mask is not None}
        with inference_precision(model.device, precision):
            loss = model.token_loss(batch.to(model.device), clean, generator, **keep_out).float().mean()
        # a batch's mean is over its rows with context (each row a mean of its own), else over its real positions
        return loss, len(batch) if context is not None else batch.numel() if padding is None else int((~padding).sum())

    return _held_out_mean(experiment, batches, batch_size, seed, batch_loss)


@torch.no_grad()
def bound_per_token(
    experiment: Experiment, batches: int, batch_size: int, seed: int, draws: int, precision: str = "auto"
) -> float:
    """The full variational bound on ``-log p`` of held-out data, in nats per real token (the same rows as L^x).

    Each row is scored with ``draws`` draws of :func:`registry.engine.likelihood.bound`, its padding positions
    left unknown (masked, summed out) and its context (``Dataset.context``) given clean and unscored: the bound on
    the rest given the context; the model is scored as the run's sampler uses it.
    """
    model = experiment.model.eval()
    clean = experiment.sampler.conditions_on_clean_latent
    unknown = mask_id(model.vocab_size)

    def batch_bound(index: int, batch: torch.Tensor, padding: Mask, context: Mask) -> tuple[torch.Tensor, int]:
        real = torch.ones_like(batch, dtype=torch.bool) if padding is None else ~padding
        scored = real if context is None else real & ~context
        rows = batch.masked_fill(~real, unknown)
        estimates = bound(model, rows, scored, draws, seed, clean, batch_size * draws, precision)
        return estimates.mean(dim=1).sum() / scored.sum(), int(scored.sum())

    return _held_out_mean(experiment, batches, batch_size, seed, batch_bound)



def _held_out_mean(
    experiment: Experiment,
    batches: int,
    batch_size: int,
    seed: int,
    score: Callable[[int, torch.Tensor, Mask, Mask], tuple[torch.Tensor, int]],
) -> float:
    """The mean over held-out batches of ``score(index, batch, padding, context)``, a batch's mean and the number of
    things (positions or rows) it averages over, weighted by that number: every rank scores its share of the batches
    and the result is the one-process mean."""
    stream = checked_batches(experiment.dataset, batch_size, seed, "validation")
    mine = share(batches)
    losses, counts = [], []
    for index in range(batches):
        batch = next(stream)  # every rank walks the same stream and scores only its own batches
        if index in mine:
            dataset = experiment.dataset
            loss, count = score(index, batch, padding_of(dataset, batch), context_of(dataset, batch))
            losses.append(loss)
            counts.append(count)
    local = torch.stack(losses).double().cpu() if losses else torch.zeros(0, dtype=torch.float64)
    weights = gather_rows(torch.tensor(counts, dtype=torch.float64))
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
        token_loss_meaning=token_loss_meaning(experiment.model),
        lower_is_better=experiment.metric.lower_is_better,
        repeats=repeats,
        floor_draws=floor_draws,
        components={slot: record for slot, record in experiment.origins().items() if slot in SCORED_BY},
    )
    per_row = 1 if bound_draws is None else bound_draws
    if per_row:
        try:
            result.bound = bound_per_token(
                experiment, settings.loss_batches, settings.batch_size, seeds[0], per_row, precision
            )
            result.bound_draws = per_row
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
            samples, cost, _ = sample_rows(
                experiment, n, int(steps), settings.batch_size, seed + int(steps), precision=precision
            )
            measured.append(experiment.metric(samples, reference))
            flops.append(cost.flops)
        scores, spread = mean_and_spread(measured)
        result.scores.append(BudgetScore(int(steps), cost.network_calls, scores, spread, sum(flops) / len(flops)))
    return result
