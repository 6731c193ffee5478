"""Tiny reference networks that ``ladd plugins check`` puts around a component to use it inside a real model."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from registry.errors import IncompatibleComponentsError
from registry.interfaces import AttentionPattern, Backbone, CachingBackbone, Channels, Denoised, Encoder
from registry.toolkit.attention import attention, context_mask, pattern_mask
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

    Each channel adds its time and the other channel's mean hidden state, so predictions depend on both; with both,
    a token prediction without the latent is refused, as a two-channel network's would be.
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
        self.two_channels = channels.tokens and channels.latent is not None

    def forward(
        self,
        x_t: Tensor | None,
        tau_x: Tensor | None,
        y_t: Tensor | None,
        tau_y: Tensor | None,
        rows: Tensor | None = None,
    ) -> Denoised:
        if self.two_channels and tau_x is not None and y_t is None:
            raise IncompatibleComponentsError(
                "a model with a latent channel was asked for token predictions without its latent (y_t None): the "
                "tokens are predicted given the latent the sampler holds"
            )
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


class ProbeAttentionBackbone(CachingBackbone):
    """The token channel through one attention layer that keeps a key-value cache, bidirectional or block-causal
    (``block``): for samplers that need a caching backbone or blocks. No position is embedded, so it takes any length;
    with blocks its cache is exact, and training passes it the clean tokens as ``context``."""

    def __init__(self, channels: Channels, block: int | None = None) -> None:
        super().__init__()
        if channels.latent is not None or not channels.tokens:
            raise IncompatibleComponentsError("the attention probe denoises the token channel alone")
        self.attention = AttentionPattern(block)
        self.cache_exact = block is not None
        self.embed = nn.Embedding(channels.vocab_size + 1, HIDDEN)
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.time = nn.Linear(1, HIDDEN)
        self.token_head = nn.Linear(HIDDEN, channels.vocab_size)

    def forward(
        self,
        x_t: Tensor | None,
        tau_x: Tensor | None,
        y_t: Tensor | None,
        tau_y: Tensor | None,
        rows: Tensor | None = None,
        cache: Any = None,
        window: slice | None = None,
        context: Tensor | None = None,
    ) -> Denoised:
        if x_t is None:
            raise IncompatibleComponentsError("the attention probe needs tokens")
        length = x_t.shape[1]
        h = self.embed(x_t) + self._time(tau_x, length)
        if window is not None:
            h, rows = h[:, window], None if rows is None else rows[:, window]
        if context is not None and self.attention.block is not None:  # the training view [x_t ; x0]
            view = torch.cat([h, self.embed(context) + self._time(tau_x, length)], dim=1)
            out = self._attend(view, context_mask(self.attention, length, h.device))[:, :length]
        elif cache is not None:
            q, k, v = self._heads(h)
            out = cache.attend(0, q, k, v, window, self.attention)
        else:
            every = torch.arange(length, device=h.device)
            out = self._attend(h, pattern_mask(self.attention, every, every))
        return Denoised(tokens=self.token_head(at_rows(h + out, rows)))

    def _heads(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        return q[:, :, None], k[:, :, None], v[:, :, None]  # one head: [B, L, 1, HIDDEN]

    def _attend(self, h: Tensor, mask: Tensor | None) -> Tensor:
        return attention(*self._heads(h), mask=mask)

    def _time(self, tau: Tensor | None, length: int) -> Tensor | float:
        if tau is None:
            return 0.0
        tau = tau.float()
        per_position = tau[:, :length, None] if tau.dim() == 2 else tau[:, None, None].expand(-1, length, 1)
        return self.time(per_position)
