"""``ladd sample``: samples of a trained run or an exported model, as token ids or text; unconditioned, like
references (given their clean latents), or along an interpolation between two references."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from registry.engine.sampling_limits import DEFAULT_MAX_HOURS, MAX_HOURS_FLAG
from registry.errors import LaddError
from registry.host.registry import Registry

from .arguments import add_sampler_choice, at_least_two, chosen_sampler, guided, hours, positive, seed
from .encode import REFERENCES_HELP
from .encode import references as read_references

if TYPE_CHECKING:  # torch: only when sampling
    from torch import Tensor

    from registry.engine.assembly import Experiment

DEFAULT_POINTS = 5


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("sample", help="sample from a trained run or an exported model")
    p.add_argument(
        "run_dir", nargs="?", metavar="RUN_OR_MODEL", help="a run folder or a model folder (ladd export, ladd import)"
    )
    p.add_argument("--model", help="a folder written by `ladd export` instead of a run folder")
    p.add_argument(
        "--adapter", help="a folder written by `ladd export --adapter`, merged into the model it was trained over first"
    )
    p.add_argument("--steps", type=positive, default=32, help="token steps (of each block, for a blockwise sampler)")
    p.add_argument(
        "--length", type=positive,
        help="tokens to generate, fewer or more than the model's length (a sampler that declares variable_length)",
    )
    p.add_argument(
        "--num", type=positive, default=16, help="samples; with --like, --latents or --interpolate: per latent"
    )
    p.add_argument("--batch-size", type=positive, default=1000)
    p.add_argument("--seed", type=seed, default=0, help="a whole number from 0 to 2**63-1")
    p.add_argument("--prompt", help="text every sample starts with (kept fixed while sampling)")
    p.add_argument(
        "--precision", default="auto",
        help="the networks' precision: auto (bf16-mixed on CUDA, else 32-true), bf16-mixed or 32-true",
    )
    p.add_argument("--suffix", help="text every sample ends with: with --prompt, an infill between the two")
    p.add_argument(
        "--like", metavar="FILE", help=f"--num samples given each reference's clean latent; {REFERENCES_HELP}"
    )
    p.add_argument("--latents", metavar="LATENTS.safetensors", help="as --like, with the latents `ladd encode` wrote")
    p.add_argument(
        "--interpolate", metavar="FILE",
        help="two references (as for --like): --num samples at each of --points latents from the first's to the "
        "second's",
    )
    p.add_argument(
        "--points", type=at_least_two,
        help=f"latents along --interpolate's path, both ends included (default {DEFAULT_POINTS})",
    )
    p.add_argument("--guidance", type=float, help="classifier-free guidance scale of the sampler (1: none)")
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
    """Sample, checking the arguments, the latents, the output file, memory and time first; one line per sample."""
    from registry.engine.loading import add_adapter, load_model_folder, load_trained  # torch: only when sampling
    from registry.engine.prompts import decode, fixed_tokens
    from registry.engine.sampling import sample_rows
    from registry.engine.sampling_limits import check_sampling_memory, check_sampling_time
    from registry.storage.files import write_text

    _check_choices(args)
    if args.out is not None:  # before anything loads (the default's name waits for the dataset)
        _check_out(args, Path(args.out))
    if args.run_dir:
        experiment, settings = load_trained(args.run_dir, registry)
    else:
        experiment, settings = load_model_folder(Path(args.model), registry)
    if args.adapter:
        add_adapter(experiment, Path(args.adapter), registry)
    experiment = guided(args, chosen_sampler(args, experiment, registry), registry, settings)
    _check_length(args, experiment, registry)
    latents, label = _latents(args, experiment)
    total = args.num if latents is None else len(latents) * args.num
    text = experiment.dataset.tokenizer is not None
    out = Path(args.out or f"samples_{args.steps}steps.{'jsonl' if text else 'txt'}")
    _check_out(args, out)  # before sampling, not after
    check_sampling_memory(experiment, total, args.batch_size, "ladd sample", _row_bytes(latents), args.length)
    rows = None if latents is None else latents.repeat_interleave(args.num, dim=0)
    fixed = None
    if args.prompt or args.suffix:
        fixed = fixed_tokens(experiment.dataset, total, args.prompt, args.suffix, args.length)
    check_sampling_time(experiment, total, args.steps, args.batch_size, args.max_hours, fixed, args.length)
    tokens, cost, lengths = sample_rows(
        experiment, total, args.steps, args.batch_size, args.seed, progress=True, fixed=fixed,
        precision=args.precision, latent=rows, length=args.length,
    )
    ids = tokens.tolist()
    if lengths is not None:  # each sample up to its end of the document
        ids = [row[:end] for row, end in zip(ids, lengths.tolist(), strict=True)]
    if text:
        keys = [{} if label is None else {label: index // args.num} for index in range(total)]
        rows_out = zip(keys, ids, decode(experiment.dataset, ids), strict=True)
        write_text(out, "".join(json.dumps({**key, "ids": row, "text": line}) + "\n" for key, row, line in rows_out))
    else:
        write_text(out, "\n".join(" ".join(map(str, row)) for row in ids) + "\n")
    per = "" if label is None else f" ({args.num} per {label}, {total // args.num} {label}s)"
    spent = f"{cost.network_calls} network calls and {cost.flops / 1e9:.4g} GFLOPs each"
    ended = "" if lengths is None else f", {int((lengths < tokens.shape[1]).sum())} ended at the end of the document"
    sized = "" if args.length is None else f" of {args.length} tokens"
    print(f"{total} samples{sized}{per}, {args.steps} token steps, {spent}{ended}: {out}")


def _check_out(args: argparse.Namespace, out: Path) -> None:
    """Refuse an output that is no regular file, or lies in the folder or is a file the command reads."""
    from registry.storage.files import check_outside, check_target

    check_target(out)
    check_outside(out, (args.run_dir, args.model, args.like, args.latents, args.interpolate), "--out")


def _check_choices(args: argparse.Namespace) -> None:
    """Refuse flags that contradict each other, before anything loads."""
    if (args.run_dir is None) == (args.model is None):
        raise LaddError("give either a run folder or --model EXPORTED_FOLDER")
    if args.like is not None and args.latents is not None:
        raise LaddError("--like FILE and --latents FILE both give the latents to sample like: give one of them")
    if args.interpolate is not None and (args.like is not None or args.latents is not None):
        raise LaddError(
            "--interpolate FILE takes its two latents from its own references: leave out --like and --latents"
        )
    if args.points is not None and args.interpolate is None:
        raise LaddError("--points sets how many latents --interpolate FILE samples at: give --interpolate too")


def _check_length(args: argparse.Namespace, experiment: Experiment, registry: Registry) -> None:
    """Refuse --length for a sampler that generates the model's length only, naming those that take one."""
    from registry.engine.sampling import sampler_label

    if args.length is None or experiment.sampler.variable_length:
        return
    valid = sorted(c.name for c in registry if c.kind == "sampler" and _variable_length(c))
    raise LaddError(
        f"--length {args.length}: {sampler_label(experiment.sampler, experiment.components.get('sampler'))} "
        f"generates the model's length "
        f"{experiment.model.seq_len} only; valid with --length: --sampler {' or '.join(valid) or '(none installed)'}"
    )


def _variable_length(component: Any) -> bool:
    try:
        return bool(getattr(component.factory(), "variable_length", False))
    except LaddError:
        return False  # a broken plugin's sampler is reported where it is used


def _latents(args: argparse.Namespace, experiment: Experiment) -> tuple[Tensor | None, str | None]:
    """The clean latents to sample at (one per reference or point), and what a text row calls its index; None, None
    without --like, --latents or --interpolate."""
    from registry.engine.interpolation import interpolate
    from registry.engine.latents import check_has_latent, encode_rows, load_latents
    from registry.engine.sampling import check_takes_latent
    from registry.engine.sampling_limits import check_sampling_memory

    given = {"--like": args.like, "--latents": args.latents, "--interpolate": args.interpolate}
    chosen = [flag for flag, value in given.items() if value is not None]
    if not chosen:
        return None, None
    model = experiment.model
    check_has_latent(model, f"ladd sample {chosen[0]}")
    check_takes_latent(experiment.sampler, experiment.components.get("sampler"))
    if args.latents is not None:
        return load_latents(args.latents, model), "reference"
    references = read_references(args.like or args.interpolate, experiment.dataset)
    if args.like is not None:
        return encode_rows(model, references, args.batch_size), "reference"
    if len(references) != 2:
        raise LaddError(
            f"--interpolate needs two references, the path's ends, but {args.interpolate} holds {len(references)}: "
            f"keep two lines"
        )
    start, end = encode_rows(model, references, args.batch_size)
    points = args.points or DEFAULT_POINTS
    check_sampling_memory(experiment, points * args.num, args.batch_size, "ladd sample", _row_bytes(start[None]))
    return interpolate(model.latent_channel()[0], start, end, points), "point"


def _row_bytes(latents: Tensor | None) -> int:
    """The bytes of one clean latent of ``latents`` (each sample holds one), 0 without latents."""
    return 0 if latents is None else latents[0].numel() * latents.element_size()
