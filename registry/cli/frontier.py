"""``ladd frontier``: Gen PPL and entropy at matched sampling compute, from per-step-count results."""
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
    p.add_argument("results", help="CSV: method,steps,gflops_per_step,gen_ppl,entropy[,ms_per_sample][,fixed_gflops]")
    p.add_argument("--budgets", required=True, help="comma-separated GFLOPs per sample, e.g. 50,100,200")
    p.add_argument("--json", action="store_true", help="print {method: {budget: {gen_ppl, entropy}}} (null: n/a)")
    p.add_argument("--plot", help="write Gen PPL against GFLOPs (log axes) to this image")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Interpolate at the budgets, print the table (or JSON) and optionally plot."""
    from registry.paper.frontier import as_json, format_table, matched_compute, parse_budgets, plot, read_measurements

    if args.plot:
        check_outside(Path(args.plot), (args.results,), "--plot")
    runs, budgets = read_measurements(args.results), parse_budgets(args.budgets)
    table = matched_compute(runs, budgets)
    print(json.dumps(as_json(table), indent=2) if args.json else format_table(table))
    if args.plot:
        print(f"wrote {plot(runs, budgets, args.plot)}", file=sys.stderr)
