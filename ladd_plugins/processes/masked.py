"""The masked (absorbing-state) discrete process of MDLM (Sec. 2.2, App. B.2)."""
from __future__ import annotations

import torch
from torch import Tensor

from registry.errors import IncompatibleComponentsError
from registry.interfaces import MaskingProcess, Schedule
from registry.toolkit.tokens import IGNORE, cross_entropy, draw_tokens, mask_id, per_sample

from .config import MaskedProcessConfig

__all__ = ["MaskedProcess", "MaskedProcessConfig"]


class MaskedProcess(MaskingProcess):
    """Each position independently jumps to the mask state ``K``; survival probability ``gbar(tau)``.

    Training takes a time per sequence (``[B]``) or per position (``[B, S]``: a block-causal backbone's blocks).
    """

    position_times = True

    def __init__(self, config: MaskedProcessConfig, schedule: Schedule, vocab_size: int) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size={vocab_size} must be at least 1")
        self.config = config
        self.horizon = config.horizon
        self.schedule = schedule
        self.vocab_size = vocab_size
        self.mask = mask_id(vocab_size)

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

    def _check_width(self, prediction: Tensor) -> None:
        # A head one value short would train and sample without error, and never produce the last value.
        if prediction.shape[-1] != self.vocab_size:
            raise IncompatibleComponentsError(
                f"the masked process over {self.vocab_size} values got predictions over {prediction.shape[-1]}: "
                f"the output head must give one logit per real value (the mask state excluded)"
            )
