"""Options of the example components."""
from dataclasses import dataclass


@dataclass
class ExponentialConfig:
    rate: float = 5.0  # decay rate: larger reveals more tokens late in sampling


@dataclass
class ConvConfig:
    hidden: int = 32  # width of the token embedding and of every convolution
    kernel: int = 5  # convolution width (odd keeps the length)
    layers: int = 2  # residual convolution layers
