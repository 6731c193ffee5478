"""The exponential moving average of the weights a stage trains, kept without reading anything back from the device.

Only the parameters that train have an average: a frozen base (``train.lora``, ``train.freeze``), a frozen encoder
and what a stage's loss does not reach never change, so their average is themselves. The averages live beside
the parameters, in their dtype and on their device; under sharding (``train.strategy=fsdp``) the parameters are
this process's shards, and so are the averages. The arithmetic is torch's EMA: the first update of a stage copies
the weights, later ones interpolate (``torch._foreach_lerp_`` with ``1 - decay``). A checkpoint holds the averaged
weights as its ``state_dict`` (the model as it would be saved) and the raw ones as ``current_model_state``, as
Lightning's ``WeightAveraging`` writes them.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor
from torch.optim.swa_utils import get_ema_multi_avg_fn

#: a checkpoint's entry of the raw (not averaged) weights
CURRENT = "current_model_state"


class EMAWeights(Callback):
    """The EMA with ``decay`` of the parameters that train, checkpointed, and put in their place when a fit ends."""

    def __init__(self, decay: float) -> None:
        self.decay = decay
        self.interpolate = get_ema_multi_avg_fn(decay)
        self.names: list[str] = []
        self.parameters: list[Tensor] = []
        self.averages: list[Tensor] = []
        self.updates = 0  # updates made this stage: the next one copies the weights when there are none
        self.latest_step = 0
        self.saved: dict[str, Tensor] = {}  # averages read from a checkpoint, placed when the fit starts training
        self.swapped_in = False

    def track(self, pl_module: L.LightningModule) -> None:
        """Average the parameters that train now (the stage's trainable set is decided), from a checkpoint's
        averages when one was loaded."""
        if self.names:
            return
        tracked = [(name, p) for name, p in pl_module.named_parameters() if p.requires_grad]
        self.names = [name for name, _ in tracked]
        self.parameters = [p for _, p in tracked]
        self.averages = [
            torch.empty_like(p).copy_(self.saved[name]) if name in self.saved else p.detach().clone()
            for name, p in tracked
        ]
        self.saved = {}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.track(pl_module)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step <= self.latest_step:
            return
        with torch.no_grad():
            current = [p.detach() for p in self.parameters]
            if self.updates:
                self.interpolate(self.averages, current, None)
            else:
                torch._foreach_copy_(self.averages, current)
        self.updates += 1
        self.latest_step = trainer.global_step

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._place()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A fit resumed from a checkpoint of its last step has no step left: Lightning skips the training loop and
        # its end, yet the stage's weights are the EMA's, exactly as when it ran to the end without a break.
        if not self.swapped_in:
            self.track(pl_module)
            self._place()

    def _place(self) -> None:
        """The averages in the parameters' place: the stage's weights."""
        with torch.no_grad():
            torch._foreach_copy_(self.parameters, self.averages)
        self.swapped_in = True

    @contextmanager
    def swapped(self) -> Iterator[None]:
        """The averages in the parameters' place for a while (a sharded checkpoint reads them there)."""
        with torch.no_grad():
            for parameter, average in zip(self.parameters, self.averages, strict=True):
                held = parameter.detach().clone()
                parameter.copy_(average)
                average.copy_(held)
        try:
            yield
        finally:
            with torch.no_grad():
                for parameter, average in zip(self.parameters, self.averages, strict=True):
                    held = parameter.detach().clone()
                    parameter.copy_(average)
                    average.copy_(held)

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates, "latest_step": self.latest_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.updates, self.latest_step = state_dict["updates"], state_dict["latest_step"]

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if getattr(trainer.strategy, "saves_averages", False):
            return  # a sharded checkpoint: the strategy writes the averages' shards itself (``sharding``)
        averages = dict(zip(self.names, self.averages, strict=True))
        checkpoint[CURRENT] = current = checkpoint["state_dict"]
        checkpoint["state_dict"] = {name: averages.get(name, value) for name, value in current.items()}

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Lightning loaded the averaged weights (the checkpoint's state_dict) into the module: they are kept as the
        # averages, and the raw weights take the module's place. A sharded checkpoint's strategy did both already.
        if CURRENT in checkpoint and not getattr(trainer.strategy, "saves_averages", False):
            self.saved = dict(checkpoint["state_dict"])
            pl_module.load_state_dict(checkpoint[CURRENT])
