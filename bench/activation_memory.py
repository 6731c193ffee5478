"""Peak memory of one training step with and without activation checkpointing, on a CPU, against ladd's estimate.

    python bench/activation_memory.py --out DIR                # a small DiT: 8 blocks of width 256, batch 16 x 512
    python bench/activation_memory.py --out DIR --size tiny    # a smoke run (the test suite's size)

Each configuration runs in its own process: the model and a batch are built, one step (the objective's forward
and backward, as ``ladd train`` takes it; LoRA adapters when ``--lora`` is given) runs to warm up, then the
process's resident high-water mark is reset (``/proc/self/clear_refs``) and a second step is measured: its peak
resident memory above the memory held before it (weights, gradients, the batch). glibc returns every block over
64 KiB to the system when it is freed (``MALLOC_MMAP_THRESHOLD_``), so the resident size follows live tensors.
The same step's loss and gradients are compared between the two processes (checkpointing recomputes, it does not
change what is computed). Rows go to ``OUT/activation_memory.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

SIZES = {
    "small": {"hidden": 256, "layers": 8, "heads": 4, "seq_len": 512, "batch": 16},
    "tiny": {"hidden": 32, "layers": 2, "heads": 2, "seq_len": 32, "batch": 4},
}
MIB = 2**20


def _status(field: str) -> int:
    """A ``/proc/self/status`` size in bytes (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(size: str, checkpointing: bool, lora: bool) -> dict:
    """One configuration, in this process: the step's peak resident memory above what it held before."""
    import torch

    import registry
    from registry.config.composition import compose
    from registry.engine.assembly import build_experiment
    from registry.engine.memory import training_memory
    from registry.training.strategy import recompute_blocks

    shape = SIZES[size]
    torch.set_num_threads(1)
    reg = registry.load()
    overrides = [
        "experiment=binsaw/mdlm_cpu", f"dataset.seq_len={shape['seq_len']}", f"backbone.hidden={shape['hidden']}",
        f"backbone.layers={shape['layers']}", f"backbone.heads={shape['heads']}", "backbone.dropout=0.0",
        *(["train.lora.rank=16"] if lora else []),
    ]
    settings = compose(overrides, reg)
    torch.manual_seed(0)
    experiment = build_experiment(settings, reg)
    model = experiment.model
    if lora:
        from registry.engine.adapters import adapt

        adapt(model, settings.train)
    with torch.no_grad():
        for parameter in model.parameters():  # every block acting (adaLN-Zero starts at zero)
            parameter.normal_(0.0, 0.05)
    if checkpointing:
        recompute_blocks(model)
    model.train()
    batch = next(experiment.dataset.batches(shape["batch"], 0))

    def step() -> torch.Tensor:
        model.zero_grad(set_to_none=False)
        loss = model.loss(batch, torch.Generator().manual_seed(1))["loss"]
        loss.backward()
        return loss.detach()

    step()  # gradients allocated, lazy initialisation done
    before = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark back to the current size
    started = time.perf_counter()
    loss = step()
    seconds = time.perf_counter() - started
    peak = _status("VmHWM")
    estimate = training_memory(model, shape["batch"], 4, checkpointing)
    gradients = [p.grad for p in model.parameters() if p.grad is not None]
    return {
        "size": size, "checkpointing": checkpointing, "lora": lora, **shape,
        "step_peak_mib": (peak - before) / MIB, "held_before_mib": before / MIB, "seconds": seconds,
        "estimated_activations_mib": estimate.activations / MIB,
        "loss": float(loss), "gradient_sum": float(sum(g.double().sum() for g in gradients)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("bench/out/activation_memory"))
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--lora", action="store_true", help="LoRA adapters of rank 16 on the attention, base frozen")
    parser.add_argument("--one", choices=["off", "on"], help=argparse.SUPPRESS)  # a configuration in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.size, args.one == "on", args.lora)))
        return
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    rows = []
    for mode in ("off", "on"):
        command = [sys.executable, __file__, "--size", args.size, "--one", mode, *(["--lora"] if args.lora else [])]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True, timeout=1200)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        row = rows[-1]
        print(f"checkpointing {mode}: step peak {row['step_peak_mib']:.1f} MiB above {row['held_before_mib']:.0f} "
              f"MiB held, {row['seconds']:.2f} s; estimated activations {row['estimated_activations_mib']:.1f} MiB",
              flush=True)
    same = rows[0]["loss"] == rows[1]["loss"] and rows[0]["gradient_sum"] == rows[1]["gradient_sum"]
    memory, time_ratio = (rows[1][key] / rows[0][key] for key in ("step_peak_mib", "seconds"))
    print(f"with checkpointing the step's peak is {memory:.2f} of the one without, {time_ratio:.2f} of its time; "
          f"loss and gradients {'equal' if same else 'DIFFER'}")
    args.out.mkdir(parents=True, exist_ok=True)
    machine = {"cpu": _cpu(), "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}
    (args.out / "activation_memory.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
