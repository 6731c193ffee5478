"""Fine-tuning at LLaDA-8B's size on one GPU, and sharded training's checkpoint round trip.

    python bench/finetune_check.py lora --out DIR                 # LLaDA-8B-shaped LoRA SFT, batch 1 x 2048
    python bench/finetune_check.py sharded --out DIR --scratch S  # FSDP: stopped and resumed against uninterrupted
    python bench/finetune_check.py lora --size tiny --out DIR     # anywhere: the same steps with tiny networks

``lora``: a few steps of ``ladd train``'s loop with LoRA of rank 16, the frozen base in bfloat16, bf16 autocast and
activation checkpointing, at batch 1 x 2048: a DiT of LLaDA-8B's parameter count (d 4096, 32 blocks, 32 heads, an
MLP of 4.5 widths: a SwiGLU of 3 widths has as many weights) on the shipped text, with a word-level tokenizer of
LLaDA's 126,464 ids and random weights. The row: peak memory allocated and
reserved, whether it fits in 80 GB, tokens/s, the dry run's estimate. ``sharded``: a tiny MDLM trained with
``train.strategy=fsdp`` (on one GPU: one shard), once through and once stopped by SIGTERM and run again, plain and
with LoRA; the row says whether losses, checkpoints' EMA and final weights agree bitwise. On a CPU the ``sharded``
rows record ladd's one-line refusal. Rows go to ``OUT/finetune_SECTION.jsonl``.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

import registry
from gpu_check import text_assets
from registry.config.composition import compose
from registry.engine.memory import GIB
from registry.training.loop import train

LLADA_ROWS = 126_464  # LLaDA's table: 126,463 tokens here and ladd's mask
#: a DiT of LLaDA-8B's parameter count: 32 blocks of 4 d^2 (attention) + 9 d^2 (MLP) weights, d = 4096
LLADA_SHAPED_DIT = [
    "backbone.hidden=4096", "backbone.layers=32", "backbone.heads=32", "backbone.mlp_ratio=4.5",
    "backbone.cond_dim=128",
]
TINY_DIT = ["backbone.hidden=32", "backbone.layers=2", "backbone.heads=2", "backbone.mlp_ratio=4.5"]
MEMORY = [
    "train.lora.rank=16", "train.frozen_dtype=bfloat16", "train.precision=bf16-mixed",
    "train.activation_checkpointing=true", "train.batch_size=1", "train.progress=false", "train.log_every=1",
    "train.checkpoint_every=1000000", "train.warmup_steps=0",
]
#: a tiny MDLM whose LoRA variant trains from a new network (the adaLN modulations adapted, the head in full)
SHARDED = [
    "experiment=binsaw/mdlm_cpu", "dataset.seq_len=16", "train.batch_size=16", "train.progress=false",
    "train.log_every=1", "train.checkpoint_every=1", "train.warmup_steps=2", "train.precision=32-true", "seed=3",
]
SHARDED_LORA = ["train.lora.rank=4", "train.lora.targets=[adaln.proj,qkv]", "train.lora.full=[final.head]"]


def lora_row(size: str, steps: int, scratch: Path, reg: registry.Registry) -> dict:
    """A few LoRA steps at LLaDA-8B's shape (or tiny), batch 1 x 2048 (or 32): peak memory and speed."""
    cuda = torch.cuda.is_available()
    length = 2048 if size == "full" else 32
    assets = text_assets(scratch / f"assets_llada_{size}", LLADA_ROWS if size == "full" else 100, "tiny")
    chosen = [
        "experiment=demo/mdlm", "dataset.source=shakespeare", "dataset.progress=false",
        f"dataset.cache_dir={scratch / 'token_cache'}", f"dataset.tokenizer={assets['tokenizer']}",
        f"dataset.seq_len={length}", f"trainer.max_steps={steps}", f"run_dir={scratch / 'runs' / 'lora'}", *MEMORY,
        *(LLADA_SHAPED_DIT if size == "full" else TINY_DIT),
    ]
    row: dict = {
        "network": "dit of LLaDA-8B's parameter count", "size": size, "batch": 1, "seq_len": length, "steps": steps
    }
    started = time.perf_counter()
    try:
        settings = compose(chosen, reg)
        from registry.training.dry_run import dry_run

        dry_run(settings, reg)  # the estimate, printed beside the measurement
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        train(settings, settings.run_dir, reg)
        rows = (Path(settings.run_dir) / "metrics.csv").read_text().splitlines()[1:]
        seconds = [float(line.split(",")[-1]) for line in rows]
        row["tokens_per_s"] = (len(seconds) - 1) * length / (seconds[-1] - seconds[0]) if len(seconds) > 1 else None
        if cuda:
            row["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / GIB
            row["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / GIB
            row["fits_80gb"] = torch.cuda.max_memory_reserved() < 80 * 10**9
        row["ok"] = True
    except Exception as error:  # noqa: BLE001 - a failure (an out-of-memory among them) is the row's finding
        row["ok"], row["error"] = False, f"{type(error).__name__}: {error}"[:400]
        traceback.print_exc()
    row["seconds"] = time.perf_counter() - started
    return row


def _ladd(args: list[str], stop_after_rows: int | None = None, metrics: Path | None = None) -> tuple[int, str]:
    """``ladd ARGS`` in its own process; with ``stop_after_rows``, SIGTERM once ``metrics`` holds that many rows."""
    command = [sys.executable, "-m", "registry.cli", *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if stop_after_rows is not None and metrics is not None:
        while process.poll() is None:
            if metrics.is_file() and len(metrics.read_text().splitlines()) - 1 >= stop_after_rows:
                process.send_signal(signal.SIGTERM)
                break
            time.sleep(0.05)
    _, error = process.communicate(timeout=600)
    return process.returncode, error.strip().splitlines()[-1] if error.strip() else ""


def sharded_row(lora: bool, scratch: Path, steps: int = 12) -> dict:
    """A sharded run stopped by SIGTERM and resumed, against one run through: bitwise or not, and why not."""
    from safetensors.torch import load_file

    label = "fsdp_lora" if lora else "fsdp"
    args = ["train", *SHARDED, *(SHARDED_LORA if lora else []), "train.strategy=fsdp",
            f"train.stages=[{{steps:{steps}}}]"]
    reference, stopped = scratch / "runs" / f"{label}_reference", scratch / "runs" / f"{label}_stopped"
    row: dict = {"row": label}
    started = time.perf_counter()
    status, last = _ladd([*args, f"run_dir={reference}"])
    if status != 0:
        refused = "shards the model over GPUs, but this process has none" in last
        row.update(ok=refused and not torch.cuda.is_available(), refused=last, seconds=time.perf_counter() - started)
        return row
    status, last = _ladd([*args, f"run_dir={stopped}"], stop_after_rows=steps // 3, metrics=stopped / "metrics.csv")
    row["stop_status"], row["stop_line"] = status, last
    checkpoint = stopped / "checkpoints" / "stage1" / "last.ckpt"
    row["sharded_checkpoint"] = checkpoint.is_dir() and (checkpoint / "meta.pt").is_file()
    status, last = _ladd([*args, f"run_dir={stopped}"])
    row["resume_status"] = status
    if status == 0:
        metrics = [(reference / "metrics.csv").read_text(), (stopped / "metrics.csv").read_text()]
        row["losses_equal"] = [line.rsplit(",", 1)[0] for line in metrics[0].splitlines()] == [
            line.rsplit(",", 1)[0] for line in metrics[1].splitlines()
        ]
        weights = [load_file(run / "model.safetensors") for run in (reference, stopped)]
        row["tensors"] = len(weights[0])
        row["max_abs_difference"] = max(
            float((weights[0][name].double() - weights[1][name].double()).abs().max()) for name in weights[0]
        )
    row["ok"] = status == 0 and row.get("losses_equal") and row.get("max_abs_difference") == 0.0
    row["seconds"] = time.perf_counter() - started
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("section", choices=("lora", "sharded"))
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--steps", type=int, default=4, help="training steps of the LoRA row")
    parser.add_argument("--out", default="bench/out", help="rows (JSON lines)")
    parser.add_argument("--scratch", default=None, help="run folders and stand-ins (default: OUT)")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    scratch = out if args.scratch is None else Path(args.scratch).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    reg = registry.load()
    rows = [lora_row(args.size, args.steps, scratch, reg)] if args.section == "lora" else [
        sharded_row(lora, scratch) for lora in (False, True)
    ]
    for row in rows:
        print(f"finetune {args.section}: " + json.dumps(row), flush=True)
        with (out / f"finetune_{args.section}.jsonl").open("a") as handle:
            handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
