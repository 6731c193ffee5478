"""The field's decoders against LADD at matched compute: ``results/decoders/`` from CPU runs it trains.

    nice python bench/decoders_results.py --runs runs/decoders --out results/decoders [--jobs 2] \
        [--eval-option binsaw:--num-samples=500 ...]

It trains what it scores, each with ``ladd train`` on one thread, ``jobs`` at a time (a run already trained is kept):
the sawtooth's ``binsaw/mdlm_cpu``, ``binsaw/coladd_seq_cpu`` and ``binsaw/diladd_seq_cpu``, the offline Gen PPL
teacher of ``bench/demo_teacher.py``, and the text demo's ``demo/mdlm`` and ``demo/coladd`` with ``metric=gen_ppl``
and that teacher. Every row is then a ``ladd eval`` of a run with a sampler chosen on the command line (each result
is kept under ``RUNS/evals/`` and not evaluated again). The sawtooth runs are scored by SWD at their presets'
budgets, the demo's by Gen PPL and the unigram entropy. ``ladd report`` writes each set's tables and plots (the
metric against token steps and against GFLOPs per sample), ``ladd frontier`` the demo's Gen PPL and entropy at
matched GFLOPs, and this script the sawtooth's SWD at matched GFLOPs (linear interpolation between measured
budgets, n/a outside them) with the best decoder at each budget; the budgets are those each model's first decoder
measured. Files are written into ``OUT`` with the prefix of
their set (``binsaw_``, ``demo_``), with a README of the scores and of every command behind them (run now or by an
earlier call of the script).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ladd_jobs import run_all
from registry.paper.frontier import interpolate
from registry.storage.results import EvalResult

CONFIDENCE = ["--sampler", "confidence", "--sampler-option"]
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
TEACHER = "teacher"


def trainings(runs: Path) -> dict[str, list[str]]:
    """run -> its ``ladd train`` overrides (the demo's scored by the teacher trained into ``RUNS/teacher``)."""
    scored = ["metric=gen_ppl", f"metric.teacher={runs / TEACHER}"]
    return {
        "binsaw_mdlm": ["experiment=binsaw/mdlm_cpu"],
        "binsaw_coladd_seq": ["experiment=binsaw/coladd_seq_cpu"],
        "binsaw_diladd_seq": ["experiment=binsaw/diladd_seq_cpu"],
        "demo_mdlm": ["experiment=demo/mdlm", *scored],
        "demo_coladd": ["experiment=demo/coladd", *scored],
    }


def sequential(latent_steps: int, decoder: str) -> list[str]:
    """The sequential sampler at the preset's latent steps, decoding its latent with ``decoder``."""
    return [
        "--sampler", "sequential", "--sampler-option", f"latent_steps={latent_steps}",
        "--sampler-option", f"token_decoder={decoder}",
    ]


def joint(decoder: str) -> list[str]:
    return ["--sampler", "joint", "--sampler-option", f"token_decoder={decoder}"]


#: the demo's other rows stop at 16 steps, to keep the script within a few hours of a 2-core CPU: a confidence step's
#: head runs at every masked position over a vocabulary of 30,522 (64 steps: 23 GFLOPs per sample, 3x ancestral's)
SHORT = ["--budgets", "4,16"]
#: set -> (method, run, sampler arguments); the first of each set is the baseline (the field's plain MDLM)
ROWS = {
    "binsaw": [
        ("mdlm_ancestral", "binsaw_mdlm", []),
        ("mdlm_low_confidence", "binsaw_mdlm", [*CONFIDENCE, "remasking=low_confidence"]),
        ("mdlm_random", "binsaw_mdlm", [*CONFIDENCE, "remasking=random"]),
        ("mdlm_margin", "binsaw_mdlm", [*CONFIDENCE, "remasking=margin"]),
        ("mdlm_entropy", "binsaw_mdlm", [*CONFIDENCE, "remasking=entropy"]),
        ("mdlm_threshold_0.9", "binsaw_mdlm", [*CONFIDENCE, "threshold=0.9"]),
        ("mdlm_threshold_0.7", "binsaw_mdlm", [*CONFIDENCE, "threshold=0.7"]),
        ("coladd_seq_ancestral", "binsaw_coladd_seq", sequential(100, "ancestral")),
        ("coladd_seq_confidence", "binsaw_coladd_seq", sequential(100, "confidence")),
        ("diladd_seq_ancestral", "binsaw_diladd_seq", sequential(8, "ancestral")),
        ("diladd_seq_confidence", "binsaw_diladd_seq", sequential(8, "confidence")),
    ],
    "demo": [  # beside the preset's budgets (4, 16, 64 steps), low_confidence's collapse deepening at 64 steps
        ("mdlm_ancestral", "demo_mdlm", []),
        ("mdlm_low_confidence", "demo_mdlm", [*CONFIDENCE, "remasking=low_confidence"]),
        *((method, run, [*chosen, *SHORT]) for method, run, chosen in [
            ("mdlm_random", "demo_mdlm", [*CONFIDENCE, "remasking=random"]),
            ("mdlm_margin", "demo_mdlm", [*CONFIDENCE, "remasking=margin"]),
            ("mdlm_entropy", "demo_mdlm", [*CONFIDENCE, "remasking=entropy"]),
            ("mdlm_threshold_0.9", "demo_mdlm", [*CONFIDENCE, "threshold=0.9"]),
            ("mdlm_threshold_0.7", "demo_mdlm", [*CONFIDENCE, "threshold=0.7"]),
            ("coladd_joint_ancestral", "demo_coladd", joint("ancestral")),
            ("coladd_joint_confidence", "demo_coladd", joint("confidence")),
        ]),
    ],
}


def ladd(*args: str, log: list[str]) -> None:
    """Run a ladd command, printed (and logged) first; stop on failure."""
    line = "ladd " + " ".join(args)
    print(line, flush=True)
    log.append(line)
    done = subprocess.run([sys.executable, "-m", "registry.cli", *args])
    if done.returncode:
        raise SystemExit(f"ladd {args[0]} failed (exit {done.returncode})")


def measured_budgets(results: list[EvalResult], runs: list[str]) -> list[float]:
    """The GFLOPs per sample measured by the first evaluation of each run (``runs``, one per result), sorted: the
    budgets of every model, where its own decoder needs no interpolation."""
    first: dict[str, EvalResult] = {}
    for run, result in zip(runs, results, strict=True):
        first.setdefault(run, result)
    return sorted({s.flops_per_sample / 1e9 for r in first.values() for s in r.scores if s.flops_per_sample})


def matched_swd(results: list[EvalResult], metric: str, budgets: list[float]) -> list[dict[str, str]]:
    """Each method's metric interpolated at ``budgets`` (GFLOPs per sample), with the best method at each."""
    rows, best = [], {}
    for result in results:
        xs = [s.flops_per_sample / 1e9 for s in result.scores]
        ys = [s.scores[metric] for s in result.scores]
        row = {"method": result.method}
        for budget in budgets:
            value = interpolate(xs, ys, budget)
            row[f"{budget:.4g}"] = "n/a" if value is None else f"{value:.4f}"
            if value is not None and (budget not in best or value < best[budget][1]):
                best[budget] = (result.method, value)
        rows.append(row)
    rows.append({"method": "best", **{f"{b:.4g}": best[b][0] for b in budgets if b in best}})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("runs/decoders"))
    parser.add_argument("--out", type=Path, default=Path("results/decoders"))
    parser.add_argument("--sets", default="binsaw,demo")
    parser.add_argument("--jobs", type=int, default=1, help="evaluations run at once")
    parser.add_argument(
        "--eval-option", action="append", default=[], metavar="SET:OPTION=VALUE",
        help="an option of every `ladd eval` of a set, e.g. binsaw:--num-samples=500",
    )
    args = parser.parse_args()
    extra: dict[str, list[str]] = {}
    for given in args.eval_option:
        name, _, option = given.partition(":")
        extra.setdefault(name, []).extend(option.split("=", 1))
    log: list[str] = []
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sets = args.sets.split(",")
    teacher = args.runs / TEACHER
    if "demo" in sets and not (teacher / "teacher.json").is_file():
        command = ["bench/demo_teacher.py", "--out", str(teacher)]
        print("python " + " ".join(command), flush=True)
        subprocess.run([sys.executable, *command], env=ONE_THREAD, check=True)
    log.append(f"OMP_NUM_THREADS=1 python bench/demo_teacher.py --out {teacher}")
    wanted = {run for name in sets for _, run, _ in ROWS[name]}
    trains = {
        run: ["train", *overrides, f"run_dir={args.runs / run}", "train.progress=false"]
        for run, overrides in trainings(args.runs).items() if run in wanted
    }
    missing_runs = [command for run, command in trains.items() if not (args.runs / run / "model.safetensors").is_file()]
    run_all(missing_runs, args.jobs, env=ONE_THREAD)
    log.extend("ladd " + " ".join(command) for command in trains.values())  # run now or kept from before
    evals = args.runs / "evals"
    evals.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    reported: dict[str, list[EvalResult]] = {}
    for name in sets:
        paths, commands = [], []
        for method, run, chosen in ROWS[name]:
            path = evals / f"{name}_{method}.json"
            options = [*chosen, *extra.get(name, []), "--method", method, "--out", str(path)]
            commands.append((["eval", str(args.runs / run), *options], path))
            paths.append(path)
        run_all([command for command, path in commands if not path.is_file()], args.jobs, env=ONE_THREAD)
        log.extend("ladd " + " ".join(command) for command, _ in commands)  # run now or kept from before
        missing = [path.name for path in paths if not path.is_file()]
        if missing:  # a run not trained yet: run the script again once it is
            print(f"{name}: not reported yet, {len(missing)} evaluations missing: {', '.join(missing)}", flush=True)
            continue
        with tempfile.TemporaryDirectory() as folder:
            ladd("report", *map(str, paths), "--out", folder, log=log)
            for produced in Path(folder).iterdir():
                shutil.copyfile(produced, args.out / f"{name}_{produced.name}")
        results = [EvalResult.load(path) for path in paths]
        metric, grid = results[0].metric, measured_budgets(results, [run for _, run, _ in ROWS[name]])
        if metric == "gen_ppl":
            budgets = ",".join(f"{budget:.6g}" for budget in grid)
            table = args.out / f"{name}_frontier.txt"
            line = f"ladd frontier {' '.join(map(str, paths))} --budgets {budgets}"
            print(line, flush=True)
            log.append(line)
            done = subprocess.run(
                [sys.executable, "-m", "registry.cli", "frontier", *map(str, paths), "--budgets", budgets],
                capture_output=True, text=True, check=True,
            )
            table.write_text(done.stdout)
        else:
            rows = matched_swd(results, metric, grid)
            with open(args.out / f"{name}_matched.csv", "w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=["method", *(f"{b:.4g}" for b in grid)])
                writer.writeheader()
                writer.writerows(rows)
        spent = {r.method: [(s.steps, s.network_calls, s.flops_per_sample) for s in r.scores] for r in results}
        print(json.dumps({name: spent}, indent=1))
        reported[name] = results
    write_readme(args.out, reported, log, started)


def score_table(results: list[EvalResult], names: list[str]) -> list[str]:
    """Markdown rows: per method and budget, its token steps, network calls, GFLOPs per sample and the scores
    ``names`` (mean ± spread over the repeats)."""

    def shown(score, name: str) -> str:
        spread = score.spread.get(name)
        return f"{score.scores[name]:.4g}" + ("" if spread is None else f" ± {spread:.2g}")

    lines = ["| method | steps | network calls | GFLOPs/sample | " + " | ".join(names) + " |",
             "| --- | --- | --- | --- | " + " | ".join("---" for _ in names) + " |"]
    for result in results:
        for score in result.scores:
            flops = "n/a" if score.flops_per_sample is None else f"{score.flops_per_sample / 1e9:.4g}"
            cells = [result.method, str(score.steps), str(score.network_calls), flops]
            lines.append("| " + " | ".join([*cells, *(shown(score, name) for name in names)]) + " |")
    return lines


def write_readme(out: Path, reported: dict[str, list[EvalResult]], log: list[str], started: str) -> None:
    """The README: every number read from the evaluation results it names, and every command run."""
    lines = [
        "# The field's decoders against LADD at matched compute",
        "",
        "Generated by `bench/decoders_results.py` from the evaluation results of the runs it trains; no number here is "
        "typed by hand. Each row is `ladd eval` of one trained run with one sampler: its token steps, the network "
        "calls and GFLOPs it spent per sample (two per multiply-add, a cached pass counted at what it computes) and "
        "its scores, means ± standard deviations over the evaluation's repeats.",
        "",
    ]
    for name, results in reported.items():
        first = results[0]
        floor = first.data_floor or {}
        names = [first.metric] + [n for n in ("entropy_unigram",) if n in first.scores[0].scores and n != first.metric]
        lines += [f"## {name}", ""]
        losses = ", ".join(
            f"{r.method} {r.token_loss:.4f}" + ("" if r.bound is None else f" (bound {r.bound:.4f})")
            for r in results if r.method.endswith("ancestral")
        )
        against = f" Data against data: {first.metric} {floor[first.metric]:.4f}." if first.metric in floor else ""
        lines.append(
            f"Held-out `L^x` (nats per token, the token term with the preset's weighting) of the runs, and the full "
            f"variational bound on -log p where the run gives one: {losses}.{against}"
        )
        lines += ["", *score_table(results, names), ""]
        lines += [
            "Files: " + ", ".join(f"`{path.name}`" for path in sorted(out.glob(f"{name}_*"))) + ".", "",
        ]
    lines += [
        "## Commands",
        "",
        "Started " + started + ":",
        "",
        "```bash",
        "nice python bench/decoders_results.py --runs runs/decoders --out results/decoders",
        *log,
        "```",
        "",
    ]
    (out / "README.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
