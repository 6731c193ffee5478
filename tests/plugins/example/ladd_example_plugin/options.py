"""Options of the example components."""
from dataclasses import dataclass

from registry.ranges import check_range


@dataclass
class ExponentialConfig:
    rate: float = 5.0  # decay rate: larger reveals more tokens late in sampling


@dataclass
class ConvConfig:
    hidden: int = 32  # width of the token embedding and of every convolution
    kernel: int = 5  # convolution width (odd keeps the length)
    layers: int = 2  # residual convolution layers


@dataclass
class TemperatureConfig:
    temperature: float = 1.0  # token logits are divided by it: below 1 sharpens, above 1 flattens

    def __post_init__(self) -> None:
        check_range("temperature", self.temperature, 0, low_open=True)
