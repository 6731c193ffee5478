"""``ladd report SWEEP_DIR``: the sweep's jobs grouped by their swept values (seeds pooled), with the results each
finished job wrote, as the rows of the sweep's table."""
from __future__ import annotations

from pathlib import Path

from registry.paper.sweep_table import Row, write_sweep_table
from registry.storage.results import EvalResult

from .folder import PlannedJob, SweepFolder

#: the override whose values are pooled into a row's mean and spread
SEED = "seed"


def rows(folder: SweepFolder) -> list[Row]:
    """One row per combination of the swept values other than the seed, in the sweep's order."""
    manifest = folder.require()
    found: dict[tuple[tuple[str, str], ...], Row] = {}
    for job in manifest.jobs:
        key = _key(job)
        row = found.setdefault(key, Row(dict(key), 0))
        row.jobs += 1
        record = folder.record(job.index)
        for name in [] if record is None else record.results:
            result = EvalResult.load(folder.run_dir(job) / name)
            row.results.setdefault(result.metric, []).append(result)
    return list(found.values())


def _key(job: PlannedJob) -> tuple[tuple[str, str], ...]:
    pairs = [override.partition("=") for override in job.swept]
    return tuple((key.lstrip("+~"), value) for key, _, value in pairs if key.lstrip("+~") != SEED)


def report(folder: SweepFolder, out: Path) -> list[Path]:
    """Write the sweep's table and plots into ``out``; the paths written."""
    return write_sweep_table(rows(folder), out, f"sweep {folder.path}")
