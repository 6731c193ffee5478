"""The exercise of a schedule: its signal, then a token process built on it."""
from __future__ import annotations

import torch

from registry.host.component import Component
from registry.host.registry import Registry

from .common import Companions, during, expect, token_processes, with_a_partner
from .processes import token_round


def exercise_schedule(component: Component, registry: Registry) -> None:
    """Signal levels in [0, 1], falling with time; then a loss and a reverse chain of a token process using it."""
    schedule = registry.instantiate(component)[0]
    tau = torch.linspace(0.0, 1.0, 9)
    with during("signal(tau)"):
        signal = schedule.signal(tau)
    expect(
        signal.shape == tau.shape, f"signal(tau) has shape {tuple(signal.shape)} for tau of shape {tuple(tau.shape)}"
    )
    expect(bool(((signal >= 0) & (signal <= 1)).all()), f"signal(tau) leaves [0, 1]: {signal.tolist()}")
    expect(bool((signal.diff() <= 1e-6).all()), f"signal(tau) must not rise with tau: {signal.tolist()}")
    with_a_partner(token_processes(Companions(registry, component), schedule), token_round)
