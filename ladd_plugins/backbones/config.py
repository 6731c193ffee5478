"""Options of the built-in backbones (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TransformerConfig:
    """Width, depth, heads, MLP expansion and residual dropout of a stack of DiT blocks."""

    hidden: int = 64  # width d of every block
    layers: int = 4  # number of blocks
    heads: int = 4  # attention heads (hidden must divide by it)
    mlp_ratio: float = 4.0  # MLP hidden width = mlp_ratio * hidden
    dropout: float = 0.1  # residual dropout in training


@dataclass
class DiTConfig(TransformerConfig):
    """DiT and MM-DiT: adaLN conditioning width, and whether token predictions see the token time."""

    cond_dim: int = 128  # width of the adaLN conditioning vector (time embedding)
    # The paper drops explicit timestep conditioning of the token denoiser; a latent channel is always conditioned.
    token_time_conditioning: bool = False


@dataclass
class MLPDenoiserConfig:
    """Residual MLP latent denoiser."""

    hidden: int = 256  # width of the residual MLP
    layers: int = 3  # number of residual blocks
    dropout: float = 0.0  # residual dropout in training
    cond_dim: int = 128  # width of the adaLN conditioning vector (time embedding)
    mlp_ratio: float = 4.0  # block hidden width = mlp_ratio * hidden
