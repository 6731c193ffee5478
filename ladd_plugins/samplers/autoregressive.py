"""Left-to-right sampling of the autoregressive baseline: one revealed token per network call."""
from __future__ import annotations

import torch
from torch import Tensor

from registry.interfaces import DenoiserModel, Needs, SampleOutput, Sampler
from registry.toolkit.sampling import denoise_tokens

__all__ = ["AutoregressiveSampler"]


class AutoregressiveSampler(Sampler):
    """The ancestral token chain on the exact fast path with ``S`` steps, whatever step count is asked.

    An autoregressive model reveals one token per network call, so ``steps`` is ignored: every budget
    of an evaluation gets the full ``S``-step chain, and ``network_calls`` reports what it cost (``S``
    less the known tokens of ``fixed``; steps with nothing left to reveal call no network). Only the
    revealed row goes through the output head. Known tokens right of a free position (an infill's
    suffix) are kept but unseen there: a causal model conditions on the left context only.
    """

    needs = Needs(latent=False)  # its predictions take no latent

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
            model, num_samples, model.seq_len, generator, model.device, fast=True, fixed=fixed
        )
        return SampleOutput(tokens, None, calls)
