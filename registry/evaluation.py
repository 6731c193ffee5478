"""Generic evaluation: held-out token loss L^x and a sample metric against sampling budgets."""
from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from .assembly import Experiment
from .errors import LaddError


@dataclass
class BudgetScore:
    """The metric at one token-step budget, with the network calls it took per sample."""

    steps: int
    network_calls: int
    score: float


@dataclass
class EvalResult:
    """What ``ladd eval`` reports for one run."""

    method: str
    metric: str
    token_loss: float
    scores: list[BudgetScore] = field(default_factory=list)
    data_floor: float | None = None  # metric between two independent data draws: the best reachable
    oracle_token_loss: float | None = None  # exact optimum when the data model is known

    def save(self, path: str | Path) -> Path:
        """Write the result as JSON (and its scores as CSV beside it)."""
        path = Path(path)
        path.write_text(json.dumps(asdict(self), indent=2))
        write_csv(path.with_suffix(".csv"), ["steps", "network_calls", "score"], [asdict(s) for s in self.scores])
        return path

    @classmethod
    def load(cls, path: str | Path) -> "EvalResult":
        """Read a result written by :meth:`save`."""
        path = Path(path)
        if not path.is_file():
            raise LaddError(f"no evaluation result at {path} (write one with `ladd eval RUN_DIR`)")
        data = json.loads(path.read_text())
        data["scores"] = [BudgetScore(**s) for s in data["scores"]]
        return cls(**data)


def write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    """A CSV with a header row."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


@torch.no_grad()
def token_loss(experiment: Experiment, batches: int, batch_size: int, seed: int) -> float:
    """Mean held-out L^x (nats per token), conditioning on the latent as the run's sampler does."""
    model = experiment.model.eval()
    generator = torch.Generator(device=model.device).manual_seed(seed)
    stream = experiment.dataset.batches(batch_size, seed, "validation")
    clean = experiment.sampler.conditions_on_clean_latent
    losses = [model.token_loss(next(stream).to(model.device), clean, generator).mean() for _ in range(batches)]
    return float(torch.stack(losses).mean())


@torch.no_grad()
def sample(experiment: Experiment, num_samples: int, steps: int, batch_size: int, seed: int, progress: bool = False) -> tuple[torch.Tensor, int]:
    """``num_samples`` sequences in batches; returns them and the network calls per sample."""
    model = experiment.model.eval()
    generator = torch.Generator(device=model.device).manual_seed(seed)
    chunks, calls = [], 0
    for start in tqdm(range(0, num_samples, batch_size), desc=f"sampling {steps} steps", disable=not progress, leave=False):
        out = experiment.sampler.sample(model, min(batch_size, num_samples - start), steps, generator)
        chunks.append(out.tokens.cpu())
        calls = out.network_calls
    return torch.cat(chunks), calls


def evaluate(experiment: Experiment, method: str, metric: str, eval_cfg: dict[str, Any], progress: bool = True) -> EvalResult:
    """L^x on held-out data and the metric at every budget in ``eval_cfg['budgets']``."""
    seed, n = eval_cfg["seed"], eval_cfg["num_samples"]
    result = EvalResult(
        method,
        metric,
        token_loss(experiment, eval_cfg["loss_batches"], eval_cfg["batch_size"], seed),
        oracle_token_loss=experiment.dataset.oracle_token_loss(),
    )
    reference = next(experiment.dataset.batches(n, seed, "test"))
    result.data_floor = experiment.metric(next(experiment.dataset.batches(n, seed, "floor")), reference)
    for steps in tqdm(eval_cfg["budgets"], desc=f"evaluating {method}", disable=not progress):
        samples, calls = sample(experiment, n, int(steps), eval_cfg["batch_size"], seed + int(steps))
        result.scores.append(BudgetScore(int(steps), calls, experiment.metric(samples, reference)))
    return result
