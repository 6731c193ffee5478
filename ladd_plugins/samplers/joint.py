"""Joint LADD sampling: tokens and latent are denoised together at every reverse step."""
from __future__ import annotations

import torch
from torch import Tensor

from registry.errors import InvalidConfigError, LaddError
from registry.interfaces import DenoiserModel, Needs, SampleOutput, Sampler, TokenDecoder, needs_of
from registry.toolkit.sampling import (
    Conditioning,
    TokenChain,
    TokenRule,
    check_fixed_kept,
    decode_tokens,
    guidance_seed,
    held_latent,
    latent_step,
    start_chain,
    time_grid,
    times,
    token_step,
)

from .config import JointConfig
from .decoders import check_decoder_options


class JointSampler(Sampler):
    """One network call per step predicts both channels; each channel takes its own reverse step.

    The tokens move by the steps of ``token_decoder`` (the token process's own step by default; a confidence rule
    commits a count of confident proposals instead), the latent by its process's step on the time grid, told the
    grid's time. A decoder that ends early (a threshold) leaves the remaining steps to the latent. A decoder that
    keeps a key-value cache is refused: the latent is predicted at every step, from every position.
    A given clean ``latent`` holds the latent channel at it (time 0) through every step, so only the tokens move:
    the decoder's token chain, conditioned on that latent.
    """

    needs = Needs(latent=True)  # and what its token decoder needs (set when it is built)
    takes_latent = True  # sample() draws tokens given a clean latent

    def __init__(self, config: JointConfig, token_decoder: TokenDecoder) -> None:
        self.config = config
        check_decoder_options(config.token_decoder_options)
        self.decoder = token_decoder
        wanted = needs_of(self.decoder)
        if wanted.backbone is not None:
            raise InvalidConfigError(
                f"token decoder {config.token_decoder!r} needs a token backbone that caches keys and values, which "
                "the joint sampler cannot use (it predicts the latent from every position at every step); sample "
                "without a cache"
            )
        self.needs = Needs(latent=True, token_process=wanted.token_process)

    @torch.no_grad()
    def sample(
        self, model: DenoiserModel, num_samples: int, steps: int, generator: torch.Generator,
        fixed: Tensor | None = None, latent: Tensor | None = None,
    ) -> SampleOutput:
        device, guidance = model.device, self.config.guidance
        held = held_latent(model, num_samples, latent, device)
        if held is not None:
            return decode_tokens(self.decoder, model, num_samples, steps, generator, fixed, held, guidance)
        chain = start_chain(model, num_samples, device, generator, fixed)
        y = model.latent_prior(num_samples, generator)
        null_seed = guidance_seed(generator, guidance)
        rules = iter(self.decoder.rules(model, chain, steps))
        for tau_t, tau_s in time_grid(steps):
            t, s = times(num_samples, tau_t, device), times(num_samples, tau_s, device)
            rule = next(rules, None) or _Idle(t)
            # the latent needs the network every step; the token head runs at the rule's rows
            prediction = token_step(model, chain, rule, generator, Conditioning(y, t, guidance, null_seed), True)
            y = latent_step(model, y, prediction, t, s, generator)
        if next(rules, None) is not None:
            raise LaddError(f"token decoder {self.config.token_decoder!r} took more than the {steps} steps asked")
        return SampleOutput(check_fixed_kept(chain.x, fixed, model), y, chain.calls, order=chain.order)


class _Idle(TokenRule):
    """A step that moves no token, once the decoder has committed them all: the network call serves the latent."""

    def __init__(self, tau: Tensor) -> None:
        self.tau = tau

    def rows(self, model: DenoiserModel, chain: TokenChain, generator: torch.Generator) -> Tensor:
        return torch.zeros_like(chain.x, dtype=torch.bool)

    def time(self, model: DenoiserModel, chain: TokenChain) -> Tensor:
        return self.tau

    def commit(
        self, model: DenoiserModel, chain: TokenChain, logits: Tensor, rows: Tensor | None, generator: torch.Generator
    ) -> Tensor:
        return chain.x
