"""Options of the built-in samplers (torch-free, for fast listing)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AncestralConfig:
    """No options: the step count is chosen per call."""


@dataclass
class JointConfig:
    """Classifier-free guidance scale on the token channel (1 turns guidance off)."""

    guidance: float = 1.0


@dataclass
class SequentialConfig:
    """Latent steps T^Y (the token steps T^X are chosen per call) and the token guidance scale."""

    latent_steps: int = 100
    guidance: float = 1.0
