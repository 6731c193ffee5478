"""Example third-party plugin: an exponential token schedule, a convolutional token denoiser and a tempered sampler."""
from __future__ import annotations

from pathlib import Path

from registry import ComponentSpec, hookimpl

from .options import ConvConfig, ExponentialConfig, TemperatureConfig


@hookimpl
def ladd_components():
    return [
        ComponentSpec(
            kind="schedule",
            name="exponential",
            factory="ladd_example_plugin.components:ExponentialSchedule",
            config=ExponentialConfig,
            description="survival exp(-rate * tau), rescaled to end at 0",
        ),
        ComponentSpec(
            kind="backbone",
            name="conv",
            factory="ladd_example_plugin.components:ConvBackbone",
            config=ConvConfig,
            description="bidirectional 1-D convolutional token denoiser",
        ),
        ComponentSpec(
            kind="sampler",
            name="temperature",
            factory="ladd_example_plugin.components:TemperatureSampler",
            config=TemperatureConfig,
            description="ancestral token sampling from logits divided by a temperature",
        ),
    ]


@hookimpl
def ladd_config_dirs():
    return [Path(__file__).parent / "conf"]
