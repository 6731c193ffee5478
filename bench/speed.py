"""Training throughput, MFU and sampling latency of the LM1B-size backbones.

    python bench/speed.py --out bench/results            # on a GPU: the paper's sizes, bf16
    python bench/speed.py --size cpu --out /tmp/speed     # on a CPU: Qwen3's vocabulary, a small network
    python bench/speed.py --size tiny --out /tmp/speed    # anywhere: tiny sizes, to check the script

Prints a table and writes one JSON file per section. A training step is the one ``ladd train`` takes
(the model's objective with its chunked cross-entropy, clipping, fused AdamW; ``train.compile`` compiles
the backbones the same way). Every figure has its baseline measured in the same run: eager against
torch.compile for training, the plain ancestral path against the exact fast path for sampling, a bf16
matmul for the MFU denominator, and the frozen encoder (Qwen3-Embedding-0.6B's shape, random weights)
computed every step against the precomputed-latent cache.
"""
from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import torch

import registry
from registry.config.settings import Objective, TrainConfig
from registry.engine.model import DiffusionModel
from registry.engine.sampling import inference_precision
from registry.interfaces import Channels
from registry.paper.flops import head_macs, transformer_macs
from registry.training.module import LaddModule
from step import optimisation_step

SIZES = {  # paper Table model_sizes_and_configs; the vocabulary is Qwen3's with the mask
    "full": {
        "vocab": 151_670,
        "seq": 128,
        "batch": 64,
        "mdlm": (1024, 13, 16, 256),
        "ladd": (768, 12, 12, 128),
        "m": 32,
    },
    "cpu": {"vocab": 151_670, "seq": 128, "batch": 4, "mdlm": (256, 2, 4, 128), "ladd": (256, 2, 4, 128), "m": 32},
    "tiny": {"vocab": 1000, "seq": 32, "batch": 8, "mdlm": (64, 2, 4, 32), "ladd": (64, 2, 4, 32), "m": 4},
}


def timed(fn, device: torch.device, repeats: int, warm_up: bool = True) -> float:
    """Seconds per call, after one warm-up call unless the caller made its own."""
    if warm_up:
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def matmul_peak(device: torch.device) -> float:
    """Measured dense matmul rate in FLOP/s (bf16 on GPU, fp32 on CPU), on matrices large enough to reach it."""
    n, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (2048, torch.float32)
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n**3 / timed(lambda: a @ b, device, 20)


def build(
    kind: str, size: dict, reg: registry.Registry, device: torch.device, encoder: torch.nn.Module | None = None
) -> DiffusionModel:
    """A model with random weights: MDLM (DiT), Co-LADD-M or Di-LADD-M (MM-DiT, fed by ``encoder`` when training)."""
    hidden, layers, heads, cond = size["mdlm" if kind == "mdlm" else "ladd"]
    schedule = reg.build("schedule", "linear")
    process = reg.build("process", "masked", {}, schedule=schedule, vocab_size=size["vocab"])
    latent, latent_process = None, None
    if kind != "mdlm":
        options = {"length": size["m"], "width": 32} | ({"codebook_size": 512} if kind == "diladd" else {})
        latent = reg.build("latent", "continuous" if kind == "coladd" else "discrete", options)
        latent_schedule = reg.build("schedule", "vp_sqrt" if kind == "coladd" else "linear")
        latent_process = reg.build(
            "process", "vp" if kind == "coladd" else "masked", {}, schedule=latent_schedule, vocab_size=latent.values
        )
    channels = Channels(size["vocab"], size["seq"], latent)
    options = {"hidden": hidden, "layers": layers, "heads": heads, "cond_dim": cond}
    backbone = reg.build("backbone", "dit" if kind == "mdlm" else "mmdit", options, channels=channels)
    return DiffusionModel(
        process,
        latent,
        backbone,
        size["vocab"],
        size["seq"],
        Objective(),
        encoder=encoder,
        latent_process=latent_process,
    ).to(device)


def forward_flops(model: DiffusionModel) -> float:
    """Forward FLOPs per sequence at 2 FLOPs per multiply-add: the transformer blocks plus the output head."""
    shape = model.backbone.transformer_shape()
    return 2 * (transformer_macs(shape) + head_macs(shape))


def train_section(
    kind: str, size: dict, reg, device, peak: float, compile_model: bool, rows_only: bool, tiny: bool, encoder=None
) -> dict:
    """One optimisation step as ``ladd train`` takes it: the model's objective in bf16, clipping, fused AdamW.

    ``rows_only``: the output head at the masked positions only (``objective.head_on_loss_rows``); MFU counts
    the FLOPs of the head at every position either way, so it compares throughput, not work done.
    LADD's frozen encoder serves its features from the latent cache (its own cost is the encoder section's).
    """
    model = build(kind, size, reg, device, encoder).train()
    model.objective.head_on_loss_rows = rows_only
    if encoder is not None:
        model.freeze_encoder()  # as in the text presets: one stage with the frozen pretrained encoder
    if compile_model:
        model.compile_backbones()
    module = LaddModule(model, TrainConfig(), seed=0)  # ladd's optimiser and clipping
    optimizer = module.configure_optimizers()["optimizer"]
    x0 = torch.randint(size["vocab"] - 1, (size["batch"], size["seq"]), device=device)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = timed(lambda: optimisation_step(model, module, optimizer, x0), device, 3 if tiny else 20)
    flops = 3 * forward_flops(model) * size["batch"]
    return {
        "model": kind,
        "compile": compile_model,
        "head_rows": "masked" if rows_only else "all",
        "tokens_per_s": size["batch"] * size["seq"] / seconds,
        "mfu": flops / seconds / peak,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None,
    }


def sample_section(kind: str, size: dict, reg, device, steps: list[int], tiny: bool) -> list[dict]:
    model = build(kind, size, reg, device).eval()
    sampler_name = "ancestral" if kind == "mdlm" else "joint"
    rows = []
    for n_steps in steps:
        for fast in (False, True):
            sampler = reg.build("sampler", sampler_name, {"fast": fast})
            generator = torch.Generator(device=device).manual_seed(0)
            with inference_precision(device, "auto"):  # as ladd sample and ladd eval run: bf16 on CUDA
                seconds = timed(
                    functools.partial(sampler.sample, model, size["batch"], n_steps, generator),
                    device,
                    1 if tiny else 3,
                )
            rows.append(
                {"model": kind, "steps": n_steps, "fast": fast, "ms_per_sample": 1000 * seconds / size["batch"]}
            )
    return rows


def encoder_assets(size: dict, folder: Path, tiny: bool) -> Path:
    """A Qwen3 model (Qwen3-Embedding-0.6B's shape or a tiny one) with random weights and a word-level tokenizer over
    the vocabulary."""
    from gpu_check import text_assets

    return Path(text_assets(folder, size["vocab"], "tiny" if tiny else "full")["encoder"])


def frozen_encoder(assets: Path, size: dict, cache: Path | None) -> torch.nn.Module:
    """The pretrained-encoder component on ``assets``, with or without the latent cache."""
    from ladd_plugins.encoders.config import PretrainedEncoderConfig
    from ladd_plugins.encoders.pretrained import PretrainedEncoder

    options = PretrainedEncoderConfig(
        model=str(assets), length=size["m"], width=32, cache_dir=None if cache is None else str(cache)
    )
    return PretrainedEncoder(options, vocab_size=size["vocab"] - 1, seq_len=size["seq"])


def encoder_section(size: dict, device: torch.device, assets: Path, cache: Path, tiny: bool) -> list[dict]:
    """Frozen-encoder seconds per training batch: computed every step, and served by the latent cache."""
    x0 = torch.randint(size["vocab"] - 1, (size["batch"], size["seq"]), device=device)
    rows = []
    for cache_dir in (None, cache):
        encoder = frozen_encoder(assets, size, cache_dir)
        seconds = timed(functools.partial(encoder, x0), device, 3 if tiny else 20)  # the warm-up call fills the cache
        rows.append({"cache": cache_dir is not None, "ms_per_batch": 1000 * seconds, "batch": size["batch"]})
    return rows


def head_section(size: dict, device: torch.device, tiny: bool) -> list[dict]:
    """The output head's forward and backward over the batch's positions: the vocabulary as it is, and padded as
    ``TokenHead`` pads it on CUDA."""
    from registry.toolkit.layers import TokenHead

    hidden = size["mdlm"][0]
    head = TokenHead(hidden, size["vocab"] - 1).to(device)
    torch.nn.init.normal_(head.weight, std=0.02)
    x = torch.randn(size["batch"] * size["seq"], hidden, device=device, requires_grad=True)
    rows, outputs = [], []
    for align in (1, TokenHead.ALIGN):
        head.ALIGN = align

        def step() -> None:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                out = head(x)
            out.float().square().mean().backward()

        seconds = timed(step, device, 3 if tiny else 20)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            outputs.append(head(x).float())
        rows.append(
            {
                "align": align,
                "ms": 1000 * seconds,
                "tflops": 3 * 2 * x.shape[0] * hidden * head.out_features / seconds / 1e12,
            }
        )
    rows[-1]["max_abs_difference"] = float((outputs[0] - outputs[1]).abs().max())
    return rows


def describe(section: str, row: dict) -> str:
    """One printed line of a measured row."""
    if section == "training":
        memory = "" if row["peak_memory_gib"] is None else f"  peak {row['peak_memory_gib']:.1f} GiB"
        return (
            f"train {row['model']:<7} compile={row['compile']!s:<5} head={row['head_rows']:<6} "
            f"{row['tokens_per_s']:>10.0f} tok/s  MFU {100 * row['mfu']:5.1f}%{memory}"
        )
    if section == "head":
        same = f"  max |difference| {row['max_abs_difference']:.2e}" if "max_abs_difference" in row else ""
        return (
            f"output head fwd+bwd, vocabulary padded to a multiple of {row['align']:<3}: {row['ms']:7.2f} ms  "
            f"{row['tflops']:6.1f} TFLOP/s{same}"
        )
    if section == "sampling":
        path = "fast " if row["fast"] else "plain"
        return f"sample {row['model']:<7} steps={row['steps']:<4} {path} {row['ms_per_sample']:8.2f} ms/sample"
    cache = "on " if row["cache"] else "off"
    return f"frozen encoder, latent cache {cache}: {row['ms_per_batch']:8.2f} ms per batch of {row['batch']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--scratch", default=None, help="where the encoder stand-in is written (default: OUT)")
    parser.add_argument("--steps", default="1,2,4,8,16,32,64,128")
    parser.add_argument("--sections", default="training,sampling,encoder,head", help="comma-separated subset to run")
    parser.add_argument(
        "--models", default="mdlm,coladd,diladd", help="models of the training (no diladd there) and sampling sections"
    )
    parser.add_argument(
        "--variants",
        default="eager,compile,compile_rows",
        help="training variants: eager, compiled, compiled with the head at masked rows",
    )
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    size, reg, tiny = SIZES[args.size], registry.load(), args.size != "full"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    card = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    peak = matmul_peak(device)
    print(f"{card}, measured matmul rate {peak / 1e12:.1f} TFLOP/s", flush=True)
    meta = {"card": card, "date": time.strftime("%Y-%m-%d"), "matmul_tflops": peak / 1e12, "sizes": size}
    scratch = out if args.scratch is None else Path(args.scratch)
    assets = functools.cache(lambda: encoder_assets(size, scratch / "encoder_assets", tiny))  # built when first needed
    cache = scratch / "encoder_assets" / "latents"
    # (compile, head at the masked rows only): compiling is only worth timing on a GPU
    named = {"eager": (False, False), "compile": (True, False), "compile_rows": (True, True)}
    variants = (
        [named[v] for v in args.variants.split(",")] if device.type == "cuda" else [(False, False), (False, True)]
    )
    models = args.models.split(",")
    steps = [int(s) for s in args.steps.split(",")]
    sections = {
        "training": lambda: (
            train_section(
                k,
                size,
                reg,
                device,
                peak,
                c,
                rows,
                tiny,
                None if k == "mdlm" else frozen_encoder(assets(), size, cache),
            )
            for k in models
            if k != "diladd"
            for c, rows in variants
        ),
        "sampling": lambda: (r for k in models for r in sample_section(k, size, reg, device, steps, tiny)),
        "encoder": lambda: encoder_section(size, device, assets(), cache, tiny),
        "head": lambda: head_section(size, device, tiny),
    }
    for section in args.sections.split(","):
        rows = []
        for row in sections[section]():  # printed as measured, so a run cut short still shows what it got
            rows.append(row)
            print(describe(section, row), flush=True)
        (out / f"{section}.json").write_text(json.dumps({**meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
