"""Confidence decoding of a masking process: LLaDA's low-confidence remasking, Dream's margin and entropy orders,
Fast-dLLM's threshold rule and its approximate key-value cache.

At every step each masked position of the current block gets a proposed token (Gumbel-max over float64 logits)
and a confidence; the most confident proposals are committed. Blocks split the free positions (those not given in
``fixed``) into runs of ``block_length`` from left to right, decoded one after the other (LLaDA's
semi-autoregressive remasking); one block covers them all. ``steps`` is spread over the blocks, and a block's
masked count over its steps, the first getting the remainder (LLaDA's transfer counts). With a ``threshold``,
every proposal whose confidence exceeds it is committed too (at least one per step, and enough that the block
ends within its steps).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from registry.errors import IncompatibleComponentsError, InvalidConfigError
from registry.interfaces import DenoiserModel, MaskingProcess, mask_id

from .options import CACHES, REMASKING
from .sampling import TokenChain, TokenRule

__all__ = [
    "CACHES",
    "REMASKING",
    "ConfidencePolicy",
    "ConfidenceRule",
    "block_steps",
    "blocks",
    "confidence",
    "confidence_rules",
    "masked_time",
    "propose",
    "select",
    "transfer_counts",
]

#: the score of a candidate pushed last (eos_confidence_inf): below every real score, above every non-candidate
_LAST = torch.finfo(torch.float64).min


def propose(logits: Tensor, temperature: float, generator: torch.Generator | None = None) -> Tensor:
    """A token per row of ``logits [N, K]``: Gumbel-max in float64, ``argmax(logits / T + g)`` with standard Gumbel
    noise ``g``, a draw from ``softmax(logits / T)``; ``T = 0``: the argmax (the lowest id among exact ties)."""
    if temperature == 0:  # widening to float64 is exact and keeps the order: the argmax of the logits as given
        return logits.argmax(-1)
    noise = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float64)
    noise = noise.log_().neg_().log_()  # -g, in place: this is a pass over the vocabulary of every candidate
    scaled = logits.to(torch.float64, copy=True) if temperature == 1 else logits.double() / temperature  # owned
    return scaled.sub_(noise).argmax(-1)


def _random(logits: Tensor, proposal: Tensor, generator: torch.Generator | None) -> Tensor:
    return torch.rand(proposal.shape, generator=generator, device=proposal.device, dtype=torch.float64)


def _low_confidence(logits: Tensor, proposal: Tensor, generator: torch.Generator | None) -> Tensor:
    logits = logits.double()  # the proposal's softmax probability, without writing the whole softmax out
    return (logits.gather(-1, proposal[:, None]).squeeze(-1) - logits.logsumexp(-1)).exp()


def _margin(logits: Tensor, proposal: Tensor, generator: torch.Generator | None) -> Tensor:
    probs = torch.softmax(logits.double(), dim=-1)
    top = probs.topk(min(2, probs.shape[-1]), dim=-1).values
    return top[:, 0] - (top[:, 1] if top.shape[1] > 1 else 0.0)


def _negative_entropy(logits: Tensor, proposal: Tensor, generator: torch.Generator | None) -> Tensor:
    log_probs = torch.log_softmax(logits.double(), dim=-1)  # one pass over the vocabulary serves both factors
    return torch.exp((log_probs.exp() * log_probs).sum(-1))


#: each remasking order's score of a row's proposal (``REMASKING`` names them for the torch-free options)
_SCORES = {"low_confidence": _low_confidence, "random": _random, "margin": _margin, "entropy": _negative_entropy}


def confidence(
    remasking: str, logits: Tensor, proposal: Tensor, generator: torch.Generator | None = None
) -> Tensor:
    """Float64 confidence ``[N]`` of each row's proposal, as ``remasking`` scores it (see ``REMASKING``)."""
    score = _SCORES.get(remasking)
    if score is None:
        raise InvalidConfigError(f"remasking={remasking!r} is not one of {', '.join(REMASKING)}")
    return score(logits, proposal, generator)


def select(scores: Tensor, candidates: Tensor, count: Tensor, threshold: float | None = None) -> Tensor:
    """Bool ``[B, S]``: per row the ``count`` candidates of highest score (exact ties: the leftmost first) and, with
    ``threshold``, every candidate scoring above it."""
    keyed = torch.where(candidates, scores, -math.inf)
    order = torch.sort(keyed, dim=1, descending=True, stable=True).indices
    places = torch.arange(order.shape[1], device=order.device).expand_as(order)
    rank = torch.empty_like(order).scatter_(1, order, places)
    chosen = candidates & (rank < count[:, None])
    return chosen if threshold is None else chosen | (candidates & (scores > threshold))


def transfer_counts(masked: Tensor, steps: int) -> Tensor:
    """``[B, steps]``: each row's ``masked`` count spread over ``steps``, the first ``masked % steps`` one more."""
    extra = masked % steps
    return (masked // steps)[:, None] + (torch.arange(steps, device=masked.device)[None] < extra[:, None]).long()


def blocks(free: Tensor, block_length: int | None) -> list[Tensor]:
    """Bool masks ``[B, S]`` of the blocks: runs of ``block_length`` free positions, left to right (None: one)."""
    if block_length is None:
        return [free]
    counts = free.sum(1)
    length = int(counts[0]) if counts.numel() else 0
    if bool((counts != length).any()):
        raise InvalidConfigError(
            f"block_length={block_length} splits every sample's free positions alike, but these samples have "
            f"{sorted(set(counts.tolist()))} free positions: give them equally many or leave block_length unset"
        )
    if length % block_length:
        raise InvalidConfigError(
            f"block_length={block_length} must divide the {length} free positions (the positions not given as "
            f"known tokens); valid: a divisor of {length}, or unset for one block"
        )
    rank = free.cumsum(1) - 1
    return [free & (rank // block_length == index) for index in range(length // block_length)]


def block_steps(steps: int, count: int) -> list[int]:
    """``steps`` spread over ``count`` blocks, the first ``steps % count`` one more (each needs one at least)."""
    if count and steps < count:
        raise InvalidConfigError(
            f"steps={steps} is fewer than the {count} blocks: each block takes one step at least; "
            f"use steps >= {count} or a longer block_length"
        )
    base, extra = divmod(steps, max(count, 1))
    return [base + (index < extra) for index in range(count)]


def masked_time(model: DenoiserModel, x: Tensor) -> Tensor:
    """The token time ``[B]`` a time-conditioned denoiser is told: the time at which the schedule masks, in
    expectation, the share of positions ``x`` holds masked (the share itself without a schedule, or for a denoiser
    that ignores the time).

    A confidence decoder's canvas is not on the process's time grid (it commits a count, not the bridge's draw), so
    its masked share is the one clue to the noise level the network was trained at; bisection on ``signal``.
    """
    share = (x == mask_id(model.vocab_size)).double().mean(1)
    schedule = model.schedule
    if schedule is None or model.caches_token_predictions:  # no schedule, or a denoiser that ignores the time
        return share.float()
    low, high = torch.zeros_like(share), torch.ones_like(share)
    for _ in range(32):  # 2**-32: below the float32 resolution of the time returned
        middle = (low + high) / 2
        short = 1.0 - schedule.signal(middle) < share
        low, high = torch.where(short, middle, low), torch.where(short, high, middle)
    return high.float()


@dataclass(frozen=True)
class ConfidencePolicy:
    """How a confidence step proposes, scores and commits tokens."""

    remasking: str = "low_confidence"
    temperature: float = 1.0
    threshold: float | None = None  # commit every proposal of confidence above it (Fast-dLLM)
    eos_logit: int | None = None  # an id never proposed (eos_logit_inf)
    eos_last: int | None = None  # an id whose proposals are committed last (eos_confidence_inf)


class ConfidenceRule(TokenRule):
    """One confidence step: proposals at the masked positions of ``block``, the ``count`` most confident committed
    per row (and, with the policy's threshold, every one above it)."""

    def __init__(
        self, block: Tensor, count: Tensor, policy: ConfidencePolicy, cache: Any = None, window: slice | None = None
    ) -> None:
        self.block, self.count, self.policy = block, count, policy
        self.cache, self.window = cache, window

    def rows(self, model: DenoiserModel, chain: TokenChain, generator: torch.Generator) -> Tensor:
        return self.block & (chain.x == mask_id(model.vocab_size))

    def time(self, model: DenoiserModel, chain: TokenChain) -> Tensor:
        return masked_time(model, chain.x)

    def commit(
        self, model: DenoiserModel, chain: TokenChain, logits: Tensor, rows: Tensor | None, generator: torch.Generator
    ) -> Tensor:
        assert rows is not None  # rows() always names the candidates
        policy = self.policy
        if policy.eos_logit is not None:  # out of place: the logits may be the network's own output
            logits = logits.index_fill(-1, torch.tensor([policy.eos_logit], device=logits.device), -math.inf)
        proposal = propose(logits, policy.temperature, generator)
        score = confidence(policy.remasking, logits, proposal, generator)
        if policy.eos_last is not None:
            score = torch.where(proposal == policy.eos_last, _LAST, score)
        scores = torch.full(rows.shape, -math.inf, dtype=torch.float64, device=rows.device).masked_scatter(rows, score)
        chosen = select(scores, rows, self.count, policy.threshold)
        x = chain.x.clone()
        x[chosen] = torch.zeros_like(chain.x).masked_scatter(rows, proposal)[chosen]
        return x


def _window(block: Tensor, cache: str) -> slice:
    """The positions a cached step recomputes: from the block's first position on (prefix), or the block (dual)."""
    where = block.any(0).nonzero().squeeze(1)
    start, stop = int(where[0]), int(where[-1]) + 1
    return slice(start, None) if cache == "prefix" else slice(start, stop)


def confidence_rules(
    model: DenoiserModel,
    chain: TokenChain,
    steps: int,
    policy: ConfidencePolicy,
    block_length: int | None = None,
    cache: str = "none",
    refresh: int = 0,
) -> Iterator[ConfidenceRule]:
    """The rules of confidence decoding's steps, block after block, each made when the step before it has run.

    ``cache`` (``CACHES``): with ``prefix`` or ``dual``, the first step of each block (and every ``refresh``-th step
    of a block, when ``refresh`` is set) runs every position and fills the cache; the others recompute the window
    only. ``refresh=1`` recomputes everything at every step: the tokens of the uncached decoder, exactly.
    """
    if not isinstance(model.process, MaskingProcess):
        raise IncompatibleComponentsError(
            f"confidence decoding commits tokens of a masking process (registry.interfaces.MaskingProcess); "
            f"token process {type(model.process).__name__} is not one"
        )
    mask = mask_id(model.vocab_size)
    parts = blocks(chain.x == mask, block_length)
    store = None if cache == "none" else model.new_cache(chain.x.shape[0])
    for block, count in zip(parts, block_steps(steps, len(parts)), strict=True):
        counts = transfer_counts(block.sum(1), count)
        for index in range(count):
            if policy.threshold is None:
                wanted = counts[:, index]
            else:
                left = (block & (chain.x == mask)).sum(1)
                if not bool(left.any()):
                    break
                wanted = (left + count - index - 1) // (count - index)  # what finishing in the steps left needs
                wanted = wanted.clamp(min=1)
            refreshed = store is None or index % (refresh or count) == 0
            yield ConfidenceRule(block, wanted, policy, store, None if refreshed else _window(block, cache))
