"""The example components, implementing ladd's documented interfaces."""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from registry.errors import IncompatibleComponentsError
from registry.interfaces import Backbone, Channels, Denoised, Schedule

from .options import ConvConfig, ExponentialConfig


class ExponentialSchedule(Schedule):
    """gbar(tau) = (exp(-rate tau) - exp(-rate)) / (1 - exp(-rate))."""

    def __init__(self, config: ExponentialConfig) -> None:
        self.rate = config.rate

    def signal(self, tau: Tensor) -> Tensor:
        end = math.exp(-self.rate)
        return (torch.exp(-self.rate * tau) - end) / (1 - end)


class ConvBackbone(Backbone):
    """Token embedding, residual 1-D convolutions, linear head; ignores time."""

    token_time_conditioned = False

    def __init__(self, config: ConvConfig, channels: Channels) -> None:
        super().__init__()
        if channels.latent is not None or not channels.tokens:
            raise IncompatibleComponentsError("backbone 'conv' only denoises the token channel")
        self.embed = nn.Embedding(channels.vocab_size + 1, config.hidden)
        self.convs = nn.ModuleList(
            nn.Conv1d(config.hidden, config.hidden, config.kernel, padding=config.kernel // 2) for _ in range(config.layers)
        )
        self.head = nn.Linear(config.hidden, channels.vocab_size)

    def forward(
        self, x_t: Tensor | None, tau_x: Tensor | None, y_t: Tensor | None, tau_y: Tensor | None, rows: Tensor | None = None
    ) -> Denoised:
        h = self.embed(x_t).transpose(1, 2)
        for conv in self.convs:
            h = h + torch.relu(conv(h))
        h = h.transpose(1, 2)
        return Denoised(tokens=self.head(h if rows is None else h[rows]))
