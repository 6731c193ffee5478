"""``ladd report``: tables and plots from several ``ladd eval`` results."""
from __future__ import annotations

import argparse
from pathlib import Path

from registry.engine.runs import is_ladd_folder
from registry.host.registry import Registry
from registry.paper.report import publish
from registry.storage.files import check_outside
from registry.storage.results import EvalResult


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("report", help="tables and plot from several `ladd eval` results")
    p.add_argument("results", nargs="+", help="eval_*.json files")
    p.add_argument("--out", required=True, help="folder for reconstruction.csv, METRIC.csv and METRIC.png")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Read the results and publish them, never into a run or model folder that holds one of them."""
    folders = {Path(path).parent for path in args.results if is_ladd_folder(Path(path).parent)}
    check_outside(Path(args.out), folders, "--out")
    publish([EvalResult.load(path) for path in args.results], args.out)
