"""The job every launcher runs: one combination of a sweep, as a function of its overrides.

It trains its run folder (resuming it where an earlier try stopped), evaluates it with the experiment's budgets and
metric and with each extra metric of the sweep, and keeps its record in the sweep's folder. Stopped by a signal, it
returns 128 + the signal's number, with the checkpoint written; any failure is recorded in one line and returned as
a status, so one job's failure never stops the others.
"""
from __future__ import annotations

import os
import socket
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from registry.config.composition import RUN_DIR, SEARCHPATH, quoted_folder
from registry.errors import describe_failure
from registry.training.stopping import Stopped, stopping_on_signals

from .folder import FAILED, FINISHED, RUNNING, STOPPED, JobRecord, SweepFolder, now

#: exit statuses of a job that failed: as ``ladd`` for an error it explains, 1 for a fault in the code
FAILED_STATUS, FAULT_STATUS = 2, 1


@dataclass(frozen=True)
class SweepJob:
    """Job ``index`` of the sweep in ``sweep_dir`` (an absolute path: the job may run in another process)."""

    sweep_dir: str
    index: int
    count: int
    overrides: tuple[str, ...]  # without its run folder: DIR/index
    swept: tuple[str, ...]
    metrics: tuple[str, ...] = ()  # evaluated besides the experiment's own metric
    searchpath: tuple[str, ...] = ()
    allow_changes: bool = False

    @property
    def run_dir(self) -> Path:
        """The job's run folder."""
        return Path(self.sweep_dir) / str(self.index)

    def arguments(self) -> list[str]:
        """``ladd train`` arguments that train this job's run alone (how Lightning starts the other ranks of a job
        training on several devices)."""
        searchpath = [f"{SEARCHPATH}=[{','.join(self.searchpath)}]"] if self.searchpath else []
        return [*searchpath, *self.overrides, quoted_folder(f"{RUN_DIR}={self.run_dir}")]

    def __call__(self) -> int:
        """Train, evaluate and record; the exit status (0: finished, 128 + N: stopped by signal N)."""
        from registry.distributed import rank

        folder = SweepFolder(self.sweep_dir)
        main = rank() == 0
        record = folder.record(self.index) or JobRecord(self.index)
        record.state, record.starts, record.started, record.ended = RUNNING, record.starts + 1, now(), None
        record.host, record.pid, record.exit_status, record.error = socket.gethostname(), os.getpid(), None, None
        if main:
            folder.write_record(record)
        swept = " ".join(self.swept) or "(nothing swept)"
        print(f"job {self.index} of {self.count}: {swept} -> {self.run_dir}", flush=True)
        with stopping_on_signals():
            try:
                self._run(folder, record, main)
            except Stopped as stop:
                print(f"ladd: {stop}", file=sys.stderr, flush=True)
                return self._end(folder, record, main, STOPPED, stop.exit_status, str(stop))
            except Exception as error:
                message, status = describe_failure(error), FAILED_STATUS
                if message is None:  # a fault in the code: its traceback goes to the job's log
                    traceback.print_exc()
                    message, status = f"{type(error).__name__}: {error}".splitlines()[0], FAULT_STATUS
                print(f"ladd: error: {message}", file=sys.stderr, flush=True)
                record.failures += 1
                return self._end(folder, record, main, FAILED, status, message)
        return self._end(folder, record, main, FINISHED, 0, None)

    def _run(self, folder: SweepFolder, record: JobRecord, main: bool) -> None:
        """Train the run, then each evaluation the job has not written yet, recording each as it is written."""
        from registry.config.composition import compose
        from registry.distributed import connected
        from registry.engine.assembly import with_metric
        from registry.engine.evaluation import evaluate
        from registry.host.registry import load
        from registry.training.loop import train

        registry = load()
        settings = compose(self.arguments(), registry, self.searchpath)
        # Lightning's launcher starts a job's other ranks by running this process's command line again
        sys.argv = [sys.argv[0], "train", *self.arguments()]
        experiment = train(settings, self.run_dir, registry, self.allow_changes)
        print(f"trained {settings.method}: {self.run_dir}", flush=True)
        for metric in (None, *self.metrics):
            name = f"eval_{settings.method}.json" if metric is None else f"eval_{settings.method}_{metric}.json"
            if name in record.results and (self.run_dir / name).is_file():
                continue  # written by an earlier try of this job
            scored = experiment if metric is None else with_metric(experiment, registry, metric)
            with connected():  # with several processes (Slurm's tasks), every rank evaluates its share
                result = evaluate(scored, settings.method, settings.eval, progress=main)
            if main:
                result.save(self.run_dir / name)
                record.results = [*[r for r in record.results if r != name], name]
                folder.write_record(record)
                print(f"evaluated {settings.method}{'' if metric is None else f' ({metric})'}: {self.run_dir / name}")

    def _end(
        self, folder: SweepFolder, record: JobRecord, main: bool, state: str, status: int, error: str | None
    ) -> int:
        """Record how the job ended; its exit status."""
        record.state, record.exit_status, record.error, record.ended = state, status, error, now()
        if main:
            folder.write_record(record)
        return status
