"""Sliced Wasserstein distance SWD_1 between two equal-size sample sets (App. F).

App. F averages over Gaussian directions ``u ~ N(0, I_S)``; the authors' code over unit directions. The two
estimate scores that differ by the factor ``E|u|`` (the norm of a Gaussian direction is independent of its
orientation), so ``directions=unit`` gives numbers on the authors' scale.
"""
from __future__ import annotations

import torch
from torch import Tensor

from registry.interfaces import Metric

from .config import SlicedWassersteinConfig

__all__ = ["SlicedWasserstein", "SlicedWassersteinConfig"]

# Bounds each chunk's projections to 2^22 float64 values (32 MiB per sample set).
_CHUNK_ELEMENTS = 1 << 22


class SlicedWasserstein(Metric):
    """Monte Carlo SWD_1: mean over fixed random directions ``u`` of the 1-D W_1 of the projections ``<u, x>``."""

    primary = "swd"

    def __init__(self, config: SlicedWassersteinConfig, tokenizer: object = None) -> None:
        self.config = config

    def directions(self, dim: int) -> Tensor:
        """The fixed projection directions ``[dim, projections]`` (float64, CPU) for samples of width ``dim``.

        Unit directions are the Gaussian ones of the same seed scaled to norm 1.
        """
        generator = torch.Generator().manual_seed(self.config.seed)
        gaussian = torch.randn(dim, self.config.projections, generator=generator, dtype=torch.float64)
        return gaussian / gaussian.norm(dim=0) if self.config.directions == "unit" else gaussian

    def __call__(self, samples: Tensor, reference: Tensor) -> dict[str, float]:
        """``{"swd": SWD_1}`` between ``samples [N, S]`` and ``reference [N, S]``; sizes must match exactly."""
        return {self.primary: self.distance(samples, reference)}

    def distance(self, samples: Tensor, reference: Tensor) -> float:
        """SWD_1 between two equal-size sample sets."""
        if samples.dim() != 2 or reference.dim() != 2:
            raise ValueError(
                f"SWD expects [N, S] sample sets, got shapes {tuple(samples.shape)} and {tuple(reference.shape)}"
            )
        (n, width), (n_ref, width_ref) = samples.shape, reference.shape
        if width != width_ref:
            raise ValueError(f"SWD needs sequences of one length, got {width} and {width_ref} positions")
        if n != n_ref:
            # The sorted-pairs formula is W_1 only for equal sizes; we refuse rather than switch formulas.
            raise ValueError(
                f"SWD needs sample sets of equal size, got {n} and {n_ref} samples; "
                "draw the same number of samples as reference sequences"
            )
        if n == 0:
            raise ValueError("SWD needs at least one sample in each set, got 0")
        device = samples.device
        x = samples.to(device=device, dtype=torch.float64)
        y = reference.to(device=device, dtype=torch.float64)
        directions = self.directions(width).to(device)
        chunk = max(1, _CHUNK_ELEMENTS // n)
        total = torch.zeros((), dtype=torch.float64, device=device)
        for start in range(0, directions.shape[1], chunk):
            u = directions[:, start : start + chunk]
            px = torch.sort(x @ u, dim=0).values
            py = torch.sort(y @ u, dim=0).values
            total += (px - py).abs().mean(dim=0).sum()
        return float(total / directions.shape[1])
