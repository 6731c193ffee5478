"""The field's decoders at batch 1: network calls, FLOPs and ms per sample, each against uncached ancestral sampling.

    python bench/decoders.py --out DIR                 # a DiT of length 640 (prompt 512, generation 128): 4 layers
                                                       # of width 256 on a CPU, MDLM's OWT size on a GPU
    python bench/decoders.py --size tiny --out DIR     # anywhere, in seconds: the same rows at a toy size

A DiT with random weights (the zero-initialised adaLN gates and head perturbed, so every layer matters), MDLM's
masked process, a prompt of ``prompt`` random tokens and ``generation`` positions to generate: Fast-dLLM's
setting (prompt 512, generation 128, block 32, 128 steps, batch 1). Every decoder samples the same prompt; its
network calls, FLOPs (counted as ``ladd eval`` counts them) and token forwards (positions the backbone ran) are per
sample (counted in a first call, which also warms up), its time the median of ``repeats`` calls, and each ratio is
against uncached ancestral sampling (``ancestral``, the exact fast path) measured in the same run. The cached
decoders also report their token agreement with the same decoder uncached at temperature 0 (the share of generated
positions that agree), at the default refresh (block starts only) and at ``refresh=1`` (which must be 1), and their
time against it, also at temperature 0 (Fast-dLLM's setting: no Gumbel noise over the vocabulary to draw). Rows are
printed as measured and written to ``OUT/decoders.json``.

The CPU model keeps the proportions that decide what a cache can save: its output head over K = 4,096 tokens is a
quarter of a position's multiply-adds (OWT's DiT: GPT-2's vocabulary head is 31% of them). A cache shrinks the trunk
only; the head, the proposals drawn over the vocabulary and the per-call overhead stay, so a model whose head
dominates (width 64 and 2 layers: 73%) understates what the cache does for the models people decode.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch

import registry
from registry.config.settings import Objective
from registry.engine.compute import counting
from registry.engine.model import DiffusionModel
from registry.engine.sampling import inference_precision
from registry.interfaces import Channels
from registry.toolkit.options import ConfidenceConfig

SIZES = {
    "full": {"hidden": 256, "layers": 4, "heads": 4, "vocab": 4096, "prompt": 512, "generation": 128, "block": 32,
             "steps": 128, "repeats": 2},
    # on a GPU, "full" is an OWT-size MDLM DiT (width 768, 12 layers, GPT-2's vocabulary) at the same length
    "full_gpu": {"hidden": 768, "layers": 12, "heads": 12, "vocab": 50258, "prompt": 512, "generation": 128,
                 "block": 32, "steps": 128, "repeats": 1},
    "tiny": {"hidden": 32, "layers": 2, "heads": 2, "vocab": 64, "prompt": 24, "generation": 16, "block": 8,
             "steps": 16, "repeats": 1},
}
#: (label, sampler, options): every decoder of the comparison; the first is the baseline
DECODERS = [
    ("ancestral", "ancestral", {}),
    ("ancestral plain", "ancestral", {"fast": False}),
    ("low_confidence", "confidence", {"remasking": "low_confidence"}),
    ("random", "confidence", {"remasking": "random"}),
    ("margin", "confidence", {"remasking": "margin"}),
    ("entropy", "confidence", {"remasking": "entropy"}),
    ("threshold 0.9", "confidence", {"threshold": 0.9}),
    ("prefix cache", "confidence", {"cache": "prefix"}),
    ("dual cache", "confidence", {"cache": "dual"}),
    ("threshold 0.9 + dual cache", "confidence", {"threshold": 0.9, "cache": "dual"}),
]


def model_of(size: dict, device: torch.device, length: int | None = None, **backbone: object) -> DiffusionModel:
    """A token-only DiT of ``length`` (prompt + generation by default; other ``backbone`` options given) with random
    weights."""
    length = size["prompt"] + size["generation"] if length is None else length
    reg = registry.load()
    schedule = reg.build("schedule", "linear")
    process = reg.build("process", "masked", schedule=schedule, vocab_size=size["vocab"])
    options = {"hidden": size["hidden"], "layers": size["layers"], "heads": size["heads"], "dropout": 0.0, **backbone}
    backbone = reg.build("backbone", "dit", options, channels=Channels(size["vocab"], length, None))
    model = DiffusionModel(process, None, backbone, size["vocab"], length, Objective(), schedule=schedule)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return model.to(device).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["full", "tiny"], default="full")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    size = SIZES["full_gpu" if args.size == "full" and device.type == "cuda" else args.size]
    torch.manual_seed(0)
    model = model_of(size, device)
    length = size["prompt"] + size["generation"]
    fixed = torch.full((1, length), size["vocab"], device=device)
    fixed[:, : size["prompt"]] = torch.randint(size["vocab"], (1, size["prompt"]), generator=torch.Generator())
    fixed = fixed.to(device)
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    meta = {"card": card, "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "size": size}
    print(f"{card}; DiT {size['layers']}x{size['hidden']}, K={size['vocab']}, prompt {size['prompt']}, generation "
          f"{size['generation']}, block {size['block']}, {size['steps']} steps, batch 1, random weights")

    def run(sampler_name: str, options: dict, repeats: int, seed: int = 0) -> tuple[torch.Tensor, float, dict]:
        """The tokens, the median ms of ``repeats`` timed calls after a counted warm-up call, and the cost."""
        sampler = registry.build("sampler", sampler_name, options)
        with torch.no_grad(), inference_precision(device, "auto"):
            with counting(model) as meter:
                out = sampler.sample(
                    model, 1, size["steps"], torch.Generator(device=device).manual_seed(seed), fixed=fixed
                )
            times = []
            for _ in range(repeats):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                out = sampler.sample(
                    model, 1, size["steps"], torch.Generator(device=device).manual_seed(seed), fixed=fixed
                )
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
        spent = meter.spent()
        cost = {"network_calls": out.network_calls, "gflops": spent.flops / 1e9, "token_forwards": spent.positions}
        return out.tokens, 1000 * statistics.median(times) if times else math.nan, cost

    rows, baseline = [], None
    for label, sampler_name, options in DECODERS:
        options = {"block_length": size["block"], **options} if sampler_name == "confidence" else options
        _, ms, cost = run(sampler_name, options, size["repeats"])
        baseline = baseline or {"ms": ms, **cost}
        row = {
            "decoder": label, "sampler": sampler_name, "options": options, "ms_per_sample": ms, **cost,
            "speedup": baseline["ms"] / ms, "calls_ratio": baseline["network_calls"] / cost["network_calls"],
            "flops_ratio": baseline["gflops"] / cost["gflops"],
            "forwards_ratio": baseline["token_forwards"] / cost["token_forwards"],
        }
        if "cache" in options:  # against the same decoder uncached: time, and token agreement at temperature 0
            plain = ConfidenceConfig(**{**options, "cache": "none"})
            same = [r for r in rows if r["sampler"] == "confidence" and ConfidenceConfig(**r["options"]) == plain]
            row["speedup_vs_uncached"] = same[0]["ms_per_sample"] / ms
            # at temperature 0 (Fast-dLLM's setting), where no Gumbel noise over the vocabulary is drawn
            greedy = {**options, "temperature": 0.0}
            uncached, uncached_ms, _ = run("confidence", {**greedy, "cache": "none"}, size["repeats"])
            cached, cached_ms, _ = run("confidence", greedy, size["repeats"])
            row["speedup_vs_uncached_greedy"] = uncached_ms / cached_ms
            generated = slice(size["prompt"], None)
            for refresh, tokens in ((0, cached), (1, run("confidence", {**greedy, "refresh": 1}, 0)[0])):
                agreement = float((tokens[:, generated] == uncached[:, generated]).double().mean())
                row[f"agreement_refresh_{refresh}"] = agreement
        rows.append(row)
        agreement = "".join(f", agreement {row[k]:.3f} (refresh {k[-1]})" for k in row if k.startswith("agreement"))
        if "speedup_vs_uncached" in row:
            agreement += (
                f"; against the same decoder uncached: {row['speedup_vs_uncached']:.2f}x time, "
                f"{row['speedup_vs_uncached_greedy']:.2f}x at temperature 0"
            )
        print(
            f"decoder {label}: {cost['network_calls']} calls, {cost['token_forwards']} token forwards, "
            f"{cost['gflops']:.3f} GFLOPs, {ms:.1f} ms/sample; against ancestral: {row['speedup']:.2f}x time, "
            f"{row['forwards_ratio']:.2f}x token forwards{agreement}",
            flush=True,
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "decoders.json").write_text(json.dumps({**meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
