"""One optimisation step as ``ladd train`` takes it, for the benchmarks that time it outside Lightning."""
from __future__ import annotations

import torch

from registry.engine.model import DiffusionModel
from registry.training.module import LaddModule


def optimisation_step(
    model: DiffusionModel, module: LaddModule, optimizer: torch.optim.Optimizer, x0: torch.Tensor
) -> None:
    """The objective (bf16 autocast on CUDA), backward, ladd's clipping and the optimiser step."""
    device = x0.device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        loss = model.loss(x0)["loss"]
    loss.backward()
    module.configure_gradient_clipping(optimizer)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
