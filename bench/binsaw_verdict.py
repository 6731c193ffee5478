"""The sawtooth protocol's numbers turned into tables and a verdict on the paper's ordering, per claim.

Reads ``ladd eval`` results whose methods are labelled ``VARIANT_sSEED`` (one per training seed), groups
them by variant, and writes into ``--out``:

- ``summary.csv``: per variant, the training seeds, ``L^x`` and the SWD at every budget as mean and
  standard deviation over the training seeds (with one seed: the spread over its evaluation seeds);
- ``verdict.csv``: each ordering claim of the paper's Table ``reconstruction_loss`` and Sec. 5.1, what
  was measured, the spread it is judged against and whether it holds;
- ``README.md``: those tables with the runs' settings (read from their folders), the commands, the
  timing and the calibration, generated so that no number in it is typed by hand.

    python bench/binsaw_verdict.py runs/binsaw_cpu128/*/eval_*.json --out results/binsaw_cpu128 \
        --command "bash bench/binsaw_cpu_long.sh" --timing runs/binsaw_cpu128/timing.txt
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

from registry.storage.results import EvalResult

#: Table reconstruction_loss of the paper (App. E.1 protocol): L^x in nats per token
PAPER_LX = {
    "oracle": 0.5075,
    "mdlm": 0.5301,
    "coladd_joint": 0.4109,
    "coladd_seq": 0.2558,
    "diladd_joint": 0.5055,
    "diladd_seq": 0.5067,
}
VARIANTS = ("mdlm", "coladd_joint", "coladd_seq", "diladd_joint", "diladd_seq")
#: "about" in a claim: within this many nats (the paper's Di-LADD rows are 0.002 from the oracle)
CLOSE = 0.01
#: a difference decides a claim when it exceeds this many standard deviations of the difference
SIGMAS = 2.0


@dataclass
class Estimate:
    """A variant's mean over training seeds and the spread it is judged with."""

    mean: float
    std: float
    source: str  # what the spread is: over training seeds, pooled, or over evaluation seeds


@dataclass
class Claim:
    """One ordering statement of the paper on L^x or the SWD at one budget.

    ``less``: a < b; ``close``: |a - b| <= CLOSE; ``close_floor``: a within the spread of the data floor b.
    """

    text: str
    kind: str
    a: str
    b: str
    score: str  # "lx" or "swd@STEPS"


CLAIMS = [
    Claim("MDLM above the oracle", "less", "oracle", "mdlm", "lx"),
    Claim("Co-LADD joint below the oracle", "less", "coladd_joint", "oracle", "lx"),
    Claim("Co-LADD seq below Co-LADD joint", "less", "coladd_seq", "coladd_joint", "lx"),
    Claim("Co-LADD seq below the oracle", "less", "coladd_seq", "oracle", "lx"),
    Claim("Di-LADD joint about the oracle", "close", "diladd_joint", "oracle", "lx"),
    Claim("Di-LADD seq about the oracle", "close", "diladd_seq", "oracle", "lx"),
    Claim("Di-LADD joint and seq close", "close", "diladd_joint", "diladd_seq", "lx"),
    Claim("Di-LADD joint below MDLM", "less", "diladd_joint", "mdlm", "lx"),
    Claim("Co-LADD seq below MDLM at one token step (SWD)", "less", "coladd_seq", "mdlm", "swd@1"),
    Claim("Di-LADD seq below MDLM at one token step (SWD)", "less", "diladd_seq", "mdlm", "swd@1"),
    Claim("Co-LADD seq at the data floor at one token step (SWD)", "close_floor", "coladd_seq", "data", "swd@1"),
    Claim("Di-LADD seq at the data floor at one token step (SWD)", "close_floor", "diladd_seq", "data", "swd@1"),
]


def variant_and_seed(method: str) -> tuple[str, int]:
    """``coladd_joint_s1`` -> ("coladd_joint", 1)."""
    found = re.fullmatch(r"(.+)_s(\d+)", method)
    if found is None or found.group(1) not in VARIANTS:
        raise SystemExit(f"method {method!r} is not VARIANT_sSEED with a variant of {', '.join(VARIANTS)}")
    return found.group(1), int(found.group(2))


def _estimate(per_seed: list[float], within: list[float | None]) -> Estimate:
    """Mean and spread over training seeds; with one seed, the spread over its evaluation seeds (if any)."""
    if len(per_seed) > 1:
        return Estimate(statistics.fmean(per_seed), statistics.stdev(per_seed), f"{len(per_seed)} training seeds")
    spread = within[0] if within and within[0] is not None else math.nan
    return Estimate(per_seed[0], spread, "evaluation seeds of one training seed")


def estimates(results: dict[str, list[EvalResult]]) -> dict[str, dict[str, Estimate]]:
    """variant -> score ("lx", "swd@STEPS") -> estimate; the oracle and data floor as variants of their own."""
    found: dict[str, dict[str, Estimate]] = {}
    lx_stds = [statistics.stdev([r.token_loss for r in runs]) for runs in results.values() if len(runs) > 1]
    pooled = math.sqrt(statistics.fmean([s * s for s in lx_stds])) if lx_stds else math.nan
    for variant, runs in results.items():
        scores = {"lx": Estimate(runs[0].token_loss, pooled, "pooled over the variants with 2+ seeds")}
        if len(runs) > 1:  # with one seed L^x has no spread of its own: the other variants' training-seed spread
            scores["lx"] = _estimate([r.token_loss for r in runs], [])
        for budget in runs[0].scores:
            at = [next(s for s in r.scores if s.steps == budget.steps) for r in runs]
            scores[f"swd@{budget.steps}"] = _estimate(
                [s.scores[r.metric] for s, r in zip(at, runs, strict=True)],
                [s.spread.get(r.metric) for s, r in zip(at, runs, strict=True)],
            )
        found[variant] = scores
    first = next(iter(results.values()))[0]
    if first.oracle_token_loss is not None:
        found["oracle"] = {"lx": Estimate(first.oracle_token_loss, 0.0, "exact")}
    if first.data_floor is not None:
        spread = first.data_floor_spread.get(first.metric, math.nan)
        floor = Estimate(first.data_floor[first.metric], spread, "data draws")
        found["data"] = {key: floor for key in found[next(iter(results))] if key.startswith("swd@")}
    return found


def judge(claim: Claim, found: dict[str, dict[str, Estimate]]) -> dict[str, str]:
    """The claim's measured difference, its spread and the verdict."""
    compared = f"{claim.a} - {claim.b}"
    if any(claim.score not in found.get(side, {}) for side in (claim.a, claim.b)):
        return {"claim": claim.text, "compared": compared, "difference": "", "spread": "", "verdict": "not measured"}
    a, b = found[claim.a][claim.score], found[claim.b][claim.score]
    diff = a.mean - b.mean
    sigma = math.sqrt(a.std**2 + b.std**2) if not (math.isnan(a.std) or math.isnan(b.std)) else math.nan
    margin = SIGMAS * sigma if not math.isnan(sigma) else 0.0
    if claim.kind == "less":
        verdict = "holds" if diff < -margin else "does not hold" if diff > margin else "within the spread"
    else:
        tolerance = CLOSE if claim.kind == "close" else 0.0
        verdict = "holds" if abs(diff) <= tolerance + margin else "does not hold"
    if math.isnan(sigma):
        verdict += " (no spread: one seed)"
    spread = "" if math.isnan(sigma) else f"{sigma:.4f}"
    difference = f"{diff:+.4f}"
    return {"claim": claim.text, "compared": compared, "difference": difference, "spread": spread, "verdict": verdict}


def _cell(estimate: Estimate, digits: int) -> str:
    return f"{estimate.mean:.{digits}f}" + ("" if math.isnan(estimate.std) else f" ± {estimate.std:.{digits}f}")


def _write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _settings(paths: list[Path]) -> list[str]:
    """One line per run: its method, seed, batch, steps per stage and sampler, from its config.yaml."""
    lines = []
    for path in paths:
        cfg = yaml.safe_load((path.parent / "config.yaml").read_text())
        stages = ", ".join(str(stage["steps"]) for stage in cfg["train"]["stages"].values() if stage)
        lines.append(
            f"| {EvalResult.load(path).method} | {cfg['seed']} | {cfg['train']['batch_size']} | {stages} | "
            f"{cfg['dataset']['seq_len']} | {cfg['backbone']['hidden']} x {cfg['backbone']['layers']} |"
        )
    return lines


def readme(
    paths: list[Path],
    found: dict[str, dict[str, Estimate]],
    results: dict[str, list[EvalResult]],
    verdicts: list[dict[str, str]],
    args: argparse.Namespace,
) -> str:
    """The results folder's README, from the numbers alone."""
    first = next(iter(results.values()))[0]
    budgets = [s.steps for s in first.scores]
    seq_len = yaml.safe_load((paths[0].parent / "config.yaml").read_text())["dataset"]["seq_len"]
    norm = math.sqrt(2) * math.exp(math.lgamma((seq_len + 1) / 2) - math.lgamma(seq_len / 2))
    timing = args.timing.read_text().strip() if args.timing else "not recorded"
    lines = [
        f"# {args.title}",
        "",
        "Generated by `bench/binsaw_verdict.py` from the evaluation results of the runs below; no number here is typed "
        "by hand.",
        "",
        "Commands:",
        "",
        "```bash",
        *args.command,
        "```",
        "",
        "Timing (UTC):",
        "",
        "```",
        timing,
        "```",
        "",
        "| run | seed | batch | steps per stage | S | network (width x layers) |",
        "| --- | --- | --- | --- | --- | --- |",
        *_settings(paths),
        "",
        "`L^x` (nats per token, ELBO-weighted, held-out data; the oracle is the exact closed form), per training seed "
        "and as mean ± standard deviation over the training seeds (with one seed, the spread used in the verdict is "
        "the other variants' pooled one); the paper's column is its Table `reconstruction_loss` (App. E.1's full "
        "protocol):",
        "",
        "| method | per seed | mean ± std | paper |",
        "| --- | --- | --- | --- |",
    ]
    if "oracle" in found:
        lines.append(f"| oracle | | {found['oracle']['lx'].mean:.4f} | {PAPER_LX['oracle']} |")
    for variant, runs in results.items():
        per_seed = ", ".join(f"{r.token_loss:.4f}" for r in runs)
        mean = _cell(found[variant]["lx"], 4) if len(runs) > 1 else f"{runs[0].token_loss:.4f}"
        lines.append(f"| {variant} | {per_seed} | {mean} | {PAPER_LX[variant]} |")
    lines += [
        "",
        "SWD to held-out data against token steps, Gaussian directions as App. F defines it (the authors' unit "
        f"directions give values about E|u| = {norm:.2f} times smaller at S = {seq_len}; `metric.directions=unit`). "
        "Mean ± std over "
        f"the training seeds (one seed: over its {first.repeats} evaluation seeds); per-seed rows in `swd.csv`:",
        "",
        "| method | " + " | ".join(str(b) for b in budgets) + " |",
        "| --- |" + " --- |" * len(budgets),
    ]
    for variant in results:
        lines.append(f"| {variant} | " + " | ".join(_cell(found[variant][f"swd@{b}"], 3) for b in budgets) + " |")
    if "data" in found:
        floor = found["data"][f"swd@{budgets[0]}"]
        lines.append(f"| data vs data | {_cell(floor, 3)} ({first.floor_draws} draws) |" + " |" * (len(budgets) - 1))
    lines += [
        "",
        "The paper's ordering, claim by claim (`verdict.csv`). Each compares two rows `a - b` (the lower one first for "
        f"a claim `a < b`, so a negative difference supports it): it holds when the difference is below -{SIGMAS:g} "
        "standard deviations of the difference, fails when it is above +that margin, and is otherwise within the "
        f'spread; "about" and "close" mean within {CLOSE} nats plus that margin, "at the data floor" within the '
        "margin:",
        "",
        "| claim | compared (a - b) | difference | std of the difference | verdict |",
        "| --- | --- | --- | --- | --- |",
        *(
            f"| {v['claim']} | {v['compared']} | {v['difference']} | {v['spread']} | {v['verdict']} |"
            for v in verdicts
        ),
    ]
    if args.calibration:
        calibration = json.loads(args.calibration.read_text())
        lines += [
            "",
            f"Steps were fixed in advance from a calibration run ({calibration['date']}, torch {calibration['torch']}, "
            f"{calibration['threads']} thread per process, CPU seconds per step; `bench/RESULTS.md`).",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="eval_*.json files, methods labelled VARIANT_sSEED")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--command", action="append", default=[], help="a command that produced the results (repeat)")
    parser.add_argument("--timing", type=Path, help="the protocol's log of start, trained and evaluated times")
    parser.add_argument("--calibration", type=Path, help="the calibration JSON the steps were chosen from")
    parser.add_argument("--title", default="Binary sawtooth at S = 128 with the paper's networks, on a 2-core CPU")
    args = parser.parse_args()
    loaded: dict[str, list[EvalResult]] = {}
    for path in sorted(args.results):
        result = EvalResult.load(path)
        loaded.setdefault(variant_and_seed(result.method)[0], []).append(result)
    results = {variant: loaded[variant] for variant in VARIANTS if variant in loaded}
    found = estimates(results)
    verdicts = [judge(claim, found) for claim in CLAIMS]
    args.out.mkdir(parents=True, exist_ok=True)
    budgets = [s.steps for s in next(iter(results.values()))[0].scores]
    _write_csv(
        args.out / "summary.csv",
        [
            {
                "method": v,
                "seeds": str(len(results[v])),
                "lx": f"{found[v]['lx'].mean:.4f}",
                "lx_std": f"{found[v]['lx'].std:.4f}",
                **{f"swd_{b}": f"{found[v][f'swd@{b}'].mean:.5f}" for b in budgets},
                **{f"swd_{b}_std": f"{found[v][f'swd@{b}'].std:.5f}" for b in budgets},
            }
            for v in results
        ],
    )
    _write_csv(args.out / "verdict.csv", verdicts)
    (args.out / "README.md").write_text(readme(sorted(args.results), found, results, verdicts, args))
    for verdict in verdicts:
        print(f"{verdict['claim']}: {verdict['verdict']} ({verdict['difference']} ± {verdict['spread']})")


if __name__ == "__main__":
    main()
