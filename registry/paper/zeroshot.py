"""Zero-shot likelihoods of one trained model on several corpora: L^x and the full variational bound, as perplexities
where they bound one."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from registry.config.settings import Settings
from registry.engine.assembly import Experiment, required_selection
from registry.engine.evaluation import (
    bound_meaning,
    bound_per_token,
    token_loss,
    token_loss_bounds,
    token_loss_meaning,
)
from registry.errors import IncompatibleComponentsError
from registry.host.registry import Registry
from registry.storage.results import BOUND_NOTE, perplexity
from registry.toolkit.progress import progress


@dataclass
class ZeroShotRow:
    """L^x and the bound (None: the model's components give none) of one corpus over ``tokens`` evaluated tokens;
    ``loss_bounds``: whether L^x is itself -log p or an estimate of an upper bound on it."""

    corpus: str
    tokens: int
    token_loss: float
    bound: float | None = None
    loss_bounds: bool = False

    @property
    def perplexity(self) -> float | None:
        """exp(bound), else exp(L^x) where L^x bounds -log p; None where neither does."""
        if self.bound is not None:
            return perplexity(self.bound)
        return perplexity(self.token_loss) if self.loss_bounds else None


@dataclass
class ZeroShot:
    """The rows, what their numbers are, and why there is no bound (None when there is one)."""

    rows: list[ZeroShotRow]
    loss_meaning: str
    bound_meaning: str | None
    no_bound: str | None = None


def zero_shot(
    experiment: Experiment,
    settings: Settings,
    registry: Registry,
    corpora: list[str],
    field: str,
    batches: int,
    batch_size: int,
    seed: int,
    bound_draws: int = 1,
) -> ZeroShot:
    """Each corpus is the run's dataset with option ``field`` set to it; the model must fit its vocabulary. The bound
    takes ``bound_draws`` Monte-Carlo draws per row (0: none), on the rows L^x is computed on."""
    name, options = required_selection(settings, "dataset")
    model = experiment.model
    table = ZeroShot([], token_loss_meaning(model), bound_meaning(model, bound_draws) if bound_draws else None)
    for corpus in progress(corpora, "zero-shot corpora"):
        dataset = registry.build("dataset", name, {**options, field: corpus})
        own = experiment.dataset
        if (dataset.vocab_size, dataset.seq_len) != (own.vocab_size, own.seq_len):
            raise IncompatibleComponentsError(
                f"corpus {corpus!r} gives {dataset.vocab_size} tokens x length {dataset.seq_len}; the model was "
                f"trained on {own.vocab_size} x {own.seq_len} (use the run's tokenizer and sequence length)"
            )
        scored = dataclasses.replace(experiment, dataset=dataset)
        loss = token_loss(scored, batches, batch_size, seed)
        bound = None
        if table.bound_meaning is not None:
            try:
                bound = bound_per_token(scored, batches, batch_size, seed, bound_draws)
            except IncompatibleComponentsError as why:
                table.bound_meaning, table.no_bound = None, str(why)
        rows = ZeroShotRow(corpus, batches * batch_size * dataset.seq_len, loss, bound, token_loss_bounds(model))
        table.rows.append(rows)
    return table


def format_zero_shot(table: ZeroShot) -> str:
    """A plain-text table of L^x, bounds and perplexities, with what each number is."""
    rows = table.rows
    width = max([len(r.corpus) for r in rows] + [6])

    def number(value: float | None, digits: int) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    lines = [f"{'corpus':<{width}}  {'tokens':>10}  {'L^x':>7}  {'bound':>7}  {'PPL':>9}"]
    lines += [
        f"{r.corpus:<{width}}  {r.tokens:>10}  {r.token_loss:>7.4f}  {number(r.bound, 4):>7}  "
        f"{number(r.perplexity, 2):>9}"
        for r in rows
    ]
    lines.append(f"L^x: {table.loss_meaning}")
    if table.bound_meaning is not None:
        lines.append(f"bound: {table.bound_meaning} ({BOUND_NOTE}); PPL = exp(bound)")
    else:
        lines.append(f"no bound on -log p: {table.no_bound or 'not asked for (--bound-draws 0)'}")
        lines.append("PPL = exp(L^x) where L^x bounds -log p; n/a where it does not")
    return "\n".join(lines)
