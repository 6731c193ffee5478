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
    token_loss: float
    scores: list[BudgetScore] = field(default_factory=list)
    data_floor: float | None = None  # metric between two independent data draws: the best reachable

    def save(self, run_dir: str | Path) -> None:
        """Write eval.json and scores.csv into the run folder."""
        run_dir = Path(run_dir)
        (run_dir / "eval.json").write_text(json.dumps(asdict(self), indent=2))
        write_csv(run_dir / "scores.csv", ["steps", "network_calls", "score"], [asdict(s) for s in self.scores])


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
def sample(experiment: Experiment, num_samples: int, steps: int, batch_size: int, seed: int, progress: bool = True) -> tuple[torch.Tensor, int]:
    """``num_samples`` sequences in batches; returns them and the network calls per sample."""
    model = experiment.model.eval()
    generator = torch.Generator(device=model.device).manual_seed(seed)
    chunks, calls = [], 0
    for start in tqdm(range(0, num_samples, batch_size), desc=f"sampling {steps} steps", disable=not progress, leave=False):
        out = experiment.sampler.sample(model, min(batch_size, num_samples - start), steps, generator)
        chunks.append(out.tokens.cpu())
        calls = out.network_calls
    return torch.cat(chunks), calls


def evaluate(experiment: Experiment, method: str, eval_cfg: dict[str, Any], progress: bool = True) -> EvalResult:
    """L^x on held-out data and the metric at every budget in ``eval_cfg['budgets']``."""
    seed, n = eval_cfg["seed"], eval_cfg["num_samples"]
    result = EvalResult(method, token_loss(experiment, eval_cfg["loss_batches"], eval_cfg["batch_size"], seed))
    reference = next(experiment.dataset.batches(n, seed, "test"))
    result.data_floor = experiment.metric(next(experiment.dataset.batches(n, seed, "floor")), reference)
    for steps in tqdm(eval_cfg["budgets"], desc=f"evaluating {method}", disable=not progress):
        samples, calls = sample(experiment, n, int(steps), eval_cfg["batch_size"], seed + int(steps), progress)
        result.scores.append(BudgetScore(int(steps), calls, experiment.metric(samples, reference)))
    return result
