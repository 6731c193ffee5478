"""``ladd prepare``: make an experiment's data ready to read (its token caches) as a step of its own.

What a cluster job runs once before ``torchrun`` or ``srun`` start the training processes. ``ladd train``
prepares on first use too; then one process prepares while the others wait for it.
"""
from __future__ import annotations

import argparse

from registry.config.composition import compose
from registry.errors import LaddError
from registry.host.registry import Registry

#: the splits ladd reads: training, L^x (validation), the metric's references (test) and the data floor
SPLITS = ("train", "validation", "test", "floor")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("prepare", help="build an experiment's token caches before training (e.g. once before torchrun)")
    p.add_argument("overrides", nargs="*", help="experiment=NAME and other Hydra overrides, as ladd train takes them")
    p.add_argument("--splits", default=",".join(SPLITS), help=f"comma-separated splits (default: {','.join(SPLITS)})")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Build the dataset alone, prepare its splits and print where each went, its size and its tokens."""
    from registry.engine.assembly import required_selection  # torch: only when preparing
    from registry.interfaces import prepare

    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    if not splits:
        raise LaddError(f"--splits {args.splits!r} names no split; e.g. --splits train,validation")
    name, options = required_selection(compose(args.overrides, registry), "dataset")
    prepared = prepare(registry.build("dataset", name, options), splits)
    if not prepared:
        print(f"dataset {name!r} has nothing to prepare (it makes its data as it reads it)")
        return
    rows = [(p.split, f"{p.rows:,}", f"{p.tokens:,}", _size(p.size_bytes), p.location) for p in prepared]
    header = ("split", "rows", "tokens", "size", "location")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        numbers = (cell.rjust(width) for cell, width in zip(row[1:4], widths[1:], strict=True))
        print("  ".join([row[0].ljust(widths[0]), *numbers, row[4]]))
    total = sum(p.tokens for p in prepared), sum(p.size_bytes for p in prepared)
    print(f"{len(prepared)} prepared: {total[0]:,} tokens, {_size(total[1])}")


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"
