"""Experiment tracking: ``train.logger`` picks Lightning's logger, which gets the run's settings and every loss term.

``csv`` (Lightning's CSV logger): one folder per stage, ``logs/stageN/``, its steps counted within the stage.
``tensorboard``, ``wandb``, ``mlflow``: one logged run for the whole training, its steps counted from the
training's start (a stage's step s at the steps of the stages before it plus s), so the stages form one curve.
TensorBoard writes to ``logs/tensorboard/``; W&B and MLflow go where their own settings say (``WANDB_MODE``,
``WANDB_DIR``, ``WANDB_PROJECT``; ``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_NAME``). A logged run gets the
settings when it begins; a resumed training continues it: the same TensorBoard folder, and the W&B run id and
MLflow run id that ``tracking.json`` in the run folder keeps. ``metrics.csv`` is written whatever the logger.
"""
from __future__ import annotations

import importlib.util
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger, Logger

from registry.config.settings import Settings
from registry.engine.runs import TRACKING_FILE, RunFolder
from registry.errors import LaddError, first_line
from registry.storage.files import write_text
from registry.storage.records import read_json

#: the package each logger needs (pip install 'ladd[tracking]' brings them all)
PACKAGES = {"csv": None, "tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
#: the folder under ``logs/`` that the TensorBoard logger writes to
TENSORBOARD_FOLDER = "tensorboard"
_LOSS = "train/loss"  # the metric TensorBoard's hyperparameter table shows beside each run's settings
#: what to do when a tracking library cannot start its logged run
_HINTS = {
    "tensorboard": "check that the run folder is writable",
    "wandb": "log in with `wandb login`, or set WANDB_MODE=offline (then `wandb sync` uploads the run)",
    "mlflow": "set MLFLOW_TRACKING_URI to a tracking server or a local store (README: Experiment tracking)",
}


def check_installed(kind: str) -> None:
    """Refuse ``train.logger=kind`` when the package it needs is missing, before anything trains."""
    package = PACKAGES[kind]
    if package is not None and importlib.util.find_spec(package) is None:
        raise LaddError(
            f"train.logger={kind} needs the {package} package, which is not installed: pip install 'ladd[tracking]' "
            f"(or pip install {package}), or choose train.logger=csv"
        )


class Tracking:
    """The logged run of one training: Lightning's logger for each stage, and what a resumed training continues."""

    def __init__(self, kind: str, folder: RunFolder, settings: Settings, main: bool) -> None:
        check_installed(kind)
        self.kind, self.folder, self.settings, self.main = kind, folder, settings, main
        self.logger: Any = None  # the Lightning logger of a whole training (not csv), made when training starts

    def stage_logger(self, index: int, offset: int) -> Logger:
        """The logger of stage ``index``, whose steps count from ``offset`` (the steps of the stages before it)."""
        if self.kind == "csv":
            logger = CSVLogger(self.folder.path, name="logs", version=f"stage{index}")
            if self.main:
                logger.log_hyperparams(self.settings.plain())
            return logger
        if self.logger is None:
            self.logger = self._begin()
        return _TrainingSteps(self.logger, offset)

    def end(self, status: str) -> None:
        """End the logged run: ``success`` after the last stage, ``failed`` or ``killed`` otherwise."""
        if self.logger is None:
            return
        self.logger.finalize(status)
        if self.main and self.kind == "wandb":  # a W&B run ends here, not when the process does
            self.logger.experiment.finish(exit_code=0 if status == "success" else 1)
            import wandb

            wandb.teardown()  # its service writes what the run logged before the training returns

    def _begin(self) -> Logger:
        """This training's logged run: the one the record names, or a new one that gets the settings."""
        path = self.folder.path / TRACKING_FILE
        records = read_json(path, "a tracking record", "delete it to start new logged runs") if path.is_file() else {}
        if not isinstance(records, dict):
            raise LaddError(f"{path} is not a tracking record (a mapping); delete it to start new logged runs")
        record = records.get(self.kind)
        name = f"{self.settings.method} {self.folder.path}"
        try:
            logger, made = _LOGGERS[self.kind](self.folder, record if isinstance(record, dict) else None, name)
        except Exception as error:  # noqa: BLE001 - the tracking library's own failure, said in one line
            raise LaddError(
                f"train.logger={self.kind} could not start its logged run ({first_line(error)}); {_HINTS[self.kind]}"
            ) from None
        if self.main and made != record:
            _log_settings(logger, self.kind, self.settings.plain())
            write_text(path, json.dumps({**records, self.kind: made}, indent=2))
        return logger


class _TrainingSteps(Logger):
    """The training's logger as one stage sees it: the stage's steps counted from the training's start."""

    def __init__(self, logger: Any, offset: int) -> None:
        super().__init__()
        self.logger, self.offset = logger, offset

    @property
    def name(self) -> str | None:
        return self.logger.name

    @property
    def version(self) -> int | str | None:
        return self.logger.version

    @property
    def save_dir(self) -> str | None:
        return self.logger.save_dir

    @property
    def experiment(self) -> Any:
        return self.logger.experiment

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.logger.log_metrics(metrics, None if step is None else self.offset + step)

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        self.logger.log_hyperparams(params, *args, **kwargs)

    def finalize(self, status: str) -> None:
        """Nothing at a stage's end: the logged run goes on into the next stage (``Tracking.end`` ends it)."""


def _tensorboard(folder: RunFolder, record: dict[str, Any] | None, name: str) -> tuple[Logger, dict[str, Any]]:
    from lightning.pytorch.loggers import TensorBoardLogger

    logger = TensorBoardLogger(folder.path, name="logs", version=TENSORBOARD_FOLDER, default_hp_metric=False)
    return logger, {"folder": str(Path("logs") / TENSORBOARD_FOLDER)}


def _wandb(folder: RunFolder, record: dict[str, Any] | None, name: str) -> tuple[Logger, dict[str, Any]]:
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    # W&B's own lines (warnings, login notes, where its logs are) would stand beside ladd's: ladd says what matters
    wandb.setup(settings=wandb.Settings(silent=True))
    record = record or {}
    run_id = str(record.get("id") or secrets.token_hex(4))
    project = str(record.get("project") or os.environ.get("WANDB_PROJECT", "ladd"))
    logger = WandbLogger(name=name, id=run_id, project=project, save_dir=os.environ.get("WANDB_DIR", "."))
    run = logger.experiment  # starts (or resumes) the run now: a failure comes before the first step
    where = getattr(run, "url", None) or f"offline in {getattr(run, 'dir', '.')}; `wandb sync` uploads it"
    print(f"ladd: logging to W&B run {run_id} of project {project} ({where})", file=sys.stderr)
    return logger, {"id": run_id, "project": project}


def _mlflow(folder: RunFolder, record: dict[str, Any] | None, name: str) -> tuple[Logger, dict[str, Any]]:
    import mlflow
    from lightning.pytorch.loggers import MLFlowLogger

    record = record or {}
    uri = str(record.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI") or mlflow.get_tracking_uri())
    experiment = str(record.get("experiment") or os.environ.get("MLFLOW_EXPERIMENT_NAME", "ladd"))
    run_id = record.get("run_id")
    logger = MLFlowLogger(experiment_name=experiment, run_name=name, tracking_uri=uri, run_id=run_id)
    return logger, {"run_id": logger.run_id, "tracking_uri": uri, "experiment": experiment}


_LOGGERS = {"tensorboard": _tensorboard, "wandb": _wandb, "mlflow": _mlflow}


def _log_settings(logger: Any, kind: str, settings: dict[str, Any]) -> None:
    """The run's settings as the logged run's hyperparameters (TensorBoard's table shows them beside the loss)."""
    if kind != "tensorboard":
        logger.log_hyperparams(settings)
        return
    from torch.utils.tensorboard.summary import hparams

    writer = logger.experiment._get_file_writer()  # Lightning's own way to write these summaries
    for summary in hparams(_flat(settings), {_LOSS: 0.0}):
        writer.add_summary(summary)


def _flat(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as ``section.option`` -> a number, a truth value or text."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value if isinstance(value, (bool, int, float, str)) else json.dumps(value)
    return flat
