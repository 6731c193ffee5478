"""Example third-party plugin: an exponential token schedule and a convolutional token denoiser."""
from __future__ import annotations

from pathlib import Path

from registry import ComponentSpec, hookimpl

from .options import ConvConfig, ExponentialConfig


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
    ]


@hookimpl
def ladd_config_dirs():
    return [Path(__file__).parent / "conf"]
