"""Sequential LADD sampling: generate a clean latent first, then decode tokens given it."""
from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from registry.interfaces import DenoiserModel, Needs, SampleOutput, Sampler, TokenDecoder, needs_of
from registry.toolkit.sampling import decode_tokens, held_latent, known_tokens, latent_step, time_grid, times

from .config import SequentialConfig
from .decoders import check_decoder_options


class SequentialSampler(Sampler):
    """T^Y latent steps, then T^X token steps of ``token_decoder`` conditioned on the fixed latent.

    Any registered token decoder (``ancestral``, the default; ``confidence``; a plugin's) decodes the tokens, given
    the clean latent at latent time 0 and with this sampler's guidance. Known tokens (``fixed``) condition the token
    steps, and the latent steps too when the latent is denoised by the token network (Di-LADD's MM-DiT); a separate
    latent-only denoiser cannot read them. A given clean ``latent`` takes the place of the latent steps: the token
    steps alone run, conditioned on it.
    """

    needs = Needs(latent=True)  # and what its token decoder needs (set when it is built)
    conditions_on_clean_latent = True
    takes_latent = True  # sample() draws tokens given a clean latent

    def __init__(self, config: SequentialConfig, token_decoder: TokenDecoder) -> None:
        if config.latent_steps < 1:
            raise ValueError(f"sampler.latent_steps must be >= 1, got {config.latent_steps}")
        self.config = config
        check_decoder_options(config.token_decoder_options)
        self.decoder = token_decoder
        self.needs = dataclasses.replace(needs_of(self.decoder), latent=True)

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
        out = decode_tokens(self.decoder, model, num_samples, steps, generator, fixed, y, self.config.guidance)
        return dataclasses.replace(out, network_calls=out.network_calls + latent_calls)
