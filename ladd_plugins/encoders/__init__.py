"""Encoders from clean tokens to the latent: a learned DiT, or a frozen pretrained text model."""
from __future__ import annotations

from registry import ComponentSpec

from .config import DiTEncoderConfig, PretrainedEncoderConfig

#: this subpackage's components, registered by ladd's plugin (``ladd_plugins.ladd_components``)
SPECS = [
    ComponentSpec(
        "encoder",
        "dit",
        "ladd_plugins.encoders.dit_encoder:DiTEncoder",
        DiTEncoderConfig,
        "learned DiT encoder read at the M rightmost positions, L2-normalised",
    ),
    ComponentSpec(
        "encoder",
        "pretrained",
        "ladd_plugins.encoders.pretrained:PretrainedEncoder",
        PretrainedEncoderConfig,
        "frozen Hugging Face text model (Qwen3-Embedding): Matryoshka-truncated, token-aligned or chunk-pooled",
    ),
]
