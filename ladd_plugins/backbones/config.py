"""Options of the built-in backbones (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass

from registry.ranges import check_range
from registry.toolkit.options import TransformerConfig


@dataclass
class DiTConfig(TransformerConfig):
    """DiT and MM-DiT: adaLN conditioning width, and whether token predictions see the token time."""

    cond_dim: int = 128  # width of the adaLN conditioning vector (time embedding)
    # The paper drops explicit timestep conditioning of the token denoiser; a latent channel is always conditioned.
    token_time_conditioning: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("cond_dim", self.cond_dim, 1)


@dataclass
class MLPDenoiserConfig:
    """Residual MLP latent denoiser."""

    hidden: int = 256  # width of the residual MLP
    layers: int = 3  # number of residual blocks
    dropout: float = 0.0  # residual dropout in training
    cond_dim: int = 128  # width of the adaLN conditioning vector (time embedding)
    mlp_ratio: float = 4.0  # block hidden width = mlp_ratio * hidden

    def __post_init__(self) -> None:
        for key in ("hidden", "layers", "cond_dim"):
            check_range(key, getattr(self, key), 1)
        check_range("mlp_ratio", self.mlp_ratio, 0, low_open=True)
        check_range("dropout", self.dropout, 0, 1, high_open=True)
