"""A training stage's exact trainable set: the parameters its loss reaches, found by one probe forward pass.

DDP without ``find_unused_parameters`` needs every parameter that requires a gradient to receive one at
every step. What a stage's loss reaches follows from the components and the stage's settings (Stage 1
with ``lambda_latent = 0`` leaves the latent heads and any latent denoiser out; a frozen encoder is out
already), not from the batch, so one forward pass on a dummy batch, walked back through its autograd
graph, finds it; the parameters it misses stop requiring gradients for the stage (``LaddModule.setup``).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import Tensor, nn

from registry.engine.model import DiffusionModel
from registry.engine.objectives import objective_of
from registry.interfaces import Objective


def unreached_parameters(model: DiffusionModel, objective: Objective | None = None) -> list[nn.Parameter]:
    """The parameters requiring gradients that the training objective (the model's own bound unless given), as the
    model stands, gives none (``Objective.reach``).

    The probe leaves no trace: weights, buffers (an EMA codebook updated in the forward pass) and the
    random streams are as before. It runs on the model's device, where collectives of a forward pass
    (a codebook synced over processes) work, and uncompiled.
    """
    candidates = [p for p in model.parameters() if p.requires_grad]
    device = model.device
    was_training = model.training
    saved = {name: t.detach().clone() for name, t in _tensors(model)}
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), _eager(), torch.enable_grad():
            model.train()
            loss = objective_of(objective).reach(model)
            reached = _leaves(loss)
            del loss
    finally:
        with torch.no_grad():
            for name, tensor in _tensors(model):
                if name in saved:
                    tensor.copy_(saved[name])
        model.train(was_training)
    return [p for p in candidates if id(p) not in reached]


def _tensors(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    yield from model.named_parameters()
    yield from model.named_buffers()


def _leaves(output: Tensor) -> set[int]:
    """The ids of the tensors whose gradients ``output.backward()`` would accumulate (the walk DDP makes to find unused
    ones)."""
    leaves: set[int] = set()
    seen: set[object] = set()
    pending = [output.grad_fn]
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)  # an AccumulateGrad node holds its leaf
        if variable is not None:
            leaves.add(id(variable))
        pending.extend(child for child, _ in node.next_functions)
    return leaves


def _eager() -> AbstractContextManager[None]:
    """Compiled backbones run as plain modules: the probe's shapes would cost a compilation of their own."""
    set_stance = getattr(torch.compiler, "set_stance", None)  # torch >= 2.6; older versions compile the probe
    return set_stance("force_eager") if set_stance is not None else nullcontext()
