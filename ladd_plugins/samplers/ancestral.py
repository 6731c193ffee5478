"""Ancestral sampling of the token channel with the exact masked bridge (App. B.2)."""
from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from registry.interfaces import DenoiserModel, Needs, SampleOutput, TokenDecoder
from registry.toolkit.sampling import ProcessRule, TokenChain, decode_tokens, process_rules

from .config import AncestralConfig


class AncestralSampler(TokenDecoder):
    """MDLM sampling: the token chain alone, the token process's own reverse step at each step of the time grid."""

    needs = Needs(latent=False)  # its predictions take no latent

    def __init__(self, config: AncestralConfig) -> None:
        self.config = config

    @torch.no_grad()
    def sample(  # type: ignore[override]  # no latent keyword: a LADD sampler hands its latent to decode_tokens
        self,
        model: DenoiserModel,
        num_samples: int,
        steps: int,
        generator: torch.Generator,
        fixed: Tensor | None = None,
    ) -> SampleOutput:
        return decode_tokens(self, model, num_samples, steps, generator, fixed)

    def rules(self, model: DenoiserModel, chain: TokenChain, steps: int) -> Iterator[ProcessRule]:
        return process_rules(chain, steps, self.config.fast)
