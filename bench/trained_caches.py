"""Fast-dLLM's approximate caches on a trained model: the share of generated tokens equal to uncached decoding.

    python bench/trained_caches.py --out results/trained_caches [--steps 400]   # trains binsaw/mdlm_cpu first
    python bench/trained_caches.py --run RUN --out DIR                           # a trained masked run

Trains the quickstart's MDLM (``binsaw/mdlm_cpu``: S = 32, batch 128) for ``steps`` steps with ``ladd train``'s loop
on one thread (or loads ``--run``), reports its held-out ``L^x``, then decodes held-out prompts (their first
``prompt`` tokens, ``samples`` of them) with the confidence decoder in blocks of ``block`` positions, one token per
step, with each cache (``prefix``, ``dual``) and without it, from the same seed, at temperature 0 and 1, at the
default refresh (block starts only) and at ``refresh=1``: the share of generated positions whose token equals the
uncached decoder's. At refresh 1 every position is recomputed at every step, so the share must be 1. On random
weights every share is 1.000 (``bench/decoders.py``); a trained model is where an approximate cache moves tokens.
Rows are printed and written to ``OUT/trained_caches.json``, with a README of them.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import torch

import registry
from registry.config.composition import compose
from registry.engine.assembly import Experiment, with_sampler
from registry.engine.evaluation import token_loss
from registry.engine.loading import load_trained
from registry.interfaces import mask_id
from registry.training.loop import train

PRESET = "binsaw/mdlm_cpu"


def trained(reg: registry.Registry, run: Path | None, steps: int, folder: Path) -> Experiment:
    """The experiment of ``run``, or the preset trained for ``steps`` steps in ``folder``."""
    if run is not None:
        return load_trained(run, reg)[0]
    cfg = compose([f"experiment={PRESET}", f"train.stages=[{{steps:{steps}}}]", "train.progress=false"], reg)
    return train(cfg, folder / "run", reg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a trained masked run (default: train the preset here)")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=8)
    parser.add_argument("--block", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("results/trained_caches"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    reg = registry.load()
    with TemporaryDirectory() as folder:
        started = time.perf_counter()
        experiment = trained(reg, args.run, args.steps, Path(folder))
        seconds = time.perf_counter() - started
    model = experiment.model.eval()
    loss = token_loss(experiment, 4, 256, 0)
    rows = next(experiment.dataset.batches(args.samples, 7, "test"))
    prompt = torch.full_like(rows, mask_id(model.vocab_size))
    prompt[:, : args.prompt] = rows[:, : args.prompt]
    steps = rows.shape[1] - args.prompt  # one token per step

    def tokens(options: dict) -> torch.Tensor:
        sampler = with_sampler(experiment, reg, "confidence", {"block_length": args.block, **options}).sampler
        with torch.no_grad():
            out = sampler.sample(model, args.samples, steps, torch.Generator().manual_seed(1), fixed=prompt)
        return out.tokens[:, args.prompt :]

    meta = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "threads": 1, "run": str(args.run or ""),
            "preset": PRESET, "steps": args.steps if args.run is None else None, "training_s": seconds,
            "heldout_token_loss": loss, "samples": args.samples, "prompt": args.prompt, "block": args.block,
            "generated": steps}
    print(f"{args.run or PRESET}: held-out L^x {loss:.4f} nats per token; {args.samples} prompts of {args.prompt} "
          f"tokens, {steps} generated in blocks of {args.block}, one token per step", flush=True)
    found = []
    for temperature in (0.0, 1.0):
        uncached = tokens({"temperature": temperature})
        for cache in ("prefix", "dual"):
            for refresh in (0, 1):
                cached = tokens({"temperature": temperature, "cache": cache, "refresh": refresh})
                row = {"temperature": temperature, "cache": cache, "refresh": refresh,
                       "agreement": float((cached == uncached).double().mean()),
                       "rows_equal": float((cached == uncached).all(dim=1).double().mean())}
                found.append(row)
                print(f"temperature {temperature:g}, cache={cache}, refresh {refresh or 'at block starts'}: "
                      f"{row['agreement']:.4f} of generated tokens equal, {row['rows_equal']:.4f} of samples",
                      flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "trained_caches.json").write_text(json.dumps({"meta": meta, "rows": found}, indent=1) + "\n")
    (args.out / "README.md").write_text(readme(meta, found))


def readme(meta: dict, rows: list[dict]) -> str:
    """The README of the results: every number read from ``meta`` and ``rows``."""
    model = meta["run"] or f"`{meta['preset']}` trained for {meta['steps']} steps ({meta['training_s']:.0f} s)"
    lines = [
        "# Fast-dLLM's caches on a trained model",
        "",
        "Generated by `bench/trained_caches.py`; no number here is typed by hand.",
        "",
        f"The model: {model}, one thread, torch {meta['torch']}, {meta['date']}; held-out `L^x` "
        f"{meta['heldout_token_loss']:.4f} nats per token. The confidence decoder continues {meta['samples']} held-out "
        f"prompts of {meta['prompt']} tokens ({meta['generated']} positions generated, blocks of {meta['block']}, one "
        "token per step) with each cache and without it, from the same seed. The share of generated tokens (and of "
        "whole samples) equal to the uncached decoder's:",
        "",
        "| temperature | cache | refresh | tokens equal | samples equal |",
        "| --- | --- | --- | --- | --- |",
        *(
            f"| {row['temperature']:g} | {row['cache']} | {row['refresh'] or 'block starts'} | {row['agreement']:.4f} "
            f"| {row['rows_equal']:.4f} |"
            for row in rows
        ),
        "",
        "Recomputed at every step (`refresh=1`) the caches are exact; at their default refresh they are Fast-dLLM's "
        "approximation, which on random weights changed no token (`bench/RESULTS.md`) and on this model gives the "
        "shares above.",
        "",
        "Command:",
        "",
        "```bash",
        "python " + " ".join(["bench/trained_caches.py", *sys.argv[1:]]),
        "```",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
