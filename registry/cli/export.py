"""``ladd export``: a run's EMA weights and config as a shareable model folder, or a run's adapters alone."""
from __future__ import annotations

import argparse

from registry.host.registry import Registry


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("export", help="write a run's EMA weights (safetensors) and config (JSON) to a shareable folder")
    p.add_argument("run_dir")
    p.add_argument("out_dir", help="a new or empty folder")
    p.add_argument("--overwrite", action="store_true", help="replace the model files of a folder that is not empty")
    p.add_argument(
        "--adapter", action="store_true",
        help="a run over a frozen base (train.lora, train.freeze): write what it trained alone, loadable onto that "
        "base (without it: the whole model, adapters merged)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Export the run and say where to."""
    from registry.engine.export import export  # torch: only when exporting

    written = export(args.run_dir, args.out_dir, registry, args.overwrite, args.adapter)
    print(f"exported {'the adapter of ' if args.adapter else ''}{args.run_dir} to {written}")
