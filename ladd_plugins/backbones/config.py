"""Options of the built-in backbones (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TransformerConfig:
    """Width, depth, heads, MLP expansion and residual dropout of a stack of DiT blocks."""

    hidden: int = 64
    layers: int = 4
    heads: int = 4
    mlp_ratio: float = 4.0
    dropout: float = 0.1


@dataclass
class DiTConfig(TransformerConfig):
    """DiT and MM-DiT: adaLN conditioning width, and whether token predictions see the token time."""

    cond_dim: int = 128
    # The paper drops explicit timestep conditioning of the token denoiser; a latent channel is always conditioned.
    token_time_conditioning: bool = False


@dataclass
class MLPDenoiserConfig:
    """Residual MLP latent denoiser."""

    hidden: int = 256
    layers: int = 3
    dropout: float = 0.0
    cond_dim: int = 128
    mlp_ratio: float = 4.0
