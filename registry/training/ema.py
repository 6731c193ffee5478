"""The exponential moving average of the weights, kept without reading anything back from the device."""
from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import WeightAveraging
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


class _Average(AveragedModel):
    """torch's ``AveragedModel`` with EMA updates that never ask the device whether one was made before.

    ``AveragedModel.update_parameters`` tests its on-device counter twice per update, which stalls the host
    on every step; here the host remembers it, reading the counter once per fit (it may come from a checkpoint).
    The arithmetic is torch's: the first update copies the weights, later ones interpolate; buffers are copied.
    """

    def __init__(self, model: torch.nn.Module, device: Any, decay: float) -> None:
        super().__init__(model, device=device, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=False)
        self.started: bool | None = None

    def update_parameters(self, model: torch.nn.Module) -> None:
        if self.started is None:
            self.started = bool(self.n_averaged > 0)
            # the copy was made before Lightning converted the model to its precision (64-true): follow its dtype
            dtype = next(model.parameters()).dtype
            if next(self.parameters()).dtype != dtype:
                self.module.to(dtype)
        averaged = [p.detach() for p in self.parameters()]
        current = [p.detach() for p in model.parameters()]
        if self.started:
            assert self.multi_avg_fn is not None
            self.multi_avg_fn(averaged, current, self.n_averaged)
        else:
            for mean, value in zip(averaged, current, strict=True):
                mean.copy_(value)
            self.started = True
        for mine, theirs in zip(self.module.buffers(), model.buffers(), strict=True):
            mine.detach().copy_(theirs.detach())  # buffers follow the model (a VQ codebook), as torch's own update does
        self.n_averaged += 1


class EMAWeights(WeightAveraging):
    """Lightning's weight averaging (checkpointed, swapped in when a fit ends) as an EMA with ``decay``."""

    def __init__(self, decay: float) -> None:
        super().__init__(use_buffers=False)
        self.decay = decay

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._average_model = _Average(pl_module, self._device or pl_module.device, self.decay)
            self.swapped_in = False

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self.swapped_in = True

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A fit resumed from a checkpoint of its last step has no step left: Lightning skips the training loop and
        # its end, yet the stage's weights are the EMA's, exactly as when it ran to the end without a break.
        if not self.swapped_in:
            self._copy_average_to_current(pl_module)
