"""Options of the binary sawtooth dataset (torch-free, for fast listing)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BinarySawtoothConfig:
    """Sequence length S, number of sawtooth periods P and minimum probability s (App. E.1)."""

    seq_len: int = 128  # S: tokens per sequence
    periods: int = 2  # P: sawtooth periods along the sequence
    floor: float = 0.01  # s: the smallest probability of a 1 (at most 0.5)
    #: training batches drawn where the model trains, in float32, each from its own seed (a stream of its own)
    draw_on_device: bool = False

    def __post_init__(self) -> None:
        if self.seq_len < 1:
            raise ValueError(f"binary sawtooth seq_len must be >= 1, got {self.seq_len}")
        if self.periods < 1:
            raise ValueError(f"binary sawtooth periods must be >= 1, got {self.periods}")
        if not 0.0 <= self.floor <= 0.5:
            raise ValueError(f"binary sawtooth floor must lie in [0, 0.5], got {self.floor}")
