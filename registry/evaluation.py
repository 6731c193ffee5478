"""Generic evaluation: held-out token loss L^x and a sample metric against sampling budgets."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from .assembly import Experiment
from .batches import checked_batches
from .config import INFERENCE_PRECISIONS, resolve_precision
from .distributed import gather_rows, share
from .errors import InvalidConfigError, LaddError, first_line
from .files import check_name, write_text
from .records import read_json

#: Seed distance between sample chunks (and loss batches): far beyond the step budgets added to the seed.
_CHUNK_SEED_STRIDE = 1_000_003
#: Seed distance between evaluation repeats: far beyond the chunks of any sample set.
_REPEAT_SEED_STRIDE = 1_000_000_007


@contextlib.contextmanager
def inference_precision(device: torch.device, precision: str) -> Iterator[None]:
    """Run the networks under bf16 autocast or in full precision (categorical draws stay float64 either way)."""
    if precision not in INFERENCE_PRECISIONS:
        raise InvalidConfigError(f"inference precision {precision!r}; valid: {', '.join(INFERENCE_PRECISIONS)}")
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=resolve_precision(precision, device.type) == "bf16-mixed"):
        yield


@dataclass
class BudgetScore:
    """The metric's named scores at one token-step budget (means over the repeats), their spread, the network calls per sample."""

    steps: int
    network_calls: int
    scores: dict[str, float]
    spread: dict[str, float] = field(default_factory=dict)  # standard deviation over the repeats (none for one)


@dataclass
class EvalResult:
    """What ``ladd eval`` reports for one run; ``metric`` names the headline score."""

    method: str
    metric: str
    token_loss: float
    scores: list[BudgetScore] = field(default_factory=list)
    data_floor: dict[str, float] | None = None  # mean score of independent data draws against the references
    data_floor_spread: dict[str, float] = field(default_factory=dict)  # its standard deviation over the draws
    oracle_token_loss: float | None = None  # exact optimum when the data model is known
    lower_is_better: bool = True  # of the headline score
    repeats: int = 1  # independent sample sets (each against its own reference draw) per budget
    floor_draws: int = 1  # data-vs-data pairs behind data_floor

    @property
    def token_perplexity(self) -> float:
        """exp(L^x): validation perplexity from the token term alone (for LADD not the full ELBO bound)."""
        return math.exp(self.token_loss)

    def curve(self) -> list[tuple[int, float]]:
        """(steps, headline score) pairs."""
        return [(s.steps, s.scores[self.metric]) for s in self.scores]

    @staticmethod
    def files(path: str | Path) -> tuple[Path, Path]:
        """The JSON result at ``path`` and the CSV of its scores beside it."""
        return Path(path), Path(path).with_suffix(".csv")

    def spreads(self) -> list[float | None]:
        """The headline score's spread at each budget of :meth:`curve` (None with one repeat)."""
        return [s.spread.get(self.metric) for s in self.scores]

    def save(self, path: str | Path) -> Path:
        """Write the result as JSON (and its scores as CSV beside it)."""
        result, scores = self.files(path)
        write_text(result, json.dumps(asdict(self), indent=2))
        names = score_columns(self.scores, self.metric)
        rows = [{"steps": s.steps, "network_calls": s.network_calls, **score_cells(s)} for s in self.scores]
        write_csv(scores, ["steps", "network_calls", *names], rows)
        return result

    @classmethod
    def load(cls, path: str | Path) -> EvalResult:
        """Read a result written by :meth:`save`."""
        path = Path(path)
        if not path.is_file():
            raise LaddError(f"no evaluation result at {path} (write one with `ladd eval RUN_DIR`)")
        data = read_json(path, "an evaluation result", "write it again with `ladd eval RUN_DIR`")
        try:
            data["scores"] = [BudgetScore(**s) for s in data["scores"]]
            result = cls(**data)
        except (ValueError, TypeError, KeyError) as error:
            raise LaddError(f"{path} is not an evaluation result written by `ladd eval` ({first_line(error)})") from None
        check_name(f"{path}: metric", result.metric, "ladd report writes METRIC.csv and METRIC.png")
        return result


def score_cells(score: BudgetScore) -> dict[str, float]:
    """A budget's scores and, as ``NAME_std``, their spreads: one CSV row's values."""
    return {**score.scores, **{f"{name}_std": value for name, value in score.spread.items()}}


def score_columns(scores: list[BudgetScore], metric: str) -> list[str]:
    """The CSV columns of :func:`score_cells` for a list of budgets, in first-seen order."""
    names = list(dict.fromkeys(name for s in scores for name in score_cells(s)))
    return names or [metric]


def mean_and_spread(draws: list[dict[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """Per-score mean over ``draws`` and sample standard deviation (left out for a single draw)."""
    names = list(draws[0])
    mean = {k: math.fsum(d[k] for d in draws) / len(draws) for k in names}
    if len(draws) < 2:
        return mean, {}
    spread = {k: math.sqrt(math.fsum((d[k] - mean[k]) ** 2 for d in draws) / (len(draws) - 1)) for k in names}
    return mean, spread


def write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    """A CSV with a header row, written whole and never through a link (``files.write_text``)."""
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, text.getvalue())


@torch.no_grad()
def token_loss(experiment: Experiment, batches: int, batch_size: int, seed: int, precision: str = "auto") -> float:
    """Mean held-out L^x (nats per token), conditioning on the latent as the run's sampler does.

    Batch ``k`` draws its noise from its own generator, so under several processes each takes its share
    of the batches and the mean over all of them is the one-process mean.
    """
    model = experiment.model.eval()
    stream = checked_batches(experiment.dataset, batch_size, seed, "validation")
    clean = experiment.sampler.conditions_on_clean_latent
    mine = share(batches)
    losses = []
    for index in range(batches):
        batch = next(stream)  # every rank walks the same stream and scores only its own batches
        if index in mine:
            generator = torch.Generator(device=model.device).manual_seed(seed + index * _CHUNK_SEED_STRIDE)
            with inference_precision(model.device, precision):
                losses.append(model.token_loss(batch.to(model.device), clean, generator).float().mean())
    local = torch.stack(losses).double().cpu() if losses else torch.zeros(0, dtype=torch.float64)
    return float(gather_rows(local).mean())


@torch.no_grad()
def sample(
    experiment: Experiment,
    num_samples: int,
    steps: int,
    batch_size: int,
    seed: int,
    progress: bool = False,
    fixed: torch.Tensor | None = None,
    precision: str = "auto",
) -> tuple[torch.Tensor, int]:
    """``num_samples`` sequences (keeping ``fixed``'s known tokens); returns them and the network calls per sample.

    Chunk ``k`` of ``batch_size`` samples draws from its own generator (seeded ``seed`` for the first), so the samples do
    not depend on how many processes share the chunks (each rank draws its share; all are gathered in order).
    """
    model = experiment.model.eval()
    starts = range(0, num_samples, batch_size)
    chunks, calls = [], 0
    for k in tqdm(share(len(starts)), desc=f"sampling {steps} steps", disable=not progress, leave=False):
        start = starts[k]
        size = min(batch_size, num_samples - start)
        generator = torch.Generator(device=model.device).manual_seed(seed + k * _CHUNK_SEED_STRIDE)
        known = None if fixed is None else fixed[start : start + size].to(model.device)
        with inference_precision(model.device, precision):
            out = experiment.sampler.sample(model, size, steps, generator, fixed=known)
        chunks.append(out.tokens.cpu())
        calls = out.network_calls
    local = torch.cat(chunks) if chunks else torch.zeros(0, model.seq_len, dtype=torch.long)
    return gather_rows(local), calls


def evaluate(experiment: Experiment, method: str, eval_cfg: dict[str, Any], progress: bool = True) -> EvalResult:
    """L^x on held-out data and the metric at every budget in ``eval_cfg['budgets']``.

    Repeat ``r`` (of ``eval.repeats``) draws its reference set and its samples from seeds of its own; the
    data floor compares ``eval.floor_draws`` further data draws with the references of those seeds, so
    the floor and the scores come with their spread over independent draws.
    """
    n, precision = eval_cfg["num_samples"], eval_cfg.get("precision", "auto")  # runs older than the option lack it
    repeats, floor_draws = eval_cfg.get("repeats", 1), eval_cfg.get("floor_draws", 1)
    if repeats < 1 or floor_draws < 1:
        raise InvalidConfigError(f"eval.repeats={repeats} and eval.floor_draws={floor_draws} must be at least 1")
    seeds = [eval_cfg["seed"] + r * _REPEAT_SEED_STRIDE for r in range(max(repeats, floor_draws))]
    result = EvalResult(
        method,
        experiment.metric.primary,
        token_loss(experiment, eval_cfg["loss_batches"], eval_cfg["batch_size"], seeds[0], precision),
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
    for steps in tqdm(eval_cfg["budgets"], desc=f"evaluating {method}", disable=not progress):
        draws, calls = [], 0
        for seed, reference in zip(seeds[:repeats], references, strict=False):
            samples, calls = sample(experiment, n, int(steps), eval_cfg["batch_size"], seed + int(steps), precision=precision)
            draws.append(experiment.metric(samples, reference))
        scores, spread = mean_and_spread(draws)
        result.scores.append(BudgetScore(int(steps), calls, scores, spread))
    return result
