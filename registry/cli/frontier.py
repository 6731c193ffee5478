"""``ladd frontier``: Gen PPL and entropy at matched sampling compute, from per-step-count results or ``ladd eval``
results of any sampler."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from registry.host.registry import Registry
from registry.storage.files import check_outside


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("frontier", help="Gen PPL and entropy at matched sampling compute from per-step-count results")
    p.add_argument(
        "results", nargs="+",
        help="a CSV (method,steps,gflops_per_step,gen_ppl,entropy[,ms_per_sample][,fixed_gflops][,gflops_per_sample]) "
        "or `ladd eval` results scored with Gen PPL (eval_*.json), each at the GFLOPs per sample it counted",
    )
    p.add_argument("--budgets", required=True, help="comma-separated GFLOPs per sample, e.g. 50,100,200")
    p.add_argument("--json", action="store_true", help="print {method: {budget: {gen_ppl, entropy}}} (null: n/a)")
    p.add_argument("--plot", help="write Gen PPL against GFLOPs (log axes) to this image")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Interpolate at the budgets, print the table (or JSON) and optionally plot."""
    from registry.paper.frontier import (
        FrontierInputError,
        as_json,
        format_table,
        matched_compute,
        parse_budgets,
        plot,
        read_measurements,
        read_results,
    )

    if args.plot:
        check_outside(Path(args.plot), tuple(args.results), "--plot")
    csv_given = [path for path in args.results if not path.endswith(".json")]
    if csv_given and len(args.results) > 1:
        raise FrontierInputError("give one CSV of measurements, or `ladd eval` results (eval_*.json), not both")
    runs = read_measurements(csv_given[0]) if csv_given else read_results(args.results)
    budgets = parse_budgets(args.budgets)
    table = matched_compute(runs, budgets)
    print(json.dumps(as_json(table), indent=2) if args.json else format_table(table))
    if args.plot:
        print(f"wrote {plot(runs, budgets, args.plot)}", file=sys.stderr)
