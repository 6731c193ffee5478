"""Block diffusion on the CPU sawtooth: ``results/block_diffusion/`` from trained runs.

    nice python bench/block_diffusion_results.py --runs runs/block_diffusion --out results/block_diffusion [--jobs 2]

Trains ``binsaw/bd3lm_cpu`` with blocks of 1, 4, 16 and 32 positions (32 is the whole length), ``binsaw/mdlm_cpu``
and the autoregressive baseline ``binsaw/ar_cpu`` with the presets' budgets (S = 32, a 2-layer DiT of width 64,
1,000 steps at batch 128), each with ``ladd train`` on one thread, ``jobs`` at a time (a run already trained is
kept). Each run is scored by ``ladd eval``: held-out ``L^x`` (nats per token; for the block models and MDLM the NELBO
with ELBO weights, block models summing their blocks' NELBOs; for AR the exact NLL) and the SWD of samples at one
step per position of a block (the block size; MDLM and AR at S). The script adds the standard error of ``L^x`` over
its held-out batches, recomputed here with ``ladd eval``'s seeds (the mean must equal ``ladd eval``'s), and times
``bench/block_diffusion.py`` on the trained blocks-of-4 model at 4x the trained length (ms per generated token with
the cache and without it). It writes ``nelbo.csv``, ``speed.json`` and a README of the numbers; every command it runs
is printed and listed there.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import registry
from ladd_jobs import run_all
from registry.engine.batches import checked_batches
from registry.engine.loading import load_trained
from registry.engine.sampling import CHUNK_SEED_STRIDE
from registry.storage.results import EvalResult

#: (method, preset, overrides, block size shown, sampling budget)
RUNS = [
    ("ar", "binsaw/ar_cpu", [], "1 (causal)", 32),
    ("bd3lm_1", "binsaw/bd3lm_cpu", ["backbone.block_size=1"], "1", 1),
    ("bd3lm_4", "binsaw/bd3lm_cpu", ["backbone.block_size=4"], "4", 4),
    ("bd3lm_16", "binsaw/bd3lm_cpu", ["backbone.block_size=16"], "16", 16),
    ("bd3lm_32", "binsaw/bd3lm_cpu", ["backbone.block_size=32"], "32 (= S)", 32),
    ("mdlm", "binsaw/mdlm_cpu", [], "32 (bidirectional)", 32),
]
LOSS_BATCHES = 16
EVAL = ["--loss-batches", str(LOSS_BATCHES), "--num-samples", "1000", "--repeats", "1", "--floor-draws", "3"]
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def loss_spread(run: Path, batches: int) -> tuple[float, float]:
    """Mean and standard error of held-out ``L^x`` over ``batches`` batches, drawn as ``ladd eval`` draws them."""
    experiment, settings = load_trained(run, registry.load())
    model, seed = experiment.model.eval(), settings.eval.seed
    clean = experiment.sampler.conditions_on_clean_latent
    stream = checked_batches(experiment.dataset, settings.eval.batch_size, seed, "validation")
    values = []
    with torch.no_grad():
        for index in range(batches):
            generator = torch.Generator().manual_seed(seed + index * CHUNK_SEED_STRIDE)
            values.append(float(model.token_loss(next(stream), clean, generator).float().mean()))
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("runs/block_diffusion"))
    parser.add_argument("--out", type=Path, default=Path("results/block_diffusion"))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    log: list[str] = []
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    trains = [
        ["train", f"experiment={preset}", *overrides, f"method={method}", f"run_dir={args.runs / method}",
         "train.progress=false"]
        for method, preset, overrides, _, _ in RUNS if not (args.runs / method / "model.safetensors").is_file()
    ]
    run_all(trains, args.jobs, log, ONE_THREAD)
    evals = args.runs / "evals"
    evals.mkdir(parents=True, exist_ok=True)
    run_all([
        ["eval", str(args.runs / method), "--budgets", str(budget), *EVAL, "--method", method,
         "--out", str(evals / f"{method}.json")]
        for method, _, _, _, budget in RUNS if not (evals / f"{method}.json").is_file()
    ], args.jobs, log, ONE_THREAD)
    speed = args.runs / "speed"
    if not (speed / "block_diffusion.json").is_file():
        command = ["bench/block_diffusion.py", "--run", str(args.runs / "bd3lm_4"), "--size", "cpu", "--batch", "16",
                   "--out", str(speed)]
        print("python " + " ".join(command), flush=True)
        subprocess.run([sys.executable, *command], env=ONE_THREAD, check=True)
    log.append(f"OMP_NUM_THREADS=1 python bench/block_diffusion.py --run {args.runs / 'bd3lm_4'} --size cpu "
               f"--batch 16 --out {speed}")
    rows = []
    for method, preset, overrides, block, _ in RUNS:
        result = EvalResult.load(evals / f"{method}.json")
        mean, error = loss_spread(args.runs / method, LOSS_BATCHES)
        if not math.isclose(mean, result.token_loss, rel_tol=1e-5):
            raise SystemExit(f"{method}: L^x recomputed {mean} is not ladd eval's {result.token_loss}")
        score = result.scores[0]
        trained = [line.split(",") for line in (args.runs / method / "metrics.csv").read_text().splitlines()]
        rows.append({
            "method": method, "preset": " ".join([preset, *overrides]), "block_size": block,
            "lx_nats_per_token": f"{result.token_loss:.4f}", "lx_standard_error": f"{error:.4f}",
            "oracle": f"{result.oracle_token_loss:.4f}", "sampling_steps": score.steps,
            "network_calls": score.network_calls, "gflops_per_sample": f"{score.flops_per_sample / 1e9:.4f}",
            "swd": f"{score.scores['swd']:.4f}", "train_seconds": trained[-1][trained[0].index("seconds")],
        })
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "nelbo.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    timing = json.loads((speed / "block_diffusion.json").read_text())
    (args.out / "speed.json").write_text(json.dumps(timing, indent=2))
    floor = EvalResult.load(evals / "mdlm.json").data_floor or {}
    write_readme(args.out, rows, timing, floor.get("swd"), log, started)


def write_readme(out: Path, rows: list[dict], timing: dict, floor: float | None, log: list[str], started: str) -> None:
    """The README: every number read from the files written beside it."""
    table = ["| method | block size | L^x (nats/token) | ± s.e. | SWD at its steps | steps | network calls | "
             "GFLOPs/sample | training s |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    keys = ("method", "block_size", "lx_nats_per_token", "lx_standard_error", "swd", "sampling_steps", "network_calls",
            "gflops_per_sample", "train_seconds")
    table += ["| " + " | ".join(str(r[key]) for key in keys) + " |" for r in rows]
    forwards, ms = timing["forwards"], timing["ms_per_token"]
    floor_text = "n/a" if floor is None else f"{floor:.4f}"
    times = timing["length"] // timing["trained_length"]
    lines = [
        "# Block diffusion on the CPU sawtooth",
        "",
        "Generated by `bench/block_diffusion_results.py` from the runs and files it names; no number here is typed by "
        "hand.",
        "",
        "Setting: the binary sawtooth at S = 32 (two periods, floor 0.01), the presets' 2-layer DiT of width 64 "
        "(4 heads, dropout 0.1), 1,000 AdamW steps at batch 128 (lr 1e-3, 100 warm-up steps, EMA 0.99), one seed, "
        "each run on one thread of a shared 2-core CPU. The block models (`binsaw/bd3lm_cpu`) differ from MDLM "
        "(`binsaw/mdlm_cpu`) only in their attention and objective; AR is the causal transformer of `binsaw/ar_cpu`. "
        "The block models sample through their exact key-value cache of the committed blocks and AR through its exact "
        "cache of the tokens generated (one new position per network call), so their network calls and GFLOPs are "
        "counted alike; MDLM recomputes every position at every step, as its bidirectional attention requires.",
        "",
        "`L^x` is held-out nats per token over "
        f"{LOSS_BATCHES} batches of 1,000 sequences: for MDLM and the block models the NELBO with ELBO weights (a "
        "block model's is the sum of its blocks' NELBOs, each block at its own time, over the length), for AR the "
        "exact NLL. The standard error is over the batches. The oracle (the entropy of a token given the sawtooth's "
        f"shift, a bound no model of the tokens alone reaches) is {rows[0]['oracle']}. SWD (Gaussian directions) "
        f"compares 1,000 samples with held-out data; data against data gives {floor_text}.",
        "",
        *table,
        "",
        f"The exact cache (`bench/block_diffusion.py`, {timing['card']}, torch {timing['torch']}, {timing['date']}): "
        f"token forwards for K = {forwards['blocks']} blocks of {timing['block']}, one commit per step: "
        f"{forwards['without_cache']:.0f} without the cache, {forwards['with_cache']:.0f} with it (closed forms "
        f"{forwards['closed_form_without_cache']} and {forwards['closed_form_with_cache']}), a ratio of "
        f"{forwards['ratio']:.3f}; per denoising step {forwards['per_step_ratio']:.3f}, the analytic (K + 1) / 2 = "
        f"{forwards['analytic']:.3f} (the cached run also writes each committed block's keys and values once). "
        f"Sampling the trained blocks-of-4 model at {timing['length']} positions ({times}x its trained length, batch "
        f"{timing['batch']}, {timing['block']} ancestral steps per block): {ms['plain']:.3f} ms per generated token "
        f"without the cache, {ms['cache']:.3f} with it ({timing['speedup']:.2f}x), tokens "
        f"{'identical' if timing['identical_tokens'] else 'different'}.",
        "",
        "Commands (started " + started + "):",
        "",
        "```bash",
        "python " + " ".join(["bench/block_diffusion_results.py", *sys.argv[1:]]),
        *log,
        "```",
        "",
    ]
    (out / "README.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
