"""Block diffusion's exact key-value cache: token forwards and ms per generated token with the cache and without it.

    python bench/block_diffusion.py --out DIR                      # OWT's DiT at length 256 in blocks of 16 (GPU)
    python bench/block_diffusion.py --size cpu --out DIR           # length 128 in blocks of 8
    python bench/block_diffusion.py --size tiny --out DIR          # seconds: the same rows at a toy size
    python bench/block_diffusion.py --run RUN --out DIR            # a trained block-causal run

Token forwards (positions the backbone ran, counted as ``ladd eval`` counts them) of K = 16 blocks generated with
the blockwise sampler, with its cache and without it, against two closed forms: the analytic ratio (K + 1) / 2 of a
step's forwards (without the cache a step runs the committed blocks and its own, K (K + 1) / 2 blocks over the K
blocks' steps; with it, its own block), and the exact count with the pass that writes each committed block's keys and
values (one block's positions, K - 1 times). The confidence decoder commits one token per step (steps = the block
size), so every step calls the network. Then ms per generated token at ``length`` positions (4x the trained length
by default; per token of the batch): the median of ``repeats`` calls after a warm-up, the same seed with and without
the cache, the tokens compared (they must be equal), with the ancestral decoder (the fast path) at one step per
position of a block. A model of random weights unless ``--run`` names a trained one. Rows are printed as measured and
written to ``OUT/block_diffusion.json``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import registry
from decoders import model_of
from registry.engine.compute import counting
from registry.engine.loading import load_trained
from registry.engine.sampling import inference_precision

SIZES = {
    "full": {"hidden": 768, "layers": 12, "heads": 12, "vocab": 50257, "length": 256, "block": 16, "repeats": 1},
    "cpu": {"hidden": 128, "layers": 2, "heads": 2, "vocab": 4096, "length": 128, "block": 8, "repeats": 3},
    "tiny": {"hidden": 32, "layers": 2, "heads": 2, "vocab": 64, "length": 32, "block": 4, "repeats": 1},
}
BLOCKS = 16  # K of the token-forward comparison
ONE_PER_STEP = {"token_decoder": "confidence", "token_decoder_options": {"remasking": "low_confidence"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--run", help="a trained run or model folder of block attention instead of random weights")
    parser.add_argument("--length", type=int, help="positions to generate for the timing (default: 4x the trained)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    size = SIZES[args.size]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    if args.run:
        model = load_trained(args.run, registry.load())[0].model.to(device).eval()
    else:
        options = {"attention": "block_causal", "block_size": size["block"]}
        model = model_of({**size, "prompt": 0, "generation": 0}, device, size["length"], **options)
    block = model.attention.block
    if block is None:
        raise SystemExit(f"{args.run or 'the model'} has no block attention pattern")
    length = args.length or 4 * model.seq_len
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    meta = {"card": card, "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "run": args.run,
            "size": None if args.run else size, "trained_length": model.seq_len, "block": block,
            "batch": args.batch}
    print(f"{card}; trained length {model.seq_len}, blocks of {block}, batch {args.batch}, "
          f"{'weights of ' + args.run if args.run else 'random weights'}", flush=True)

    def sample(steps: int, positions: int, cache: bool, **options: object) -> tuple[torch.Tensor, float, dict]:
        sampler = registry.build("sampler", "blockwise", {"cache": cache, "stop_at_eos": False, **options})

        def call() -> torch.Tensor:
            generator = torch.Generator(device=device).manual_seed(0)
            return sampler.sample(model, args.batch, steps, generator, length=positions).tokens

        with torch.no_grad(), inference_precision(device, "auto"):
            with counting(model) as meter:
                tokens = call()
            times = []
            for _ in range(size["repeats"]):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                call()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
        spent = meter.spent()
        cost = {"network_calls": spent.calls, "token_forwards": spent.positions, "gflops": spent.flops / 1e9}
        return tokens, 1000 * statistics.median(times), cost

    ratio_length = BLOCKS * block
    _, _, cached = sample(block, ratio_length, True, **ONE_PER_STEP)
    _, _, plain = sample(block, ratio_length, False, **ONE_PER_STEP)
    steps = block * BLOCKS
    closed_plain = args.batch * block * block * BLOCKS * (BLOCKS + 1) // 2
    closed_cached = args.batch * (block * steps + block * (BLOCKS - 1))
    forwards = {
        "blocks": BLOCKS, "with_cache": cached["token_forwards"], "without_cache": plain["token_forwards"],
        "ratio": plain["token_forwards"] / cached["token_forwards"],
        "per_step_ratio": plain["token_forwards"] / (args.batch * block * steps), "analytic": (BLOCKS + 1) / 2,
        "closed_form_with_cache": closed_cached, "closed_form_without_cache": closed_plain,
    }
    print(f"token forwards, K = {BLOCKS} blocks of {block} (one commit per step): {plain['token_forwards']:.0f} "
          f"without the cache, {cached['token_forwards']:.0f} with it (closed forms {closed_plain}, {closed_cached}): "
          f"ratio {forwards['ratio']:.3f}; per step {forwards['per_step_ratio']:.3f} against (K + 1) / 2 = "
          f"{forwards['analytic']:.3f}", flush=True)
    timing = {}
    for cache in (False, True):
        tokens, ms, cost = sample(block, length, cache)
        timing["cache" if cache else "plain"] = {"tokens": tokens, "ms": ms, **cost}
        print(f"length {length} ({length // model.seq_len}x the trained), {'with' if cache else 'without'} the cache: "
              f"{ms / (length * args.batch):.3f} ms per generated token, {cost['network_calls']} calls, "
              f"{cost['token_forwards']:.0f} token forwards, {cost['gflops']:.3f} GFLOPs", flush=True)
    same = torch.equal(timing["cache"].pop("tokens"), timing["plain"].pop("tokens"))
    speedup = timing["plain"]["ms"] / timing["cache"]["ms"]
    verdict = "identical" if same else "DIFFERENT"
    print(f"length {length}: the cache {speedup:.2f}x faster, tokens {verdict}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {**meta, "forwards": forwards, "length": length, "timing": timing, "speedup": speedup,
              "identical_tokens": same, "ms_per_token": {k: v["ms"] / (length * args.batch) for k, v in timing.items()}}
    (out / "block_diffusion.json").write_text(json.dumps(record, indent=2))
    if not same:
        raise SystemExit("tokens differ with and without the cache")


if __name__ == "__main__":
    main()
