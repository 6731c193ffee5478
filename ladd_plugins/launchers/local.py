"""The local launcher: several of a sweep's jobs at once on this machine, through submitit's local executor."""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from registry.errors import InvalidConfigError
from registry.interfaces import Launcher

from .config import LocalConfig
from .processes import Submitted, job_log, submitit

#: submitit's local jobs have a time limit; a sweep's have none
_NO_LIMIT_MINUTES = 60 * 24 * 365
_POLL_SECONDS = 0.5
#: while ladd stops, the signal is sent again this often until every job has ended (a job still starting up has not
#: installed ladd's handler, and submitit's own lets SIGTERM pass)
_RESEND_SECONDS = 2.0


class LocalLauncher(Launcher):
    """``workers`` jobs at once, each a process with ``cores // workers`` threads and its own GPUs; more wait."""

    waits = True

    def __init__(self, config: LocalConfig) -> None:
        cores = len(os.sched_getaffinity(0))
        self.workers = config.workers or cores
        self.threads = max(1, cores // self.workers)
        self.gpus = config.gpus_per_job

    def launch(self, jobs: Sequence[Callable[[], int]], folder: Path, started: Callable[[int, str], None]) -> None:
        executor = submitit().LocalExecutor(folder=folder)
        executor.update_parameters(timeout_min=_NO_LIMIT_MINUTES)
        devices = self._devices()
        waiting = list(enumerate(jobs))
        running: dict[int, Any] = {}  # worker -> its job's handle
        try:
            while waiting or running:
                for worker in [w for w in range(self.workers) if w not in running][: len(waiting)]:
                    position, job = waiting.pop(0)
                    if self.gpus:
                        mine = devices[worker * self.gpus : (worker + 1) * self.gpus]
                        executor.update_parameters(gpus_per_node=self.gpus, visible_gpus=mine)
                    with _terminal_interrupts_ignored():
                        running[worker] = executor.submit(Submitted(job, self.threads))
                    started(position, running[worker].job_id)
                running = {worker: handle for worker, handle in running.items() if not handle.done()}
                time.sleep(_POLL_SECONDS)
        except BaseException:
            _stop(list(running.values()))
            raise

    def alive(self, job_ids: Sequence[str], folder: Path) -> set[str]:
        """The jobs whose controller still runs (a job outlives a ladd that was killed without warning)."""
        return {job_id for job_id in job_ids if _controls(job_id, folder)}

    def log(self, job_id: str, folder: Path) -> Path | None:
        return job_log(job_id, folder)

    def _devices(self) -> tuple[int, ...]:
        """The GPUs the workers share out, refused when there are too few."""
        if not self.gpus:
            return ()
        import torch

        visible = torch.cuda.device_count()
        if self.workers * self.gpus > visible:
            raise InvalidConfigError(
                f"launcher.workers={self.workers} x launcher.gpus_per_job={self.gpus} needs "
                f"{self.workers * self.gpus} GPUs; {visible} are visible"
            )
        return tuple(range(visible))


def _controls(pid: str, folder: Path) -> bool:
    """Whether process ``pid`` is submitit's local controller of a job in ``folder``."""
    try:
        command = (Path("/proc") / pid / "cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return False
    return b"submitit.local._local" in command and os.fsencode(folder) in command


@contextmanager
def _terminal_interrupts_ignored() -> Iterator[None]:
    """Start a job with SIGINT ignored, which its processes inherit: Ctrl-C in a terminal reaches every process of the
    foreground group, and submitit's controller would answer it by killing the job within a second. The job installs
    ladd's handler when it trains, and ladd passes the stop on to it as SIGTERM (``_stop``)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stop(handles: list[Any]) -> None:
    """SIGTERM to each job's controller (its id is the controller's process id), which passes it on to the job: each
    stops at a checkpoint. Sent again until every job has ended."""
    while handles:
        for handle in handles:
            try:
                os.kill(int(handle.job_id), signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + _RESEND_SECONDS
        while handles and time.monotonic() < deadline:
            handles = [handle for handle in handles if not handle.done()]
            time.sleep(_POLL_SECONDS / 5)
