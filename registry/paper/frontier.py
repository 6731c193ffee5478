"""Matched-compute frontier: Gen PPL and entropy at fixed sampling budgets, from per-step-count measurements.

A measurement's budget is ``steps x gflops_per_step + fixed_gflops`` GFLOPs per sample (``fixed_gflops``,
optional, is compute spent once per sample whatever the token step count, e.g. the ``T^Y`` latent steps
of sequential sampling), or ``gflops_per_sample`` where a row gives it: what ``ladd eval`` counted for any sampler,
whose steps need not cost alike (a key-value cache, a threshold, steps that reveal nothing). ``ladd eval`` results
scored with Gen PPL (``eval_*.json``) are read directly, each labelled with its method. At a requested budget,
each score is interpolated linearly in the budget between the two measurements that bracket it; outside the
measured range it is ``None`` (``n/a``), never extrapolated. With ``ms_per_sample`` the throughput per Gen PPL point
is reported as in the paper: ``1000 / (Gen PPL x ms per sample)``, i.e. samples per second divided by Gen PPL, with
the time interpolated like the scores.
"""
from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from registry.errors import LaddError
from registry.storage.files import write_figure

__all__ = [
    "FrontierInputError",
    "MatchedPoint",
    "Measurement",
    "as_json",
    "budget_key",
    "format_table",
    "interpolate",
    "matched_compute",
    "parse_budgets",
    "plot",
    "read_measurements",
    "read_results",
]

#: the score the frontier compares at matched compute, as the paper's tables do: Gen PPL
QUALITY = "gen_ppl"
REQUIRED = ("method", "steps", "gflops_per_step", QUALITY, "entropy")
OPTIONAL = ("ms_per_sample", "fixed_gflops", "gflops_per_sample")
#: the entropy a Gen PPL result reports beside it: the per-sequence unigram entropy the MDLM literature prints
RESULT_ENTROPY = "entropy_unigram"


class FrontierInputError(LaddError):
    """A per-step results file that is missing columns or holds values that cannot be read."""


@dataclass(frozen=True)
class Measurement:
    """Scores of one method sampled with ``steps`` token steps, and what that cost per sample."""

    steps: int
    budget: float  # GFLOPs per sample
    gen_ppl: float
    entropy: float
    ms_per_sample: float | None = None


@dataclass(frozen=True)
class MatchedPoint:
    """Scores at one budget; None outside the measured range."""

    gen_ppl: float | None
    entropy: float | None
    ms_per_sample: float | None = None

    @property
    def throughput_per_ppl(self) -> float | None:
        """Samples per second per Gen PPL point, ``1000 / (Gen PPL x ms per sample)`` (higher is better)."""
        if self.gen_ppl is None or self.ms_per_sample is None:
            return None
        return 1000.0 / (self.gen_ppl * self.ms_per_sample)


def read_measurements(path: str | Path) -> dict[str, list[Measurement]]:
    """Method -> its measurements sorted by budget, from a CSV with columns
    ``method,steps,gflops_per_step,gen_ppl,entropy[,ms_per_sample][,fixed_gflops]``."""
    if not Path(path).is_file():
        raise FrontierInputError(f"{path}: no such results file")
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        given = reader.fieldnames or []
        counted = "gflops_per_sample" in given  # then the cost per step is not needed
        missing = [c for c in REQUIRED if c not in given and not (counted and c == "gflops_per_step")]
        if missing:
            raise FrontierInputError(
                f"{path}: missing column(s) {', '.join(missing)}; expected {','.join(REQUIRED)}[,{','.join(OPTIONAL)}]"
            )
        runs: dict[str, list[Measurement]] = {}
        for line, row in enumerate(reader, start=2):
            runs.setdefault(row["method"], []).append(_measurement(row, f"{path}:{line}"))
    return _sorted(runs, str(path))


def read_results(paths: Sequence[str | Path]) -> dict[str, list[Measurement]]:
    """Method -> its measurements sorted by budget, from ``ladd eval`` results scored with Gen PPL, each budget at the
    GFLOPs per sample the evaluation counted."""
    from registry.storage.results import EvalResult

    runs: dict[str, list[Measurement]] = {}
    for path in paths:
        result = EvalResult.load(path)
        if QUALITY not in {name for score in result.scores for name in score.scores}:
            raise FrontierInputError(
                f"{path}: scored with {result.metric!r}, not Gen PPL; the frontier reads results of metric=gen_ppl "
                f"(`ladd report` plots any metric against GFLOPs per sample)"
            )
        for score in result.scores:
            if score.flops_per_sample is None:
                raise FrontierInputError(
                    f"{path}: written before ladd eval counted FLOPs per sample; evaluate the run again"
                )
            budget, scores = score.flops_per_sample / 1e9, score.scores
            runs.setdefault(result.method, []).append(
                Measurement(score.steps, budget, scores[QUALITY], scores.get(RESULT_ENTROPY, math.nan))
            )
    return _sorted(runs, ", ".join(map(str, paths)))


def _sorted(runs: dict[str, list[Measurement]], where: str) -> dict[str, list[Measurement]]:
    """``runs`` with each method's measurements sorted by budget; two at one budget are refused."""
    for method, rows in runs.items():
        rows.sort(key=lambda m: m.budget)
        budgets = [m.budget for m in rows]
        if len(set(budgets)) != len(budgets):
            raise FrontierInputError(f"{where}: method {method!r} has two measurements at the same budget")
    return runs


def _measurement(row: Mapping[str, str], where: str) -> Measurement:
    def text_of(column: str) -> str:
        return (row.get(column) or "").strip()

    def optional(column: str) -> float | None:
        return number(column) if text_of(column) else None

    def number(column: str) -> float:
        text = text_of(column)
        try:
            value = float(text)
        except ValueError:
            raise FrontierInputError(f"{where}: {column}={text!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise FrontierInputError(f"{where}: {column}={text!r} must be a finite non-negative number")
        return value

    steps = number("steps")
    if not steps.is_integer():
        raise FrontierInputError(f"{where}: steps={steps:g} must be a whole number")
    counted = optional("gflops_per_sample")
    if counted is None:
        counted = steps * number("gflops_per_step") + (optional("fixed_gflops") or 0.0)
    return Measurement(
        steps=int(steps),
        budget=counted,
        gen_ppl=number("gen_ppl"),
        entropy=number("entropy"),
        ms_per_sample=optional("ms_per_sample"),
    )


def interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float | None:
    """Linear interpolation of ``ys`` over increasing ``xs`` at ``x``; exact hits return the measurement, None
    outside."""
    for x0, y0 in zip(xs, ys, strict=True):
        if math.isclose(x, x0, rel_tol=1e-12):
            return y0
    for (x0, x1), (y0, y1) in zip(pairwise(xs), pairwise(ys), strict=True):
        if x0 < x < x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


def matched_compute(
    runs: Mapping[str, Sequence[Measurement]], budgets: Sequence[float]
) -> dict[str, dict[float, MatchedPoint]]:
    """Method -> budget -> interpolated scores (and time, where every measurement of the method has one)."""
    table = {}
    for method, rows in runs.items():
        xs = [m.budget for m in rows]
        times = [m.ms_per_sample for m in rows if m.ms_per_sample is not None]
        timed = len(times) == len(rows)
        table[method] = {
            b: MatchedPoint(
                interpolate(xs, [m.gen_ppl for m in rows], b),
                interpolate(xs, [m.entropy for m in rows], b),
                interpolate(xs, times, b) if timed else None,
            )
            for b in budgets
        }
    return table


def budget_key(budget: float) -> str:
    """A budget as written on the command line: ``50`` rather than ``50.0``."""
    return str(int(budget)) if float(budget).is_integer() else repr(float(budget))


def as_json(table: Mapping[str, Mapping[float, MatchedPoint]]) -> dict[str, dict[str, dict[str, float | None]]]:
    """``{method: {budget: {"gen_ppl": value or None, "entropy": value or None}}}``."""
    return {
        method: {budget_key(b): {"gen_ppl": p.gen_ppl, "entropy": p.entropy} for b, p in points.items()}
        for method, points in table.items()
    }


def format_table(table: Mapping[str, Mapping[float, MatchedPoint]]) -> str:
    """Gen PPL, entropy and (where timed) throughput per Gen PPL point, one column per budget."""
    budgets = list(next(iter(table.values()), {}))
    width = max([len(m) for m in table] + [len("GFLOPs")])
    header = f"{'GFLOPs':<{width}}  " + "  ".join(f"{budget_key(b):>10}" for b in budgets)
    sections = [
        ("Gen PPL (lower is better)", lambda p: p.gen_ppl, ".2f"),
        ("entropy", lambda p: p.entropy, ".3f"),
        ("throughput per Gen PPL point, 1000 / (Gen PPL x ms per sample)", lambda p: p.throughput_per_ppl, ".4f"),
    ]
    lines = []
    for title, value, spec in sections:
        if all(value(p) is None for points in table.values() for p in points.values()):
            continue
        lines += ["", title, header]
        for method, points in table.items():
            cells = (_cell(value(p), spec) for p in points.values())
            lines.append(f"{method:<{width}}  " + "  ".join(f"{c:>10}" for c in cells))
    return "\n".join(
        lines[1:] + ["", "linear interpolation in budget between measured step counts; n/a: outside the measured range"]
    )


def _cell(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def plot(runs: Mapping[str, Sequence[Measurement]], budgets: Sequence[float], path: str | Path) -> Path:
    """Measured Gen PPL against GFLOPs per sample, one line per method, log-log, requested budgets marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, rows in runs.items():
        ax.plot([m.budget for m in rows], [m.gen_ppl for m in rows], marker="o", label=method)
    for b in budgets:
        ax.axvline(b, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("sampling compute per sample (GFLOPs)")
    ax.set_ylabel("Gen PPL (lower is better)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    fig.tight_layout()
    path = Path(path)
    write_figure(path, fig)
    plt.close(fig)
    return path


def parse_budgets(text: str) -> list[float]:
    """``"50,100,200"`` -> ``[50.0, 100.0, 200.0]``, with a clear error for anything else."""
    try:
        budgets = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise FrontierInputError(f"--budgets {text!r} must be comma-separated numbers, e.g. 50,100,200") from None
    if not budgets or any(not math.isfinite(b) or b <= 0 for b in budgets):
        raise FrontierInputError(f"--budgets {text!r} must list positive GFLOPs budgets, e.g. 50,100,200")
    return budgets
