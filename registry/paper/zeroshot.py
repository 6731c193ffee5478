"""Zero-shot validation perplexity of one trained model on several corpora."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from registry.config.settings import Settings
from registry.engine.assembly import Experiment, required_selection
from registry.engine.evaluation import token_loss
from registry.errors import IncompatibleComponentsError
from registry.host.registry import Registry
from registry.storage.results import PPL_NOTE, perplexity
from registry.toolkit.progress import progress


@dataclass
class ZeroShotRow:
    """L^x and exp(L^x) of one corpus over ``tokens`` evaluated tokens."""

    corpus: str
    tokens: int
    token_loss: float

    @property
    def perplexity(self) -> float:
        return perplexity(self.token_loss)


def zero_shot(
    experiment: Experiment,
    settings: Settings,
    registry: Registry,
    corpora: list[str],
    field: str,
    batches: int,
    batch_size: int,
    seed: int,
) -> list[ZeroShotRow]:
    """Each corpus is the run's dataset with option ``field`` set to it; the model must fit its vocabulary."""
    name, options = required_selection(settings, "dataset")
    rows = []
    for corpus in progress(corpora, "zero-shot corpora"):
        dataset = registry.build("dataset", name, {**options, field: corpus})
        own = experiment.dataset
        if (dataset.vocab_size, dataset.seq_len) != (own.vocab_size, own.seq_len):
            raise IncompatibleComponentsError(
                f"corpus {corpus!r} gives {dataset.vocab_size} tokens x length {dataset.seq_len}; the model was "
                f"trained on {own.vocab_size} x {own.seq_len} (use the run's tokenizer and sequence length)"
            )
        loss = token_loss(dataclasses.replace(experiment, dataset=dataset), batches, batch_size, seed)
        rows.append(ZeroShotRow(corpus, batches * batch_size * dataset.seq_len, loss))
    return rows


def format_zero_shot(rows: list[ZeroShotRow]) -> str:
    """A plain-text table of perplexities with the note on what they measure."""
    width = max([len(r.corpus) for r in rows] + [6])
    lines = [f"{'corpus':<{width}}  {'tokens':>10}  {'L^x':>7}  {'PPL':>9}"]
    lines += [f"{r.corpus:<{width}}  {r.tokens:>10}  {r.token_loss:>7.4f}  {r.perplexity:>9.2f}" for r in rows]
    return "\n".join([*lines, PPL_NOTE])
