"""A sweep's job as a process that submitit starts: its share of the cores, its exit status, its requeue."""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from registry.errors import LaddError

#: the signal on which ``ladd train`` stops at a step's end with a checkpoint (docs/distributed.md); submitit sends it
#: a job before its time limit and, once the job has stopped, requeues it
WARNING = signal.SIGUSR1
_SUBMITIT_SIGNAL = "SUBMITIT_PREEMPT_SIGNAL"  # submitit's setting of that signal (its default, SIGUSR2, is not ladd's)
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def submitit() -> Any:
    """The submitit module, its warning signal set to ladd's in this process and in the jobs it starts (which inherit
    the environment)."""
    os.environ[_SUBMITIT_SIGNAL] = WARNING.name.removeprefix("SIG")
    import submitit as module
    from submitit.core.job_environment import JobEnvironment

    if JobEnvironment._usr_sig() != WARNING:
        raise LaddError(
            f"submitit was imported with {_SUBMITIT_SIGNAL}={JobEnvironment.USR_SIG} before ladd set it to "
            f"{os.environ[_SUBMITIT_SIGNAL]}: import submitit after ladd's launcher, or unset the variable"
        )
    return module


def job_log(job_id: str, folder: Path) -> Path:
    """Where submitit writes the standard error of job ``job_id``'s first task."""
    from submitit.core.utils import JobPaths

    return Path(JobPaths(folder, job_id, 0).stderr)


class Submitted:
    """``job`` as the process of an engine: on ``threads`` threads, ending with the job's exit status.

    A job that the warning signal stopped has checkpointed; the signal is then raised again for submitit's handler,
    which asks :meth:`checkpoint` what to run next, requeues the job and exits (``keep_status``: the process ends with
    the signal's status all the same, where the scheduler has requeued it already).
    """

    def __init__(self, job: Callable[[], int], threads: int, keep_status: bool = False) -> None:
        self.job, self.threads, self.keep_status = job, threads, keep_status

    def __call__(self) -> None:
        for variable in _THREAD_VARIABLES:  # torch reads them as it starts
            os.environ[variable] = str(self.threads)
        if "torch" in sys.modules:  # started already (by what the job's module imports)
            sys.modules["torch"].set_num_threads(self.threads)
        status = self.job()
        if status == 128 + WARNING:
            try:
                signal.raise_signal(WARNING)
            except SystemExit:
                if not self.keep_status:
                    raise
        if status:
            sys.exit(status)

    def checkpoint(self) -> Any:
        """What submitit requeues: the same job, whose run folder holds the checkpoint it resumes from."""
        return submitit().helpers.DelayedSubmission(self)
