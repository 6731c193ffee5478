"""Tiny reference networks that ``ladd plugins check`` puts around a component to use it inside a real model."""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from registry.interfaces import Backbone, Channels, Denoised, Encoder
from registry.toolkit.tokens import at_rows

HIDDEN = 16


class ProbeEncoder(Encoder):
    """Mean token embedding mapped to ``length`` unit vectors of ``width``."""

    def __init__(self, vocab_size: int, length: int, width: int) -> None:
        super().__init__()
        self.length, self.width = length, width
        self.embed = nn.Embedding(vocab_size + 1, HIDDEN)
        self.out = nn.Linear(HIDDEN, length * width)

    def forward(self, x0: Tensor, masked: Tensor | None = None) -> Tensor:
        features = self.out(self.embed(x0).mean(dim=1)).view(-1, self.length, self.width)
        return F.normalize(features, dim=-1)


class ProbeBackbone(Backbone):
    """Either channel or both: tokens embedded per position, the latent through its own input and output layers.

    Each channel adds its time and the other channel's mean hidden state, so predictions depend on both.
    """

    def __init__(self, channels: Channels) -> None:
        super().__init__()
        if channels.tokens:
            self.embed = nn.Embedding(channels.vocab_size + 1, HIDDEN)
            self.token_head = nn.Linear(HIDDEN, channels.vocab_size)
        if channels.latent is not None:
            self.latent_in = channels.latent.input_layer(HIDDEN)
            self.latent_head = channels.latent.output_layer(HIDDEN)
        self.time = nn.Linear(1, HIDDEN)

    def forward(
        self,
        x_t: Tensor | None,
        tau_x: Tensor | None,
        y_t: Tensor | None,
        tau_y: Tensor | None,
        rows: Tensor | None = None,
    ) -> Denoised:
        h = None if x_t is None else self.embed(x_t) + self._time(tau_x)
        g = None if y_t is None else self.latent_in(y_t) + self._time(tau_y)
        if h is not None and g is not None:
            h, g = h + g.mean(dim=1, keepdim=True), g + h.mean(dim=1, keepdim=True)
        return Denoised(
            tokens=None if h is None else self.token_head(at_rows(h, rows)),
            latent=None if g is None else self.latent_head(g),
        )

    def _time(self, tau: Tensor | None) -> Tensor | float:
        return 0.0 if tau is None else self.time(tau.float()[:, None])[:, None]
