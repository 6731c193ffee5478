"""Options of Di-LADD's discrete latent (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass

from registry.ranges import check_range
from registry.toolkit.options import check_weighting


@dataclass
class DiscreteLatentConfig:
    """Latent length M, width d_l, the quantiser's options and the code process's options."""

    length: int = 1  # M: codes per sequence
    width: int = 32  # d_l: width of the encoder features and code vectors
    codebook_size: int = 2048  # C: codes in the codebook (the mask is code C)
    decay: float = 0.95  # EMA decay of the codebook
    commitment: float = 0.1  # beta: the auxiliary loss is beta * L_VQ
    dead_code_threshold: int = 2  # codes used less than this (EMA count) are restarted
    horizon: int = 4000  # training horizon T of the masked process on codes
    weighting: str = "constant"  # code loss weights: constant or elbo
    # all-reduce the codebook's EMA statistics across ranks; None: whenever WORLD_SIZE > 1 (torchrun, Lightning DDP)
    sync_codebook: bool | None = None

    def __post_init__(self) -> None:
        if self.length < 1 or self.width < 1 or self.codebook_size < 2:
            raise ValueError(
                f"discrete latent needs length >= 1, width >= 1, codebook_size >= 2; "
                f"got {self.length}, {self.width}, {self.codebook_size}"
            )
        check_range("decay", self.decay, 0, 1)
        check_range("commitment", self.commitment, 0)
        check_range("dead_code_threshold", self.dead_code_threshold, 0)
        check_range("horizon", self.horizon, 1)
        check_weighting(self.weighting)
