"""Evaluation results as files: the JSON ``ladd eval`` writes, the CSV of its scores, and reading them back."""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from registry.errors import LaddError, first_line

from .files import check_name, write_text
from .records import read_json

#: printed with every bound: what it covers
BOUND_NOTE = "the full variational bound: token and latent channels, endpoint and encoder terms (App. C.1)"


def perplexity(nats: float) -> float:
    """``exp(nats)``, infinite where it exceeds a float (a bound of an untrained model can be hundreds of nats)."""
    try:
        return math.exp(nats)
    except OverflowError:
        return math.inf


@dataclass
class BudgetScore:
    """The metric's named scores at one token-step budget (means over the repeats), their spread, the network calls per
    sample."""

    steps: int
    network_calls: int
    scores: dict[str, float]
    spread: dict[str, float] = field(default_factory=dict)  # standard deviation over the repeats (none for one)
    flops_per_sample: float | None = None  # FLOPs (two per multiply-add) spent per sample, mean over the repeats


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
    #: the full variational bound on -log p of the held-out rows of token_loss, nats per real token (None: not asked)
    bound: float | None = None
    bound_draws: int = 0  # Monte Carlo draws per held-out row behind bound
    no_bound: str | None = None  # why the bound was left out when it was not asked for explicitly
    #: what token_loss is for this model (``engine.evaluation.token_loss_meaning``): a bound, an estimate of one, or not
    token_loss_meaning: str | None = None
    #: the sampler and metric that produced it (slot -> kind, name, qualified name, plugin, distribution, version and
    #: ``nested``: the components they name, as a sampler's token decoder); empty in results of an earlier ladd
    components: dict[str, Any] = field(default_factory=dict)

    @property
    def token_perplexity(self) -> float:
        """exp(L^x): a perplexity only where L^x is a likelihood or estimates its bound (``token_loss_meaning``)."""
        return perplexity(self.token_loss)

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
        rows = [
            {"steps": s.steps, "network_calls": s.network_calls, "gflops_per_sample": gflops(s), **score_cells(s)}
            for s in self.scores
        ]
        write_csv(scores, ["steps", "network_calls", "gflops_per_sample", *names], rows)
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
            raise LaddError(
                f"{path} is not an evaluation result written by `ladd eval` ({first_line(error)})"
            ) from None
        check_name(f"{path}: metric", result.metric, "ladd report writes METRIC.csv and METRIC.png")
        return result


def gflops(score: BudgetScore) -> str:
    """A budget's GFLOPs per sample as a CSV cell (empty for a result written before they were counted)."""
    return "" if score.flops_per_sample is None else f"{score.flops_per_sample / 1e9:.6g}"


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
