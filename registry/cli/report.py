"""``ladd report``: tables and plots from several ``ladd eval`` results, or from a sweep's folder."""
from __future__ import annotations

import argparse
from pathlib import Path

from registry.engine.runs import is_ladd_folder
from registry.host.registry import Registry
from registry.paper.report import publish
from registry.storage.files import check_outside
from registry.storage.results import EvalResult
from registry.sweeps.folder import MANIFEST, SweepFolder


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("report", help="tables and plots from `ladd eval` results or a sweep (`ladd train -m`)")
    p.add_argument(
        "results", nargs="+",
        help="eval_*.json files, or a sweep's folder (one table keyed by the swept values, seeds pooled)",
    )
    p.add_argument(
        "--out", required=True,
        help="folder for reconstruction.csv, METRIC.csv and METRIC.png (a sweep: sweep.csv, sweep.md, METRIC.png)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Read the results and publish them, never into a run, model or sweep folder that holds one of them."""
    out = Path(args.out)
    if len(args.results) == 1 and (Path(args.results[0]) / MANIFEST).is_file():
        from registry.sweeps.report import report

        sweep = Path(args.results[0])
        check_outside(out, [sweep], "--out")
        paths = report(SweepFolder(sweep), out)
        print((out / "sweep.md").read_text(encoding="utf-8"), end="")
        print("wrote " + ", ".join(str(p) for p in paths))
        return
    folders = {Path(path).parent for path in args.results if is_ladd_folder(Path(path).parent)}
    check_outside(out, folders, "--out")
    publish([EvalResult.load(path) for path in args.results], args.out)
