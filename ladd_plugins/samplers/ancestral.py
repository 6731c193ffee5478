"""Ancestral sampling of the token channel with the exact masked bridge (App. B.2)."""
from __future__ import annotations

import torch
from torch import Tensor

from registry.interfaces import DenoiserModel, SampleOutput, Sampler

from .common import (
    check_fixed_kept,
    full,
    guidance_seed,
    reveals_first,
    start_tokens,
    time_grid,
    token_logits,
)
from .config import AncestralConfig


def denoise_tokens(
    model: DenoiserModel,
    num_samples: int,
    steps: int,
    generator: torch.Generator,
    device: torch.device,
    latent: Tensor | None = None,
    guidance: float = 1.0,
    fast: bool = True,
    fixed: Tensor | None = None,
) -> tuple[Tensor, int]:
    """Run the token chain from all-mask to clean, optionally conditioned on a fixed clean latent and known tokens.

    Fast path (exact): draw the positions that reveal first, then compute the output head and the
    categorical draw there only; a step that reveals nothing calls no network. Plain path: predict
    every position, and reuse the last prediction while nothing changes and the denoiser ignores
    the token time (it would be recomputed from identical inputs). Known tokens (``fixed``) start
    unmasked, so a masked process never changes them and the chain only fills the free positions.
    """
    x = start_tokens(model, num_samples, device, generator, fixed)
    tau_y = None if latent is None else full(num_samples, 0.0, device)
    fast = reveals_first(model, fast)
    null_seed = guidance_seed(generator, guidance)
    logits, calls = None, 0
    for tau_t, tau_s in time_grid(steps):
        t, s = full(num_samples, tau_t, device), full(num_samples, tau_s, device)
        if fast:
            reveal = model.process.reveal(x, t, s, generator)
            if bool(reveal.any()):
                rows, _, used = token_logits(model, x, t, latent, tau_y, guidance, null_seed, rows=reveal)
                calls += used
                x = model.process.fill(x, reveal, rows, generator)
            continue
        if logits is None or not model.caches_token_predictions:
            logits, _, used = token_logits(model, x, t, latent, tau_y, guidance, null_seed)
            calls += used
        x_next = model.process.step(x, logits, t, s, generator)
        if not torch.equal(x_next, x):
            logits = None
        x = x_next
    return check_fixed_kept(x, fixed, model), calls


class AncestralSampler(Sampler):
    """MDLM sampling: the token chain alone."""

    def __init__(self, config: AncestralConfig) -> None:
        self.config = config

    @torch.no_grad()
    def sample(
        self, model: DenoiserModel, num_samples: int, steps: int, generator: torch.Generator, fixed: Tensor | None = None
    ) -> SampleOutput:
        tokens, calls = denoise_tokens(model, num_samples, steps, generator, model.device, fast=self.config.fast, fixed=fixed)
        return SampleOutput(tokens, None, calls)
