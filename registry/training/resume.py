"""Resuming: the checks of a run's saved state, the callbacks that write and restore a stage's checkpoint, and the
point where running the same command again continues.

A finished stage leaves ``checkpoints/stageN/final.safetensors`` (the next stage's start); an unfinished one
resumes from ``last.ckpt``, which holds what Lightning saves plus ladd's own entry (RNG states, stage,
component origins). The paths come from ``runs.RunFolder``.
"""
from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from registry.config.settings import Settings
from registry.engine.adapters import BASE_KEY, Base, base_fix
from registry.engine.assembly import check_installed
from registry.engine.model import DiffusionModel
from registry.engine.runs import RunFolder
from registry.errors import LaddError
from registry.host.registry import Registry
from registry.storage.weights import CorruptFileError, check_checkpoint, check_dtypes, check_shapes, read_tensors

from .metrics_file import METRICS_COLUMNS, METRICS_FILE, MetricsFile, check_logged_through
from .sharding import is_sharded, read_metadata
from .stopping import Stopped, received, reclaim


def is_checkpoint(path: Path) -> bool:
    """Whether a stage's checkpoint is there: a file, or a sharded checkpoint's folder (``sharding``)."""
    return path.is_file() or is_sharded(path)


def has_saved_state(folder: RunFolder, stages: int) -> bool:
    """Whether any of the first ``stages`` stages left weights or a checkpoint: the run has begun."""
    return any(
        folder.stage_weights(index).is_file() or is_checkpoint(folder.last_checkpoint(index))
        for index in range(1, stages + 1)
    )


def check_saved_state(
    model: DiffusionModel,
    folder: RunFolder,
    settings: Settings,
    base: Base | None = None,
    columns: tuple[str, ...] = METRICS_COLUMNS,
) -> None:
    """Every stage's saved weights or checkpoint is intact, fits ``model``, is within the stage's steps and, over a
    frozen base, was trained over this one; ``metrics.csv`` (of ``columns``) holds the rows logged before it.

    Checked before the run writes anything.
    """
    for index, (name, stage) in enumerate(settings.train.stages_to_run().items(), start=1):
        final, last = folder.stage_weights(index), folder.last_checkpoint(index)
        if final.is_file():
            tensors, metadata = read_tensors(final)
            if base is not None:
                base.check(metadata.get(BASE_KEY, "(none: whole weights)"), str(final), base_fix(settings))
            check_dtypes(model, tensors, final)
            check_shapes(model, {name: tuple(tensor.shape) for name, tensor in tensors.items()}, final)
        elif is_checkpoint(last):
            if last.is_file():
                check_checkpoint(last)
            checkpoint = read_checkpoint(last)
            step = checkpoint["global_step"]
            if base is not None:
                recorded = (checkpoint.get("ladd") or {}).get("base", "(none: whole weights)")
                base.check(recorded, str(last), base_fix(settings))
            if last.is_file():  # a sharded checkpoint's tensors are read by its strategy, which checks them
                # LaddModule holds the model as its attribute `model`
                shapes = {name.removeprefix("model."): tuple(t.shape) for name, t in checkpoint["state_dict"].items()}
                check_shapes(model, shapes, last)
            steps = settings.stage_steps(stage)
            if step > steps:  # Lightning would take the stage for finished and keep weights of more steps
                overridden = settings.trainer.max_steps is not None
                key = "trainer.max_steps" if overridden else f"train.stages.{name}.steps"
                raise LaddError(
                    f"cannot resume from {last}: it is at step {step}, past the {steps} steps of stage {index} "
                    f"({key}={steps}); continue it with {key}={step} or more, or delete it to restart the stage"
                )
            logged = (checkpoint.get("callbacks") or {}).get(MetricsFile.STATE_KEY, {}).get("logged")
            if logged is not None:
                check_logged_through(folder.path / METRICS_FILE, tuple(logged), last, columns)


def read_checkpoint(last: Path) -> dict[str, Any]:
    """A stage checkpoint holding (EMA) weights and the step it was written at; a file without them is refused.

    Of a sharded checkpoint, its ``meta.pt`` alone: the step and everything but the tensors.
    """
    sharded = is_sharded(last)
    checkpoint = read_metadata(last) if sharded else torch.load(last, map_location="cpu", weights_only=True, mmap=True)
    state = checkpoint.get("state_dict", {} if sharded else None) if isinstance(checkpoint, dict) else None
    step = checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict) or type(step) is not int or step < 0:
        raise CorruptFileError(
            f"cannot resume from {last}: it is not a ladd checkpoint (it lacks weights or a step count); delete it "
            f"to restart this stage from its beginning"
        )
    return checkpoint


def resume_point(folder: RunFolder, stages: int) -> str:
    """Where running the same command again continues: the first unfinished stage, at its checkpoint's step."""
    for index in range(1, stages + 1):
        if folder.stage_weights(index).is_file():
            continue
        last = folder.last_checkpoint(index)
        try:
            step = read_checkpoint(last)["global_step"] if is_checkpoint(last) else 0
        except Exception:  # noqa: BLE001 - a damaged checkpoint is reported when the command runs again
            return f"in stage {index}"
        return f"at step {step} of stage {index}"
    return f"at the end of stage {stages}"


def stage_checkpoint(stage_dir: Path, every: int) -> ModelCheckpoint:
    """The callback that writes a stage's ``last.ckpt`` every ``every`` steps (and nothing else)."""
    return ModelCheckpoint(
        dirpath=stage_dir,
        save_last=True,
        save_top_k=0,
        every_n_train_steps=every,
        enable_version_counter=False,  # last.ckpt, also after a resume from one a stop wrote
    )


class StopOnSignal(Callback):
    """Stops a stage that a signal asked to stop (``stopping``) at the end of a step, writing its checkpoint there.

    The processes agree on the step: each step ends with one reduction of whether any received a signal (on
    a single process, no work). Lightning's own SIGTERM handling is set aside for the fit: it stops processes
    at different steps and deadlocks DDP when it writes a checkpoint there, and it ends with exit status 0.
    """

    def __init__(self, last: Path) -> None:
        self.last = last
        self.asked_at_the_end = False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        reclaim()  # from the handler Lightning installed for this fit
        self._stop_if_asked(trainer, save=False)  # a signal that came while the stage was set up: no step taken

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._stop_if_asked(trainer, save=True)  # the step's EMA update and metrics row are done

    def _stop_if_asked(self, trainer: L.Trainer, save: bool) -> None:
        if trainer.strategy.reduce_boolean_decision(received() is not None, all=False):
            if save and trainer.global_step >= trainer.max_steps:
                # The stage's last step: it ends as an uninterrupted stage does (its checkpoint and weights written
                # there, the same files whenever the signal came), and the command stops after (``stop_if_asked``).
                self.asked_at_the_end = True
                return
            if save:
                trainer.save_checkpoint(self.last, weights_only=False)
            raise Stopped(received() or signal.SIGTERM)

    def stop_if_asked(self) -> None:
        """Once the stage's weights are saved: stop every process if a signal came at the stage's last step."""
        if self.asked_at_the_end:
            raise Stopped(received() or signal.SIGTERM)


class ResumeState(Callback):
    """Saves and restores what Lightning does not: RNG states, data position, stage and component origins.

    ``stream`` is the stage's batch stream: its ``start`` is set to the batches already trained on.
    """

    def __init__(
        self, stream: Any, stage: int, origins: dict[str, dict[str, Any]], registry: Registry, base: Base | None = None
    ) -> None:
        self.stream, self.stage, self.origins, self.registry = stream, stage, origins, registry
        self.base = base

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        checkpoint["ladd"] = {
            "stage": self.stage,
            "components": self.origins,
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            **({} if self.base is None else {"base": self.base.digest}),
        }

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("ladd")
        if state is None or state["stage"] != self.stage:
            raise LaddError(
                f"checkpoint of stage {None if state is None else state['stage']} found where stage {self.stage} was "
                "expected"
            )
        check_installed(state["components"], self.registry, f"checkpoint of stage {self.stage}")
        torch.set_rng_state(state["rng_cpu"])
        if state["rng_cuda"]:
            torch.cuda.set_rng_state_all(state["rng_cuda"])
        self.stream.start = checkpoint["global_step"]
