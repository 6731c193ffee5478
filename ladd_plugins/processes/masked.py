"""The masked (absorbing-state) discrete process of MDLM (Sec. 2.2, App. B.2)."""
from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor

from registry.errors import IncompatibleComponentsError
from registry.interfaces import BoundDraw, MaskingProcess, Schedule
from registry.toolkit.tokens import IGNORE, cross_entropy, draw_tokens, mask_id, per_sample, summed_cross_entropy

from .config import MaskedProcessConfig

__all__ = ["MaskedProcess", "MaskedProcessConfig"]


class MaskedProcess(MaskingProcess):
    """Each position independently jumps to the mask state ``K``; survival probability ``gbar(tau)``.

    Its bound (``elbo``) is LLaDA's Monte Carlo estimator taken at the horizon ``T``: of the ``L`` scored positions a
    draw masks ``l``, stratified over ``1..L``, at a grid time drawn given ``l``; the masked cross-entropies are
    weighted by ``L W_l``, where ``W_l`` is the chance that the reverse chain reveals a given position while exactly
    ``l`` are masked (``1/l`` as ``T`` grows: LLaDA's ``L/l``). A draw's mean is the chain's bound exactly.
    ``bound=continuous`` takes the limit: ``W_l = 1/l`` (LLaDA's evaluator), or, with the masked share kept in
    ``[f, 1]`` (``bound_floor``: Dream's evaluator draws it uniformly there), ``W_l = P(Bin(L, f) < l) / (l (1 - f))``;
    a draw's time is then the one at which the chain's masked share is the share drawn given ``l``.

    Training takes a time per sequence (``[B]``) or per position (``[B, S]``: a block-causal backbone's blocks).
    """

    elbo = True
    position_times = True

    def __init__(self, config: MaskedProcessConfig, schedule: Schedule, vocab_size: int) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size={vocab_size} must be at least 1")
        self.config = config
        self.horizon = config.horizon
        self.schedule = schedule
        self.vocab_size = vocab_size
        self.mask = mask_id(vocab_size)
        self._grid: tuple[Tensor, Tensor] | None = None
        self.elbo_weighted = config.weighting == "elbo"

    def _gbar(self, tau: Tensor) -> Tensor:
        return self.schedule.signal(tau.double())

    def prior(self, shape: tuple[int, ...], device: torch.device, generator: torch.Generator | None = None) -> Tensor:
        return torch.full(shape, self.mask, dtype=torch.long, device=device)

    def corrupt(self, x0: Tensor, tau: Tensor, generator: torch.Generator | None = None) -> Tensor:
        keep = torch.rand(x0.shape, generator=generator, device=x0.device, dtype=torch.float64)
        return torch.where(keep < per_sample(self._gbar(tau), x0), x0, self.mask)

    def weight(self, tau: Tensor) -> Tensor:
        """Loss weight at ``tau``: ``T (gbar(tau - 1/T) - gbar(tau)) / (1 - gbar(tau))`` or 1."""
        if self.config.weighting == "constant":
            return torch.ones_like(tau)
        previous = (tau.double() - 1.0 / self.horizon).clamp(min=0.0)
        gbar = self._gbar(tau)
        # gbar(0) = 1 makes 0/0 at tau = 0; the numerator is 0 there, so any positive floor gives 0
        denominator = (1.0 - gbar).clamp(min=torch.finfo(torch.float64).tiny)
        return (self.horizon * (self._gbar(previous) - gbar) / denominator).to(tau.dtype)

    def loss(self, prediction: Tensor, x0: Tensor, x_t: Tensor, tau: Tensor) -> Tensor:
        """Weighted cross-entropy at the masked positions of real-token logits ``[B, S, K]``, or ``[N, K]`` at those
        positions only."""
        if tau.dim() == 2:
            return self.position_loss(prediction, x0, x_t, tau).mean(dim=1)
        return self._cross_entropy(prediction, x0, x_t).mean(dim=1) * self.weight(tau).float()

    def position_loss(self, prediction: Tensor, x0: Tensor, x_t: Tensor, tau: Tensor) -> Tensor:
        """The weighted cross-entropy at each position ``[B, S]`` (0 where the position is not masked)."""
        return self._cross_entropy(prediction, x0, x_t) * per_sample(self.weight(tau).float(), x0)

    def _cross_entropy(self, prediction: Tensor, x0: Tensor, x_t: Tensor) -> Tensor:
        """``[B, S]``: the cross-entropy of ``x0`` at the masked positions, 0 elsewhere."""
        self._check_width(prediction)
        masked = self.loss_rows(x_t)
        if prediction.dim() == 2:
            zeros = torch.zeros(x0.shape, dtype=torch.float32, device=x0.device)
            return zeros.masked_scatter(masked, cross_entropy(prediction, x0[masked]))
        # ignore_index keeps the logits un-copied: unmasked positions contribute exactly 0
        return cross_entropy(prediction.flatten(0, -2), torch.where(masked, x0, IGNORE).flatten()).view(x0.shape)

    def loss_rows(self, x_t: Tensor) -> Tensor:
        """The masked positions: elsewhere SUBS fixes the prediction and the loss is 0."""
        return x_t == self.mask

    def reveal_probability(self, tau_t: Tensor, tau_s: Tensor) -> Tensor:
        """Probability that a position masked at ``tau_t`` is revealed at ``tau_s``: ``(gbar_s - gbar_t) / (1 -
        gbar_t)``."""
        gbar_t, gbar_s = self._gbar(tau_t), self._gbar(tau_s)
        bridge = (gbar_s - gbar_t) / (1.0 - gbar_t).clamp(min=torch.finfo(torch.float64).tiny)
        # the final step removes all remaining noise, even where gbar(0) < 1
        return torch.where(tau_s <= 0, 1.0, bridge.clamp(0.0, 1.0))

    def reveal(self, x_t: Tensor, tau_t: Tensor, tau_s: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Masked positions that the exact bridge reveals between ``tau_t`` and ``tau_s`` (independent of the
        prediction)."""
        draw = torch.rand(x_t.shape, generator=generator, device=x_t.device, dtype=torch.float64)
        return (x_t == self.mask) & (draw < per_sample(self.reveal_probability(tau_t, tau_s), x_t))

    def fill(self, x_t: Tensor, reveal: Tensor, prediction: Tensor, generator: torch.Generator | None = None) -> Tensor:
        self._check_width(prediction)
        return draw_tokens(x_t, reveal, prediction, generator)

    def chain(self) -> tuple[Tensor, Tensor]:
        """``(r, m)`` on the grid ``k = 1..T`` (float64): the chance that a masked position reveals in the reverse step
        from ``k/T`` to ``(k-1)/T``, and that a position of the chain started all-masked is still masked at ``k/T``.

        ``m_k = (1 - gbar_k) / (1 - gbar_1)``: the forward process conditioned on ending all-masked, as the samplers
        start (so ``m_T = 1`` even where ``gbar(1) > 0``); ``r_1 = 1``: the last step reveals everything.
        """
        if self._grid is None:
            tau = torch.arange(self.horizon + 1, dtype=torch.float64) / self.horizon
            gbar = self._gbar(tau)
            reveal = self.reveal_probability(tau[1:], tau[:-1])
            masked = ((1.0 - gbar[1:]) / (1.0 - gbar[-1]).clamp(min=torch.finfo(torch.float64).tiny)).clamp(0.0, 1.0)
            self._grid = reveal, masked
        return self._grid

    def _log_count_law(self, free: Tensor, count: Tensor) -> Tensor:
        """``[N, T]``: log of ``r_k C(L, l) m_k^l (1 - m_k)^(L - l)``, the chance that the chain reveals a given one of
        ``L = free`` positions at step ``k`` while exactly ``l = count`` of them are masked."""
        reveal, masked = self.chain()
        free, count = free.double()[:, None], count.double()[:, None]
        binomial = torch.lgamma(free + 1) - torch.lgamma(count + 1) - torch.lgamma(free - count + 1)
        return reveal.log() + binomial + torch.xlogy(count, masked) + torch.xlogy(free - count, 1.0 - masked)

    def count_weight(self, free: Tensor, count: Tensor) -> Tensor:
        """``W_l`` (float64) of a draw masking ``l = count`` of ``L = free`` positions: the chain's (its reveal chance
        while ``l`` are masked) or the continuous-time limit's."""
        if self.config.bound == "chain":
            return self._log_count_law(free, count).logsumexp(dim=1).exp()
        floor = self.config.bound_floor
        kept = _binomial_below(free, count, torch.full_like(free, floor, dtype=torch.float64)) if floor else 1.0
        return kept / (count.double().clamp(min=1) * (1.0 - floor))

    def subset_weight(self, free: int, count: int) -> float:
        """The bound's weight of one set of ``count`` masked positions among ``free``: ``W_l / C(L, l)``."""
        weight = float(self.count_weight(torch.tensor([free]), torch.tensor([count]))[0])
        return weight * math.exp(math.lgamma(count + 1) + math.lgamma(free - count + 1) - math.lgamma(free + 1))

    def _share_time(self, share: Tensor) -> Tensor:
        """The time at which the chain started all-masked holds each position masked with chance ``share``
        (bisection on the schedule: ``(1 - gbar(t)) / (1 - gbar(1))`` grows with t)."""
        top = (1.0 - self._gbar(torch.ones(()))).clamp(min=torch.finfo(torch.float64).tiny)
        low, high = torch.zeros_like(share), torch.ones_like(share)
        for _ in range(52):  # float64 resolution of a time in [0, 1]
            middle = (low + high) / 2
            short = (1.0 - self._gbar(middle)) / top < share
            low, high = torch.where(short, middle, low), torch.where(short, high, middle)
        return high

    def _continuous_times(self, free: Tensor, count: Tensor, generator: torch.Generator) -> Tensor:
        """A time per draw given ``l = count`` masked of ``L = free``: the masked share drawn from its law given ``l``
        (Beta(l, L - l + 1) on ``[bound_floor, 1]``) by inverting its distribution function, then its time."""
        floor = self.config.bound_floor
        pick = torch.rand(free.shape[0], generator=generator, dtype=torch.float64)
        free, count = free.clamp(min=1), count.clamp(min=1)

        def below(share: Tensor) -> Tensor:  # P(share' < share): a Beta's distribution function, by the binomial
            return 1.0 - _binomial_below(free, count, share)

        start = below(torch.full_like(pick, floor))
        goal = start + pick * (1.0 - start)
        low, high = torch.full_like(pick, floor), torch.ones_like(pick)
        for _ in range(52):
            middle = (low + high) / 2
            short = below(middle) < goal
            low, high = torch.where(short, middle, low), torch.where(short, high, middle)
        return self._share_time(high)

    def bound_draw(self, x0: Tensor, scored: Tensor | None, u: Tensor, generator: torch.Generator) -> BoundDraw:
        """Mask ``l = floor(u L) + 1`` of a row's ``L`` scored positions, chosen uniformly, at a grid time drawn from
        the chain's law given ``l``; weight ``L W_l``."""
        scored = torch.ones_like(x0, dtype=torch.bool) if scored is None else scored
        free = scored.sum(dim=1)
        count = torch.minimum(torch.floor(u.double() * free).long() + 1, free.clamp(min=1))
        keys = torch.rand(x0.shape, generator=generator, dtype=torch.float64).masked_fill(~scored, 2.0)
        ranks = keys.argsort(dim=1).argsort(dim=1)
        masked = scored & (ranks < count[:, None])
        weight = torch.where(free > 0, free * self.count_weight(free, count), 0.0)
        if self.config.bound == "continuous":
            tau = self._continuous_times(free, count, generator)
        else:
            law = self._log_count_law(free, count)
            cumulative = (law - law.logsumexp(dim=1)[:, None]).exp().cumsum(dim=1)
            pick = torch.rand(x0.shape[0], generator=generator, dtype=torch.float64)
            step = torch.searchsorted(cumulative, pick[:, None]).squeeze(1).clamp(max=self.horizon - 1) + 1
            tau = step.double() / self.horizon
        return BoundDraw(x0.masked_fill(masked, self.mask), tau, weight, masked)

    def bound_state(self, x0: Tensor, scored: Tensor | None, tau: Tensor, generator: torch.Generator) -> Tensor:
        """Each scored position masked with the chain's chance ``m(tau)`` (tau on the grid, unless the bound is the
        continuous one)."""
        scored = torch.ones_like(x0, dtype=torch.bool) if scored is None else scored
        if self.config.bound == "continuous":
            top = (1.0 - self._gbar(torch.ones(()))).clamp(min=torch.finfo(torch.float64).tiny)
            chance = ((1.0 - self._gbar(tau.double().cpu())) / top).clamp(0.0, 1.0)
        else:
            step = torch.round(tau.double() * self.horizon).long().clamp(1, self.horizon)
            chance = self.chain()[1][step - 1]
        draw = torch.rand(x0.shape, generator=generator, dtype=torch.float64)
        return x0.masked_fill(scored & (draw < chance[:, None]), self.mask)

    def bound_terms(self, prediction: Tensor, x0: Tensor, draw: BoundDraw) -> Tensor:
        """The cross-entropy summed over the draw's masked scored positions, times its weight."""
        rows = draw.rows if draw.rows is not None else draw.state == self.mask
        self._check_width(prediction)
        return summed_cross_entropy(prediction, x0, rows) * draw.weight.to(x0.device)

    def prior_bound(self, x0: Tensor, scored: Tensor | None) -> Tensor:
        """0: the chain starts all-masked, as the bound's forward process ends."""
        return torch.zeros(x0.shape[0], dtype=torch.float64, device=x0.device)

    def bound_subsets(self, x0: Tensor, scored: Tensor | None) -> BoundDraw:
        """Every non-empty set of the scored positions masked, each weighted ``W_l / C(L, l)``."""
        scored = torch.ones_like(x0, dtype=torch.bool) if scored is None else scored
        positions = scored[0].nonzero().squeeze(1).tolist()
        free = len(positions)
        subsets = [chosen for size in range(1, free + 1) for chosen in itertools.combinations(positions, size)]
        masked = torch.zeros(len(subsets), x0.shape[1], dtype=torch.bool)
        for index, chosen in enumerate(subsets):
            masked[index, list(chosen)] = True
        weights = {size: self.subset_weight(free, size) for size in range(1, free + 1)}
        weight = torch.tensor([weights[len(chosen)] for chosen in subsets], dtype=torch.float64)
        state = x0.expand(len(subsets), -1).masked_fill(masked, self.mask)
        return BoundDraw(state, torch.ones(len(subsets), dtype=torch.float64), weight, masked)

    def _check_width(self, prediction: Tensor) -> None:
        # A head one value short would train and sample without error, and never produce the last value.
        if prediction.shape[-1] != self.vocab_size:
            raise IncompatibleComponentsError(
                f"the masked process over {self.vocab_size} values got predictions over {prediction.shape[-1]}: "
                f"the output head must give one logit per real value (the mask state excluded)"
            )


def _binomial_below(n: Tensor, k: Tensor, p: Tensor) -> Tensor:
    """``P(Bin(n, p) < k)`` per row (float64), summed over its terms in log space."""
    n, k, p = n.double()[:, None], k.double()[:, None], p.double()[:, None]
    j = torch.arange(int(n.max()) + 1 if n.numel() else 1, dtype=torch.float64)[None]
    log_terms = (torch.lgamma(n + 1) - torch.lgamma(j + 1) - torch.lgamma((n - j).clamp(min=0) + 1)
                 + torch.xlogy(j, p) + torch.xlogy(n - j, 1.0 - p))
    return log_terms.masked_fill((j >= k) | (j > n), -math.inf).logsumexp(dim=1).exp()
