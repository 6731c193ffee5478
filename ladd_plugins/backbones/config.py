"""Options of the built-in backbones (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DiTConfig:
    hidden: int = 64
    layers: int = 4
    heads: int = 4
    mlp_ratio: float = 4.0
    dropout: float = 0.1
    cond_dim: int = 128
    time_conditioning: bool = False  # token channel only: the latent channel is always time conditioned


@dataclass
class MMDiTConfig:
    hidden: int = 64
    layers: int = 4
    heads: int = 4
    mlp_ratio: float = 4.0
    dropout: float = 0.1
    cond_dim: int = 128
    token_time_conditioning: bool = False


@dataclass
class MLPDenoiserConfig:
    hidden: int = 256
    layers: int = 3
    dropout: float = 0.0
    cond_dim: int = 128
    mlp_ratio: float = 4.0
