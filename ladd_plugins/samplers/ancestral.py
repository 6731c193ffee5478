"""Ancestral sampling of the token channel with the exact masked bridge (App. B.2)."""
from __future__ import annotations

import torch
from torch import Tensor

from registry.interfaces import DenoiserModel, Needs, SampleOutput, Sampler
from registry.toolkit.sampling import denoise_tokens

from .config import AncestralConfig


class AncestralSampler(Sampler):
    """MDLM sampling: the token chain alone."""

    needs = Needs(latent=False)  # its predictions take no latent

    def __init__(self, config: AncestralConfig) -> None:
        self.config = config

    @torch.no_grad()
    def sample(  # type: ignore[override]  # no latent keyword: ladd passes a clean latent to no such sampler
        self,
        model: DenoiserModel,
        num_samples: int,
        steps: int,
        generator: torch.Generator,
        fixed: Tensor | None = None,
    ) -> SampleOutput:
        tokens, calls = denoise_tokens(
            model, num_samples, steps, generator, model.device, fast=self.config.fast, fixed=fixed
        )
        return SampleOutput(tokens, None, calls)
