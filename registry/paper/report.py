"""Tables and plots comparing evaluated runs: reconstruction loss and metric against sampling compute."""
from __future__ import annotations

from pathlib import Path

from registry.storage.files import check_name, write_figure
from registry.storage.results import EvalResult, gflops, score_cells, score_columns, write_csv


def publish(results: list[EvalResult], out_dir: str | Path) -> None:
    """Write the report of ``results`` to ``out_dir``, print their table and the files written."""
    paths = write_report(results, out_dir)
    print(format_table(results))
    print("wrote " + ", ".join(str(p) for p in paths))


def write_report(results: list[EvalResult], out_dir: str | Path) -> list[Path]:
    """Write reconstruction.csv, METRIC.csv (with a data-vs-data row) and METRIC.png for a set of evaluated runs, and
    METRIC_flops.png (the metric against GFLOPs per sample) when every result counted its FLOPs."""
    out_dir = Path(out_dir)
    metric, oracle = _metric(results), _oracle(results)
    check_name("metric", metric, "METRIC.csv and METRIC.png")
    rows = ([{"method": "oracle", "lx": f"{oracle:.4f}"}] if oracle is not None else []) + [
        {"method": r.method, "lx": f"{r.token_loss:.4f}"} for r in results
    ]
    write_csv(out_dir / "reconstruction.csv", ["method", "lx"], rows)
    curve = [
        {
            "method": r.method,
            "steps": s.steps,
            "network_calls": s.network_calls,
            "gflops_per_sample": gflops(s),
            "draws": r.repeats,
            **_cells(score_cells(s)),
        }
        for r in results
        for s in r.scores
    ]
    floor = _floor(results)
    if floor is not None:
        curve.append({"method": "data", "draws": floor.floor_draws, **_cells(_floor_cells(floor))})
    names = list(dict.fromkeys(name for r in results for name in score_columns(r.scores, metric)))
    columns = ["method", "steps", "network_calls", "gflops_per_sample", "draws", *names]
    write_csv(out_dir / f"{metric}.csv", columns, curve)
    curve_plot = plot(results, metric, out_dir / f"{metric}.png")
    paths = [out_dir / "reconstruction.csv", out_dir / f"{metric}.csv", curve_plot]
    if all(s.flops_per_sample is not None for r in results for s in r.scores):
        paths.append(plot(results, metric, out_dir / f"{metric}_flops.png", flops=True))
    return paths


def _cells(values: dict[str, float]) -> dict[str, str]:
    return {k: f"{v:.5f}" for k, v in values.items()}


def _floor_cells(result: EvalResult) -> dict[str, float]:
    return {**(result.data_floor or {}), **{f"{k}_std": v for k, v in result.data_floor_spread.items()}}


def _metric(results: list[EvalResult]) -> str:
    metrics = {r.metric for r in results}
    if len(metrics) != 1:
        raise ValueError(f"cannot compare results scored with different metrics: {sorted(metrics)}")
    return metrics.pop()


def _oracle(results: list[EvalResult]) -> float | None:
    return next((r.oracle_token_loss for r in results if r.oracle_token_loss is not None), None)


def _floor(results: list[EvalResult]) -> EvalResult | None:
    """The result whose data floor rests on the most draws (the results of one comparison share their seeds)."""
    with_floor = [r for r in results if r.data_floor]
    return max(with_floor, key=lambda r: r.floor_draws) if with_floor else None


#: more methods than this and the legend is drawn beside the axes
_INSIDE_LEGEND = 5
_MARKERS = "osD^v"


def _style(index: int) -> tuple[str, str, str]:
    """The ``index``-th line's colour, marker and line style: ten colours, then other markers and dashes, so that
    no two of the first hundred lines look alike."""
    turn = index // 10
    marker, dashed = _MARKERS[turn % len(_MARKERS)], turn % 2 == 1
    return f"C{index % 10}", marker, "--" if dashed else "-"


def plot(results: list[EvalResult], metric: str, path: Path, flops: bool = False) -> Path:
    """Metric against token denoising steps (``flops``: against GFLOPs per sample), one line per method with error
    bars, and the data-vs-data band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    many = len(results) > _INSIDE_LEGEND  # then the legend goes beside the axes, not over the curves
    fig, ax = plt.subplots(figsize=(8.5, 4) if many else (6, 4), layout="constrained")
    for index, r in enumerate(results):
        scores = [s.scores[metric] for s in r.scores]
        xs = [(s.flops_per_sample or 0.0) / 1e9 if flops else s.steps for s in r.scores]
        spreads = [s or 0.0 for s in r.spreads()]
        color, marker, line = _style(index)
        ax.errorbar(
            xs, scores, yerr=spreads if any(spreads) else None, capsize=3, label=r.method, color=color, marker=marker,
            linestyle=line,
        )
    floor = _floor(results)
    if floor is not None and floor.data_floor is not None:
        level, spread = floor.data_floor[metric], floor.data_floor_spread.get(metric, 0.0)
        label = f"data vs data ({floor.floor_draws} draws, mean ± std)" if spread else "data vs data"
        ax.axhline(level, color="grey", linestyle="--", label=label)
        if spread:
            ax.axhspan(level - spread, level + spread, color="grey", alpha=0.2)
    if flops:
        ax.set_xscale("log")
        ax.set_xlabel("sampling compute per sample (GFLOPs, 2 per multiply-add)")
    else:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("token denoising steps")
    ax.set_ylabel(f"{metric} (lower is better)" if all(r.lower_is_better for r in results) else metric)
    ax.grid(alpha=0.3)
    if many:
        fig.legend(loc="outside right center", fontsize="small")
    else:
        ax.legend()
    write_figure(path, fig)
    plt.close(fig)
    return path


def _with_spread(value: float, spread: float | None) -> str:
    return f"{value:.4f}" + (f"±{spread:.4f}" if spread else "")


def format_table(results: list[EvalResult]) -> str:
    """A plain-text table: L^x per method, then the metric per step budget (mean±std over the repeats)."""
    metric, oracle = _metric(results), _oracle(results)
    budgets = sorted({s.steps for r in results for s in r.scores})
    width = max([len(r.method) for r in results] + [8])
    repeats = max((r.repeats for r in results), default=1)
    cell = 14 if repeats > 1 else 7
    lines = [f"{'method':<{width}}  {'L^x':>7}  " + "  ".join(f"{b:>{cell}}" for b in budgets)]
    if oracle is not None:
        lines.append(f"{'oracle':<{width}}  {oracle:>7.4f}")
    for r in results:
        by_steps = {
            steps: _with_spread(score, spread) for (steps, score), spread in zip(r.curve(), r.spreads(), strict=True)
        }
        cells = "  ".join(f"{by_steps.get(b, '-'):>{cell}}" for b in budgets)
        lines.append(f"{r.method:<{width}}  {r.token_loss:>7.4f}  {cells}")
    header = f"{metric} by token steps (columns" + (
        f"; mean±std over {repeats} evaluation seeds)" if repeats > 1 else ")"
    )
    floor = _floor(results)
    if floor is not None and floor.data_floor is not None:
        spread = floor.data_floor_spread.get(metric)
        header += f"; data vs data {_with_spread(floor.data_floor[metric], spread)}"
        header += f" ({floor.floor_draws} draws)" if floor.floor_draws > 1 else ""
    counted = [r for r in results if any(s.flops_per_sample is not None for s in r.scores)]
    if counted:
        lines.append("GFLOPs per sample spent (two per multiply-add, every network call counted):")
        for r in counted:
            spent = {s.steps: gflops(s) or "-" for s in r.scores}
            lines.append(f"{r.method:<{width}}  {'':>7}  " + "  ".join(f"{spent.get(b, '-'):>{cell}}" for b in budgets))
    return header + "\n" + "\n".join(lines)
