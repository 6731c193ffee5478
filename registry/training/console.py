"""What a training run prints: a stage's optimisation steps out of its total, and no advertisements."""
from __future__ import annotations

import logging
import sys
import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

#: Lightning's logger for its one-time notices (devices found, and a tip to install a cloud logger)
LIGHTNING_NOTICES = "lightning.pytorch.utilities.rank_zero"
#: Lightning's logger for the signals it receives ("Received SIGTERM")
SIGNAL_NOTICES = "lightning.pytorch.trainer.connectors.signal_connector"


class StepProgressBar(TQDMProgressBar):
    """``stage N: step/steps`` with the loss terms of the last logged step (Lightning's bar counts epochs, which an
    endless stream lacks).

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

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        bar, step = self.train_progress_bar, trainer.global_step
        if step % self.log_every == 0 or step == bar.total:
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
        if self._should_update(step, bar.total):
            bar.n = step
            bar.refresh()

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        # also what Lightning shows when the stage ends: the loss terms, not the logger's version (the stage folder)
        return _terms(pl_module)


class StepLines(ProgressBar):
    """``stage N: step/steps`` with the loss terms as one line every ``log_every`` steps and at the stage's end.

    For output that is not a terminal (a log file, a pipe): a bar's carriage-return updates would make it one long line.
    """

    def __init__(self, stage: int, log_every: int) -> None:
        super().__init__()
        self.stage, self.log_every, self.enabled = stage, log_every, True

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step, steps = trainer.global_step, trainer.max_steps
        if self.enabled and (step % self.log_every == 0 or step == steps):
            terms = "".join(f", {name}={value}" for name, value in _terms(pl_module).items())
            seconds = time.perf_counter() - self.start
            print(f"stage {self.stage}: step {step}/{steps}{terms} ({seconds:.1f} s)", flush=True)


def progress_bar(stage: int, log_every: int) -> ProgressBar:
    """A stage's progress: a bar on a terminal, else lines (:class:`StepLines`)."""
    return StepProgressBar(stage, log_every) if sys.stdout.isatty() else StepLines(stage, log_every)


def _terms(pl_module: L.LightningModule) -> dict[str, str]:
    """The loss terms of the module's last logged step, to four significant digits."""
    return {name: f"{float(value):.4g}" for name, value in getattr(pl_module, "last_terms", {}).items()}


def _not_a_tip(record: logging.LogRecord) -> bool:
    """Neither the tip nor the note of a KeyboardInterrupt, which ladd says in its own line."""
    return not any(words in record.getMessage() for words in ("Tip:", "Detected KeyboardInterrupt"))


def quiet_lightning_notices() -> None:
    """Keep Lightning's device notices but not its tip to install a cloud logger nor its notes of a SIGTERM or a
    KeyboardInterrupt."""
    # the tip comes with every Trainer; a stop is told in one line by ladd, whichever signal asked for it
    notices = logging.getLogger(LIGHTNING_NOTICES)
    if _not_a_tip not in notices.filters:
        notices.addFilter(_not_a_tip)
    logging.getLogger(SIGNAL_NOTICES).setLevel(logging.WARNING)
