"""The Slurm launcher: a sweep's jobs as one job array, through submitit's Slurm executor."""
from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from registry.errors import LaddError, MissingResourceError
from registry.interfaces import Launcher

from .config import SlurmConfig
from .processes import Submitted, job_log, submitit

#: the Slurm commands the launcher runs
_COMMANDS = ("sbatch", "srun", "squeue", "scontrol")
_ANSWER_SECONDS = 60


class SlurmLauncher(Launcher):
    """One array job per launch, at most ``array_parallelism`` of its jobs running at once; each job may be requeued
    (preemption, or SIGUSR1 ``signal_delay`` seconds before its time limit, after which it checkpoints)."""

    waits = False

    def __init__(self, config: SlurmConfig) -> None:
        missing = [command for command in _COMMANDS if shutil.which(command) is None]
        if missing:
            raise MissingResourceError(
                f"launcher 'slurm' runs Slurm's {', '.join(missing)}, not found on PATH: launch from a node of the "
                f"cluster, or choose launcher=local"
            )
        answer = _slurm("scontrol", "ping")
        if answer.returncode:
            raise MissingResourceError(
                f"launcher 'slurm' finds no Slurm controller from here ({_message(answer)}): launch from a node of the "
                f"cluster (or set SLURM_CONF), or choose launcher=local"
            )
        self.config = config

    def launch(self, jobs: Sequence[Callable[[], int]], folder: Path, started: Callable[[int, str], None]) -> None:
        engine = submitit()
        from submitit.core.utils import FailedJobError

        executor = engine.SlurmExecutor(folder=folder)
        executor.update_parameters(**self.parameters())
        threads = self.config.cpus_per_job // self.config.tasks
        refused = io.StringIO()
        try:
            with contextlib.redirect_stderr(refused), executor.batch():  # submitit prints sbatch's errors as well
                handles = [executor.submit(Submitted(job, threads, keep_status=True)) for job in jobs]
        except FailedJobError as error:
            message = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
            raise LaddError(f"Slurm refused the jobs: {message or 'sbatch failed'}; none was queued") from None
        for position, handle in enumerate(handles):
            started(position, handle.job_id)

    def parameters(self) -> dict[str, Any]:
        """submitit's parameters of every job: sbatch's options, the job requeueable."""
        config = self.config
        chosen = {
            "partition": config.partition,
            "account": config.account,
            "qos": config.qos,
            "constraint": config.constraint,
            "mem": None if config.mem_gb is None else f"{int(config.mem_gb * 1024)}M",
            "gpus_per_node": config.gpus_per_job or None,
        }
        return {
            "job_name": config.job_name,
            "time": config.time,
            "ntasks_per_node": config.tasks,
            "cpus_per_task": config.cpus_per_job // config.tasks,
            "array_parallelism": config.array_parallelism,
            "signal_delay_s": config.signal_delay,
            # a preempted job goes back to the queue (and `scontrol requeue` is allowed where JobRequeue=0)
            "additional_parameters": {"requeue": True},
            **{key: value for key, value in chosen.items() if value is not None},
        }

    def alive(self, job_ids: Sequence[str], folder: Path) -> set[str]:
        """The jobs squeue still lists (pending, running, requeued), each array task on its own line."""
        listed = _slurm("squeue", "--me", "--noheader", "--array", "--format=%i")
        if listed.returncode:
            raise LaddError(f"squeue failed ({_message(listed)}); the states of the sweep's Slurm jobs are unknown")
        queued = set(listed.stdout.split())
        return {job_id for job_id in job_ids if job_id in queued}

    def log(self, job_id: str, folder: Path) -> Path | None:
        return job_log(job_id, folder)


def _slurm(*command: str) -> subprocess.CompletedProcess:
    """Run one of Slurm's commands; one that does not answer in time is refused."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=_ANSWER_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LaddError(f"{command[0]} did not answer ({error})") from None


def _message(done: subprocess.CompletedProcess) -> str:
    """What a failed Slurm command said, in one line."""
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return "; ".join(lines) or f"exit status {done.returncode}"
