"""A run's ``metrics.csv``: one row of loss terms per logged step, kept whole across kills and resumes.

Rows are appended as steps are logged; a checkpoint records the row logged last before it. On resume the
rows past the checkpoint are dropped (the resumed steps log them again). A last row cut short (a write
that a kill or a full disk interrupted: no line end) is such a row and is dropped as well; a damaged row
elsewhere, or a file missing rows that the checkpoint says were logged, would lose logged steps for good,
so the resume is refused and the file left as it is.
"""
from __future__ import annotations

import csv
import io
import math
import time
from pathlib import Path
from typing import Any, cast

import lightning as L
from lightning.pytorch.callbacks import Callback

from registry.engine.objectives import ModelBound
from registry.errors import LaddError
from registry.storage.files import write_text

METRICS_FILE = "metrics.csv"
Position = tuple[int, int]  # (stage, step)
_FIX = "restore it from a copy, or move it away to continue this run with a new one"


def metrics_columns(terms: tuple[str, ...]) -> tuple[str, ...]:
    """The columns of a run's ``metrics.csv`` whose objective returns ``terms`` (``Objective.terms``) besides
    ``loss``; each term's column may be left empty (a term the model or the stage does not have)."""
    return ("stage", "step", "loss", *terms, "seconds")


#: the columns of a run that trains the model's own bound (an empty loss slot)
METRICS_COLUMNS = metrics_columns(ModelBound.terms)


def _whole(row: list[str], columns: tuple[str, ...]) -> bool:
    """Whether a row holds a stage and a step (whole numbers), a loss and seconds, and terms or nothing."""
    if len(row) != len(columns):
        return False
    values = dict(zip(columns, row, strict=True))
    if not (values["stage"].isdigit() and values["step"].isdigit()):
        return False
    optional = columns[3:-1]
    try:
        numbers = [float(values[name]) for name in columns[2:] if values[name] or name not in optional]
    except ValueError:
        return False
    return math.isfinite(numbers[-1])  # seconds; a loss may be non-finite (the row of the step that stops the run)


def read_metrics(path: Path, columns: tuple[str, ...] = METRICS_COLUMNS) -> list[tuple[Position, dict[str, str]]]:
    """The whole rows written so far with their (stage, step), without a last row cut short.

    A file of other columns, or with a damaged row before its last, is refused rather than overwritten.
    """
    if not path.is_file():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise LaddError(f"{path} is damaged (not text); {_FIX}") from None
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows or tuple(rows[0]) != columns:
        raise LaddError(
            f"{path} is not this run's metrics file (columns {', '.join(rows[0] if rows and rows[0] else ['none'])}, "
            f"expected {', '.join(columns)}); move it away to continue this run"
        )
    if not text.endswith("\n"):
        rows.pop()  # a write cut short: its step comes after the last checkpoint, so it is trained and logged again
    found = []
    for line, row in enumerate(rows[1:], start=2):
        if not _whole(row, columns):
            raise LaddError(f"{path} is damaged (line {line} is not a whole row of {','.join(columns)}); {_FIX}")
        found.append(((int(row[0]), int(row[1])), dict(zip(columns, row, strict=True))))
    return found


def check_logged_through(
    path: Path, logged: Position, checkpoint: Path, columns: tuple[str, ...] = METRICS_COLUMNS
) -> None:
    """Refuse to resume from ``checkpoint`` when ``path`` lacks the row it says was logged last before it."""
    positions = [position for position, _ in read_metrics(path, columns)]
    if path.is_file() and logged not in positions:
        ends = f"its last row is step {positions[-1][1]} of stage {positions[-1][0]}" if positions else "it has no rows"
        raise LaddError(
            f"{path} lacks rows logged before {checkpoint} (up to step {logged[1]} of stage {logged[0]}; {ends}): "
            f"it was cut or edited, and resuming would lose them; {_FIX}"
        )


class MetricsFile(Callback):
    """Appends stage, step, loss terms and wall-clock seconds since the stage's fit began to ``metrics.csv``, every
    ``every`` steps and at the stage's last step.

    Steps per second between two rows is their step difference over their ``seconds`` difference (logging
    reads the loss, so the GPU has caught up then). ``columns``: :func:`metrics_columns` of the run's objective.
    """

    #: where a checkpoint keeps this callback's state
    STATE_KEY = "metrics_file"

    def __init__(self, path: Path, stage: int, every: int, columns: tuple[str, ...] = METRICS_COLUMNS) -> None:
        self.path, self.stage, self.every, self.columns = path, stage, max(1, int(every)), columns
        self.logged: Position | None = None  # the row written last

    @property
    def state_key(self) -> str:
        return self.STATE_KEY

    def state_dict(self) -> dict[str, Any]:
        return {"logged": self.logged}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.start = time.perf_counter()
        if not trainer.is_global_zero:
            return
        reached = (self.stage, trainer.global_step)
        kept = [(position, row) for position, row in read_metrics(self.path, self.columns) if position <= reached]
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, self.columns)
        writer.writeheader()
        writer.writerows(row for _, row in kept)
        write_text(self.path, text.getvalue())
        self.logged = kept[-1][0] if kept else None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        last = trainer.global_step == trainer.max_steps  # a stage's last step is logged wherever it falls
        if (trainer.global_step % self.every and not last) or not trainer.is_global_zero:
            return
        row: dict[str, int | str] = {"stage": self.stage, "step": trainer.global_step}
        # the terms of ladd's training module's step, reduced over the processes
        row.update({name: repr(float(value)) for name, value in cast(Any, pl_module).last_terms.items()})
        row["seconds"] = f"{time.perf_counter() - self.start:.3f}"
        with self.path.open("a", newline="") as handle:
            csv.DictWriter(handle, self.columns).writerow(row)
        self.logged = (self.stage, trainer.global_step)
