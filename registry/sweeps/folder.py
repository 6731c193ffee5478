"""A sweep's folder: the manifest the launching ``ladd train -m`` writes, and the record each job writes of itself.

::

    DIR/sweep.json     the manifest: every job (index, overrides, run folder, launcher, job id, state, exit status)
    DIR/sweep.lock     held by the ``ladd train -m`` launching the sweep
    DIR/N/             job N's run folder
    DIR/jobs/N.json    job N's record of itself: started, finished, failed or stopped, tries, its last error, results
    DIR/launcher/      the launcher's own files (submitit's scripts, pickles and logs)

A job writes only its record and its run folder, the launching process only the manifest, so no file has two
writers.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from registry.errors import LaddError
from registry.storage.files import exclusive, is_partial, write_text
from registry.storage.records import read_json

MANIFEST = "sweep.json"
LOCK = "sweep.lock"
RECORDS = "jobs"
ENGINE = "launcher"
FORMAT = "ladd-sweep/1"
#: what a job records of itself
RUNNING, FINISHED, FAILED, STOPPED = "running", "finished", "failed", "stopped"


def now() -> str:
    """The time in UTC, to the second, as records write it."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


@dataclass
class PlannedJob:
    """One job as the manifest keeps it: what it trains and, once launched, where and how it last ended."""

    index: int
    overrides: list[str]  # the job's overrides, its run folder left out (it is run_dir)
    swept: list[str]  # the overrides in which it differs from the other jobs
    run_dir: str = ""  # its run folder, inside the sweep's folder: the index
    launcher: str | None = None  # the launcher that last started it
    job_id: str | None = None  # its id with that launcher
    state: str = "not started"  # as last seen by the launching process
    exit_status: int | None = None
    tries: int = 0

    def __post_init__(self) -> None:
        self.run_dir = str(self.index)


@dataclass
class Launch:
    """One launch of some of the sweep's jobs."""

    time: str
    launcher: dict[str, Any]  # name and options
    jobs: list[int]


@dataclass
class Manifest:
    """The sweep: its jobs, the metrics each evaluates besides its own, and its launches."""

    jobs: list[PlannedJob]
    metrics: list[str] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    format: str = FORMAT

    def identity(self) -> list[Any]:
        """What makes two manifests the same sweep: every job's overrides, and the metrics."""
        return [[job.overrides for job in self.jobs], sorted(self.metrics)]


@dataclass
class JobRecord:
    """What a job writes of itself as it starts and ends (``DIR/jobs/N.json``)."""

    index: int
    state: str = RUNNING
    starts: int = 0  # times it started
    failures: int = 0  # times it failed
    host: str = ""
    pid: int = 0
    started: str = ""
    ended: str | None = None
    exit_status: int | None = None
    error: str | None = None  # the last failure's (or stop's) one line
    results: list[str] = field(default_factory=list)  # the evaluation results it wrote into its run folder

    def runs_here(self) -> bool:
        """Whether the job is running as a process of this machine (its recorded process is alive)."""
        if self.state != RUNNING or self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True


class SweepFolder:
    """A sweep's folder and its files."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def engine(self) -> Path:
        """The launcher's folder (absolute: jobs may run elsewhere than the launching process's folder)."""
        return self.path.absolute() / ENGINE

    def run_dir(self, job: PlannedJob) -> Path:
        """Job ``job``'s run folder."""
        return self.path / job.run_dir

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Within: this process alone launches the sweep (another ``ladd train -m`` on the folder is refused)."""
        self.path.mkdir(parents=True, exist_ok=True)
        with exclusive(self.path / LOCK, LaddError(
            f"{self.path} is being launched by another `ladd train -m` (it holds {LOCK}); wait for it to end, or "
            f"give this sweep another hydra.sweep.dir"
        )):
            yield

    def read(self) -> Manifest | None:
        """The sweep's manifest; None for a folder without one (new, or empty)."""
        path = self.path / MANIFEST
        if not path.is_file() or path.is_symlink():
            return None
        fix = "restore it, or give this sweep another hydra.sweep.dir"
        data = read_json(path, "a sweep manifest", fix)
        try:
            if data.get("format") != FORMAT:
                raise ValueError(f"its format is {data.get('format')!r}, not {FORMAT!r}")
            return Manifest(
                jobs=[PlannedJob(**job) for job in data["jobs"]],
                metrics=list(data["metrics"]),
                launches=[Launch(**launch) for launch in data["launches"]],
            )
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise LaddError(f"{path} is not a sweep manifest of this ladd ({error}); {fix}") from None

    def require(self) -> Manifest:
        """The manifest of a folder that must hold a sweep."""
        manifest = self.read()
        if manifest is None:
            raise LaddError(f"{self.path} holds no sweep ({MANIFEST} is missing): give the folder of a `ladd train -m`")
        return manifest

    def claim(self, planned: Manifest) -> Manifest:
        """The manifest to launch ``planned`` with: the folder's own when it holds the same sweep, ``planned`` for a new
        or empty folder; another sweep, or files that are no sweep's, are refused (nothing is written)."""
        if self.path.exists() and not self.path.is_dir():
            raise LaddError(f"hydra.sweep.dir {self.path} is a file, not a folder; give the sweep another folder")
        existing = self.read()
        if existing is None:
            found = [p.name for p in self.path.iterdir() if p.name != LOCK and not is_partial(p)] if (
                self.path.is_dir()) else []
            if found:
                raise LaddError(
                    f"{self.path} is not empty ({', '.join(sorted(found)[:3])}{', ...' if len(found) > 3 else ''}) and "
                    f"holds no sweep ({MANIFEST}); ladd writes nothing into it: give the sweep a new or empty "
                    f"hydra.sweep.dir"
                )
            return planned
        if existing.identity() != planned.identity():
            raise LaddError(
                f"{self.path} holds another sweep ({_difference(existing, planned)}); it is left as it is: give this "
                f"sweep another hydra.sweep.dir"
            )
        return existing

    def write(self, manifest: Manifest) -> None:
        """Write the manifest whole."""
        write_text(self.path / MANIFEST, json.dumps(asdict(manifest), indent=2))

    def record_path(self, index: int) -> Path:
        """Where job ``index`` writes its record."""
        return self.path / RECORDS / f"{index}.json"

    def record(self, index: int) -> JobRecord | None:
        """Job ``index``'s record of itself; None before it first started."""
        path = self.record_path(index)
        if not path.is_file():
            return None
        data = read_json(path, "a sweep job's record", "delete it to run the job again from its run folder")
        try:
            return JobRecord(**data)
        except TypeError as error:
            raise LaddError(f"{path} is not a sweep job's record of this ladd ({error})") from None

    def write_record(self, record: JobRecord) -> None:
        """Write a job's record whole (the job alone writes it)."""
        path = self.record_path(record.index)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(asdict(record), indent=2))


def _difference(old: Manifest, new: Manifest) -> str:
    """The first way two sweeps differ, for a one-line refusal."""
    if sorted(old.metrics) != sorted(new.metrics):
        return f"its extra metrics are {old.metrics or 'none'}, not {new.metrics or 'none'}"
    if len(old.jobs) != len(new.jobs):
        return f"{len(old.jobs)} job{'s' if len(old.jobs) != 1 else ''}, not {len(new.jobs)}"
    job = next(o for o, n in zip(old.jobs, new.jobs, strict=True) if o.overrides != n.overrides)
    return f"its job {job.index} is {' '.join(job.overrides)}"
