"""Every likelihood number says what it is: -log p, an estimate of an upper bound on it, or a term that bounds nothing.

A freshly built DiT predicts every token with probability 1/K (its output layer starts at zero), so its -log p is
``log K`` per token exactly, and so is the bound of its chain; the masked loss with ELBO weights estimates the same,
while constant weights give ``E[t] log K = log K / 2``: half of -log p, no upper bound on it.
"""
from __future__ import annotations

import math

import pytest
import torch

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.evaluation import bound_per_token, token_loss, token_loss_meaning, token_perplexity_meaning
from registry.paper.zeroshot import format_zero_shot, zero_shot
from registry.storage.results import perplexity

BATCHES, ROWS = 8, 64


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def _built(reg, *overrides: str):
    settings = compose([*overrides, "dataset.seq_len=16"], reg)
    torch.manual_seed(0)
    return build_experiment(settings, reg), settings


@pytest.mark.parametrize("weighting", ["elbo", "constant"])
def test_mdlm_loss_is_labelled_a_bound_estimate_under_elbo_weights_and_no_bound_under_constant_ones(reg, weighting):
    experiment, _ = _built(reg, "experiment=binsaw/mdlm_cpu", f"process.weighting={weighting}")
    nats = math.log(2)  # the binary sawtooth's vocabulary: -log p of the uniform model per token
    assert bound_per_token(experiment, 2, ROWS, 0, 1) == pytest.approx(nats, rel=1e-3)
    loss = token_loss(experiment, BATCHES, ROWS, 0)
    meaning = token_loss_meaning(experiment.model)
    if weighting == "elbo":
        assert loss == pytest.approx(nats, rel=0.05)  # E[w(t) t] log K = log K: the chain's weights
        assert meaning.endswith("estimate of the token chain's negative ELBO, i.e. of an upper bound on -log p")
        assert token_perplexity_meaning(experiment.model) == "an estimate of an upper bound on the perplexity"
    else:
        assert loss == pytest.approx(nats / 2, rel=0.05)  # E[t] log K over uniform times: below -log p
        assert meaning.endswith("weighted otherwise than the ELBO (its elbo_weighted is false), not a bound on -log p")
        assert "bounds no perplexity" in token_perplexity_meaning(experiment.model)


def test_a_ladd_models_loss_is_its_reconstruction_term_and_the_autoregressive_one_exact(reg):
    coladd, _ = _built(reg, "experiment=binsaw/coladd_seq_cpu")
    assert token_loss_meaning(coladd.model).startswith("the token reconstruction term given the latent")
    assert "bounds no perplexity" in token_perplexity_meaning(coladd.model)
    ar, _ = _built(reg, "experiment=binsaw/ar_cpu")
    assert token_loss_meaning(ar.model) == "the exact negative log-likelihood"
    assert token_perplexity_meaning(ar.model) == "the exact perplexity"


def test_zero_shot_gives_a_ladd_model_its_bound_and_the_perplexity_from_it(reg):
    experiment, settings = _built(reg, "experiment=binsaw/coladd_seq_cpu")
    table = zero_shot(experiment, settings, reg, ["0.01", "0.2"], "floor", 1, 8, 0)
    for row in table.rows:
        assert row.bound is not None and row.bound > row.token_loss and not row.loss_bounds
        assert row.perplexity == perplexity(row.bound)  # an untrained latent: a bound of thousands of nats
    printed = format_zero_shot(table)
    assert "L^x: the token reconstruction term given the latent" in printed
    assert "bound: a Monte-Carlo estimate (1 draw per row) of an upper bound on -log p" in printed
    without = zero_shot(experiment, settings, reg, ["0.01"], "floor", 1, 8, 0, bound_draws=0)
    assert without.rows[0].bound is None and without.rows[0].perplexity is None
    assert "n/a" in format_zero_shot(without)
