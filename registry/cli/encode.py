"""``ladd encode``: the clean latent of each reference sequence of a file, for ``ladd sample --latents``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from registry.host.registry import Registry

from .arguments import positive

if TYPE_CHECKING:  # torch: only when encoding
    from torch import Tensor

    from registry.interfaces import Dataset

REFERENCES_HELP = (
    "one reference per line: text for a dataset with a tokenizer (or a .jsonl file of JSON objects with 'text', or "
    "'ids' as `ladd sample` writes them), else token ids separated by spaces; longer ones are cut to the model's length"
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("encode", help="the clean latent of each reference of a file (for `ladd sample --latents`)")
    p.add_argument("model", metavar="RUN_OR_MODEL", help="a run folder or a model folder (ladd export, ladd import)")
    p.add_argument("--input", required=True, metavar="FILE", help=REFERENCES_HELP)
    p.add_argument("--out", required=True, metavar="LATENTS.safetensors", help="the latents, with the model's identity")
    p.add_argument("--batch-size", type=positive, default=1000, help="references encoded at once")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Encode every reference, checking the output file, the model and the references first."""
    from registry.engine.latents import check_has_latent, encode_rows, save_latents  # torch: only when encoding
    from registry.engine.loading import load_trained
    from registry.storage.files import check_outside, check_target

    out = Path(args.out)
    check_target(out)
    check_outside(out, (args.model, args.input), "--out")
    experiment = load_trained(args.model, registry)[0]
    model = experiment.model
    check_has_latent(model, "ladd encode")
    latents = encode_rows(model, references(args.input, experiment.dataset), args.batch_size)
    save_latents(out, model, latents)
    print(f"{len(latents)} references encoded to latents of shape {list(latents.shape[1:])} ({latents.dtype}): {out}")


def references(path: str, dataset: Dataset) -> Tensor:
    """The reference sequences of ``path`` as rows of the model's length, with a note on any that were cut."""
    from registry.engine.references import read_references

    read = read_references(path, dataset)
    for note in read.notes:
        print(f"ladd: note: {note}", file=sys.stderr)
    return read.tokens
