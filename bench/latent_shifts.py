"""Whether samples drawn like a reference keep its shift, on the binary sawtooth whose data model is known.

    python bench/latent_shifts.py LABEL=RUN_DIR[:SAMPLER] [...] --out FOLDER [--references 200] [--num 5] [--steps 32]

References are drawn from the sawtooth's data model with their shifts. For each trained run (sampled by its own
sampler, or by SAMPLER) the script runs the commands a user runs: ``ladd encode`` of the references, ``ladd sample
--latents`` of those latents (N samples per reference), and ``ladd sample`` without a latent; then ``ladd encode``
of the samples, to compare their latents with the reference's. Exact draws from the true conditional (N per
reference, tokens drawn given the reference's shift) are the floor no model can beat.

Each sequence's shift is estimated by maximum likelihood under the data model, on a grid of the shifts it can tell
apart (the sawtooth repeats every 1/P); the error against the reference's shift is circular, modulo 1/P, so samples
that ignore the reference score 1/(4P) on average. Writes ``shift_errors.csv`` (mean errors with their standard
errors, and how often a sample's own latent matches the reference's) and ``shifts.png`` (each sample's estimated
shift against its reference's).
"""
from __future__ import annotations

import argparse
import csv
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

import registry
from latent_agreement import agreement
from registry.cli import main as ladd

#: grid points per sawtooth period for the maximum-likelihood shift (a step of 1/(P * 2000) of the whole period)
GRID = 2000


@dataclass
class Run:
    """A trained run, the label it is reported under and the sampler that samples it (None: the run's own)."""

    label: str
    path: Path
    sampler: str | None = None

    @classmethod
    def parse(cls, text: str) -> Run:
        label, sep, rest = text.partition("=")
        if not sep or not label or not rest:
            raise argparse.ArgumentTypeError(f"{text!r} is not LABEL=RUN_DIR[:SAMPLER]")
        path, _, sampler = rest.partition(":")
        return cls(label, Path(path), sampler or None)


def sawtooth(run: Path):
    """The run's dataset, built from its recorded config (the script needs its data model: ``sample`` and ``omega``)."""
    options = dict(yaml.safe_load((run / "config.yaml").read_text())["dataset"])
    return registry.build("dataset", options.pop("name"), options)


def period(dataset) -> float:
    """The shift's period 1/P: shifts that far apart give the same sequences."""
    return 1.0 / dataset.config.periods


def shift_grid(dataset) -> torch.Tensor:
    """The shifts the estimator tries, ``GRID`` of them over one period."""
    return torch.arange(GRID, dtype=torch.float64) * (period(dataset) / GRID)


def ml_shifts(dataset, tokens: torch.Tensor) -> torch.Tensor:
    """The maximum-likelihood shift of each row of ``tokens`` ``[N, S]`` on the grid (float64 ``[N]``)."""
    grid = shift_grid(dataset)
    positions = torch.arange(1, dataset.seq_len + 1, dtype=torch.float64)
    ones = dataset.omega(positions, grid[:, None])  # [G, S]: P(x_i = 1 | y)
    x = tokens.double()
    log_likelihood = x @ ones.log().T + (1 - x) @ (1 - ones).log().T
    return grid[log_likelihood.argmax(dim=1)]


def circular_error(estimate: torch.Tensor, truth: torch.Tensor, span: float) -> torch.Tensor:
    """``|estimate - truth|`` on a circle of circumference ``span``: at most ``span / 2``."""
    difference = torch.remainder(estimate - truth, span)
    return torch.minimum(difference, span - difference)


def exact_draws(dataset, shifts: torch.Tensor, num: int, generator: torch.Generator) -> torch.Tensor:
    """``num`` sequences per shift, in shift order, drawn from the data model's conditional given that shift."""
    positions = torch.arange(1, dataset.seq_len + 1, dtype=torch.float64)
    ones = dataset.omega(positions, shifts.repeat_interleave(num)[:, None])
    return (torch.rand(ones.shape, generator=generator, dtype=torch.float64) < ones).long()


def mean_and_error(values: torch.Tensor) -> tuple[float, float]:
    """The mean and its standard error."""
    return float(values.mean()), float(values.std() / math.sqrt(values.numel()))


def write_ids(path: Path, tokens: torch.Tensor) -> None:
    path.write_text("".join(" ".join(map(str, row)) + "\n" for row in tokens.tolist()))


def read_ids(path: Path) -> torch.Tensor:
    return torch.tensor([[int(v) for v in line.split()] for line in path.read_text().splitlines()])


def run_ladd(*args: str) -> None:
    status = ladd([str(a) for a in args])
    if status != 0:
        raise SystemExit(f"ladd {' '.join(map(str, args))} failed with exit status {status}")


def encoded(run: Run, tokens_file: Path, out: Path) -> torch.Tensor:
    """The latents ``ladd encode`` writes for the rows of ``tokens_file``."""
    from safetensors.torch import load_file

    run_ladd("encode", run.path, "--input", tokens_file, "--out", out)
    return load_file(str(out))["latents"]


def measure(run: Run, references: Path, shifts: torch.Tensor, args: argparse.Namespace, work: Path) -> list[dict]:
    """The like and unconditioned rows of one run: shift errors and latent agreement, and the samples' shifts."""
    dataset = sawtooth(run.path)
    chosen = ["--sampler", run.sampler] if run.sampler else []
    common = ["--num", args.num, "--steps", args.steps, "--seed", args.seed, *chosen]
    reference_latents = encoded(run, references, work / f"{run.label}_references.safetensors")
    like, unconditioned = work / f"{run.label}_like.txt", work / f"{run.label}_unconditioned.txt"
    run_ladd("sample", run.path, "--latents", work / f"{run.label}_references.safetensors", "--out", like, *common)
    count = ["--num", len(shifts) * args.num]
    run_ladd("sample", run.path, *count, "--steps", args.steps, "--seed", args.seed, *chosen, "--out", unconditioned)
    target = shifts.repeat_interleave(args.num)
    rows = []
    for kind, path in (("like", like), ("unconditioned", unconditioned)):
        estimates = ml_shifts(dataset, read_ids(path))
        latents = encoded(run, path, work / f"{run.label}_{kind}.safetensors")
        agree = agreement(latents, reference_latents.repeat_interleave(args.num, 0))
        rows.append(row(run.label, kind, estimates, target, period(dataset), agree))
    return rows


def row(
    label: str, kind: str, estimates: torch.Tensor, target: torch.Tensor, span: float, agree: torch.Tensor | None
) -> dict:
    error, standard_error = mean_and_error(circular_error(estimates, target, span))
    cells = {"model": label, "samples": kind, "n": estimates.numel(), "mean_error": error}
    cells["standard_error"] = standard_error
    if agree is not None:
        cells["latent_agreement"] = float(agree.mean())
    return {**cells, "estimates": estimates, "target": target}


def plot(rows: list[dict], span: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows if r["samples"] != "exact"))
    exact = next(r for r in rows if r["samples"] == "exact")
    figure, axes = plt.subplots(1, len(models) + 1, figsize=(3.4 * (len(models) + 1), 3.6), sharey=True)
    panels = [(f"exact draws given the shift\nmean error {exact['mean_error']:.4f}", [exact])]
    for model in models:  # like samples drawn over the unconditioned ones
        panels.append((model, sorted((r for r in rows if r["model"] == model), key=lambda r: r["samples"] == "like")))
    colours = {"like": "tab:blue", "unconditioned": "tab:gray", "exact": "tab:green"}
    for axis, (title, chosen) in zip(axes, panels, strict=True):
        for r in chosen:
            label = f"{r['samples']} ({r['mean_error']:.4f})"
            axis.scatter(r["target"] % span, r["estimates"], s=3, alpha=0.35, color=colours[r["samples"]], label=label)
        axis.plot([0, span], [0, span], color="black", linewidth=0.6)
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("reference shift (mod 1/P)")
        axis.legend(fontsize=7, loc="upper left", markerscale=3)
    axes[0].set_ylabel("ML shift of the sample (mod 1/P)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_table(rows: list[dict], path: Path) -> None:
    exact = next(r["mean_error"] for r in rows if r["samples"] == "exact")
    columns = ["model", "samples", "n", "mean_error", "standard_error", "vs_exact", "latent_agreement"]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            cells = {**r, "mean_error": f"{r['mean_error']:.5f}", "standard_error": f"{r['standard_error']:.5f}"}
            cells["vs_exact"] = f"{r['mean_error'] / exact:.3f}"
            if "latent_agreement" in r:
                cells["latent_agreement"] = f"{r['latent_agreement']:.4f}"
            writer.writerow(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Run.parse, help="LABEL=RUN_DIR[:SAMPLER], sawtooth runs with a latent")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--references", type=int, default=200)
    parser.add_argument("--num", type=int, default=5, help="samples per reference")
    parser.add_argument("--steps", type=int, default=32, help="token steps of every sample")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    dataset = sawtooth(args.runs[0].path)
    generator = torch.Generator().manual_seed(args.seed)
    tokens, shifts = dataset.sample(args.references, generator)
    span = period(dataset)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        references = work / "references.txt"
        write_ids(references, tokens)
        exact = ml_shifts(dataset, exact_draws(dataset, shifts, args.num, generator))
        rows = [row("data model", "exact", exact, shifts.repeat_interleave(args.num), span, None)]
        for run in args.runs:
            rows += measure(run, references, shifts, args, work)
    write_table(rows, args.out / "shift_errors.csv")
    plot(rows, span, args.out / "shifts.png")
    for r in rows:
        agree = f"  latent agreement {r['latent_agreement']:.4f}" if "latent_agreement" in r else ""
        error = f"mean error {r['mean_error']:.5f} ± {r['standard_error']:.5f}"
        print(f"{r['model']:<14} {r['samples']:<14} {error}{agree}")


if __name__ == "__main__":
    main()
