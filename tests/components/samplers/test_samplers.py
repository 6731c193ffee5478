"""Samplers against models whose exact output distribution is known."""
from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from ladd_plugins.latents.continuous import ContinuousLatent, ContinuousLatentConfig
from ladd_plugins.processes.masked import MaskedProcess, MaskedProcessConfig
from ladd_plugins.processes.vp import VPGaussianProcess, VPProcessConfig
from ladd_plugins.samplers.ancestral import AncestralSampler
from ladd_plugins.samplers.config import AncestralConfig, JointConfig, SequentialConfig
from ladd_plugins.samplers.joint import JointSampler
from ladd_plugins.samplers.sequential import SequentialSampler
from ladd_plugins.schedules.closed_form import LinearSchedule, ScheduleConfig
from registry.errors import LaddError
from registry.interfaces import Denoised, DenoiserModel
from registry.toolkit.sampling import latent_step, revealing, token_logits

MARGINALS = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [1 / 3, 1 / 3, 1 / 3], [0.05, 0.9, 0.05]])


class ProductOracle(nn.Module, DenoiserModel):
    """Exact denoiser of a product distribution: every position is independent with known marginals.

    With an optional latent channel whose clean value is the constant ``latent_value``.
    """

    def __init__(self, caches: bool = True, latent_value: Tensor | None = None) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(()))
        self.seq_len, self.vocab_size = MARGINALS.shape
        self.process = MaskedProcess(
            MaskedProcessConfig(horizon=1000), schedule=LinearSchedule(ScheduleConfig()), vocab_size=self.vocab_size
        )
        self.latent_value = latent_value
        if latent_value is None:
            self.latent, self.latent_process = None, None
        else:
            self.latent = ContinuousLatent(
                ContinuousLatentConfig(length=latent_value.shape[0], width=latent_value.shape[1])
            )
            self.latent_process = VPGaussianProcess(VPProcessConfig(), LinearSchedule(ScheduleConfig()))
        self._caches = caches
        self.calls: list[tuple[Tensor | None, Tensor | None]] = []

    @property
    def device(self) -> torch.device:
        return self.anchor.device

    @property
    def caches_token_predictions(self) -> bool:
        return self._caches

    def predict(self, x_t, tau_x, y_t, tau_y, rows=None) -> Denoised:
        if tau_x is None:
            return Denoised(latent=self.latent_value.expand(y_t.shape[0], -1, -1))
        self.calls.append((y_t, tau_y))
        logits = MARGINALS.log().expand(x_t.shape[0], -1, -1)
        latent = None if self.latent_value is None else self.latent_value.expand(x_t.shape[0], -1, -1)
        return Denoised(tokens=logits if rows is None else logits[rows], latent=latent)


def _ancestral(fast: bool = True) -> AncestralSampler:
    """The token decoder ladd builds for a LADD sampler by default."""
    return AncestralSampler(AncestralConfig(fast=fast))


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("steps", [1, 3, 16])
def test_ancestral_sampler_reproduces_the_exact_marginals(steps, fast):
    n = 6000
    out = AncestralSampler(AncestralConfig(fast=fast)).sample(
        ProductOracle(), n, steps, torch.Generator().manual_seed(steps)
    )
    assert out.tokens.shape == (n, 4) and int(out.tokens.max()) < 3, "no mask may remain"
    for position, probs in enumerate(MARGINALS):
        freq = torch.bincount(out.tokens[:, position], minlength=3).double() / n
        tolerance = 5 * torch.sqrt(probs.double() * (1 - probs.double()) / n) + 1e-9
        assert bool(((freq - probs.double()).abs() <= tolerance).all()), (position, freq, probs)


def test_no_change_cache_gives_identical_samples_with_fewer_calls():
    sampler = AncestralSampler(AncestralConfig(fast=False))
    cached = sampler.sample(ProductOracle(caches=True), 3, 64, torch.Generator().manual_seed(0))
    plain = sampler.sample(ProductOracle(caches=False), 3, 64, torch.Generator().manual_seed(0))
    assert torch.equal(cached.tokens, plain.tokens)
    assert plain.network_calls == 64 and cached.network_calls < plain.network_calls


def test_sequential_sampler_finishes_the_latent_then_conditions_tokens_on_it():
    target = torch.tensor([[0.6, -0.8]])
    model = ProductOracle(latent_value=target)
    sampler = SequentialSampler(SequentialConfig(latent_steps=5), _ancestral())
    out = sampler.sample(model, 7, 2, torch.Generator().manual_seed(0))
    assert torch.allclose(out.latent, target.expand(7, -1, -1))
    for y_t, tau_y in model.calls:
        assert torch.allclose(y_t, target.expand(7, -1, -1)) and bool((tau_y == 0).all())
    assert out.network_calls == 5 + len(model.calls)


def test_joint_sampler_updates_both_channels_each_step():
    target = torch.tensor([[0.6, -0.8]])
    model = ProductOracle(latent_value=target)
    sampler = JointSampler(JointConfig(fast=False), _ancestral(fast=False))
    out = sampler.sample(model, 5, 4, torch.Generator().manual_seed(0))
    assert len(model.calls) == 4 and out.network_calls == 4
    taus = [float(tau[0]) for _, tau in model.calls]
    assert taus == [1.0, 0.75, 0.5, 0.25]
    # DDIM with an exact y0 prediction lands on it at the last step.
    assert torch.allclose(out.latent, target.expand(5, -1, -1), atol=1e-6)


def test_guidance_combines_conditional_and_unconditional_log_probabilities():
    class Guided(ProductOracle):
        def predict(self, x_t, tau_x, y_t, tau_y, rows=None):
            out = super().predict(x_t, tau_x, y_t, tau_y, rows)
            # the unconditional call sees the null latent (noised at tau 0, i.e. exactly 0): predict uniform tokens
            if float(y_t.abs().sum()) == 0:
                out.tokens = torch.zeros_like(out.tokens)
            return out

    model = Guided(latent_value=torch.tensor([[0.6, -0.8]]))
    x = torch.full((2, 4), 3)
    y = torch.tensor([[[0.6, -0.8]]]).expand(2, -1, -1)
    tau = torch.zeros(2)
    logits, _, calls = token_logits(model, x, tau, y, tau, guidance=2.0, null_seed=0)
    assert calls == 2
    conditional, unconditional = MARGINALS.log().log_softmax(-1), torch.full((4, 3), -math.log(3))
    assert torch.allclose(logits[0], unconditional + 2 * (conditional - unconditional), atol=1e-6)


def test_revealing_takes_the_fast_path_only_when_asked_and_the_process_reveals_first():
    model = ProductOracle(latent_value=torch.tensor([[0.6, -0.8]]))
    assert revealing(model, fast=True) is model.process
    assert revealing(model, fast=False) is None
    model.process = model.latent_process  # the VP process draws every coordinate anew: no positions to pick
    assert revealing(model, fast=True) is None


def test_latent_step_lands_on_an_exact_prediction_and_refuses_a_missing_one():
    target = torch.tensor([[0.6, -0.8]])
    model = ProductOracle(latent_value=target)
    y = model.latent_prior(3, torch.Generator().manual_seed(0))
    t, s = torch.full((3,), 0.5), torch.zeros(3)
    landed = latent_step(model, y, target.expand(3, -1, -1), t, s, torch.Generator().manual_seed(1))
    assert torch.allclose(landed, target.expand(3, -1, -1), atol=1e-6)  # DDIM to time 0 returns the y0 prediction
    with pytest.raises(LaddError, match="predicted no latent"):
        latent_step(model, y, None, t, s, torch.Generator())
