"""Joint LADD sampling: tokens and latent are denoised together at every reverse step."""
from __future__ import annotations

import torch
from torch import Tensor

from registry.interfaces import DenoiserModel, Needs, SampleOutput, Sampler
from registry.toolkit.sampling import (
    check_fixed_kept,
    denoise_tokens,
    guidance_seed,
    held_latent,
    known_tokens,
    latent_step,
    revealing,
    reverse_step,
    start_tokens,
    time_grid,
    times,
    token_logits,
)

from .config import JointConfig


class JointSampler(Sampler):
    """One network call per step predicts both channels; each channel takes its own reverse step.

    A given clean ``latent`` holds the latent channel at it (time 0) through every step, so only the tokens move:
    the token chain of :func:`registry.toolkit.sampling.denoise_tokens`, conditioned on that latent.
    """

    needs = Needs(latent=True)
    takes_latent = True  # sample() draws tokens given a clean latent

    def __init__(self, config: JointConfig) -> None:
        self.config = config

    @torch.no_grad()
    def sample(
        self, model: DenoiserModel, num_samples: int, steps: int, generator: torch.Generator,
        fixed: Tensor | None = None, latent: Tensor | None = None,
    ) -> SampleOutput:
        device = model.device
        held = held_latent(model, num_samples, latent, device)
        if held is not None:
            guidance, fast = self.config.guidance, self.config.fast
            tokens, calls = denoise_tokens(model, num_samples, steps, generator, device, held, guidance, fast, fixed)
            return SampleOutput(tokens, held, calls)
        x = start_tokens(model, num_samples, device, generator, fixed)
        known = known_tokens(model, num_samples, fixed, device)
        y = model.latent_prior(num_samples, generator)
        revealer, calls = revealing(model, self.config.fast), 0
        null_seed = guidance_seed(generator, self.config.guidance)
        for tau_t, tau_s in time_grid(steps):
            t, s = times(num_samples, tau_t, device), times(num_samples, tau_s, device)
            if revealer is not None:  # the latent needs the network every step; the token head runs at revealed rows
                reveal = revealer.reveal(x, t, s, generator)
                rows, latent_prediction, used = token_logits(
                    model, x, t, y, t, self.config.guidance, null_seed, rows=reveal
                )
                x = revealer.fill(x, reveal, rows, generator)
            else:
                logits, latent_prediction, used = token_logits(model, x, t, y, t, self.config.guidance, null_seed)
                x = reverse_step(model.process, x, logits, t, s, generator, known)
            calls += used
            y = latent_step(model, y, latent_prediction, t, s, generator)
        return SampleOutput(check_fixed_kept(x, fixed, model), y, calls)
