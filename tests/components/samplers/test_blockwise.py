"""The blockwise sampler: the same tokens with the exact cache as without it at 1x, 4x and 16x the trained length,
token forwards against their closed forms, prompts as leading blocks, the end of the document, and refusals."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from block_models import MASK, experiment, randomised

import registry
from ladd_plugins.datasets.text.tokenizer import load_tokenizer
from registry.engine.assembly import with_sampler
from registry.engine.compute import counting
from registry.engine.prompts import fixed_tokens
from registry.errors import IncompatibleComponentsError, InvalidConfigError, LaddError

DECODERS = {
    "ancestral": {},
    "confidence": {"token_decoder": "confidence", "token_decoder_options": {"remasking": "margin"}},
}


@pytest.fixture(scope="module")
def model():
    return randomised(experiment(backbone={"block_size": 4}).model)


@pytest.fixture(scope="module")
def short():
    """Trained length 8, blocks of 4: 16x the length is 32 blocks."""
    return randomised(experiment(8, backbone={"block_size": 4}).model)


def _sample(model, steps: int = 4, length: int | None = None, fixed=None, seed: int = 1, **options):
    sampler = registry.build("sampler", "blockwise", options)
    with counting(model) as meter:
        out = sampler.sample(model, 3, steps, torch.Generator().manual_seed(seed), fixed=fixed, length=length)
    return out, meter.spent()


SLOW = pytest.mark.slow  # seconds: 32 and 16 blocks, each step over the whole prefix without the cache


@pytest.mark.parametrize(
    ("decoder", "times"),
    [("ancestral", 1), ("ancestral", 4), pytest.param("ancestral", 16, marks=SLOW), ("confidence", 1),
     pytest.param("confidence", 4, marks=SLOW)],
)
def test_the_cache_changes_no_token(short, decoder, times):
    length = times * short.seq_len
    cached, cached_spent = _sample(short, 2, length, **DECODERS[decoder])
    plain, plain_spent = _sample(short, 2, length, cache=False, **DECODERS[decoder])
    assert cached.tokens.shape == (3, length) and not bool((cached.tokens == MASK).any())
    assert torch.equal(cached.tokens, plain.tokens)
    assert cached_spent.positions < plain_spent.positions


@pytest.mark.slow  # seconds: many block steps
def test_token_forwards_with_and_without_the_cache_have_their_closed_forms(model):
    # 16 blocks of 4 at 4x the trained length; a confidence step commits one token, so each block takes 4 calls
    options = DECODERS["confidence"]
    cached, cached_spent = _sample(model, 4, 64, **options)
    plain, plain_spent = _sample(model, 4, 64, cache=False, **options)
    blocks, block, steps = 16, 4, 4
    assert plain_spent.positions == 3 * steps * sum(block * k for k in range(1, blocks + 1))  # the prefix, every step
    assert cached_spent.positions == 3 * (steps * blocks * block + (blocks - 1) * block)  # the block, then its commit
    assert (cached.network_calls, plain.network_calls) == (steps * blocks + blocks - 1, steps * blocks)
    per_step = plain_spent.positions / (3 * steps * blocks * block)
    assert per_step == (blocks + 1) / 2


@pytest.mark.slow  # seconds: many block steps
def test_a_prompt_is_kept_as_leading_blocks_and_read_through_the_cache(model):
    fixed = torch.full((3, 32), MASK)
    fixed[:, :6] = torch.tensor([1, 0, 1, 1, 0, 0])  # a block and a half
    cached, _ = _sample(model, length=32, fixed=fixed)
    plain, _ = _sample(model, length=32, fixed=fixed, cache=False)
    assert torch.equal(cached.tokens, plain.tokens) and torch.equal(cached.tokens[:, :6], fixed[:, :6])
    with pytest.raises(InvalidConfigError, match=r"shape \(3, 24\)"):
        _sample(model, length=24, fixed=fixed)


def test_sampling_ends_at_the_first_generated_end_of_document_token(model):
    model.eos_id = 1  # the sawtooth's token 1 stands in for an end-of-document token
    try:
        fixed = torch.full((3, 64), MASK)
        fixed[:, :3] = 1  # ends of documents in the prompt do not end the sample
        ended, ended_spent = _sample(model, length=64, fixed=fixed)
        whole, whole_spent = _sample(model, length=64, fixed=fixed, stop_at_eos=False)
    finally:
        model.eos_id = None
    assert ended.lengths is not None and whole.lengths is None
    for row, end in zip(range(3), ended.lengths.tolist(), strict=True):
        first = 3 + int((whole.tokens[row, 3:] == 1).int().argmax()) + 1
        assert end == first
        assert torch.equal(ended.tokens[row, :end], whole.tokens[row, :end])
        assert bool((ended.tokens[row, end:] == 1).all())
    assert ended_spent.calls < whole_spent.calls, "sampling stops once every sample has ended"


def test_bad_requests_are_refused_in_one_line(model):
    with pytest.raises(InvalidConfigError, match="length=0"):
        _sample(model, length=0)
    text = SimpleNamespace(tokenizer=load_tokenizer("text8"), vocab_size=30, seq_len=16)
    assert fixed_tokens(text, 2, "to be", length=40).shape == (2, 40)
    with pytest.raises(LaddError, match="take 12 tokens, leaving nothing to generate in 8: give a longer length"):
        fixed_tokens(text, 2, "to be or not", length=8)
    with pytest.raises(InvalidConfigError, match="keeps a key-value cache of its own"):
        registry.build("sampler", "blockwise", {"token_decoder": "confidence",
                                                "token_decoder_options": {"cache": "prefix"}})
    reg = registry.load()
    causal = experiment(backbone={"name": "causal"}, process={"name": "autoregressive"}, sampler={"name": "ancestral"})
    # the causal transformer keeps a cache but attends position by position, not in blocks of a block model
    with pytest.raises(IncompatibleComponentsError, match="attends in blocks, but backbone 'causal' attends without"):
        with_sampler(causal, reg, "blockwise")
    bidirectional = {"attention": "bidirectional", "block_size": None}
    bidirectional_model = experiment(backbone=bidirectional, sampler={"name": "ancestral"})
    with pytest.raises(IncompatibleComponentsError, match="attends in blocks, but backbone 'dit' attends without"):
        with_sampler(bidirectional_model, reg, "blockwise")
    with pytest.raises(IncompatibleComponentsError, match="attends without blocks, but backbone 'dit' attends in"):
        with_sampler(experiment(backbone={"block_size": 4}), reg, "ancestral")
