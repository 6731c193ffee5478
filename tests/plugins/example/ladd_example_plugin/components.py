"""The example components, implementing ladd's documented interfaces."""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from registry.errors import IncompatibleComponentsError
from registry.interfaces import Backbone, Channels, Denoised, DenoiserModel, SampleOutput, Sampler, Schedule
from registry.toolkit.sampling import denoise_tokens
from registry.toolkit.tokens import at_rows

from .options import ConvConfig, ExponentialConfig, TemperatureConfig


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
        return Denoised(tokens=self.head(at_rows(h.transpose(1, 2), rows)))


class Tempered(DenoiserModel):
    """``model`` with its token logits divided by ``temperature``."""

    def __init__(self, model: DenoiserModel, temperature: float) -> None:
        self.model, self.temperature = model, temperature
        self.process, self.latent = model.process, model.latent
        self.seq_len, self.vocab_size = model.seq_len, model.vocab_size

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def caches_token_predictions(self) -> bool:
        return self.model.caches_token_predictions

    def predict(
        self, x_t: Tensor | None, tau_x: Tensor | None, y_t: Tensor | None, tau_y: Tensor | None, rows: Tensor | None = None
    ) -> Denoised:
        out = self.model.predict(x_t, tau_x, y_t, tau_y, rows)
        return Denoised(None if out.tokens is None else out.tokens / self.temperature, out.latent)


class TemperatureSampler(Sampler):
    """The token chain of ancestral sampling, drawing from tempered logits."""

    def __init__(self, config: TemperatureConfig) -> None:
        self.temperature = config.temperature

    @torch.no_grad()
    def sample(
        self, model: DenoiserModel, num_samples: int, steps: int, generator: torch.Generator, fixed: Tensor | None = None
    ) -> SampleOutput:
        tempered = Tempered(model, self.temperature)
        tokens, calls = denoise_tokens(tempered, num_samples, steps, generator, model.device, fixed=fixed)
        return SampleOutput(tokens, None, calls)
