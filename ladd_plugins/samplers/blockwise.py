"""Block diffusion sampling (BD3-LM): the blocks of a block-causal model generated left to right, each by a token
decoder, with an exact key-value cache of the committed blocks, to any length, ending at the end of the document.

A block is decoded as a sequence of its own by any registered token decoder (``ancestral``, the default, or
``confidence``): the decoder sees a view of the model whose predictions are those of the block given the committed
blocks before it, so its steps, random draws and commits are the same with the cache as without it. With the cache,
a block's steps recompute the block alone and read the committed blocks' keys and values, which one pass writes when
the block is done; without it, every step runs the block-causal network over every position up to the block's end.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from registry.errors import IncompatibleComponentsError, InvalidConfigError
from registry.interfaces import (
    CachingBackbone,
    Denoised,
    DenoiserModel,
    Needs,
    SampleOutput,
    Sampler,
    TokenDecoder,
    mask_id,
    needs_of,
)
from registry.toolkit.sampling import Conditioning, TokenChain, check_fixed_kept, known_tokens, run_rules

from .config import BlockwiseConfig
from .decoders import check_decoder_options

__all__ = ["BlockwiseSampler"]


class BlockwiseSampler(Sampler):
    """Blocks of ``model.attention.block`` positions from left to right, each decoded in ``steps`` token steps.

    ``length`` positions are generated (the model's length by default; any length, also beyond the trained one: a
    block then sees the blocks of the model's length up to its own). Known tokens of ``fixed`` (a prompt) are kept: a
    block they fill is committed without a step. With ``stop_at_eos`` and data that has an end-of-document token, a
    sequence ends at its first generated one (``SampleOutput.lengths``; the end-of-document id fills the rest), and
    sampling stops once every sequence has ended.
    """

    variable_length = True
    needs = Needs(latent=False, blocks=True)  # and what its token decoder and its cache need (set when it is built)

    def __init__(self, config: BlockwiseConfig, token_decoder: TokenDecoder) -> None:
        self.config = config
        check_decoder_options(config.token_decoder_options)
        self.decoder = token_decoder
        wanted = needs_of(self.decoder)
        if wanted.backbone is not None:
            raise InvalidConfigError(
                f"token decoder {config.token_decoder!r} keeps a key-value cache of its own, but the blockwise "
                "sampler keeps the exact cache of the committed blocks (cache=true); leave the decoder's cache unset"
            )
        cache = CachingBackbone if config.cache else None
        why = "its option cache=true keeps the committed blocks' key-value cache; cache=false needs none"
        self.needs = Needs(latent=False, token_process=wanted.token_process, backbone=cache, blocks=True, why=why)

    @torch.no_grad()
    def sample(  # type: ignore[override]  # no latent keyword: block attention is trained without a latent channel
        self,
        model: DenoiserModel,
        num_samples: int,
        steps: int,
        generator: torch.Generator,
        fixed: Tensor | None = None,
        length: int | None = None,
    ) -> SampleOutput:
        block = model.attention.block
        if block is None:
            raise IncompatibleComponentsError(
                "the blockwise sampler decodes the blocks of a token backbone of block attention, but this model's "
                "attends bidirectionally; choose another sampler or a backbone of block attention"
            )
        length = model.seq_len if length is None else length
        if length < 1:
            raise InvalidConfigError(f"length={length} is not valid: it must be a whole number >= 1")
        device = model.device
        known = known_tokens(model, num_samples, fixed, device, length)
        x = model.process.prior((num_samples, length), device, generator)
        if known is not None:
            x = torch.where(known == mask_id(model.vocab_size), x, known)
        cache = model.new_cache(num_samples) if self.config.cache else None
        eos = model.eos_id if self.config.stop_at_eos else None
        ends = torch.full((num_samples,), length, device=device)
        calls, committed = 0, 0
        for start in range(0, length, block):
            stop = min(start + block, length)
            masked = x[:, start:stop] == mask_id(model.vocab_size)
            if not bool(masked.any()):
                continue  # given whole: committed with the next block that needs a step
            if cache is not None and committed < start:  # the clean keys and values of the blocks done
                rows = torch.zeros(num_samples, start, dtype=torch.bool, device=device)
                model.predict(x[:, :start], torch.zeros(num_samples, device=device), None, None, rows,
                              cache=cache, window=slice(committed, start))
                calls, committed = calls + 1, start
            view = _BlockView(model, x[:, :start], stop - start, cache)
            chain = TokenChain(x[:, start:stop].clone(), None if known is None else known[:, start:stop])
            run_rules(view, chain, self.decoder.rules(view, chain, steps), generator, Conditioning())
            x[:, start:stop] = chain.x
            calls += chain.calls
            if eos is not None:
                ends = _ended(ends, masked & (chain.x == eos), start)
                if bool((ends < length).all()):
                    break
        tokens = check_fixed_kept(x, fixed, model)
        if eos is not None:
            tokens = torch.where(torch.arange(length, device=device) >= ends[:, None], eos, tokens)
        stopped = None if bool((ends == length).all()) else ends
        return SampleOutput(tokens, None, calls, stopped)


def _ended(ends: Tensor, eos: Tensor, start: int) -> Tensor:
    """The end of each sequence: its length so far, or the position after the first generated end-of-document token
    (``eos``, bool over the block from ``start``) of one that had not ended."""
    hit = eos.any(dim=1)
    first = start + eos.int().argmax(dim=1) + 1
    return torch.where(hit & (first < ends), first, ends)


class _BlockView(DenoiserModel):
    """The model as its decoder sees one block: a sequence of the block's positions, predicted given the committed
    blocks ``prefix`` (read from ``cache`` when there is one, else run again at every call)."""

    def __init__(self, model: DenoiserModel, prefix: Tensor, width: int, cache: Any) -> None:
        self.model, self.prefix, self.cache = model, prefix, cache
        self.process, self.schedule, self.vocab_size = model.process, model.schedule, model.vocab_size
        self.latent, self.latent_process, self.eos_id, self.seq_len = None, None, model.eos_id, width

    def predict(
        self,
        x_t: Tensor | None,
        tau_x: Tensor | None,
        y_t: Tensor | None,
        tau_y: Tensor | None,
        rows: Tensor | None = None,
        cache: Any = None,
        window: slice | None = None,
    ) -> Denoised:
        assert x_t is not None and tau_x is not None  # a token decoder predicts tokens at a token time
        start, stop = self.prefix.shape[1], self.prefix.shape[1] + x_t.shape[1]
        tokens = torch.cat([self.prefix, x_t], dim=1)  # [B, stop]
        if rows is not None:
            rows = torch.cat([torch.zeros_like(self.prefix, dtype=torch.bool), rows], dim=1)
        if self.cache is not None:
            return self.model.predict(tokens, tau_x, None, None, rows, cache=self.cache, window=slice(start, stop))
        out = self.model.predict(tokens, tau_x, None, None, rows)
        return out if rows is not None or out.tokens is None else dataclasses.replace(out, tokens=out.tokens[:, start:])

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def caches_token_predictions(self) -> bool:
        return self.model.caches_token_predictions
