"""What ``ladd train``'s loop costs per step beyond the model's own work, against a bare PyTorch loop.

    python bench/overhead.py --out bench/results/cpu          # CPU or GPU: the sawtooth and an LM1B-shaped tiny model

Both loops train the same experiment (same config, model, data stream (drawn on the device where the
dataset offers it, as ``train`` does), objective, clipping, AdamW) for
the same steps in the same process. ``train`` adds what a run needs: Lightning's loop, the EMA of the
weights, the batch checks, logging and the metrics file, checkpoints (disabled here: set far apart).
Steps per second come from ``metrics.csv``'s ``seconds`` column for ``train`` and from a timer around
the bare loop, both after the same warm-up steps.
"""
from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path

import torch

import registry
from registry.config.composition import compose
from registry.config.settings import checked
from registry.engine.assembly import build_experiment
from registry.interfaces import device_batches
from registry.training.loop import train
from registry.training.metrics_file import METRICS_FILE
from registry.training.module import LaddModule
from step import optimisation_step

#: (label, overrides): small enough that the loop, not the arithmetic, is what is measured on a CPU
CASES = {
    "binsaw": [
        "experiment=binsaw/mdlm",
        "train.batch_size=64",
        "dataset.seq_len=32",
        "backbone.hidden=32",
        "backbone.layers=2",
    ],
    "lm1b_tiny": [
        "experiment=lm1b/mdlm",
        "dataset.source=shakespeare",
        "dataset.tokenizer=text8",
        "dataset.vocab_size=null",
        "dataset.progress=false",
        "train.batch_size=8",
        "backbone.hidden=64",
        "backbone.layers=2",
        "backbone.heads=4",
    ],
}
WARMUP = 10


def ladd_loop(cfg: dict, steps: int, reg: registry.Registry) -> float:
    """Steps per second of ``train`` between step ``WARMUP`` and the last step."""
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = {
            **cfg,
            "trainer": {"max_steps": steps},
            "train": {
                **cfg["train"],
                "log_every": 1,
                "progress": False,
                "checkpoint_every": 10**9,
                "stages": dict(list(cfg["train"]["stages"].items())[:1]),
            },
        }
        train(cfg, run_dir, reg)
        with (Path(run_dir) / METRICS_FILE).open(newline="") as handle:
            rows = {int(r["step"]): float(r["seconds"]) for r in csv.DictReader(handle)}
    return (steps - WARMUP) / (rows[steps] - rows[WARMUP])


def bare_loop(cfg: dict, steps: int, reg: registry.Registry) -> float:
    """Steps per second of a plain loop over the same model, data stream, objective, clipping and AdamW."""
    torch.manual_seed(cfg["seed"])
    experiment = build_experiment(cfg, reg)
    model = experiment.model.to("cuda" if torch.cuda.is_available() else "cpu").train()
    module = LaddModule(model, checked(cfg).train, cfg["seed"])
    optimizer = module.configure_optimizers()["optimizer"]
    batch, seed = cfg["train"]["batch_size"], cfg["seed"] + 1
    stream = device_batches(experiment.dataset, 0, batch, seed, model.device) or experiment.dataset.batches(
        batch, seed, "train"
    )
    start = 0.0
    for step in range(1, steps + 1):
        optimisation_step(model, module, optimizer, next(stream).to(model.device, non_blocking=True))
        if step == WARMUP:
            if model.device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    return (steps - WARMUP) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument(
        "--repeats", type=int, default=2, help="alternating measurements of each loop; the best is kept"
    )
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    reg = registry.load()
    rows = []
    for label, overrides in CASES.items():
        cfg = compose([*overrides, "train.progress=false"], reg).plain()
        ladd, bare = 0.0, 0.0
        for _ in range(args.repeats):
            bare = max(bare, bare_loop(cfg, args.steps, reg))
            ladd = max(ladd, ladd_loop(cfg, args.steps, reg))
        row = {
            "case": label,
            "overrides": overrides,
            "bare_steps_per_s": bare,
            "ladd_steps_per_s": ladd,
            "overhead_ms_per_step": 1000 * (1 / ladd - 1 / bare),
            "ratio": bare / ladd,
        }
        rows.append(row)
        print(
            f"{label:<10} bare loop {bare:7.1f} steps/s   ladd train {ladd:7.1f} steps/s   "
            f"ratio {row['ratio']:.2f}   overhead {row['overhead_ms_per_step']:6.2f} ms/step",
            flush=True,
        )
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overhead.json").write_text(
        json.dumps({"device": device, "date": time.strftime("%Y-%m-%d"), "steps": args.steps, "rows": rows}, indent=2)
    )


if __name__ == "__main__":
    main()
