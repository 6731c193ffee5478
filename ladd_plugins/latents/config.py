"""Options of the built-in latents (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass, field

from registry.ranges import check_choice, check_range

#: What the token side sees for a row dropped by p_cfg: the null latent noised to tau_y (the paper's text) or
#: the null latent itself, y_t = 0 (the authors' code).
DROPPED_INPUTS = ("noised_null", "zero")


def _check_size(length: int, width: int) -> None:
    if length < 1 or width < 1:
        raise ValueError(f"a latent needs length >= 1 and width >= 1, got {length}, {width}")


@dataclass
class ContinuousLatentConfig:
    """Latent length M, width d_l, the encoder posterior's std sigma_lat and what a p_cfg-dropped row's tokens see."""

    length: int = 1  # M: latent vectors per sequence
    width: int = 32  # d_l: width of each latent vector
    std: float = 0.01  # sigma_lat^2 = 1e-4 (Sec. 3.1)
    # a row dropped by objective.p_cfg (and guidance's unconditional pass): noised_null, the null latent 0 noised
    # to the row's tau_y (App. C.3); zero, y_t = 0 itself (the authors' code)
    dropped_input: str = "noised_null"

    def __post_init__(self) -> None:
        _check_size(self.length, self.width)
        check_range("std", self.std, 0)
        check_choice("dropped_input", self.dropped_input, DROPPED_INPUTS)


@dataclass
class DiscreteLatentConfig:
    """Latent length M, width d_l and the options of a cosine-distance EMA vector quantiser."""

    length: int = 1  # M: codes per sequence
    width: int = 32  # d_l: width of the encoder features and code vectors
    codebook_size: int = 2048  # C: codes in the codebook (the mask is code C)
    decay: float = 0.95  # EMA decay of the codebook
    commitment: float = 0.1  # beta: the auxiliary loss is beta * L_VQ
    dead_code_threshold: int = 2  # codes used less than this (EMA count) are restarted
    # all-reduce the codebook's EMA statistics across ranks; None: whenever WORLD_SIZE > 1 (torchrun, Lightning DDP)
    sync_codebook: bool | None = None

    def __post_init__(self) -> None:
        _check_size(self.length, self.width)
        check_range("codebook_size", self.codebook_size, 2)
        check_range("decay", self.decay, 0, 1)
        check_range("commitment", self.commitment, 0)
        check_range("dead_code_threshold", self.dead_code_threshold, 0)


@dataclass
class ResidualVQLatentConfig(DiscreteLatentConfig):
    """A vector quantiser's options plus the number of residual stages Q (each position holds C^Q values)."""

    codebook_size: int = 16  # C per stage: the masked process sees C^Q values per position
    quantizers: int = 2  # Q: residual quantisation stages

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("quantizers", self.quantizers, 1)


@dataclass
class FSQLatentConfig:
    """Latent length M, width d_l and the levels of finite scalar quantisation (prod(levels) codes)."""

    length: int = 1  # M: codes per sequence
    width: int = 32  # d_l: width of the encoder features (projected to len(levels) dimensions)
    levels: list[int] = field(default_factory=lambda: [8, 5, 5, 5])  # values per dimension: 1000 codes

    def __post_init__(self) -> None:
        _check_size(self.length, self.width)
        # the library refuses 2 levels (its rounding grid would not be symmetric)
        if not self.levels or min(self.levels) < 3:
            raise ValueError(f"levels={list(self.levels)} needs at least one dimension, each with >= 3 levels")


@dataclass
class LFQLatentConfig:
    """Latent length M, width d_l and the options of lookup-free quantisation (binary codes)."""

    length: int = 1  # M: codes per sequence
    width: int = 32  # d_l: width of the encoder features (projected to log2(codebook_size) signs)
    codebook_size: int = 1024  # a power of two
    entropy_weight: float = 0.1  # weight of the entropy auxiliary loss
    commitment: float = 0.0  # weight of the commitment auxiliary loss

    def __post_init__(self) -> None:
        _check_size(self.length, self.width)
        if self.codebook_size < 2 or self.codebook_size & (self.codebook_size - 1):
            raise ValueError(f"codebook_size={self.codebook_size} must be a power of two >= 2")
        check_range("entropy_weight", self.entropy_weight, 0)
        check_range("commitment", self.commitment, 0)
