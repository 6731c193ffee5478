"""Trains the CPU RL demo and scores every model on held-out questions: ``results/rl/reward.csv``.

    python bench/rl_results.py [--work DIR] [--seeds 1,2,3] [--grpo-steps N] [--ladd-grpo-steps N]
                               [--ladd-sft-steps A,B] [--workers K] [--out results/rl]

In ``DIR`` (default ``rl_work``): the SFT model (``demo/arith_sft``), diffu-GRPO from it (``demo/arith_grpo``) once
per seed, the Di-LADD model on top of the SFT one (``demo/arith_diladd_sft``) and diffu-GRPO of it per seed with the
plan in the policy and token-only (``loss.latent_in_policy=false``): the same model, the same budget.
``--grpo-steps``, ``--ladd-grpo-steps`` and ``--ladd-sft-steps`` shorten the presets' stages (the Di-LADD model's two
RL variants always get the same); the RL runs go ``K`` at a time. Every model is scored, as soon as it is trained, by
``ladd reward`` on the same 100 held-out questions, 4 completions each, with its own sampler. Runs already finished
are kept (ladd resumes or skips them). Writes ``reward.csv`` (method, seed, held-out reward and its standard error,
what it was trained from, and the gain over that model: the mean difference over the same prompts, with its standard
error), and ``provenance.json`` (the commit and whether the tree differed from it, the budget,
every command with its wall-clock seconds, the machine).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS, GROUP, STEPS, EVAL_SEED = 100, 4, 24, 0
SFT, LADD_SFT = "runs/arith_sft", "runs/arith_diladd_sft"


def _run(command: list[str], work: Path, log: list[dict]) -> None:
    started = time.monotonic()
    done = subprocess.run(command, cwd=work, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    log.append({"command": " ".join(command), "seconds": round(time.monotonic() - started, 1), "rc": done.returncode})
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")


def _ladd(*args: str) -> list[str]:
    return [sys.executable, "-m", "registry.cli", *args]


def _train(preset: str, run: str, *overrides: str) -> list[str]:
    return _ladd("train", f"experiment={preset}", f"run_dir={run}", "train.progress=false", *overrides)


def _scored(work: Path, run: str, key: tuple[str, int]) -> Path | None:
    """The result of scoring ``run`` when it was scored after its weights were last written, else None."""
    scored, weights = work / f"reward_{key[0]}_{key[1]}.json", work / run / "model.safetensors"
    fresh = scored.is_file() and weights.is_file() and scored.stat().st_mtime > weights.stat().st_mtime
    return scored if fresh else None


def _gain(scores: list[float], start: list[float] | None) -> dict[str, str]:
    """The mean per-prompt difference to the model a run was trained from, on the same prompts and evaluation seed,
    and its standard error (empty for a model trained from random weights)."""
    if start is None:
        return {"gain": "", "gain_stderr": ""}
    differences = [mine - theirs for mine, theirs in zip(scores, start, strict=True)]
    return {"gain": f"{statistics.mean(differences):.4f}",
            "gain_stderr": f"{statistics.stdev(differences) / len(differences) ** 0.5:.4f}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="rl_work")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--grpo-steps", type=int, help="steps of every RL run (default: the presets' 150)")
    parser.add_argument("--ladd-grpo-steps", type=int, help="steps of the Di-LADD RL runs (default: --grpo-steps)")
    parser.add_argument("--ladd-sft-steps", help="A,B: the Di-LADD model's two stages (default: the preset's 600,400)")
    parser.add_argument("--allow-changes", action="store_true", help="runs in progress continue with new steps")
    parser.add_argument("--workers", type=int, default=2, help="runs trained or scored at a time")
    parser.add_argument("--out", default=str(ROOT / "results" / "rl"))
    args = parser.parse_args()
    work, out, seeds = Path(args.work).resolve(), Path(args.out), [int(s) for s in args.seeds.split(",")]
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    log: list[dict] = []
    rl_budget = [] if args.grpo_steps is None else [f"train.stages.stage1.steps={args.grpo_steps}"]
    ladd_steps = args.ladd_grpo_steps or args.grpo_steps
    ladd_rl_budget = [] if ladd_steps is None else [f"train.stages.stage1.steps={ladd_steps}"]
    ladd_budget = []
    if args.ladd_sft_steps is not None:
        first, second = args.ladd_sft_steps.split(",")
        ladd_budget = [f"train.stages.stage1.steps={first}", f"train.stages.stage2.steps={second}"]
    train = [] if not args.allow_changes else ["--allow-changes"]
    if _scored(work, SFT, ("sft", 0)) is None:  # a model trained and scored is kept as it is
        _run(_train("demo/arith_sft", SFT), work, log)
    # (run, (method, seed), trained from, preset, overrides)
    mdlm = [(f"runs/arith_grpo_s{s}", ("grpo", s), SFT, "demo/arith_grpo", [f"seed={s}", *rl_budget]) for s in seeds]
    ladd = []
    for s in seeds:
        ladd.append((f"runs/arith_diladd_grpo_s{s}", ("diladd_grpo_latent", s), LADD_SFT, "demo/arith_diladd_grpo",
                     [f"seed={s}", *ladd_rl_budget]))
        ladd.append((f"runs/arith_diladd_grpo_tokens_s{s}", ("diladd_grpo_tokens", s), LADD_SFT,
                     "demo/arith_diladd_grpo", [f"seed={s}", *ladd_rl_budget, "loss.latent_in_policy=false"]))

    def score(run: str, key: tuple[str, int], source: str) -> dict:
        scored = work / f"reward_{key[0]}_{key[1]}.json"
        if _scored(work, run, key) is None:
            _run(_ladd("reward", run, "--reward", "exact_match", "--prompts", str(PROMPTS), "--group", str(GROUP),
                       "--steps", str(STEPS), "--seed", str(EVAL_SEED), "--out", str(scored)), work, log)
        result = json.loads(scored.read_text())
        return {"method": key[0], "seed": key[1], "held_out_reward": f"{result['mean']:.4f}",
                "stderr": f"{result['stderr']:.4f}", "run": run, "trained_from": source,
                "per_prompt": result["per_prompt"]}

    def rl(run: str, key: tuple[str, int], source: str, preset: str, extra: list[str], after: Future | None) -> dict:
        if after is not None:  # the model it starts from
            after.result()
        if _scored(work, run, key) is None:
            _run([*_train(preset, run, *extra), *train], work, log)
        return score(run, key, source)

    with ThreadPoolExecutor(args.workers) as pool:  # each model scored as soon as it is trained
        ladd_done = pool.submit(rl, LADD_SFT, ("diladd_sft", 0), SFT, "demo/arith_diladd_sft", ladd_budget, None)
        started = [pool.submit(rl, *job, None) for job in mdlm]
        started.append(pool.submit(score, SFT, ("sft", 0), "random initialisation"))
        started += [pool.submit(rl, *job, ladd_done) for job in ladd]
        rows = sorted((done.result() for done in [ladd_done, *started]), key=lambda row: (row["method"], row["seed"]))
    by_run = {row["run"]: row["per_prompt"] for row in rows}
    for row in rows:
        row.update(_gain(row.pop("per_prompt"), by_run.get(row["trained_from"])))
    with (out / "reward.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    provenance = {
        "commit": commit, "files_changed_from_commit": changed.split(),
        "budget": {"grpo_steps": args.grpo_steps or 150, "ladd_grpo_steps": ladd_steps or 150,
                   "ladd_sft_steps": args.ladd_sft_steps or "600,400",
                   "seeds": seeds, "workers": args.workers},
        "machine": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "evaluation": {"split": "test", "prompts": PROMPTS, "group": GROUP, "steps": STEPS, "seed": EVAL_SEED},
        "commands": log,
    }
    (out / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
    print(f"{len(rows)} models scored: {out / 'reward.csv'}")


if __name__ == "__main__":
    main()
