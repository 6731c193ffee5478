"""One real, tiny use of each kind's interface inside a model, for ``ladd plugins check``: one module per kind, and
the table of them.

A component is built with its default options and put into a small model with ladd's probe networks
(``registry/conformance/probes.py``) and, where it needs them, other registered components (a schedule, a token
process, samplers). Every capability it declares is exercised, not only its signature; a failure is an
``ExerciseFailure`` naming what was being done and the promise it broke. A new kind adds its module here and its line
in ``EXERCISES``.
"""
from __future__ import annotations

from collections.abc import Callable

from registry.host.component import Component
from registry.host.registry import Registry

from .backbones import exercise_backbone
from .commands import command_folders, exercise_command
from .common import ExerciseFailure
from .datasets import exercise_dataset
from .encoders import exercise_encoder
from .importers import exercise_importer
from .latents import exercise_latent
from .launchers import exercise_launcher
from .metrics import exercise_metric
from .objectives import exercise_objective
from .processes import exercise_process
from .rewards import exercise_reward
from .samplers import exercise_sampler
from .schedules import exercise_schedule

__all__ = ["EXERCISES", "ExerciseFailure", "command_folders", "exercise_command", "exercise_importer"]

#: Kind -> its exercise: one tiny real use of a component of that kind, run by ``ladd plugins check``.
EXERCISES: dict[str, Callable[[Component, Registry], None]] = {
    "process": exercise_process,
    "latent": exercise_latent,
    "encoder": exercise_encoder,
    "schedule": exercise_schedule,
    "backbone": exercise_backbone,
    "sampler": exercise_sampler,
    "dataset": exercise_dataset,
    "metric": exercise_metric,
    "launcher": exercise_launcher,
    "reward": exercise_reward,
    "objective": exercise_objective,
}
