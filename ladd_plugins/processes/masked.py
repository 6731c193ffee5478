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

    def subset_weight(self, free: int, count: int) -> float:
        """The bound's weight of one set of ``count`` masked positions among ``free``: ``W_l / C(L, l)``."""
        law = self._log_count_law(torch.tensor([free]), torch.tensor([count]))
        return math.exp(float(law.logsumexp(dim=1)) - math.lgamma(free + 1) + math.lgamma(count + 1)
                        + math.lgamma(free - count + 1))

    def bound_draw(self, x0: Tensor, scored: Tensor | None, u: Tensor, generator: torch.Generator) -> BoundDraw:
        """Mask ``l = floor(u L) + 1`` of a row's ``L`` scored positions, chosen uniformly, at a grid time drawn from
        the chain's law given ``l``; weight ``L W_l``."""
        scored = torch.ones_like(x0, dtype=torch.bool) if scored is None else scored
        free = scored.sum(dim=1)
        count = torch.minimum(torch.floor(u.double() * free).long() + 1, free.clamp(min=1))
        keys = torch.rand(x0.shape, generator=generator, dtype=torch.float64).masked_fill(~scored, 2.0)
        ranks = keys.argsort(dim=1).argsort(dim=1)
        masked = scored & (ranks < count[:, None])
        law = self._log_count_law(free, count)
        total = law.logsumexp(dim=1)
        cumulative = (law - total[:, None]).exp().cumsum(dim=1)
        pick = torch.rand(x0.shape[0], generator=generator, dtype=torch.float64)
        step = torch.searchsorted(cumulative, pick[:, None]).squeeze(1).clamp(max=self.horizon - 1) + 1
        weight = torch.where(free > 0, free * total.exp(), 0.0)
        return BoundDraw(x0.masked_fill(masked, self.mask), step.double() / self.horizon, weight, masked)

    def bound_state(self, x0: Tensor, scored: Tensor | None, tau: Tensor, generator: torch.Generator) -> Tensor:
        """Each scored position masked with the chain's chance ``m(tau)`` (tau on the grid)."""
        scored = torch.ones_like(x0, dtype=torch.bool) if scored is None else scored
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
