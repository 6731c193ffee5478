"""The variance-preserving Gaussian process on real vectors: Co-LADD's latent process (Sec. 2.1, App. B.1)."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from registry.interfaces import VECTORS, BoundDraw, Process, Schedule
from registry.toolkit.tokens import per_sample

from .config import VPProcessConfig

__all__ = ["VPGaussianProcess", "VPProcessConfig"]


class VPGaussianProcess(Process):
    """``y_t = abar_t y0 + sbar_t eps`` with ``abar_t**2 = signal(tau)``; y0-prediction, DDIM(eta) reverse step.

    Its bound (``elbo``) is that of the ancestral chain (``eta = 1``) on the grid ``1/T, ..., 1`` (App. B.1): for
    ``t >= 2`` the KL of the bridge to the model's step, ``lambda_t ||y0 - y0_hat||^2`` summed over every feature;
    for ``t = 1`` the reconstruction ``-log N(y0; y0_hat(y_1), v)`` with ``v = sbar_1^2 / abar_1^2``, the noise of
    ``y_1 / abar_1`` (the chain's own last step is deterministic, which has no density); ``L_T`` in closed form.
    Steps are drawn in proportion to the size each term has when the error is as large as the noise
    (``lambda_t sbar_t^2``; the reconstruction's own size at ``t = 1``) and weighted back: near ``t = 0`` the terms
    grow like ``1/t``, and drawing steps uniformly would give estimates of enormous variance.
    """

    diffuses = VECTORS
    elbo = True

    def __init__(self, config: VPProcessConfig, schedule: Schedule, vocab_size: int | None = None) -> None:
        # vocab_size is part of every process's build context; real vectors have no vocabulary
        self.config = config
        self.schedule = schedule
        self.horizon = config.horizon
        self.weighting = config.weighting
        self.eta = config.eta
        self.feature_reduction = config.feature_reduction
        self._proposal: Tensor | None = None

    def _variances(self, tau: Tensor) -> tuple[Tensor, Tensor]:
        """``(abar**2, sbar**2)`` at ``tau`` in float64."""
        signal = self.schedule.signal(tau.double())
        return signal, 1.0 - signal

    def prior(self, shape: tuple[int, ...], device: torch.device, generator: torch.Generator | None = None) -> Tensor:
        return torch.randn(shape, generator=generator, device=device)

    def corrupt(self, x0: Tensor, tau: Tensor, generator: torch.Generator | None = None) -> Tensor:
        abar2, sbar2 = self._variances(tau)
        noise = torch.randn(x0.shape, generator=generator, device=x0.device, dtype=torch.float64)
        y_t = per_sample(abar2.sqrt(), x0) * x0.double() + per_sample(sbar2.sqrt(), x0) * noise
        return y_t.to(x0.dtype)

    def weight(self, tau: Tensor) -> Tensor:
        """Loss weight: 1, or ``T * abar_{t-1}^2 sigma_t^2 / (2 sbar_{t-1}^2 sbar_t^2)`` (eq. app_y0_pred_weight)."""
        if self.weighting == "constant":
            return torch.ones_like(tau)
        return self._kl_weight(tau, self.horizon).to(tau.dtype)

    def _kl_weight(self, tau: Tensor, scale: float) -> Tensor:
        """``scale * abar_{t-1}^2 sigma_t^2 / (2 sbar_{t-1}^2 sbar_t^2)`` in float64, 0 at the first grid step."""
        abar2_prev, sbar2_prev = self._variances((tau.double() - 1.0 / self.horizon).clamp(min=0.0))
        abar2, sbar2 = self._variances(tau)
        sigma2 = sbar2 - abar2 / abar2_prev * sbar2_prev
        elbo = scale * abar2_prev * sigma2 / (2.0 * sbar2_prev * sbar2)
        # The ELBO sum runs from t = 2: the t = 1 term is the reconstruction L_0, not a weighted
        # regression, so it gets weight 0 (rounding tau * T keeps float32 grid times exact).
        return torch.where(self._first_step(tau), 0.0, elbo)

    def _first_step(self, tau: Tensor) -> Tensor:
        return torch.round(tau.double() * self.horizon) <= 1

    def reconstruction_variance(self) -> float:
        """``v = sbar_1^2 / abar_1^2`` at the first grid time ``1/T``: the variance of the bound's last step."""
        abar2, sbar2 = self._variances(torch.tensor([1.0 / self.horizon], dtype=torch.float64))
        return float(sbar2 / abar2)

    def step_proposal(self) -> Tensor:
        """The chance of drawing each grid step ``k = 1..T`` for the bound (float64, sums to 1)."""
        if self._proposal is None:
            tau = torch.arange(1, self.horizon + 1, dtype=torch.float64) / self.horizon
            size = self._kl_weight(tau, 1.0) * self._variances(tau)[1]
            size[0] = abs(0.5 * math.log(2.0 * math.pi * self.reconstruction_variance())) + 0.5
            self._proposal = size / size.sum()
        return self._proposal

    def bound_draw(self, x0: Tensor, scored: Tensor | None, u: Tensor, generator: torch.Generator) -> BoundDraw:
        """A grid step drawn from :meth:`step_proposal` by inverting its distribution at ``u``, the forward marginal
        there, weight ``1 / p(k)``."""
        proposal = self.step_proposal()
        index = torch.searchsorted(proposal.cumsum(dim=0), u.double()).clamp(max=self.horizon - 1)
        tau = (index + 1).double() / self.horizon
        return BoundDraw(self.bound_state(x0, scored, tau, generator), tau, 1.0 / proposal[index])

    def bound_state(self, x0: Tensor, scored: Tensor | None, tau: Tensor, generator: torch.Generator) -> Tensor:
        """The forward marginal ``q(y_tau | y0)`` (every position: a latent has no unscored ones)."""
        return self.corrupt(x0, tau, generator)

    def bound_terms(self, prediction: Tensor, x0: Tensor, draw: BoundDraw) -> Tensor:
        """``L_{t-1} = lambda_t ||y0 - y0_hat||^2`` at ``t >= 2``; at ``t = 1`` the Gaussian reconstruction; times the
        draw's weight."""
        squared = (x0.double() - prediction.double()).square().flatten(1).sum(dim=1)
        tau = draw.tau.to(x0.device)
        variance = self.reconstruction_variance()
        reconstruction = 0.5 * x0[0].numel() * math.log(2.0 * math.pi * variance) + squared / (2.0 * variance)
        terms = torch.where(self._first_step(tau), reconstruction, self._kl_weight(tau, 1.0) * squared)
        return terms * draw.weight.to(x0.device)

    def prior_bound(self, x0: Tensor, scored: Tensor | None) -> Tensor:
        """``KL(N(abar_1 y0, sbar_1^2) || N(0, I))`` summed over every feature."""
        abar2, sbar2 = (v.item() for v in self._variances(torch.ones(1, dtype=torch.float64)))
        per_feature = 0.5 * (abar2 * x0.double().square() + sbar2 - 1.0 - math.log(sbar2))
        return per_feature.flatten(1).sum(dim=1)

    def loss(self, prediction: Tensor, x0: Tensor, x_t: Tensor, tau: Tensor) -> Tensor:
        """Weighted squared error, averaged (or summed) over the features and averaged over the ``M`` positions."""
        squared = (prediction.float() - x0.float()).square()
        per_vector = squared.mean(dim=-1) if self.feature_reduction == "mean" else squared.sum(dim=-1)
        return per_vector.flatten(1).mean(dim=1) * self.weight(tau).float()

    def step(
        self, x_t: Tensor, prediction: Tensor, tau_t: Tensor, tau_s: Tensor,
        generator: torch.Generator | None = None, fixed: Tensor | None = None,
    ) -> Tensor:
        """DDIM kernel (eq. app_ddim_kernel): eta=1 is the Markovian bridge, eta=0 deterministic (``fixed``: unused)."""
        abar2_t, sbar2_t = self._variances(tau_t)
        abar2_s, sbar2_s = self._variances(tau_s)
        y0_hat = prediction.double()
        eps_hat = (x_t.double() - per_sample(abar2_t.sqrt(), x_t) * y0_hat) / per_sample(sbar2_t.sqrt(), x_t)
        sigma2_ts = sbar2_t - abar2_t / abar2_s * sbar2_s
        variance = (self.eta**2 * sigma2_ts * sbar2_s / sbar2_t).clamp(min=0.0)
        mean = (
            per_sample(abar2_s.sqrt(), x_t) * y0_hat
            + per_sample((sbar2_s - variance).clamp(min=0.0).sqrt(), x_t) * eps_hat
        )
        y_s = mean
        if self.eta > 0:
            noise = torch.randn(x_t.shape, generator=generator, device=x_t.device, dtype=torch.float64)
            y_s = mean + per_sample(variance.sqrt(), x_t) * noise
        # the final step removes the noise: return the prediction itself
        return torch.where(per_sample(tau_s <= 0, x_t), y0_hat, y_s).to(x_t.dtype)
