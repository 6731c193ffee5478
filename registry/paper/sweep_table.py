"""A sweep's table: one row per combination of the swept values (seeds pooled), mean ± standard deviation over the
seeds of ``L^x`` and of each metric at each step budget, the best row of each column marked; one plot per metric.

A row lists the results its finished jobs wrote; a cell resting on fewer seeds than the sweep has for its row is
marked, and a row none of whose jobs has finished is kept, its cells missing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from registry.storage.files import check_name, write_text
from registry.storage.results import BudgetScore, EvalResult, mean_and_spread, write_csv

from .report import plot

MISSING = "—"
PARTIAL = "†"
LOSS = "lx"


@dataclass
class Row:
    """One combination of swept values: its label's parts, how many jobs (seeds) the sweep has for it, and the
    results its finished jobs wrote, by metric (one per job)."""

    key: dict[str, str]
    jobs: int
    results: dict[str, list[EvalResult]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``k=v k2=v2``, or ``all`` when only the seed was swept."""
        return " ".join(f"{k}={v}" for k, v in self.key.items()) or "all"


@dataclass(frozen=True)
class Cell:
    """A column's mean and standard deviation over the seeds of a row (None: no seed has it), and their number."""

    mean: float | None
    std: float | None
    seeds: int


@dataclass(frozen=True)
class Column:
    """A column: ``L^x``, or a metric at a step budget."""

    name: str
    metric: str | None  # None: the token loss L^x
    steps: int | None
    lower_is_better: bool = True

    def cell(self, row: Row) -> Cell:
        """This column's value for ``row`` over the seeds that have it."""
        values = [v for v in (self._value(r) for r in self._results(row)) if v is not None]
        if not values:
            return Cell(None, None, 0)
        mean, spread = mean_and_spread([{"v": v} for v in values])
        return Cell(mean["v"], spread.get("v"), len(values))

    def _results(self, row: Row) -> list[EvalResult]:
        if self.metric is not None:
            return row.results.get(self.metric, [])
        return next(iter(row.results.values()), [])  # every result of a job holds its L^x: the first metric's

    def _value(self, result: EvalResult) -> float | None:
        if self.metric is None:
            return result.token_loss
        return dict(result.curve()).get(self.steps) if self.steps is not None else None


def columns(rows: list[Row]) -> list[Column]:
    """``L^x``, then every metric (in the order the rows name them) at each of its step budgets."""
    metrics: dict[str, bool] = {}
    budgets: dict[str, set[int]] = {}
    for row in rows:
        for metric, results in row.results.items():
            for result in results:
                metrics.setdefault(metric, result.lower_is_better)
                budgets.setdefault(metric, set()).update(steps for steps, _ in result.curve())
    return [Column(LOSS, None, None)] + [
        Column(f"{metric}@{steps}", metric, steps, lower) for metric, lower in metrics.items()
        for steps in sorted(budgets[metric])
    ]


def best(rows: list[Row], column: Column) -> int | None:
    """The index of the row whose mean is best in ``column`` (lowest, or highest for a metric where higher is
    better); None when no row has a value."""
    values = [(index, column.cell(row).mean) for index, row in enumerate(rows)]
    present = [(index, mean) for index, mean in values if mean is not None]
    if not present:
        return None
    sign = 1.0 if column.lower_is_better else -1.0
    return min(present, key=lambda item: sign * item[1])[0]


def _text(cell: Cell, row: Row, best: bool) -> str:
    if cell.mean is None:
        return MISSING
    text = f"{cell.mean:.4f}" + (f" ± {cell.std:.4f}" if cell.std is not None else "")
    text = f"**{text}**" if best else text
    return text + (PARTIAL if cell.seeds < row.jobs else "")


def write_sweep_table(rows: list[Row], out_dir: str | Path, source: str) -> list[Path]:
    """Write ``sweep.csv``, ``sweep.md`` and, per metric, ``METRIC.png`` (against step budgets) and
    ``METRIC_flops.png`` (against GFLOPs per sample, when every result counted them); the paths written."""
    out_dir = Path(out_dir)
    table = columns(rows)
    winners = {column.name: best(rows, column) for column in table}
    keys = list(dict.fromkeys(k for row in rows for k in row.key))
    csv_rows = []
    for index, row in enumerate(rows):
        cells = {column.name: column.cell(row) for column in table}
        values: dict[str, str] = {**{k: row.key.get(k, "") for k in keys}, "seeds": str(row.jobs)}
        for name, cell in cells.items():
            values[name] = "" if cell.mean is None else f"{cell.mean:.6g}"
            values[f"{name}_std"] = "" if cell.std is None else f"{cell.std:.6g}"
            values[f"{name}_seeds"] = str(cell.seeds)
        values["best"] = ";".join(name for name, winner in winners.items() if winner == index)
        csv_rows.append(values)
    header = [*keys, "seeds", *(f"{c.name}{suffix}" for c in table for suffix in ("", "_std", "_seeds")), "best"]
    paths = [out_dir / "sweep.csv", out_dir / "sweep.md"]
    write_csv(paths[0], header, csv_rows)
    write_text(paths[1], markdown(rows, table, winners, source))
    for metric in dict.fromkeys(c.metric for c in table if c.metric is not None):
        check_name("metric", metric, "METRIC.png")
        pooled = [pooled_result(row, metric) for row in rows if row.results.get(metric)]
        paths.append(plot(pooled, metric, out_dir / f"{metric}.png"))
        if all(s.flops_per_sample is not None for r in pooled for s in r.scores):
            paths.append(plot(pooled, metric, out_dir / f"{metric}_flops.png", flops=True))
    return paths


def markdown(rows: list[Row], table: list[Column], winners: dict[str, int | None], source: str) -> str:
    """The table in Markdown: the best mean of each column in bold, marks for cells from fewer seeds than their row
    has and for rows not finished."""
    keys = list(dict.fromkeys(k for row in rows for k in row.key)) or ["combination"]
    names = [("L^x" if c.metric is None else f"{c.metric} @{c.steps}") for c in table]
    lines = [
        f"| {' | '.join(keys)} | seeds | {' | '.join(names)} |",
        "| " + " | ".join("---" for _ in [*keys, "seeds", *names]) + " |",
    ]
    for index, row in enumerate(rows):
        key = [row.key.get(k, "") for k in keys] if row.key else ["all"]
        cells = [_text(c.cell(row), row, winners[c.name] == index) for c in table]
        finished = max((c.cell(row).seeds for c in table), default=0)
        seeds = str(row.jobs) if finished == row.jobs else f"{finished} of {row.jobs}"
        lines.append(f"| {' | '.join(key)} | {seeds} | {' | '.join(cells)} |")
    notes = [
        f"Mean ± standard deviation over the seeds of each row ({source}); `L^x` in nats per token; metrics at each "
        f"token step budget. Bold: the best mean of each column. {PARTIAL}: from fewer seeds than the row has (the "
        f"others not finished); {MISSING}: no finished seed."
    ]
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"


def pooled_result(row: Row, metric: str) -> EvalResult:
    """The row's results for ``metric`` as one: at each budget every score's mean over the seeds, its spread their
    standard deviation (none for one seed), the FLOPs their mean; labelled by the row."""
    results = row.results[metric]
    first = results[0]
    budgets = sorted(set.intersection(*({s.steps for s in r.scores} for r in results)))
    scores = []
    for steps in budgets:
        at = [next(s for s in r.scores if s.steps == steps) for r in results]
        mean, spread = mean_and_spread([s.scores for s in at])
        flops = [s.flops_per_sample for s in at]
        scores.append(BudgetScore(
            steps, at[0].network_calls, mean, spread,
            None if any(f is None for f in flops) else math.fsum(f for f in flops if f is not None) / len(flops),
        ))
    return EvalResult(
        row.label, metric, math.fsum(r.token_loss for r in results) / len(results), scores,
        data_floor=first.data_floor, data_floor_spread=first.data_floor_spread, lower_is_better=first.lower_is_better,
        repeats=len(results), floor_draws=first.floor_draws,
    )
