"""Confidence decoding of a masked diffusion LM: LLaDA's remasking, Dream's generation, Fast-dLLM's threshold, factor
and cache.

What the denoiser is told: a token-time-conditioned denoiser gets the time at which the token schedule masks, in
expectation, the share of positions still masked (``registry.toolkit.decoding.masked_time``): the canvas of a
confidence decoder is not on the process's time grid, and that share is the noise level the network was trained to
read. A denoiser without time conditioning (LLaDA's, the paper's MDLM) is unaffected.
"""
from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from registry.errors import InvalidConfigError
from registry.interfaces import CachingBackbone, DenoiserModel, MaskingProcess, Needs, SampleOutput, TokenDecoder
from registry.toolkit.decoding import ConfidencePolicy, ConfidenceRule, confidence_rules
from registry.toolkit.options import ConfidenceConfig
from registry.toolkit.sampling import TokenChain, decode_tokens

__all__ = ["ConfidenceSampler"]


class ConfidenceSampler(TokenDecoder):
    """Commits, at each step, the most confident proposals among the masked positions up to the current block's end.

    With ``temperature=0``, no threshold and no cache its tokens are those of LLaDA's ``generate()`` (exact ties of
    confidence broken towards the leftmost position); ``guidance`` w is LLaDA's ``cfg_scale`` w - 1. With
    ``bounded=false`` a threshold or factor is Fast-dLLM's; with ``schedule=dream``, Dream's ``diffusion_generate``
    (its ``alg``: ``origin``, ``maskgit_plus`` = low_confidence, ``topk_margin`` = margin, ``entropy``).
    """

    needs = Needs(latent=False, token_process=MaskingProcess, blocks=False)

    def __init__(self, config: ConfidenceConfig) -> None:
        self.config = config
        if config.cache != "none":  # a cache needs a backbone that keeps one: checked before anything runs
            why = f"its option cache={config.cache!r} keeps the backbone's key-value cache; cache='none' needs none"
            self.needs = Needs(latent=False, token_process=MaskingProcess, backbone=CachingBackbone, blocks=False,
                               why=why)

    @torch.no_grad()
    def sample(  # type: ignore[override]  # no latent keyword: a LADD sampler hands its latent to decode_tokens
        self,
        model: DenoiserModel,
        num_samples: int,
        steps: int,
        generator: torch.Generator,
        fixed: Tensor | None = None,
    ) -> SampleOutput:
        return decode_tokens(self, model, num_samples, steps, generator, fixed, guidance=self.config.guidance)

    def rules(self, model: DenoiserModel, chain: TokenChain, steps: int) -> Iterator[ConfidenceRule]:
        config = self.config
        policy = ConfidencePolicy(
            config.remasking,
            config.temperature,
            config.threshold,
            _eos(model, "eos_logit_inf") if config.eos_logit_inf else None,
            _eos(model, "eos_confidence_inf") if config.eos_confidence_inf else None,
            config.factor,
            config.bounded,
            config.schedule,
            config.eps,
            config.top_p,
            config.top_k,
            config.alg_temp,
        )
        return confidence_rules(model, chain, steps, policy, config.block_length, config.cache, config.refresh)


def _eos(model: DenoiserModel, option: str) -> int:
    """The model's end-of-document id, which ``option`` acts on."""
    if model.eos_id is None:
        raise InvalidConfigError(
            f"{option}=true acts on the end-of-document token, but this model's data has none (no eos_id); "
            f"set {option}=false"
        )
    return model.eos_id
