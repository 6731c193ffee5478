"""The randomly shifted binary sawtooth: tokens independent given a uniform global shift y (Sec. 5.1)."""
from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor

from registry.interfaces import Dataset

from ..seeds import stream_seed
from .config import BinarySawtoothConfig
from .mersenne import skip_doubles

__all__ = ["BinarySawtooth", "BinarySawtoothConfig"]


def _half_square_log(p: float) -> float:
    """An antiderivative of ``p log p``: ``p^2 log(p) / 2 - p^2 / 4`` (0 at p = 0)."""
    return (0.5 * p * p * math.log(p) if p > 0 else 0.0) - 0.25 * p * p


class BinarySawtooth(Dataset):
    """``x_i ~ Bernoulli(omega(i, y))`` independently given ``y ~ U[0, 1]``, over ``{0, 1}^S``."""

    vocab_size = 2

    def __init__(self, config: BinarySawtoothConfig) -> None:
        self.config = config
        self.seq_len = config.seq_len

    def omega(self, positions: Tensor, y: Tensor) -> Tensor:
        """P(x_i = 1 | y) at 1-based ``positions`` for shifts ``y`` (broadcast together), eq. omega_sawtooth."""
        c = self.config
        phase = torch.remainder(c.periods * ((positions - 1) / c.seq_len + y), 1.0)
        return c.floor + (1 - 2 * c.floor) * (1 - torch.abs(2 * phase - 1))

    def sample(self, n: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
        """``n`` sequences ``LongTensor[n, S]`` and the shifts ``y`` ``[n]`` they were drawn with, on the generator's
        device."""
        device = generator.device
        y = torch.rand(n, generator=generator, dtype=dtype, device=device)
        positions = torch.arange(1, self.seq_len + 1, dtype=dtype, device=device)
        probs = self.omega(positions, y[:, None])
        x = (torch.rand(n, self.seq_len, generator=generator, dtype=dtype, device=device) < probs).long()
        return x, y

    def batches(self, batch_size: int, seed: int, split: str = "train") -> Iterator[Tensor]:
        """An endless stream of fresh batches, reproducible from ``(seed, split)``."""
        return self.batches_from(0, batch_size, seed, split)

    def batches_from(self, start: int, batch_size: int, seed: int, split: str = "train") -> Iterator[Tensor]:
        """The stream from batch ``start`` on: the generator jumps past the draws of the batches before it."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        generator = torch.Generator().manual_seed(stream_seed("binsaw", seed, split))
        skip_doubles(generator, start * batch_size * (self.seq_len + 1))  # sample() draws y, then x
        return self._stream(batch_size, generator)

    def _stream(self, batch_size: int, generator: torch.Generator) -> Iterator[Tensor]:
        while True:
            yield self.sample(batch_size, generator)[0]

    def device_batches(self, start: int, batch_size: int, seed: int, device: torch.device) -> Iterator[Tensor] | None:
        """With ``draw_on_device``: batch k drawn on ``device`` in float32 from a generator seeded for k alone."""
        if not self.config.draw_on_device:
            return None
        return self._device_stream(start, batch_size, seed, torch.Generator(device))

    def _device_stream(self, start: int, batch_size: int, seed: int, generator: torch.Generator) -> Iterator[Tensor]:
        index = start
        while True:
            generator.manual_seed(stream_seed("binsaw-device", seed, f"train:{index}"))
            yield self.sample(batch_size, generator, torch.float32)[0]
            index += 1

    def oracle_token_loss(self) -> float:
        """Exact ``E_y[(1/S) sum_i H_b(omega(i, y))]`` in nats (0.5095814... for the defaults).

        For y ~ U[0, 1] each ``omega(i, y)`` is uniform on [s, 1 - s] (P whole periods of a triangle
        wave), so this is the mean of the binary entropy over that interval, in closed form.
        """
        s = self.config.floor
        if s == 0.5:
            return math.log(2.0)
        # H_b(p) = -p log p - (1-p) log(1-p) and both terms integrate to the same over [s, 1-s].
        return 2.0 * (_half_square_log(s) - _half_square_log(1.0 - s)) / (1.0 - 2.0 * s)
