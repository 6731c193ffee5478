"""The autoregressive token process: teacher-forced next-token training, left-to-right revealing.

Written as a :class:`RevealingProcess` so the generic model trains it and every token sampler runs it:
the "noisy" state during sampling is a sequence whose leftmost free positions are being filled, and
a causal backbone (``backbones/causal.py``) predicts position i from the tokens before it. Time is
ignored: training sees clean sequences (the causal network never sees the future), and the reverse
chain reveals a number of positions set by the step's share of the remaining time.
"""
from __future__ import annotations

import torch
from torch import Tensor

from registry.errors import InvalidConfigError
from registry.interfaces import SEQUENCES, BoundDraw, RevealingProcess, Schedule
from registry.toolkit.tokens import cross_entropy, draw_tokens, mask_id, summed_cross_entropy

__all__ = ["AutoregressiveProcess"]

#: times arrive as float32, so ``m (tau_t - tau_s) / tau_t`` is off by a relative ~1e-7 S: shrink it before ceil
#: so that an exact integer (one per step with S steps) is not rounded up (safe for S up to ~8000)
_ROUNDING = 1e-3


class AutoregressiveProcess(RevealingProcess):
    """Next-token cross-entropy on clean sequences; the reverse step reveals the leftmost masked positions."""

    #: one training time: the objective does not depend on it
    horizon = 1
    #: left to right under a causal network: tokens only, never a latent channel
    diffuses = SEQUENCES
    #: the teacher-forced cross-entropy is the exact negative log-likelihood
    elbo = True
    exact_likelihood = True
    elbo_weighted = True  # the loss is the exact negative log-likelihood itself

    def __init__(self, vocab_size: int, schedule: Schedule | None = None) -> None:
        # schedule is accepted (and unused) so every token process is built the same way
        if vocab_size < 1:
            raise ValueError(f"vocab_size={vocab_size} must be at least 1")
        self.vocab_size = vocab_size
        self.mask = mask_id(vocab_size)

    def prior(self, shape: tuple[int, ...], device: torch.device, generator: torch.Generator | None = None) -> Tensor:
        """All masked."""
        return torch.full(shape, self.mask, dtype=torch.long, device=device)

    def fill(self, x_t: Tensor, reveal: Tensor, prediction: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """The float64 categorical draw at the revealed rows, as the masked process makes it."""
        return draw_tokens(x_t, reveal, prediction, generator)

    def corrupt(self, x0: Tensor, tau: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """``x0`` itself: teacher forcing (the causal backbone shifts its input, so no position sees its own token)."""
        return x0

    def loss(self, prediction: Tensor, x0: Tensor, x_t: Tensor, tau: Tensor) -> Tensor:
        """Next-token cross-entropy of logits ``[B, S, K]`` (position i predicts token i), averaged over positions."""
        return self.position_loss(prediction, x0, x_t, tau).mean(dim=1)

    def position_loss(self, prediction: Tensor, x0: Tensor, x_t: Tensor, tau: Tensor) -> Tensor:
        """The next-token cross-entropy at each position ``[B, S]``."""
        return cross_entropy(prediction.flatten(0, -2), x0.flatten()).view(x0.shape[0], -1).float()

    def bound_draw(self, x0: Tensor, scored: Tensor | None, u: Tensor, generator: torch.Generator) -> BoundDraw:
        """The clean sequence itself (teacher forcing), weight 1, read at the scored positions: every draw is the
        exact likelihood."""
        ones = torch.ones(x0.shape[0], dtype=torch.float64)
        rows = x0 != self.mask if scored is None else scored
        return BoundDraw(x0, ones, ones, rows)

    def bound_state(self, x0: Tensor, scored: Tensor | None, tau: Tensor, generator: torch.Generator) -> Tensor:
        return x0

    def bound_terms(self, prediction: Tensor, x0: Tensor, draw: BoundDraw) -> Tensor:
        """The next-token cross-entropy summed over the draw's rows (the scored positions)."""
        rows = draw.rows if draw.rows is not None else x0 != self.mask
        return summed_cross_entropy(prediction, x0, rows) * draw.weight.to(x0.device)

    def prior_bound(self, x0: Tensor, scored: Tensor | None) -> Tensor:
        return torch.zeros(x0.shape[0], dtype=torch.float64, device=x0.device)

    def bound_subsets(self, x0: Tensor, scored: Tensor | None) -> BoundDraw:
        return self.bound_draw(x0, scored, torch.zeros(x0.shape[0]), torch.Generator())

    def reveal(self, x_t: Tensor, tau_t: Tensor, tau_s: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """The leftmost ``ceil(m (tau_t - tau_s) / tau_t)`` of a row's ``m`` masked positions (all at tau_s = 0).

        With ``S`` equal steps from all-mask this is one position per step; positions that are not masked
        (prompt tokens) are skipped, so a prompt only shortens the chain.
        """
        masked = x_t == self.mask
        remaining = masked.sum(dim=1).double()
        share = ((tau_t.double() - tau_s.double()) / tau_t.double()).clamp(0.0, 1.0)
        count = torch.where(tau_s <= 0, remaining, torch.ceil(remaining * share * (1 - _ROUNDING)))
        widest = int(count.max()) if count.numel() else 0
        if widest > 1:
            raise InvalidConfigError(
                f"the autoregressive process reveals one token per network call, but this step would reveal {widest}: "
                f"sample with at least as many steps as free positions (S={x_t.shape[1]} from all-mask; "
                "sampler=autoregressive always takes S)"
            )
        return masked & (masked.cumsum(dim=1) <= count[:, None])
