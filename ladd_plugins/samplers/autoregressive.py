"""Left-to-right sampling of the autoregressive baseline: one revealed token per network call, with a KV cache."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from registry.interfaces import CachingBackbone, DenoiserModel, Needs, SampleOutput, Sampler, mask_id
from registry.toolkit.sampling import (
    Conditioning,
    ProcessRule,
    TokenChain,
    check_fixed_kept,
    process_rules,
    run_rules,
    start_chain,
    time_grid,
    times,
)

from .config import AutoregressiveConfig

__all__ = ["AutoregressiveSampler"]


class AutoregressiveSampler(Sampler):
    """The ancestral token chain on the exact fast path with ``S`` steps, whatever step count is asked.

    An autoregressive model reveals one token per network call, so ``steps`` is ignored: every budget
    of an evaluation gets the full ``S``-step chain, and ``network_calls`` reports what it cost (``S``
    less the known tokens of ``fixed``; steps with nothing left to reveal call no network). Only the
    revealed row goes through the output head. Known tokens right of a free position (an infill's
    suffix) are kept but unseen there: a causal model conditions on the left context only. With ``cache`` (the
    default) a call runs only the positions whose keys and values are not yet cached from final tokens (one per
    call without a prompt), the rest read from the causal backbone's exact cache: the same tokens as without it.
    """

    needs = Needs(latent=False)  # its predictions take no latent (and, with the cache, a caching backbone)

    def __init__(self, config: AutoregressiveConfig | None = None) -> None:
        self.config = config or AutoregressiveConfig()
        self.needs = Needs(latent=False, backbone=CachingBackbone if self.config.cache else None)

    @torch.no_grad()
    def sample(  # type: ignore[override]  # no latent keyword: ladd passes a clean latent to no such sampler
        self,
        model: DenoiserModel,
        num_samples: int,
        steps: int,
        generator: torch.Generator,
        fixed: Tensor | None = None,
    ) -> SampleOutput:
        chain = start_chain(model, num_samples, model.device, generator, fixed)
        rules = _cached_rules(model, chain) if self.config.cache else process_rules(chain, model.seq_len)
        run_rules(model, chain, rules, generator, Conditioning())
        return SampleOutput(check_fixed_kept(chain.x, fixed, model), None, chain.calls, order=chain.order)


class _CachedRule(ProcessRule):
    """A step that recomputes the positions from ``fresh`` (the first whose cached keys and values were not computed
    from final tokens) to the last one it reveals, and reads the others from the cache."""

    def __init__(self, tau_t: Tensor, tau_s: Tensor, cache: Any, fresh: int) -> None:
        super().__init__(tau_t, tau_s)
        self.cache, self.fresh = cache, fresh

    def rows(self, model: DenoiserModel, chain: TokenChain, generator: torch.Generator) -> Tensor | None:
        rows = super().rows(model, chain, generator)
        assert rows is not None  # an autoregressive process reveals: the fast path applies
        if bool(rows.any()):
            length = chain.x.shape[1]
            masked = chain.x == mask_id(model.vocab_size)
            # a row's positions up to its first masked one have final inputs (the tokens before each)
            final = torch.where(masked.any(dim=1), masked.int().argmax(dim=1), length)
            stop = int(rows.nonzero()[:, 1].max()) + 1
            self.window = slice(self.fresh, stop)
            self.fresh = min(stop, int(final.min()) + 1)
        return rows


def _cached_rules(model: DenoiserModel, chain: TokenChain) -> Iterator[_CachedRule]:
    """The ``S`` steps of the chain through one key-value cache, each window starting where the last one left
    positions computed from final tokens."""
    batch, device = chain.x.shape[0], chain.x.device
    cache, fresh = model.new_cache(batch), 0
    for tau_t, tau_s in time_grid(model.seq_len):
        rule = _CachedRule(times(batch, tau_t, device), times(batch, tau_s, device), cache, fresh)
        yield rule
        fresh = rule.fresh
