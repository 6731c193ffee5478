"""Sequential LADD sampling: generate a clean latent first, then denoise tokens given it."""
from __future__ import annotations

import torch
from torch import Tensor

from registry.interfaces import DenoiserModel, Needs, SampleOutput, Sampler
from registry.toolkit.sampling import denoise_tokens, held_latent, known_tokens, latent_step, time_grid, times

from .config import SequentialConfig


class SequentialSampler(Sampler):
    """T^Y latent steps, then T^X token steps conditioned on the fixed latent.

    Known tokens (``fixed``) condition the token steps, and the latent steps too when the latent is
    denoised by the token network (Di-LADD's MM-DiT); a separate latent-only denoiser cannot read them.
    A given clean ``latent`` takes the place of the latent steps: the token steps alone run, conditioned on it.
    """

    needs = Needs(latent=True)
    conditions_on_clean_latent = True
    takes_latent = True  # sample() draws tokens given a clean latent

    def __init__(self, config: SequentialConfig) -> None:
        if config.latent_steps < 1:
            raise ValueError(f"sampler.latent_steps must be >= 1, got {config.latent_steps}")
        self.config = config

    @torch.no_grad()
    def sample(
        self, model: DenoiserModel, num_samples: int, steps: int, generator: torch.Generator,
        fixed: Tensor | None = None, latent: Tensor | None = None,
    ) -> SampleOutput:
        device = model.device
        known = known_tokens(model, num_samples, fixed, device)  # checked before the latent steps read it
        y = held_latent(model, num_samples, latent, device)
        latent_calls = 0 if y is not None else self.config.latent_steps
        if y is None:
            y = model.latent_prior(num_samples, generator)
            for tau_t, tau_s in time_grid(self.config.latent_steps):
                t, s = times(num_samples, tau_t, device), times(num_samples, tau_s, device)
                y = latent_step(model, y, model.predict(known, None, y, t).latent, t, s, generator)
        tokens, calls = denoise_tokens(
            model, num_samples, steps, generator, device, y, self.config.guidance, self.config.fast, fixed
        )
        return SampleOutput(tokens, y, calls + latent_calls)
