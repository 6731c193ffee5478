"""What a training run prints: a stage's optimisation steps out of its total, and no advertisements."""
from __future__ import annotations

import logging
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar

#: Lightning's logger for its one-time notices (devices found, and a tip to install a cloud logger)
LIGHTNING_NOTICES = "lightning.pytorch.utilities.rank_zero"


class StepProgressBar(TQDMProgressBar):
    """``stage N: step/steps`` with the loss terms (Lightning's bar counts epochs, which an endless stream lacks)."""

    def __init__(self, stage: int) -> None:
        super().__init__()
        self.stage = stage

    @property
    def train_description(self) -> str:
        return f"stage {self.stage}"

    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any) -> None:
        bar = self.train_progress_bar
        bar.reset(total=trainer.max_steps)
        bar.n = trainer.global_step  # a resumed stage continues where it stopped
        bar.refresh()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        bar = self.train_progress_bar
        if self._should_update(trainer.global_step, bar.total):
            bar.n = trainer.global_step
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)  # the logger's version: the stage folder, already in the description
        return metrics


def _not_a_tip(record: logging.LogRecord) -> bool:
    return "Tip:" not in record.getMessage()


def drop_lightning_tips() -> None:
    """Keep Lightning's device notices but not its tip to install a cloud logger, printed by every Trainer."""
    notices = logging.getLogger(LIGHTNING_NOTICES)
    if _not_a_tip not in notices.filters:
        notices.addFilter(_not_a_tip)
