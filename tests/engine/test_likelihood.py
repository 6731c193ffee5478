"""The likelihood bound of registry/engine/likelihood.py against closed forms and enumerations written here."""
from __future__ import annotations

import itertools
import math

import pytest
import torch
from support import redraw_weights

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.likelihood import bound, greedy_matches, row_seed
from registry.errors import LaddError
from registry.interfaces import mask_id

S = 16


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def scrambled(name: str, reg, *overrides: str):
    """An untrained model with redrawn weights, in float64: comparisons see the estimator, not float32 rounding that
    depends on the batch's shape."""
    experiment = build_experiment(compose([f"experiment={name}", f"dataset.seq_len={S}", *overrides], reg), reg)
    redraw_weights(experiment.model, 0.3).double()
    return experiment


@pytest.fixture(scope="module")
def mdlm(reg):
    return scrambled("binsaw/mdlm_cpu", reg, "process.horizon=1000")


def row(prompt: int, scored: int, vocab: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """A row with ``prompt`` given tokens, ``scored`` scored ones, the rest unknown (the mask id)."""
    generator = torch.Generator().manual_seed(prompt * 31 + scored)
    tokens = torch.full((1, S), mask_id(vocab), dtype=torch.long)
    tokens[0, : prompt + scored] = torch.randint(vocab, (prompt + scored,), generator=generator)
    chosen = torch.zeros(1, S, dtype=torch.bool)
    chosen[0, prompt : prompt + scored] = True
    return tokens, chosen


def log_softmaxes(model, state: torch.Tensor, positions: list[int], targets: list[int]) -> list[float]:
    """float64 log-softmax of the network's logits at ``positions`` (the output head applied there, as the bound
    applies it) at the ``targets``."""
    rows = torch.zeros_like(state, dtype=torch.bool)
    rows[0, positions] = True
    with torch.no_grad():
        logits = model.predict(state, torch.ones(1), None, None, rows).tokens.double().log_softmax(-1)
    return [float(logits[i, target]) for i, target in enumerate(targets)]


@pytest.mark.parametrize("schedule", ["linear", "loglinear", "cosine"])
def test_a_one_token_continuation_scores_the_exact_log_softmax_at_its_masked_slot(reg, schedule):
    experiment = scrambled("binsaw/mdlm_cpu", reg, f"schedule={schedule}", "process.horizon=500")
    model = experiment.model.eval()
    tokens, scored = row(prompt=5, scored=1)
    state = tokens.clone()
    state[scored] = mask_id(2)
    expected = -log_softmaxes(model, state, [5], [int(tokens[0, 5])])[0]
    estimates = bound(model, tokens, scored, 16, 0, False, 64)
    assert (estimates - expected).abs().max() < 1e-6  # every draw masks the one slot, with weight exactly 1


def subset_weight(free: int, count: int, horizon: int) -> float:
    """For the linear schedule (mask chance k/T at step k, reveal chance 1/k): sum_k (1/k) (k/T)^l (1 - k/T)^(L-l),
    the chance that the chain reveals one given position while exactly a given set of ``count`` is masked."""
    steps = range(1, horizon + 1)
    return math.fsum((1 / k) * (k / horizon) ** count * (1 - k / horizon) ** (free - count) for k in steps)


def brute_force(model, tokens: torch.Tensor, scored: torch.Tensor, horizon: int) -> float:
    """The bound by enumeration: every masked set of the scored positions, its cross-entropies, its weight."""
    positions = scored[0].nonzero().squeeze(1).tolist()
    subsets = [c for size in range(1, len(positions) + 1) for c in itertools.combinations(positions, size)]
    states = tokens.repeat(len(subsets), 1)
    for index, chosen in enumerate(subsets):
        states[index, list(chosen)] = mask_id(2)
    with torch.no_grad():
        log_probs = model.predict(states, torch.ones(len(subsets)), None, None).tokens.log_softmax(-1)
    weights = {size: subset_weight(len(positions), size, horizon) for size in range(1, len(positions) + 1)}
    return math.fsum(
        weights[len(chosen)] * -float(log_probs[index, p, tokens[0, p]])
        for index, chosen in enumerate(subsets)
        for p in chosen
    )


@pytest.mark.parametrize("length", [1, 2, 3, 4, 5, 6])
def test_exact_mode_equals_a_brute_force_enumeration_and_mc_lies_within_three_standard_errors(mdlm, length):
    model = mdlm.model.eval()
    tokens, scored = row(prompt=3, scored=length)
    expected = brute_force(model, tokens, scored, horizon=1000)
    exact = bound(model, tokens, scored, 1, 0, False, 64, mode="exact")
    assert exact.shape == (1, 1)
    assert float(exact) == pytest.approx(expected, rel=1e-9)
    draws = bound(model, tokens, scored, 128, 0, False, 256)[0]
    error = float(draws.std()) / math.sqrt(128)
    assert abs(float(draws.mean()) - expected) < 3 * error + 1e-9


def test_the_count_weights_approach_llada_s_l_over_l_as_the_horizon_grows(reg):
    process = build_experiment(compose(["experiment=binsaw/mdlm_cpu", "process.horizon=20000"], reg), reg).model.process
    for free in (1, 3, 8):
        for count in range(1, free + 1):
            weight = process.subset_weight(free, count) * math.comb(free, count)  # W_l
            assert weight == pytest.approx(1 / count, rel=2e-3)
    assert process.subset_weight(1, 1) == pytest.approx(1.0, abs=1e-12)


def test_with_the_true_conditionals_of_independent_tokens_the_bound_is_their_exact_log_likelihood(mdlm):
    """Independent tokens with known probabilities: a network predicting them at every masked slot makes the chain
    exact, so the bound (summed over every masked set) equals -sum log p(x_i) whatever the masks."""
    process = mdlm.model.process
    tokens, scored = row(prompt=2, scored=6)
    probs = torch.tensor([0.3, 0.7], dtype=torch.float64)
    subsets = process.bound_subsets(tokens, scored)
    logits = probs.log().expand(int(subsets.rows.sum()), -1)
    total = float(process.bound_terms(logits, tokens.expand(subsets.state.shape[0], -1), subsets).sum())
    assert total == pytest.approx(-float(probs.log()[tokens[scored]].sum()), rel=1e-9)


def test_a_row_s_draws_depend_on_the_row_and_the_seed_only(mdlm):
    model = mdlm.model.eval()
    tokens, scored = row(prompt=4, scored=5)
    other, other_scored = row(prompt=1, scored=3)
    alone = bound(model, tokens, scored, 8, 3, False, 64)
    batched = bound(model, torch.cat([other, tokens]), torch.cat([other_scored, scored]), 8, 3, False, 5)
    assert torch.allclose(alone[0], batched[1], rtol=1e-6, atol=1e-7)
    assert row_seed(3, tokens, scored) != row_seed(4, tokens, scored)


def test_an_autoregressive_model_s_bound_is_its_exact_teacher_forced_likelihood(reg):
    model = scrambled("binsaw/ar_cpu", reg).model.eval()
    tokens, scored = row(prompt=3, scored=4)
    with torch.no_grad():
        logits = model.predict(tokens, torch.ones(1), None, None).tokens[0].log_softmax(-1)
    expected = -sum(float(logits[p, tokens[0, p]]) for p in range(3, 7))
    assert float(bound(model, tokens, scored, 128, 0, False, 64).squeeze()) == pytest.approx(expected, rel=1e-6)
    greedy = logits[3:7].argmax(-1).equal(tokens[0, 3:7])
    assert bool(greedy_matches(model, tokens, scored, 0, False, 8)[0]) == greedy


def test_greedy_decoding_commits_the_most_confident_argmax_each_step(mdlm):
    model = mdlm.model.eval()
    tokens, scored = row(prompt=3, scored=4)
    state = tokens.masked_fill(scored, mask_id(2))
    for _ in range(4):  # written here: one position per step, the most confident masked one
        with torch.no_grad():
            probs = model.predict(state, torch.ones(1), None, None).tokens[0].softmax(-1)
        open_positions = [p for p in range(S) if bool(scored[0, p]) and int(state[0, p]) == mask_id(2)]
        best = max(open_positions, key=lambda p: float(probs[p].max()))
        state[0, best] = int(probs[best].argmax())
    greedy = state.clone()
    assert bool(greedy_matches(model, tokens, scored, 0, False, 8)[0]) == torch.equal(greedy, tokens)
    assert bool(greedy_matches(model, greedy, scored, 0, False, 8)[0])


def test_exact_mode_is_refused_for_a_model_with_a_latent_or_a_long_continuation(reg, mdlm):
    coladd = scrambled("binsaw/coladd_seq_cpu", reg).model.eval()
    tokens, scored = row(prompt=0, scored=4)
    with pytest.raises(LaddError, match="has a latent channel; use the Monte Carlo mode"):
        bound(coladd, tokens, scored, 1, 0, True, 8, mode="exact")
    tokens, scored = row(prompt=0, scored=13)
    with pytest.raises(LaddError, match="L = 13, above 12"):
        bound(mdlm.model, tokens, scored, 1, 0, False, 8, mode="exact")
