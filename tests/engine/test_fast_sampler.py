"""The exact fast sampling path against the plain one: identical under a shared random stream, same law."""
from __future__ import annotations

import pytest
import torch
from scipy import stats
from support import TINY

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment


def _random_model(variant: str, sampler_options: dict | None = None):
    """A binary-sawtooth model with random (not zero-initialised) weights, so every head matters."""
    reg = registry.load()
    torch.manual_seed(0)
    experiment = build_experiment(compose([f"experiment=binsaw/{variant}_cpu", *TINY], reg).plain(), reg)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in experiment.model.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    sampler_name = compose([f"experiment=binsaw/{variant}_cpu"], reg).plain()["sampler"]["name"]
    make = lambda fast: reg.build("sampler", sampler_name, {**(sampler_options or {}), "fast": fast})  # noqa: E731
    return experiment.model.eval(), make


@pytest.mark.parametrize("variant", ["mdlm", "coladd_joint", "coladd_seq", "diladd_seq"])
@pytest.mark.parametrize("steps", [1, 5, 32])
def test_fast_and_plain_paths_agree_exactly_under_a_shared_random_stream(variant, steps):
    model, make = _random_model(variant, {"latent_steps": 3} if variant.endswith("seq") else None)
    plain = make(False).sample(model, 64, steps, torch.Generator().manual_seed(steps))
    fast = make(True).sample(model, 64, steps, torch.Generator().manual_seed(steps))
    assert 0.05 < plain.tokens.float().mean() < 0.95, "the model must not be degenerate for this test to mean anything"
    assert torch.equal(fast.tokens, plain.tokens)
    assert fast.network_calls <= plain.network_calls


@pytest.mark.parametrize("variant", ["coladd_joint", "coladd_seq"])
def test_fast_and_plain_paths_agree_exactly_under_guidance(variant):
    """The guided pass's null-latent noise does not depend on how many network calls a path makes."""
    model, make = _random_model(variant, {"guidance": 2.0, **({"latent_steps": 3} if variant.endswith("seq") else {})})
    plain = make(False).sample(model, 4, 64, torch.Generator().manual_seed(9))
    fast = make(True).sample(model, 4, 64, torch.Generator().manual_seed(9))
    assert torch.equal(fast.tokens, plain.tokens)
    if variant.endswith("seq"):  # (the joint sampler calls the network every step: its latent needs it)
        assert fast.network_calls < plain.network_calls, "steps that reveal nothing call no network"


def test_fast_path_skips_network_calls_when_nothing_reveals():
    model, make = _random_model("mdlm")
    # 16 positions and 256 steps: most steps reveal nothing in a batch of 2
    fast = make(True).sample(model, 2, 256, torch.Generator().manual_seed(0))
    assert fast.network_calls <= 2 * 16


@pytest.mark.slow
def test_fast_and_plain_paths_have_the_same_distribution(tmp_path):
    from registry.training.loop import train

    reg = registry.load()
    experiment = train(compose(["experiment=binsaw/mdlm_cpu", *TINY, "train.stages=[{steps:60}]"], reg), tmp_path, reg)
    model = experiment.model.eval()
    make = lambda fast: reg.build("sampler", "ancestral", {"fast": fast})  # noqa: E731
    n, steps = 20000, 4
    fast = make(True).sample(model, n, steps, torch.Generator().manual_seed(1)).tokens
    plain = make(False).sample(model, n, steps, torch.Generator().manual_seed(2)).tokens
    # Per-position frequencies of ones: two-proportion tests, Bonferroni over positions.
    for position in range(fast.shape[1]):
        ones = [int(fast[:, position].sum()), int(plain[:, position].sum())]
        if ones in ([0, 0], [n, n]):
            continue  # the same constant in both sets
        table = [[ones[0], n - ones[0]], [ones[1], n - ones[1]]]
        assert stats.chi2_contingency(table).pvalue > 0.001 / fast.shape[1], position
    # Joint structure: the number of ones per sequence (sensitive to dependence between positions).
    histogram = torch.stack([torch.bincount(x.sum(1), minlength=fast.shape[1] + 1) for x in (fast, plain)])
    assert stats.chi2_contingency(histogram[:, histogram.sum(0) > 0].tolist()).pvalue > 0.001
    # Power check: a bias of 5 points in one position's probability of a one is detected at this size.
    biased = plain.clone()
    zeros = torch.nonzero(biased[:, 0] == 0).squeeze(1)
    biased[zeros[: int(0.05 * n)], 0] = 1
    table = [[int(fast[:, 0].sum()), n - int(fast[:, 0].sum())], [int(biased[:, 0].sum()), n - int(biased[:, 0].sum())]]
    assert stats.chi2_contingency(table).pvalue < 0.001 / fast.shape[1]
