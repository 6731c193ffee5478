"""Every preset trained for a few steps at its full size, and the host synchronisations of a step counted.

    python bench/gpu_check.py presets --group lm1b --out DIR                 # the paper's sizes, on a GPU
    python bench/gpu_check.py presets --group binsaw --size tiny --out DIR   # anywhere: shrunk networks
    python bench/gpu_check.py syncs --out DIR                                # host syncs of a step (CUDA)

A preset trains through ``registry.training.train``, as ``ladd train`` does (Lightning, EMA, the preset's
precision and options, fused AdamW on CUDA), every stage for ``--steps`` steps so that a two-stage
preset enters Stage 2, at the per-GPU batch (text: 512 over 8 GPUs = 64). Downloads are replaced by
stand-ins of the same shapes: a word-level tokenizer of Qwen3's size, a Qwen3-Embedding-0.6B-shaped
encoder with random weights, the shipped corpus. Each preset prints one row as it finishes and appends
it to ``OUT/presets_GROUP.jsonl``, a failure included; its sampling call draws 64 sequences in 8 steps.
"""
from __future__ import annotations

import argparse
import functools
import json
import shutil
import time
import traceback
import warnings
from pathlib import Path

import torch

import registry
from registry.config.composition import compose
from registry.config.settings import checked
from registry.engine.assembly import build_experiment
from registry.engine.sampling import inference_precision
from registry.host_reads import count_host_reads
from registry.training.loop import train
from registry.training.metrics_file import METRICS_FILE
from registry.training.module import LaddModule
from step import optimisation_step

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "experiment"
QWEN3_ROWS = 151_670  # Qwen3's tokenizer with ladd's mask: K = 151,669 real tokens
TEXT_BATCH = 64  # the text presets' 512 over 8 GPUs
SAMPLES, SAMPLE_STEPS = 64, 8
#: Qwen3-Embedding-0.6B's shape (random weights), and a tiny stand-in
ENCODER_SHAPES = {
    "full": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128},
    "tiny": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 8},
}
#: Shrunk networks for a dry run of the script on a CPU
TINY = ["backbone.hidden=32", "backbone.layers=1", "backbone.heads=2", "train.batch_size=4"]


#: presets of MDLM's published setting: the import section (bench/import_mdlm.py) measures the imported MDLM
IMPORT_SECTION = ("owt/mdlm_published", "owt/coladd_16_from_mdlm")


def presets(group: str) -> list[str]:
    """The presets of one group (``lm1b``, ``owt``, ``binsaw``) at the paper's size (no ``_cpu`` variants)."""
    found = (f"{group}/{p.stem}" for p in (CONFIGS / group).glob("*.yaml") if not p.stem.endswith("_cpu"))
    return sorted(name for name in found if name not in IMPORT_SECTION)


def text_assets(folder: Path, rows: int, shape: str) -> dict[str, str]:
    """A word-level tokenizer of ``rows`` ids (EOS and mask last) and a Qwen3 encoder of ``shape`` with random
    weights sharing it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModel, PreTrainedTokenizerFast, Qwen3Config

    tokenizer_dir, encoder_dir = folder / "tokenizer", folder / "encoder"
    if not (encoder_dir / "config.json").is_file():
        words = {f"w{i}": i for i in range(rows - 2)} | {"<|endoftext|>": rows - 2, "<|mask|>": rows - 1}
        model = Tokenizer(models.WordLevel(words, unk_token="w0"))
        model.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=model,
            unk_token="w0",
            eos_token="<|endoftext|>",
            pad_token="<|endoftext|>",
            mask_token="<|mask|>",
        )
        tokenizer.save_pretrained(tokenizer_dir)
        config = Qwen3Config(vocab_size=rows, max_position_embeddings=4096, **ENCODER_SHAPES[shape])
        AutoModel.from_config(config).save_pretrained(encoder_dir)
        tokenizer.save_pretrained(encoder_dir)
    return {"tokenizer": str(tokenizer_dir), "encoder": str(encoder_dir)}


def overrides(
    preset: str, size: str, scratch: Path, steps: int, assets: dict[str, str] | None, reg: registry.Registry
) -> list[str]:
    """The preset as it is, with stand-ins for downloads, ``steps`` steps per stage and the per-GPU batch."""
    chosen = [
        f"experiment={preset}",
        f"run_dir={scratch / 'runs' / preset}",
        f"trainer.max_steps={steps}",
        "train.progress=false",
        f"train.log_every={max(1, steps // 4)}",
        "train.checkpoint_every=1000000000",
    ]
    if assets is not None:
        chosen += [
            "dataset.source=shakespeare",
            f"dataset.tokenizer={assets['tokenizer']}",
            "dataset.progress=false",
            f"dataset.cache_dir={scratch / 'token_cache'}",
            f"train.batch_size={TEXT_BATCH}",
        ]
        if size == "tiny":
            chosen.append("dataset.vocab_size=null")
        if (compose(chosen, reg).selection("encoder") or {}).get("name") == "pretrained":
            chosen.append(f"encoder.model={assets['encoder']}")
    return chosen + (TINY if size == "tiny" else [])


def steps_per_second(metrics: Path) -> tuple[int, float | None]:
    """The last stage and its steps per second between its first and last logged rows (compilation and warm-up
    excluded)."""
    import csv

    with metrics.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    stage = max(int(r["stage"]) for r in rows)
    last = [r for r in rows if int(r["stage"]) == stage]
    if len(last) < 2:
        return stage, None
    steps = int(last[-1]["step"]) - int(last[0]["step"])
    return stage, steps / (float(last[-1]["seconds"]) - float(last[0]["seconds"]))


def check_preset(
    preset: str,
    size: str,
    scratch: Path,
    steps: int,
    assets: dict[str, str] | None,
    reg: registry.Registry,
    extra: list[str],
) -> dict:
    """Train ``preset`` (with ``extra`` overrides) for a few steps per stage, then draw one batch of samples; the row
    describing it (the run folder is deleted)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    row: dict = {"preset": preset, "extra": extra}
    started = time.perf_counter()
    try:
        cfg = compose([*overrides(preset, size, scratch, steps, assets, reg), *extra], reg).plain()
        row["batch"], row["seq_len"] = cfg["train"]["batch_size"], cfg["dataset"]["seq_len"]
        row["compile"] = (cfg["train"]["compile_mode"] or "default") if cfg["train"]["compile"] else False
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        experiment = train(cfg, cfg["run_dir"], reg)
        row["stages"], rate = steps_per_second(Path(cfg["run_dir"]) / METRICS_FILE)
        row["steps_per_s"] = rate
        row["tokens_per_s"] = None if rate is None else rate * row["batch"] * row["seq_len"]
        row["params_m"] = sum(p.numel() for p in experiment.model.parameters()) / 1e6
        model = experiment.model.to(device).eval()
        generator = torch.Generator(device=device).manual_seed(0)
        with inference_precision(device, cfg["eval"]["precision"]):
            start = time.perf_counter()
            experiment.sampler.sample(model, SAMPLES, SAMPLE_STEPS, generator)
            if device.type == "cuda":
                torch.cuda.synchronize()
            row["sample_ms"] = 1000 * (time.perf_counter() - start)
        row["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
        row["ok"] = True
    except Exception as error:  # noqa: BLE001 - a failing preset is a row of the table, not the end of the check
        row["ok"], row["error"] = False, f"{type(error).__name__}: {error}"[:400]
        traceback.print_exc()
    shutil.rmtree(scratch / "runs" / preset, ignore_errors=True)
    row["seconds"] = time.perf_counter() - started
    return row


def describe(row: dict) -> str:
    """One printed line of a preset's row."""
    if not row["ok"]:
        return f"{row['preset']:<22} FAILED  {row['error']}"
    fmt = lambda value, spec: "-" if value is None else format(value, spec)  # noqa: E731
    return (
        f"{row['preset']:<22} ok  stages {row['stages']}  batch {row['batch']:>4}  {fmt(row['steps_per_s'], '7.1f')} "
        "steps/s  "
        f"{fmt(row['tokens_per_s'], '9.0f')} tok/s  peak {fmt(row['peak_gib'], '5.1f')} GiB  "
        f"sample {row['sample_ms']:7.0f} ms  compile={row['compile']}  ({row['seconds']:.0f} s)"
    )


def count_syncs(fn) -> int:
    """Host synchronisations CUDA reports while ``fn()`` runs; off CUDA, the host reads that would be ones on a GPU."""
    if not torch.cuda.is_available():
        with count_host_reads() as reads:
            fn()
        return reads.total
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def sync_rows(reg: registry.Registry, scratch: Path) -> list[dict]:
    """Host syncs of one training step (objective, backward, clipping, AdamW) and one sampling step, small networks."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assets = text_assets(scratch / "assets_tiny", 100, "tiny")
    rows = []
    for preset in ("binsaw/mdlm", "binsaw/coladd_joint", "binsaw/diladd_joint", "lm1b/mdlm", "lm1b/coladd_32"):
        text = not preset.startswith("binsaw")
        cfg = compose(
            [*overrides(preset, "tiny", scratch, 1, assets if text else None, reg), "train.fused_adamw=true"], reg
        ).plain()
        experiment = build_experiment(cfg, reg)
        model = experiment.model.to(device).train()
        module = LaddModule(model, checked(cfg).train, cfg["seed"])
        optimizer = module.configure_optimizers()["optimizer"]
        x0 = next(iter(experiment.dataset.batches(cfg["train"]["batch_size"], 0, "train"))).to(device)

        step = functools.partial(optimisation_step, model, module, optimizer, x0)
        step()  # the first step allocates optimiser state
        generator = torch.Generator(device=device).manual_seed(0)
        model.eval()
        with inference_precision(device, "auto"), torch.no_grad():
            experiment.sampler.sample(model, 4, 1, generator)
            sampling = count_syncs(functools.partial(experiment.sampler.sample, model, 4, 1, generator))
        model.train()
        row = {"preset": preset, "train_step_syncs": count_syncs(step), "sampling_step_syncs": sampling}
        if not text:
            row["train_loop_syncs_per_step"] = loop_syncs(preset, scratch, reg)
        rows.append(row)
        loop = f"  ladd train's loop per step {row['train_loop_syncs_per_step']:.1f}" if not text else ""
        print(
            f"host syncs  {preset:<22} training step {row['train_step_syncs']}  one-step sampling call "
            f"{sampling}{loop}",
            flush=True,
        )
    return rows


def loop_syncs(preset: str, scratch: Path, reg: registry.Registry, short: int = 3, long: int = 11) -> float:
    """Host syncs per step of ``train``'s whole loop (Lightning, batches drawn on the device, EMA, logging between
    log steps), from a short and a long run of the last stage, so that what a run does once cancels out."""

    def run(steps: int) -> int:
        cfg = compose(
            [
                *overrides(preset, "tiny", scratch, steps, None, reg),
                "train.log_every=1000",
                "train.fused_adamw=true",
                "dataset.draw_on_device=true",
            ],
            reg,
        ).plain()
        cfg["train"]["stages"] = dict(list(cfg["train"]["stages"].items())[-1:])
        try:
            return count_syncs(functools.partial(train, cfg, cfg["run_dir"], reg))
        finally:
            shutil.rmtree(cfg["run_dir"], ignore_errors=True)

    run(short)  # what a process does once (compiling, caching) stays out of both counts
    return (run(long) - run(short)) / (long - short)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("section", choices=("presets", "syncs"))
    parser.add_argument("--group", choices=("lm1b", "owt", "binsaw"), default="binsaw")
    parser.add_argument("--only", default=None, help="comma-separated presets of the group to check (default: all)")
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--steps", type=int, default=20, help="training steps of every stage")
    parser.add_argument("--out", default="bench/out", help="rows (JSON)")
    parser.add_argument("--label", default="", help="suffix of the rows' file name, presets_GROUP{LABEL}.jsonl")
    parser.add_argument(
        "--extra", nargs="*", default=[], help="Hydra overrides added to every preset (e.g. train.compile=true)"
    )
    parser.add_argument(
        "--scratch",
        default=None,
        help="run folders, stand-ins and token caches (default: OUT); a RAM disk saves minutes",
    )
    args = parser.parse_args()
    out = Path(args.out).resolve()
    scratch = out if args.scratch is None else Path(args.scratch).resolve()
    out.mkdir(parents=True, exist_ok=True)
    reg = registry.load()
    if args.section == "syncs":
        (out / "syncs.json").write_text(json.dumps(sync_rows(reg, scratch), indent=2))
        return
    rows = QWEN3_ROWS if args.size == "full" else 100
    assets = None if args.group == "binsaw" else text_assets(scratch / f"assets_{args.size}", rows, args.size)
    chosen = presets(args.group) if args.only is None else [f"{args.group}/{name}" for name in args.only.split(",")]
    for preset in chosen:
        row = check_preset(preset, args.size, scratch, args.steps, assets, reg, args.extra)
        print(describe(row), flush=True)
        with (out / f"presets_{args.group}{args.label}.jsonl").open("a") as handle:
            handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
