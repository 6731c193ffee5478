"""``ladd import NAME SRC OUT``: another library's checkpoint as a ladd model folder, by an importer a plugin ships."""
from __future__ import annotations

import argparse
from pathlib import Path

from registry.host.registry import Registry


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("import", help="convert another library's checkpoint (e.g. mdlm) into a ladd model folder")
    p.add_argument("name", help="the importer: installed plugins ship them (ladd's own: mdlm)")
    p.add_argument("source", help="the checkpoint: a folder, or a Hugging Face hub id where the hub is reachable")
    p.add_argument("out_dir", help="a new or empty folder")
    p.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE",
        help="settings of the model folder besides its network (e.g. dataset.source=..., metric=..., eval.budgets=...)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace the model files of a folder written by ladd export or import"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Let the importer read the source and fill the model it declares; ladd builds, checks and writes the folder."""
    from registry.engine.importing import import_checkpoint  # torch: only when importing
    from registry.storage.files import check_outside

    entry = registry.importer(args.name)
    out_dir = Path(args.out_dir)
    check_outside(out_dir, (args.source,) if Path(args.source).exists() else (), "out_dir")  # a folder, not a hub id
    written = import_checkpoint(entry, args.source, out_dir, list(args.overrides), registry, args.overwrite)
    print(f"imported {args.source} ({args.name} checkpoint) as a ladd model folder: {written}")
