"""A run's ``rollouts.jsonl``: what the objective sampled (``Objective.records``), one JSON record a line, each with
the stage and the step that made it, kept consistent with the checkpoint across kills and resumes as ``metrics.csv``
is: records past the step a resumed stage starts from are dropped (the resumed steps make them again)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import lightning as L
from lightning.pytorch.callbacks import Callback

from registry.errors import LaddError
from registry.storage.files import write_text

RECORDS_FILE = "rollouts.jsonl"


def read_records(path: Path) -> list[dict[str, Any]]:
    """The whole records written so far; a last line cut short (a write a kill interrupted) is left out, a damaged line
    before it refused."""
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    whole = lines[:-1]  # the part after the last line end is a cut write, or nothing
    records = []
    for number, line in enumerate(whole, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("stage"), int) or not isinstance(
            record.get("step"), int
        ):
            raise LaddError(
                f"{path} is damaged (line {number} is no record with a stage and a step); restore it from a copy, or "
                f"move it away to continue this run"
            )
        records.append(record)
    return records


class RecordsFile(Callback):
    """Appends the objective's records after each step (global rank 0), each with its stage and step."""

    def __init__(self, path: Path, stage: int) -> None:
        self.path, self.stage = path, stage

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero or not self.path.is_file():
            return
        reached = (self.stage, trainer.global_step)
        kept = [r for r in read_records(self.path) if (r["stage"], r["step"]) <= reached]
        write_text(self.path, "".join(json.dumps(record) + "\n" for record in kept))

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        records = cast(Any, pl_module).objective.records()  # ladd's training module, typed as Lightning's
        if not records or not trainer.is_global_zero:
            return
        with self.path.open("a", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps({"stage": self.stage, "step": trainer.global_step, **record}) + "\n")
