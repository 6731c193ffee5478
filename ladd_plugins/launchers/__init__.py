"""Launchers of a sweep's jobs: in this process one after another, several at once on this machine, or on Slurm."""
from __future__ import annotations

from registry import ComponentSpec

from .config import LocalConfig, SlurmConfig

#: this subpackage's components, registered by ladd's plugin (``ladd_plugins.ladd_components``)
SPECS = [
    ComponentSpec("launcher", "serial", "ladd_plugins.launchers.serial:SerialLauncher", None,
                  "one job after another in this process (the default)"),
    ComponentSpec("launcher", "local", "ladd_plugins.launchers.local:LocalLauncher", LocalConfig,
                  "several jobs at once on this machine, each in its own process with its share of the cores "
                  "(submitit's local executor)"),
    ComponentSpec("launcher", "slurm", "ladd_plugins.launchers.slurm:SlurmLauncher", SlurmConfig,
                  "one Slurm job per combination, as a job array (submitit's Slurm executor); requeued on "
                  "preemption and before the time limit"),
]
