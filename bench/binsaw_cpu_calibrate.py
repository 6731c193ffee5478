"""Calibration of the long CPU sawtooth protocol (``binsaw_cpu_long.sh``) at the paper's S = 128 and networks.

For each variant it times training steps of both stages at several batch sizes, and for each sampler a
sampling call of the evaluation's batch at two budgets, in process CPU time on one thread: the protocol
runs two single-threaded jobs at once on two cores, so CPU seconds are the wall seconds of an idle
core even when the machine is shared while calibrating. It prints the steps that fill a time budget per
variant and the evaluation's estimated time, and writes every figure to ``--out``.

    python bench/binsaw_cpu_calibrate.py --batches 64,128,256 --out bench/results/cpu
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.sampling import sample
from registry.training.module import LaddModule
from step import optimisation_step

#: variant -> (preset, sampler override for evaluation); Di-LADD's one model is also sampled sequentially
SAMPLERS = {
    "mdlm": ("binsaw/mdlm", []),
    "coladd_joint": ("binsaw/coladd_joint", []),
    "coladd_seq": ("binsaw/coladd_seq", []),
    "diladd_joint": ("binsaw/diladd_joint", []),
    "diladd_seq": ("binsaw/diladd_seq", []),
}
TRAINED = ("mdlm", "coladd_joint", "coladd_seq", "diladd_joint")


def cpu_seconds(work: Callable[[], Any], repeats: int) -> float:
    """Process CPU seconds per call of ``work`` after one warm-up call."""
    work()
    start = time.process_time()
    for _ in range(repeats):
        work()
    return (time.process_time() - start) / repeats


def training_steps(variant: str, batch: int, repeats: int, reg: registry.Registry) -> dict[str, float]:
    """CPU seconds per optimisation step of each stage (Stage 2: the encoder frozen, the latent loss on)."""
    settings = compose([f"experiment={SAMPLERS[variant][0]}", f"train.batch_size={batch}"], reg)
    torch.manual_seed(0)
    experiment = build_experiment(settings, reg)
    model = experiment.model.train()
    module = LaddModule(model, settings.train, seed=0)
    optimizer = module.configure_optimizers()["optimizer"]
    stream = experiment.dataset.batches(batch, 0, "train")
    stages = list(settings.train.stages.values())
    found = {}
    for index, stage in enumerate(stages):
        model.begin_stage(stage)
        found[f"stage{index + 1}"] = cpu_seconds(
            lambda: optimisation_step(model, module, optimizer, next(stream)), repeats
        )
    return found


def sampling_calls(variant: str, samples: int, budgets: tuple[int, int], reg: registry.Registry) -> dict[str, float]:
    """CPU seconds of one sampling call of ``samples`` sequences at each of two budgets (random weights)."""
    cfg = compose([f"experiment={SAMPLERS[variant][0]}", f"eval.batch_size={samples}"], reg).plain()
    torch.manual_seed(0)
    experiment = build_experiment(cfg, reg)
    return {
        str(steps): cpu_seconds(
            lambda steps=steps: sample(experiment, samples, steps, samples, 0, precision="32-true"), 1
        )
        for steps in budgets
    }


def evaluation_seconds(calls: dict[str, float], budgets: list[int], repeats: int) -> float:
    """The sampling time of an evaluation: a call's cost is linear in its budget between the two measured budgets."""
    (low, low_s), (high, high_s) = sorted((int(k), v) for k, v in calls.items())
    per_step = (high_s - low_s) / (high - low)
    return repeats * sum(low_s + per_step * (budget - low) for budget in budgets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="64,128,256", help="training batch sizes to time")
    parser.add_argument("--repeats", type=int, default=8, help="timed steps per stage")
    parser.add_argument("--minutes", type=float, default=60.0, help="training budget per run, to turn rates into steps")
    parser.add_argument("--eval-samples", type=int, default=2000)
    parser.add_argument("--eval-budgets", default="1,2,4,8,16,32,64")
    parser.add_argument("--eval-repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    reg = registry.load()
    budgets = [int(b) for b in args.eval_budgets.split(",")]
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "threads": 1,
        "load_average": os.getloadavg(),
        "minutes": args.minutes,
        "training": {},
        "sampling": {},
    }
    for variant in TRAINED:
        for batch in (int(b) for b in args.batches.split(",")):
            seconds = training_steps(variant, batch, args.repeats, reg)
            # LADD's two stages get equal steps (as the paper's 20k + 20k); MDLM one stage
            steps = int(args.minutes * 60 / sum(seconds.values()))
            report["training"][f"{variant}@{batch}"] = {
                "seconds_per_step": seconds,
                "steps_per_stage": steps,
                "samples_per_stage": steps * batch,
            }
            print(variant, batch, {k: round(v, 4) for k, v in seconds.items()}, "steps per stage:", steps, flush=True)
    for variant in SAMPLERS:
        calls = sampling_calls(variant, args.eval_samples, (1, 8), reg)
        estimate = evaluation_seconds(calls, budgets, args.eval_repeats)
        report["sampling"][variant] = {"call_seconds": calls, "evaluation_minutes": estimate / 60}
        print(
            variant,
            "sampling",
            {k: round(v, 2) for k, v in calls.items()},
            f"evaluation ~{estimate / 60:.1f} min",
            flush=True,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "binsaw_cpu_calibration.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
