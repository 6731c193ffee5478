"""What a training run prints: a stage's optimisation steps out of its total, and no advertisements."""
from __future__ import annotations

import logging
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar

#: Lightning's logger for its one-time notices (devices found, and a tip to install a cloud logger)
LIGHTNING_NOTICES = "lightning.pytorch.utilities.rank_zero"
#: Lightning's logger for the signals it receives ("Received SIGTERM")
SIGNAL_NOTICES = "lightning.pytorch.trainer.connectors.signal_connector"


class StepProgressBar(TQDMProgressBar):
    """``stage N: step/steps`` with the loss terms of the last logged step (Lightning's bar counts epochs, which an endless stream lacks).

    The terms are read from the module's ``last_terms`` only every ``log_every`` steps: reading them is a host
    synchronisation, which a bar refreshed at every step would otherwise add to every step.
    """

    def __init__(self, stage: int, log_every: int) -> None:
        super().__init__()
        self.stage, self.log_every = stage, log_every

    @property
    def train_description(self) -> str:
        return f"stage {self.stage}"

    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any) -> None:
        bar = self.train_progress_bar
        bar.reset(total=trainer.max_steps)
        bar.n = trainer.global_step  # a resumed stage continues where it stopped
        bar.refresh()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        bar, step = self.train_progress_bar, trainer.global_step
        if step % self.log_every == 0 or step == bar.total:
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
        if self._should_update(step, bar.total):
            bar.n = step
            bar.refresh()

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        # also what Lightning shows when the stage ends: the loss terms, not the logger's version (the stage folder)
        return {name: f"{float(value):.4g}" for name, value in getattr(pl_module, "last_terms", {}).items()}


def _not_a_tip(record: logging.LogRecord) -> bool:
    return "Tip:" not in record.getMessage()


def quiet_lightning_notices() -> None:
    """Keep Lightning's device notices but not its tip to install a cloud logger nor its note of a SIGTERM."""
    # the tip comes with every Trainer; a stop is told in one line by ladd, whichever signal asked for it
    notices = logging.getLogger(LIGHTNING_NOTICES)
    if _not_a_tip not in notices.filters:
        notices.addFilter(_not_a_tip)
    logging.getLogger(SIGNAL_NOTICES).setLevel(logging.WARNING)
