"""Training-time sampling of diffusion times on the discrete grid {1/T, ..., 1}."""
from __future__ import annotations

import torch
from torch import Tensor


def stratified_uniform(
    batch: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu"
) -> Tensor:
    """Low-discrepancy U[0,1) draws: one random offset shared by ``batch`` evenly spaced strata."""
    offset = torch.rand((), generator=generator, device=device, dtype=torch.float64)
    return (offset + torch.arange(batch, device=device, dtype=torch.float64) / batch) % 1.0


def to_grid(u: Tensor, horizon: int) -> Tensor:
    """Map U[0,1) draws to times tau = t/T with t uniform on {1, ..., T}."""
    t = torch.floor(u * horizon).clamp(max=horizon - 1) + 1
    return (t / horizon).float()


def draw_times(
    batch: int, horizon: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu",
    low: float = 0.0, high: float = 1.0,
) -> Tensor:
    """Low-discrepancy times on the training grid, within ``[low, high]`` (the whole grid by default)."""
    u = stratified_uniform(batch, generator, device)
    return to_grid(u if (low, high) == (0.0, 1.0) else low + (high - low) * u, horizon)


def draw_independent_times(
    batch: int, horizon: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu"
) -> Tensor:
    """Low-discrepancy times independent of any other draw in the batch.

    Two stratified draws are coupled (sample i of both lies in stratum i), so the strata of this
    draw are randomly permuted across the batch.
    """
    u = stratified_uniform(batch, generator, device)
    perm = torch.randperm(batch, generator=generator, device=device)
    return to_grid(u[perm], horizon)
