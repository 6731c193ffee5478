"""Learned DiT encoder (paper App. D): tokens to ``M`` unit-norm latent features of width ``d_l``.

The features are read from the final hidden states at the ``M`` rightmost positions, projected to
``d_l`` and L2-normalised per vector (eq. ``ladds_latent_norm``). Encoder-input dropout (App. C.3, ``p_r``)
zeroes the input embedding of each position masked in ``x_t`` with probability ``p_r ~ U[0, input_dropout_max]``,
drawn per sequence, whenever the model passes ``masked`` (while it trains, also in Stage 2 with the encoder frozen).
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from registry.interfaces import Encoder
from registry.toolkit.layers import DiTTrunk, FinalLayer, learned_condition

from .config import DiTEncoderConfig
from .input_dropout import input_dropout

__all__ = ["DiTEncoder", "DiTEncoderConfig"]


class DiTEncoder(Encoder):
    """Bidirectional DiT over the clean tokens with a learned constant conditioning vector."""

    trainable = True

    def __init__(self, config: DiTEncoderConfig, vocab_size: int, seq_len: int, tokenizer: object = None):
        super().__init__()
        if not 1 <= config.length <= seq_len:
            raise ValueError(f"encoder length M={config.length} must be between 1 and seq_len={seq_len}")
        self.length, self.width = config.length, config.width
        self.input_dropout_max = config.input_dropout_max
        self.embed = nn.Embedding(vocab_size + 1, config.hidden)
        self.condition = learned_condition(config.hidden)
        self.trunk = DiTTrunk(
            config.hidden, config.layers, config.heads, config.hidden, config.mlp_ratio, config.dropout
        )
        self.final = FinalLayer(config.hidden, config.hidden, nn.Linear(config.hidden, config.width))

    def forward(self, x0: Tensor, masked: Tensor | None = None) -> Tensor:
        h = self.embed(x0)
        if masked is not None and self.input_dropout_max > 0:
            h = h.masked_fill(input_dropout(masked, self.input_dropout_max).unsqueeze(-1), 0.0)
        c = self.condition.expand(x0.shape[0], -1)
        h = self.trunk(h, c)[:, -self.length :]
        return F.normalize(self.final(h, c), dim=-1)
