"""Where each job of a sweep stands: its own record, and whether its launcher still has it queued or running."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from registry.errors import LaddError, first_line
from registry.host.registry import Registry

from .folder import FAILED, FINISHED, RUNNING, STOPPED, JobRecord, Manifest, PlannedJob, SweepFolder

if TYPE_CHECKING:  # annotations only: the interfaces import torch
    from registry.interfaces import Launcher

#: the states ``ladd sweep status`` shows, in the order it counts them
QUEUED, INTERRUPTED, NEW = "queued", "interrupted", "not started"
STATES = (FINISHED, RUNNING, QUEUED, STOPPED, INTERRUPTED, FAILED, NEW)


@dataclass
class JobState:
    """A job of the manifest, its record (None before it first started) and whether its launcher still holds it."""

    job: PlannedJob
    record: JobRecord | None
    alive: bool
    log: str | None = None  # the last line of its launcher's log, for a job that ended without saying why

    @property
    def name(self) -> str:
        """finished, running, queued, stopped (by a signal, resumable), interrupted (ended without recording how:
        killed without warning; resumable), failed or not started."""
        record = self.record
        if record is not None and record.state == FINISHED:
            return FINISHED
        if self.alive:
            return RUNNING if record is not None and record.state == RUNNING else QUEUED
        if record is None:
            return NEW if self.job.job_id is None else INTERRUPTED
        return INTERRUPTED if record.state == RUNNING else record.state

    @property
    def error(self) -> str | None:
        """The last failure's line (or how it stopped), else the last line of its log when it ended silently."""
        if self.record is not None and self.record.error and self.name in (FAILED, STOPPED):
            return self.record.error
        return self.log if self.name == INTERRUPTED else None


def job_states(folder: SweepFolder, manifest: Manifest, registry: Registry) -> list[JobState]:
    """Every job's state. The launchers that started jobs not yet finished are asked which they still hold; one that
    cannot be asked here (its scheduler's commands missing) is refused in one line."""
    records = {job.index: folder.record(job.index) for job in manifest.jobs}
    waiting = [job for job in manifest.jobs if job.job_id is not None and _state(records[job.index]) != FINISHED]
    alive: set[tuple[str, str]] = set()
    logs: dict[int, str] = {}
    for name in sorted({job.launcher for job in waiting if job.launcher is not None}):
        launcher = _launcher(manifest, name, registry)
        mine = [job for job in waiting if job.launcher == name]
        alive |= {(name, job_id) for job_id in launcher.alive(_ids(mine), folder.engine)}
        logs |= {job.index: line for job in mine if (line := _last_line(launcher, job, folder)) is not None}
    states = []
    for job in manifest.jobs:
        record = records[job.index]
        here = record is not None and record.runs_here()
        states.append(JobState(job, record, (job.launcher, job.job_id) in alive or here, logs.get(job.index)))
    return states


def _state(record: JobRecord | None) -> str | None:
    return None if record is None else record.state


def _ids(jobs: Sequence[PlannedJob]) -> list[str]:
    return [job.job_id for job in jobs if job.job_id is not None]


def _launcher(manifest: Manifest, name: str, registry: Registry) -> Launcher:
    """The launcher ``name`` with the options of the sweep's last launch through it."""
    options = next(
        launch.launcher["options"] for launch in reversed(manifest.launches) if launch.launcher["name"] == name
    )
    try:
        launcher: Launcher = registry.build("launcher", name, options)
    except LaddError as error:
        raise LaddError(
            f"jobs of this sweep were launched with launcher {name!r}, which cannot be asked here whether they still "
            f"run ({first_line(error)})"
        ) from None
    return launcher


def _last_line(launcher: Launcher, job: PlannedJob, folder: SweepFolder) -> str | None:
    """The last line the job wrote to its standard error, where the launcher keeps it."""
    path = None if job.job_id is None else launcher.log(job.job_id, folder.engine)
    if path is None or not path.is_file():
        return None
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - 4096))
        lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1] if lines else None
