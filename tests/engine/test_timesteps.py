"""Training-time draws: stratification, the training grid, and true independence of t_x and t_y."""
from __future__ import annotations

import torch

from registry.engine.timesteps import draw_independent_times, draw_times, stratified_uniform


def test_stratified_draws_cover_every_stratum_once():
    u = stratified_uniform(64, torch.Generator().manual_seed(0))
    strata = torch.floor(u * 64).long().sort().values
    assert torch.equal(strata, torch.arange(64))


def test_times_lie_on_the_training_grid():
    tau = draw_times(1000, 40, torch.Generator().manual_seed(1))
    t = tau * 40
    assert torch.allclose(t, t.round(), atol=1e-5)
    assert t.min() >= 1 and t.max() <= 40


def test_independent_times_are_not_coupled_to_the_token_times():
    # Two plain stratified draws differ by one constant (mod 1) across the batch: fully coupled.
    # Independent draws must instead show the |U - V| law of two independent uniforms: P(|U-V| < 1/B) = 2/B - 1/B^2.
    gen = torch.Generator().manual_seed(2)
    batch, rounds, horizon = 32, 400, 100_000
    close, products = 0, []
    for _ in range(rounds):
        tx = draw_times(batch, horizon, gen)
        ty = draw_independent_times(batch, horizon, gen)
        close += int(((tx - ty).abs() < 1 / batch).sum())
        products.append(((tx - 0.5) * (ty - 0.5)).mean())
    frac = close / (batch * rounds)
    expected = 2 / batch - 1 / batch**2
    assert abs(frac - expected) < 5 * (expected / (batch * rounds)) ** 0.5
    # Correlation of t_x and t_y: near zero (its standard error is about 1/sqrt(batch * rounds)).
    corr = torch.stack(products).mean() / (1 / 12)
    assert abs(float(corr)) < 4 / (batch * rounds) ** 0.5

    gap = (
        draw_times(batch, horizon, torch.Generator().manual_seed(3))
        - draw_times(batch, horizon, torch.Generator().manual_seed(4))
    ) % 1
    assert float(gap.max() - gap.min()) < 2 / horizon, "control: plain stratified draws are coupled"
