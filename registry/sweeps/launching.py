"""Launching a sweep, or continuing one: every job not finished, not held by its launcher and not given up goes to the
launcher, the manifest recording each as it is handed over.

Running the same ``ladd train -m`` again continues the sweep: finished jobs are skipped, jobs still queued or running
are left to their launcher, stopped and interrupted ones resume from their last checkpoint, and a failed one is tried
again until it has failed more than ``retries`` times, then reported in one line.
"""
from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from registry.errors import LaddError
from registry.host.registry import Registry
from registry.training.stopping import check

from .choice import LauncherChoice
from .folder import FAILED, FINISHED, Launch, Manifest, PlannedJob, SweepFolder, now
from .states import STATES, JobState, job_states

if TYPE_CHECKING:  # annotations only: the interfaces import torch
    from registry.interfaces import Launcher

#: further tries of a failed job, by default
RETRIES = 2


def launch_sweep(
    folder: SweepFolder,
    planned: Manifest,
    choice: LauncherChoice,
    launcher: Launcher,
    registry: Registry,
    job: Callable[[PlannedJob], Callable[[], int]],
    retries: int = RETRIES,
) -> None:
    """Launch what the sweep ``planned`` still needs in ``folder`` (the folder's own sweep, or a new one); raises
    ``LaddError`` when a launcher that waits leaves jobs unfinished, or when a job was given up."""
    with folder.locked():
        manifest = folder.claim(planned)
        states = job_states(folder, manifest, registry)
        given_up = [s for s in states if s.name == FAILED and _failures(s) > retries]
        chosen = [s.job for s in states if s.name != FINISHED and not s.alive and s not in given_up]
        held = [s for s in states if s.alive]
        if held:
            print(f"{_count(len(held))} still queued or running from an earlier launch: left to it", flush=True)
        folder.write(manifest)  # before any job starts: jobs and `ladd sweep status` read it
        try:
            if chosen:
                _launch(folder, manifest, chosen, choice, launcher, job)
        finally:  # also when ladd stops on a signal: the manifest says where the jobs stopped
            states = job_states(folder, manifest, registry)
            _refresh(manifest, states)
            folder.write(manifest)
    check()  # a signal that stopped the sweep while its last job ended
    print(summary(folder, states))
    for state in given_up:
        print(
            f"job {state.job.index} ({_swept(state.job)}): failed {_failures(state)} times, more than --retries "
            f"{retries}, and is not tried again; its last error: {state.error}",
            file=sys.stderr,
        )
    unfinished = [s for s in states if s.name != FINISHED and (launcher.waits or not s.alive)]
    if given_up or (launcher.waits and unfinished):
        raise LaddError(
            f"{_count(len(unfinished))} of {len(states)} did not finish ({_counts(unfinished)}); "
            f"`ladd sweep status {folder.path}` shows why; run the same command to continue the sweep"
        )
    if not launcher.waits and chosen:
        print(
            f"queued {_count(len(chosen))} with launcher {choice.name!r}: `ladd sweep status {folder.path}` follows "
            f"them; once they end, `ladd report {folder.path} --out DIR` tables them and the same command continues "
            f"any that did not finish"
        )


def _launch(
    folder: SweepFolder,
    manifest: Manifest,
    chosen: list[PlannedJob],
    choice: LauncherChoice,
    launcher: Launcher,
    job: Callable[[PlannedJob], Callable[[], int]],
) -> None:
    """Hand ``chosen`` to the launcher, recording each job id in the manifest as it is given."""
    manifest.launches.append(Launch(now(), choice.as_record(), [job.index for job in chosen]))

    def started(position: int, job_id: str) -> None:
        planned = chosen[position]
        planned.launcher, planned.job_id, planned.state = choice.name, job_id, "launched"
        folder.write(manifest)

    count = len(manifest.jobs)
    verb = "running" if launcher.waits else "queueing"
    print(f"{verb} {_count(len(chosen))} of {count} with launcher {choice.name!r} ({folder.path})", flush=True)
    launcher.launch([job(planned) for planned in chosen], folder.engine, started)


def _refresh(manifest: Manifest, states: list[JobState]) -> None:
    """The manifest's view of each job: its state, exit status and tries as last seen."""
    for state in states:
        state.job.state = state.name
        if state.record is not None:
            state.job.exit_status, state.job.tries = state.record.exit_status, state.record.starts


def _failures(state: JobState) -> int:
    return 0 if state.record is None else state.record.failures


def summary(folder: SweepFolder, states: list[JobState]) -> str:
    """``sweep DIR: N jobs: a finished, b running, ...``."""
    return f"sweep {folder.path}: {_count(len(states))}: {_counts(states)}"


def _counts(states: list[JobState]) -> str:
    counted = Counter(state.name for state in states)
    return ", ".join(f"{counted[name]} {name}" for name in STATES if counted[name])


def _count(jobs: int) -> str:
    return f"{jobs} job{'s' if jobs != 1 else ''}"


def _swept(job: PlannedJob) -> str:
    return " ".join(job.swept) or "nothing swept"
