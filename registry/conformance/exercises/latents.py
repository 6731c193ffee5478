"""The exercise of a latent: its codes and null latent, a training step of a joint and of a sequential model, a Stage 2
step, then sampling both."""
from __future__ import annotations

from typing import Any

import torch

from registry.config.settings import Objective
from registry.engine.model import DiffusionModel
from registry.host.component import Component
from registry.host.registry import Registry
from registry.interfaces import Channels, Latent, Process

from ..probes import ProbeBackbone, ProbeEncoder
from .common import (
    BATCH,
    CPU,
    SEQ,
    VOCAB,
    Companions,
    during,
    expect,
    generator,
    latent_processes,
    schedule,
    token_processes,
    with_a_partner,
)
from .samplers import sample_with


def exercise_latent(component: Component, registry: Registry) -> None:
    """Codes and the null latent checked with a process diffusing them, a training step in a joint and in a
    sequential model, then sampling."""
    companions = Companions(registry, component)
    chosen = schedule(companions)
    latent: Latent = registry.instantiate(component)[0]
    y0 = _check_codes(latent)
    pairs = [
        (f"{name} and {t}", (latent_process, token))
        for name, latent_process in latent_processes(companions, latent, chosen)
        for t, token in token_processes(companions, chosen)
    ]

    def use(pair: tuple[Process, Any]) -> None:
        latent_process, token = pair
        with during("the latent process's prior"):
            prior = latent_process.prior(tuple(y0.shape), CPU, generator())
        expect(
            prior.shape == y0.shape and prior.dtype == y0.dtype,
            f"the prior gives {prior.dtype} of shape {tuple(prior.shape)}, encode {y0.dtype} of {tuple(y0.shape)}",
        )
        latent_round(latent, latent_process, token, companions)

    with_a_partner(pairs, use)


def latent_round(latent: Latent, latent_process: Process, process: Any, companions: Companions) -> None:
    """Training steps of a joint and a sequential model of ``latent``, a Stage 2 step, then sampling both."""
    joint = DiffusionModel(
        process,
        latent,
        ProbeBackbone(Channels(VOCAB, SEQ, latent)),
        VOCAB,
        SEQ,
        Objective(),
        ProbeEncoder(VOCAB, latent.length, latent.width),
        latent_process=latent_process,
        schedule=schedule(companions),
    )
    _train_step(joint, "a training step of a joint model")
    sequential = DiffusionModel(
        process,
        latent,
        ProbeBackbone(Channels(VOCAB, SEQ, latent)),
        VOCAB,
        SEQ,
        Objective(latent_time="clean"),
        ProbeEncoder(VOCAB, latent.length, latent.width),
        ProbeBackbone(Channels(0, 0, latent)),
        latent_process,
        schedule(companions),
    )
    _train_step(sequential, "a training step of a sequential model (separate latent denoiser)")
    joint.freeze_encoder()  # last: the frozen encoder is shared with the sequential model
    _train_step(joint, "a Stage 2 training step (encoder frozen)")
    sample_with(joint, companions, lambda s: not s.conditions_on_clean_latent)
    sample_with(sequential, companions, lambda s: s.conditions_on_clean_latent)


def _check_codes(latent: Latent) -> torch.Tensor:
    """Discrete codes are int64 and the null latent has the clean latent's shape and dtype; returns the clean latent."""
    features = ProbeEncoder(VOCAB, latent.length, latent.width)(torch.randint(VOCAB, (BATCH, SEQ)))
    with during("encode"):
        y0 = latent.encode(features).y0
    expect(
        y0.is_floating_point() or y0.dtype == torch.long,
        f"encode gives codes of dtype {y0.dtype}; discrete codes must be torch.long (int64)",
    )
    with during("null"):
        null = latent.null(BATCH, CPU)
    expect(
        null.shape == y0.shape and null.dtype == y0.dtype,
        f"null gives {null.dtype} of shape {tuple(null.shape)} but encode gives {y0.dtype} of shape {tuple(y0.shape)}; "
        "they must match",
    )
    return y0


def _train_step(model: DiffusionModel, what: str) -> None:
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model.train()
    with during(what):
        terms = model.loss(torch.randint(VOCAB, (2 * BATCH, SEQ), generator=generator()), generator())
        expect(all(bool(torch.isfinite(v)) for v in terms.values()), f"{what}: loss terms are not finite: {terms}")
        terms["loss"].backward()
        optimizer.step()
