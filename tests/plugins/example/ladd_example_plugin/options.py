"""Options of the example components."""
from dataclasses import dataclass


@dataclass
class ExponentialConfig:
    rate: float = 5.0


@dataclass
class ConvConfig:
    hidden: int = 32
    kernel: int = 5
    layers: int = 2
