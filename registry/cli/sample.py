"""``ladd sample``: samples of a trained run or an exported model, as token ids or text."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from registry.engine.sampling_limits import DEFAULT_MAX_HOURS, MAX_HOURS_FLAG
from registry.errors import LaddError
from registry.host.registry import Registry

from .arguments import add_sampler_choice, chosen_sampler, hours, positive, seed


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("sample", help="sample from a trained run or an exported model")
    p.add_argument("run_dir", nargs="?", help="a run folder or a model folder (ladd export, ladd import)")
    p.add_argument("--model", help="a folder written by `ladd export` instead of a run folder")
    p.add_argument("--steps", type=positive, default=32)
    p.add_argument("--num", type=positive, default=16)
    p.add_argument("--batch-size", type=positive, default=1000)
    p.add_argument("--seed", type=seed, default=0, help="a whole number from 0 to 2**63-1")
    p.add_argument("--prompt", help="text every sample starts with (kept fixed while sampling)")
    p.add_argument(
        "--precision", default="auto",
        help="the networks' precision: auto (bf16-mixed on CUDA, else 32-true), bf16-mixed or 32-true",
    )
    p.add_argument("--suffix", help="text every sample ends with: with --prompt, an infill between the two")
    p.add_argument(
        "--out", help="default: samples_STEPSsteps.jsonl (text data; ids and text) or .txt (ids) in the current folder"
    )
    add_sampler_choice(p, "sample")
    p.add_argument(
        MAX_HOURS_FLAG, type=hours, default=DEFAULT_MAX_HOURS,
        help=f"refuse jobs whose measured estimate is longer (default {DEFAULT_MAX_HOURS:g}; raise it for longer jobs)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Sample, checking the output file, memory and time first; write one line per sample."""
    from registry.engine.loading import load_model_folder, load_trained  # torch: only when sampling
    from registry.engine.prompts import decode, fixed_tokens
    from registry.engine.sampling import sample
    from registry.engine.sampling_limits import check_sampling_memory, check_sampling_time
    from registry.storage.files import check_target, write_text

    if (args.run_dir is None) == (args.model is None):
        raise LaddError("give either a run folder or --model EXPORTED_FOLDER")
    if args.run_dir:
        experiment = load_trained(args.run_dir, registry)[0]
    else:
        experiment = load_model_folder(Path(args.model), registry)[0]
    experiment = chosen_sampler(args, experiment, registry)
    text = experiment.dataset.tokenizer is not None
    out = Path(args.out or f"samples_{args.steps}steps.{'jsonl' if text else 'txt'}")
    check_target(out)  # before sampling, not after
    check_sampling_memory(experiment, args.num, args.batch_size, "ladd sample")
    fixed = fixed_tokens(experiment.dataset, args.num, args.prompt, args.suffix) if args.prompt or args.suffix else None
    check_sampling_time(experiment, args.num, args.steps, args.batch_size, args.max_hours, fixed)
    tokens, calls = sample(
        experiment, args.num, args.steps, args.batch_size, args.seed, progress=True, fixed=fixed,
        precision=args.precision,
    )
    if text:
        rows = zip(tokens.tolist(), decode(experiment.dataset, tokens), strict=True)
        write_text(out, "".join(json.dumps({"ids": ids, "text": line}) + "\n" for ids, line in rows))
    else:
        write_text(out, "\n".join(" ".join(map(str, row.tolist())) for row in tokens) + "\n")
    print(f"{args.num} samples, {args.steps} token steps, {calls} network calls each: {out}")
