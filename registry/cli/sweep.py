"""``ladd sweep status DIR``: where each job of a sweep stands, and the last line of each that failed."""
from __future__ import annotations

import argparse

from registry.host.registry import Registry


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("sweep", help="follow a sweep (`ladd train -m`): ladd sweep status DIR")
    actions = p.add_subparsers(dest="action", required=True)
    status = actions.add_parser("status", help="each job's state, tries, job id and exit status; failures' last lines")
    status.add_argument("sweep_dir", help="the sweep's folder (hydra.sweep.dir)")
    status.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Print the sweep's jobs as a table, then the last line of each that failed or ended without saying why."""
    from registry.sweeps.folder import SweepFolder
    from registry.sweeps.launching import summary
    from registry.sweeps.states import job_states

    folder = SweepFolder(args.sweep_dir)
    states = job_states(folder, folder.require(), registry)
    print(summary(folder, states))
    header = ("job", "state", "tries", "launcher", "job id", "exit", "run", "swept")
    table = [header] + [
        (
            str(s.job.index), s.name, str(s.record.starts if s.record else 0), s.job.launcher or "-",
            s.job.job_id or "-", "-" if s.record is None or s.record.exit_status is None else str(s.record.exit_status),
            str(folder.run_dir(s.job)), " ".join(s.job.swept) or "-",
        )
        for s in states
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        print("  ".join(f"{cell:<{width}}" for cell, width in zip(row, widths, strict=False)) + "  " + row[-1])
    for s in states:
        if s.error is not None:
            print(f"job {s.job.index} {s.name}: {s.error}")
