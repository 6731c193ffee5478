"""Options of the built-in samplers (torch-free, for fast listing)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from registry.ranges import check_range
from registry.toolkit.options import ConfidenceConfig, refers_to

__all__ = [
    "AncestralConfig", "AutoregressiveConfig", "BlockwiseConfig", "ConfidenceConfig", "JointConfig", "SequentialConfig",
]

#: a LADD or block sampler's token decoder: a registered TokenDecoder sampler, given the sampler's ``fast`` unless
#: its own options set it
TOKEN_DECODER = refers_to("sampler", options="token_decoder_options", interface="TokenDecoder", inherits=("fast",))


@dataclass
class AncestralConfig:
    """``fast``: the exact fast path (head and draws at revealing positions only); the step count is chosen per call."""

    fast: bool = True  # exact fast path: token head and draws only at the positions that reveal


@dataclass
class AutoregressiveConfig:
    """Left-to-right sampling (always ``S`` steps, one token per network call) and the causal backbone's cache."""

    cache: bool = True  # keep the keys and values of the tokens generated (exact); false recomputes every position


@dataclass
class JointConfig:
    """Classifier-free guidance scale on the token channel (1 turns guidance off) and the token decoder's steps."""

    guidance: float = 1.0  # classifier-free guidance scale on the token channel; 1 turns it off
    fast: bool = True  # exact fast path: token head and draws only at the positions that reveal
    token_decoder: str = field(default="ancestral", metadata=TOKEN_DECODER)  # the token decoder moving the tokens
    token_decoder_options: dict[str, Any] = field(default_factory=dict)  # its options (guidance and fast: set above)

    def __post_init__(self) -> None:
        check_range("guidance", self.guidance, 0)


@dataclass
class SequentialConfig:
    """Latent steps T^Y (the token steps T^X are chosen per call) and the token guidance scale."""

    latent_steps: int = 100  # T^Y: reverse steps of the latent before the token steps
    guidance: float = 1.0  # classifier-free guidance scale on the token channel; 1 turns it off
    fast: bool = True  # exact fast path: token head and draws only at the positions that reveal
    token_decoder: str = field(default="ancestral", metadata=TOKEN_DECODER)  # the token decoder given the latent
    token_decoder_options: dict[str, Any] = field(default_factory=dict)  # its options (guidance and fast: set above)

    def __post_init__(self) -> None:
        check_range("latent_steps", self.latent_steps, 1)
        check_range("guidance", self.guidance, 0)


@dataclass
class BlockwiseConfig:
    """Block diffusion sampling: the token decoder of each block (its steps chosen per call, per block), the exact
    key-value cache of the committed blocks and stopping at the end of the document."""

    token_decoder: str = field(default="ancestral", metadata=TOKEN_DECODER)  # the token decoder of each block
    token_decoder_options: dict[str, Any] = field(default_factory=dict)  # its options (fast: set below)
    fast: bool = True  # exact fast path: token head and draws only at the positions that reveal
    cache: bool = True  # keep the keys and values of committed blocks (exact); false recomputes every position
    stop_at_eos: bool = True  # a sequence ends at its first end-of-document token (data that has one)
