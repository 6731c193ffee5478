"""Confidence decoding of a masking process: LLaDA's low-confidence remasking, Dream's generation, Fast-dLLM's threshold
and factor rules and its approximate key-value cache.

At every step each masked position before the end of the current block gets a proposed token (Gumbel-max over float64
logits) and a confidence; the most confident proposals are committed. Blocks split the free positions (those not given
in ``fixed``) into runs of ``block_length`` from left to right, decoded one after the other (LLaDA's
semi-autoregressive remasking); one block covers them all. ``steps`` is spread over the blocks. How many a step
commits is the schedule's (``CONFIDENCE_SCHEDULES``): LLaDA's spread of a block's masked count over its steps, the
first getting the remainder, or Dream's ``int(M (1 - s/t))`` of the ``M`` masked positions on its time grid. With a
``threshold`` (or Fast-dLLM's ``factor``), the confident proposals are committed too: at least enough that the block
ends within its steps (``bounded``), or, as Fast-dLLM does, at least the most confident one, step after step until
the block holds no mask.

A network whose output keeps a column for its own mask (``DenoiserModel.mask_column``: LLaDA's and Dream's) proposes
and scores over it as their code does: a proposal of the mask takes its place among the committed ones and leaves the
position masked, a candidate again at the next step (and after its block, until the end, as in LLaDA's ``generate``).
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

from .options import CACHES, CONFIDENCE_SCHEDULES, REMASKING
from .sampling import TokenChain, TokenRule

__all__ = [
    "CACHES",
    "CONFIDENCE_SCHEDULES",
    "REMASKING",
    "ConfidencePolicy",
    "ConfidenceRule",
    "block_steps",
    "blocks",
    "confidence",
    "confidence_rules",
    "dream_confidence",
    "dream_counts",
    "dream_logits",
    "factor_counts",
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


def select(
    scores: Tensor, candidates: Tensor, count: Tensor, threshold: float | None = None, inclusive: bool = False
) -> Tensor:
    """Bool ``[B, S]``: per row the ``count`` candidates of highest score (exact ties: the leftmost first) and, with
    ``threshold``, every candidate scoring above it (or at it, ``inclusive``: Fast-dLLM keeps those)."""
    chosen = candidates & (_ranks(scores, candidates) < count[:, None])
    if threshold is None:
        return chosen
    return chosen | (candidates & (scores >= threshold if inclusive else scores > threshold))


def _ranks(scores: Tensor, candidates: Tensor) -> Tensor:
    """``[B, S]``: each position's place in its row ordered by score, candidates first (exact ties: leftmost first)."""
    keyed = torch.where(candidates, scores, -math.inf)
    order = torch.sort(keyed, dim=1, descending=True, stable=True).indices
    places = torch.arange(order.shape[1], device=order.device).expand_as(order)
    return torch.empty_like(order).scatter_(1, order, places)


def factor_counts(scores: Tensor, candidates: Tensor, factor: float) -> Tensor:
    """``[B]``: Fast-dLLM's factor rule. With a row's ``n`` candidate scores in falling order ``c_0 >= c_1 >= ...``,
    the first place ``j >= 1`` where ``c_j < 1 - factor / (j + 2)``, or every candidate when none falls short; as
    Fast-dLLM's code does, a shortfall at the last place commits every candidate too (and one candidate, one)."""
    keyed = torch.where(candidates, scores, -math.inf)
    ordered = torch.sort(keyed, dim=1, descending=True).values
    places = torch.arange(ordered.shape[1], device=ordered.device)
    bars = 1.0 - factor / (places + 2.0)
    total = candidates.sum(1)
    short = (ordered < bars) & (places >= 1) & (places < total[:, None])
    first = torch.where(short.any(1), short.long().argmax(1), total - 1)
    return torch.where((first == 0) | (first == total - 1), first + 1, first).clamp(min=0)


def transfer_counts(masked: Tensor, steps: int) -> Tensor:
    """``[B, steps]``: each row's ``masked`` count spread over ``steps``, the first ``masked % steps`` one more."""
    extra = masked % steps
    return (masked // steps)[:, None] + (torch.arange(steps, device=masked.device)[None] < extra[:, None]).long()


def dream_counts(masked: Tensor, steps: int, index: int, eps: float) -> tuple[Tensor, Tensor]:
    """Step ``index`` (from 0) of Dream's ``steps``: how many of each row's ``masked`` positions it commits,
    ``int(M (1 - s/t))`` on the float32 grid ``linspace(1, eps, steps + 1)`` (every one at the last step), and the
    chance ``1 - s/t`` (1 at the last step) with which its ``origin`` order commits each."""
    grid = torch.linspace(1, eps, steps + 1)  # float32, as Dream computes it
    last = index == steps - 1
    chance = torch.ones(()) if last else 1 - grid[index + 1] / grid[index]
    count = masked if last else (masked.float() * chance.to(masked.device)).long()
    return count, chance.double()


def dream_logits(logits: Tensor, temperature: float, top_p: float | None, top_k: int | None) -> Tensor:
    """Float64 logits of the distribution Dream proposes from: divided by the temperature (when above 0), then the
    tokens outside the nucleus ``top_p`` (the most probable one always kept) and outside the ``top_k`` most probable
    given no probability."""
    scaled = logits.double() / temperature if temperature > 0 else logits.double()
    if top_p is not None and top_p < 1:
        ordered, order = torch.sort(scaled, dim=-1, descending=True)
        beyond = ordered.softmax(-1).cumsum(-1) > top_p
        beyond = torch.cat([torch.zeros_like(beyond[..., :1]), beyond[..., :-1]], dim=-1)
        scaled = scaled.masked_fill(torch.zeros_like(beyond).scatter_(-1, order, beyond), -math.inf)
    if top_k is not None:
        kth = scaled.topk(min(top_k, scaled.shape[-1]), dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, -math.inf)
    return scaled


def _dream_probability(probs: Tensor, proposal: Tensor) -> Tensor:
    return probs.gather(-1, proposal[:, None]).squeeze(-1)


def _dream_margin(probs: Tensor, proposal: Tensor) -> Tensor:
    top = probs.topk(min(2, probs.shape[-1]), dim=-1).values
    return top[:, 0] - (top[:, 1] if top.shape[1] > 1 else 0.0)


def _dream_negative_entropy(probs: Tensor, proposal: Tensor) -> Tensor:
    return (probs * (probs + 1e-10).log()).sum(-1)


#: each order's score under Dream's generation (its maskgit_plus, topk_margin and entropy)
_DREAM_SCORES = {"low_confidence": _dream_probability, "margin": _dream_margin, "entropy": _dream_negative_entropy}


def dream_confidence(remasking: str, logits: Tensor, proposal: Tensor) -> Tensor:
    """Float64 confidence ``[N]`` of each row's proposal as Dream's generation scores it, from the distribution of
    :func:`dream_logits`: the proposal's probability, the top-1 minus top-2 probability, or ``sum p log(p + 1e-10)``."""
    score = _DREAM_SCORES.get(remasking)
    if score is None:
        raise InvalidConfigError(f"remasking={remasking!r} orders no proposals by Dream's confidence; valid: "
                                 f"{', '.join(_DREAM_SCORES)}")
    return score(logits.softmax(-1), proposal)


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
    """How a confidence step proposes, scores and commits tokens (``ConfidenceConfig`` says what each option does)."""

    remasking: str = "low_confidence"
    temperature: float = 1.0
    threshold: float | None = None  # commit every proposal of confidence above it (Fast-dLLM)
    eos_logit: int | None = None  # an id never proposed (eos_logit_inf)
    eos_last: int | None = None  # an id whose proposals are committed last (eos_confidence_inf)
    factor: float | None = None  # Fast-dLLM's factor rule
    bounded: bool = True  # a threshold or factor still ends each block within its steps
    schedule: str = "llada"  # CONFIDENCE_SCHEDULES
    eps: float = 1e-3  # Dream's grid ends at eps
    top_p: float | None = None
    top_k: int | None = None
    alg_temp: float | None = None

    def __post_init__(self) -> None:
        if self.schedule not in CONFIDENCE_SCHEDULES:
            raise InvalidConfigError(f"schedule={self.schedule!r} is not one of {', '.join(CONFIDENCE_SCHEDULES)}")

    @property
    def adaptive(self) -> bool:
        """Whether the confidences decide how many are committed (a threshold or a factor)."""
        return self.threshold is not None or self.factor is not None


class ConfidenceRule(TokenRule):
    """One confidence step: proposals at the masked positions up to the end of ``block`` (of ``block`` alone in a
    cached window), ``count`` of them committed per row as the policy chooses (``chance``: each with this chance,
    Dream's ``origin``)."""

    def __init__(
        self, block: Tensor, count: Tensor, policy: ConfidencePolicy, cache: Any = None, window: slice | None = None,
        reach: Tensor | None = None, chance: Tensor | None = None,
    ) -> None:
        self.block, self.count, self.policy = block, count, policy
        self.cache, self.window = cache, window
        self.reach = block if reach is None else reach
        self.chance = chance

    def rows(self, model: DenoiserModel, chain: TokenChain, generator: torch.Generator) -> Tensor:
        return (self.block if self.window is not None else self.reach) & (chain.x == mask_id(model.vocab_size))

    def time(self, model: DenoiserModel, chain: TokenChain) -> Tensor:
        return masked_time(model, chain.x)

    def commit(
        self, model: DenoiserModel, chain: TokenChain, logits: Tensor, rows: Tensor | None, generator: torch.Generator
    ) -> Tensor:
        assert rows is not None  # rows() always names the candidates
        policy = self.policy
        if policy.eos_logit is not None:  # out of place: the logits may be the network's own output
            logits = logits.index_fill(-1, torch.tensor([policy.eos_logit], device=logits.device), -math.inf)
        if policy.schedule == "dream":
            logits = dream_logits(logits, policy.temperature, policy.top_p, policy.top_k)
            proposal = propose(logits, 1.0 if policy.temperature > 0 else 0.0, generator)  # tempered already
            score = None if self.chance is not None else dream_confidence(policy.remasking, logits, proposal)
        else:
            proposal = propose(logits, policy.temperature, generator)
            score = confidence(policy.remasking, logits, proposal, generator)
        scores = torch.full(rows.shape, -math.inf, dtype=torch.float64, device=rows.device)
        if score is not None:
            if policy.eos_last is not None:
                score = torch.where(proposal == policy.eos_last, _LAST, score)
            scores = scores.masked_scatter(rows, score)
        chosen = self._chosen(scores, rows, generator)
        own = model.mask_column
        if own is not None:  # the network proposed its own mask: the position stays masked (LLaDA, Dream)
            proposal = proposal.masked_fill(proposal == own, mask_id(model.vocab_size))
        x = chain.x.clone()
        x[chosen] = torch.zeros_like(chain.x).masked_scatter(rows, proposal)[chosen]
        return x

    def _chosen(self, scores: Tensor, rows: Tensor, generator: torch.Generator) -> Tensor:
        """Bool ``[B, S]``: the candidates this step commits."""
        policy = self.policy
        if self.chance is not None:  # Dream's origin: each masked position on its own
            draw = torch.rand(rows.shape, generator=generator, device=rows.device, dtype=torch.float64)
            return rows & (draw < self.chance.to(rows.device))
        if policy.alg_temp:  # Dream: positions drawn without replacement in proportion to softmax(score / alg_temp)
            noise = torch.rand(rows.shape, generator=generator, device=rows.device, dtype=torch.float64)
            scores = scores / policy.alg_temp - noise.log_().neg_().log_()
        count = self.count
        if policy.factor is not None:
            wanted = factor_counts(scores, rows, policy.factor)
            count = torch.maximum(count, wanted) if policy.bounded else wanted
        return select(scores, rows, count, policy.threshold, inclusive=not policy.bounded)


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
    An unbounded threshold or factor (``policy.bounded`` False) steps until the block holds no mask, or until a step
    leaves every token as it was (each proposal it committed was the mask).
    """
    if not isinstance(model.process, MaskingProcess):
        raise IncompatibleComponentsError(
            f"confidence decoding commits tokens of a masking process (registry.interfaces.MaskingProcess); "
            f"token process {type(model.process).__name__} is not one"
        )
    mask = mask_id(model.vocab_size)
    parts = blocks(chain.x == mask, block_length)
    store = None if cache == "none" else model.new_cache(chain.x.shape[0])
    reach = torch.zeros_like(chain.x, dtype=torch.bool)
    for block, count in zip(parts, block_steps(steps, len(parts)), strict=True):
        reach = reach | block
        counts = transfer_counts(block.sum(1), count)
        index = 0
        while policy.adaptive and not policy.bounded or index < count:
            left = (block & (chain.x == mask)).sum(1)
            if policy.adaptive and not bool(left.any()):
                break
            chance = None
            if policy.schedule == "dream":
                wanted, chance = dream_counts((reach & (chain.x == mask)).sum(1), count, index, policy.eps)
                chance = chance if policy.remasking == "origin" else None
            elif not policy.adaptive:
                wanted = counts[:, index]
            elif policy.bounded:  # what finishing in the steps left needs
                wanted = ((left + count - index - 1) // (count - index)).clamp(min=1)
            else:
                wanted = torch.ones_like(left)  # Fast-dLLM: the most confident one, whatever its confidence
            refreshed = store is None or index == 0 or (refresh > 0 and index % refresh == 0)
            before = chain.x
            yield ConfidenceRule(block, wanted, policy, store, None if refreshed else _window(block, cache), reach,
                                 chance)
            if not policy.bounded and torch.equal(before, chain.x):
                break
            index += 1
