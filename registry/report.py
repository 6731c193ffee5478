"""Tables and plots comparing evaluated runs: reconstruction loss and metric against sampling compute."""
from __future__ import annotations

from pathlib import Path

from .evaluation import EvalResult, write_csv
from .files import write_figure


def write_report(results: list[EvalResult], out_dir: str | Path) -> list[Path]:
    """Write reconstruction.csv, METRIC.csv and METRIC.png for a set of evaluated runs."""
    out_dir = Path(out_dir)
    metric, oracle = _metric(results), _oracle(results)
    rows = ([{"method": "oracle", "lx": f"{oracle:.4f}"}] if oracle is not None else []) + [
        {"method": r.method, "lx": f"{r.token_loss:.4f}"} for r in results
    ]
    write_csv(out_dir / "reconstruction.csv", ["method", "lx"], rows)
    curve = [
        {"method": r.method, "steps": s.steps, "network_calls": s.network_calls, **{k: f"{v:.5f}" for k, v in s.scores.items()}}
        for r in results
        for s in r.scores
    ]
    names = list(dict.fromkeys(k for r in results for s in r.scores for k in s.scores))
    write_csv(out_dir / f"{metric}.csv", ["method", "steps", "network_calls", *names], curve)
    return [out_dir / "reconstruction.csv", out_dir / f"{metric}.csv", plot(results, metric, out_dir / f"{metric}.png")]


def _metric(results: list[EvalResult]) -> str:
    metrics = {r.metric for r in results}
    if len(metrics) != 1:
        raise ValueError(f"cannot compare results scored with different metrics: {sorted(metrics)}")
    return metrics.pop()


def _oracle(results: list[EvalResult]) -> float | None:
    return next((r.oracle_token_loss for r in results if r.oracle_token_loss is not None), None)


def plot(results: list[EvalResult], metric: str, path: Path) -> Path:
    """Metric against token denoising steps, one line per method, with the score of a second data draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        steps, scores = zip(*r.curve()) if r.scores else ((), ())
        ax.plot(steps, scores, marker="o", label=r.method)
    floors = [r.data_floor[metric] for r in results if r.data_floor]
    if floors:
        ax.axhline(min(floors), color="grey", linestyle="--", label="data vs data")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("token denoising steps")
    ax.set_ylabel(f"{metric} (lower is better)" if all(r.lower_is_better for r in results) else metric)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    write_figure(path, fig)
    plt.close(fig)
    return path


def format_table(results: list[EvalResult]) -> str:
    """A plain-text table: L^x per method, then the metric per step budget."""
    metric, oracle = _metric(results), _oracle(results)
    budgets = sorted({s.steps for r in results for s in r.scores})
    width = max([len(r.method) for r in results] + [8])
    lines = [f"{'method':<{width}}  {'L^x':>7}  " + "  ".join(f"{b:>7}" for b in budgets)]
    if oracle is not None:
        lines.append(f"{'oracle':<{width}}  {oracle:>7.4f}")
    for r in results:
        by_steps = dict(r.curve())
        cells = "  ".join(f"{by_steps[b]:>7.4f}" if b in by_steps else f"{'-':>7}" for b in budgets)
        lines.append(f"{r.method:<{width}}  {r.token_loss:>7.4f}  {cells}")
    floors = [r.data_floor[metric] for r in results if r.data_floor]
    header = f"{metric} by token steps (columns); data vs data {min(floors):.4f}" if floors else metric
    return header + "\n" + "\n".join(lines)
