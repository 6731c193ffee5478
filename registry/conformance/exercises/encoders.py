"""The exercise of an encoder: features of clean tokens, and gradients for a trainable one."""
from __future__ import annotations

import torch

from registry.host.component import Component
from registry.host.registry import Registry

from .common import BATCH, SEQ, VOCAB, during, expect, without_text


def exercise_encoder(component: Component, registry: Registry) -> None:
    """Features ``[B, length, width]`` of clean tokens; a trainable encoder receives gradients."""
    encoder = without_text(component, registry, vocab_size=VOCAB, seq_len=SEQ)
    tokens = torch.randint(VOCAB, (BATCH, SEQ))
    with during("forward"):
        features = encoder(tokens, tokens == VOCAB)
    expected = (BATCH, encoder.length, encoder.width)
    expect(
        tuple(features.shape) == expected,
        f"features of shape {tuple(features.shape)}, expected (batch, length, width) = {expected}",
    )
    if encoder.trainable and any(p.requires_grad for p in encoder.parameters()):
        features.sum().backward()
        expect(
            any(p.grad is not None for p in encoder.parameters()),
            "a trainable encoder's features do not reach its parameters",
        )
