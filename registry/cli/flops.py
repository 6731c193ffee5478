"""``ladd flops``: GFLOPs per sampling step of an experiment's backbones."""
from __future__ import annotations

import argparse
import json

from registry.config.composition import compose
from registry.host.registry import Registry


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser(
        "flops", help="GFLOPs per sampling step of an experiment's backbones (paper convention and measured)"
    )
    p.add_argument("overrides", nargs="*", help="experiment=NAME and other Hydra overrides")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Count and print (a table, or JSON)."""
    from registry.paper.flops import flops_report  # torch: only when counting

    report = flops_report(compose(args.overrides, registry), registry)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.table())
