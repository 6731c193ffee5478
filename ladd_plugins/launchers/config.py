"""Options of the launchers (torch-free, for fast listing)."""
from __future__ import annotations

from dataclasses import dataclass

from registry.errors import InvalidConfigError
from registry.ranges import check_range


@dataclass
class LocalConfig:
    """How many jobs run at once on this machine, and the GPUs each gets."""

    workers: int | None = None  # jobs at once, each with cores / workers threads; None: one per core
    gpus_per_job: int = 0  # GPUs each job sees, its own (workers x gpus_per_job must not exceed the visible GPUs)

    def __post_init__(self) -> None:
        check_range("launcher.workers", self.workers, 1, optional=True)
        check_range("launcher.gpus_per_job", self.gpus_per_job, 0)


@dataclass
class SlurmConfig:
    """What each job asks of Slurm (sbatch's options of the same names), and how many run at once."""

    partition: str | None = None  # None: the cluster's default partition
    account: str | None = None  # the account charged
    qos: str | None = None  # quality of service
    constraint: str | None = None  # node features the job needs (sbatch --constraint)
    time: int = 60  # minutes each job may run; it checkpoints signal_delay seconds before and is queued again
    cpus_per_job: int = 1  # CPUs per job (its threads), split evenly over its tasks
    gpus_per_job: int = 0  # GPUs per job, one task (process) each: Lightning's Slurm mode; set train.devices to it
    mem_gb: float | None = None  # memory per job in GB; None: the partition's default
    array_parallelism: int = 256  # jobs of the sweep's array running at once
    signal_delay: int = 120  # seconds before the time limit that SIGUSR1 reaches each job (one step and a checkpoint)
    job_name: str = "ladd"  # the jobs' name in squeue

    def __post_init__(self) -> None:
        for text in ("partition", "account", "qos", "constraint", "job_name"):
            value = getattr(self, text)
            if value is not None and (not value or any(c.isspace() or not c.isprintable() for c in value)):
                raise InvalidConfigError(
                    f"launcher.{text}={value!r} is not valid: it must be a non-empty name without spaces"
                )
        check_range("launcher.time", self.time, 1)
        check_range("launcher.cpus_per_job", self.cpus_per_job, 1)
        check_range("launcher.gpus_per_job", self.gpus_per_job, 0)
        check_range("launcher.mem_gb", self.mem_gb, 0, low_open=True, optional=True)
        check_range("launcher.array_parallelism", self.array_parallelism, 1)
        check_range("launcher.signal_delay", self.signal_delay, 1, self.time * 60 - 1)
        if self.cpus_per_job % self.tasks:
            raise InvalidConfigError(
                f"launcher.cpus_per_job={self.cpus_per_job} must split evenly over the job's {self.tasks} tasks "
                f"(one per GPU: launcher.gpus_per_job={self.gpus_per_job})"
            )

    @property
    def tasks(self) -> int:
        """Processes per job: one per GPU, or one."""
        return max(1, self.gpus_per_job)
