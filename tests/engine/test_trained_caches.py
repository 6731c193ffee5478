"""The exact key-value caches give the tokens of the uncached path on trained models, not only on random weights.

A network trained for a few hundred steps on the sawtooth (its held-out L^x below the untrained log 2) is sampled with
the cache and without it, from the same seeds: block diffusion at 4x its trained length (the committed blocks read
from the cache), the autoregressive baseline at its length (the prefix read from the cache), and MDLM decoded by
confidence with Fast-dLLM's approximate caches recomputed at every step (``refresh=1``), which makes them exact.
How many tokens the approximate caches change at their default refresh is measured by ``bench/trained_caches.py``.
"""
from __future__ import annotations

import math

import pytest
import torch

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment, with_sampler
from registry.engine.evaluation import token_loss
from registry.interfaces import mask_id

STEPS, BATCH = 200, 64


def _trained(reg, experiment: str):
    experiment_ = build_experiment(compose([f"experiment={experiment}", "dataset.seq_len=16"], reg), reg)
    model = experiment_.model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    stream = experiment_.dataset.batches(BATCH, 0, "train")
    for step in range(STEPS):
        loss = model.loss(next(stream), torch.Generator().manual_seed(step))["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    assert token_loss(experiment_, 2, BATCH, 0) < math.log(2) - 0.02, "the network learnt the sawtooth's tokens"
    return experiment_


@pytest.mark.slow
@pytest.mark.parametrize(
    ("experiment", "sampler", "length"),
    [("binsaw/bd3lm_cpu", "blockwise", 64), ("binsaw/ar_cpu", "autoregressive", None)],
)
def test_cached_and_uncached_sampling_of_a_trained_model_give_the_same_tokens(experiment, sampler, length):
    reg = registry.load()
    torch.manual_seed(0)
    trained = _trained(reg, experiment)
    sized = {} if length is None else {"length": length}
    tokens = [
        with_sampler(trained, reg, sampler, {"cache": cache})
        .sampler.sample(trained.model, 32, 4, torch.Generator().manual_seed(1), **sized)
        .tokens
        for cache in (True, False)
    ]
    assert tokens[0].shape == (32, length or 16)
    assert torch.equal(tokens[0], tokens[1])
    assert 0.1 < float(tokens[0].double().mean()) < 0.9, "both token values occur: the samples are not degenerate"


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_fast_dllm_caches_recomputed_every_step_give_the_uncached_tokens_of_a_trained_model(temperature):
    reg = registry.load()
    torch.manual_seed(0)
    trained = _trained(reg, "binsaw/mdlm_cpu")
    rows = next(trained.dataset.batches(32, 7, "test"))
    prompt = torch.full_like(rows, mask_id(trained.model.vocab_size))
    prompt[:, :4] = rows[:, :4]

    def tokens(**cache) -> torch.Tensor:
        options = {"block_length": 4, "temperature": temperature, **cache}
        sampler = with_sampler(trained, reg, "confidence", options).sampler
        return sampler.sample(trained.model, 32, 12, torch.Generator().manual_seed(1), fixed=prompt).tokens

    uncached = tokens()
    for cache in ("prefix", "dual"):
        assert torch.equal(tokens(cache=cache, refresh=1), uncached), cache
    # the same caches at their default refresh (block starts) move tokens of this model: its predictions read the
    # context, so the equality above is not that of a network that ignores what the cache holds
    assert not torch.equal(tokens(cache="dual"), uncached)
