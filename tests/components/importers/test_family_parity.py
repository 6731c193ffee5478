"""The published families decode and score as their own code does: a tiny checkpoint in LLaDA's and in Dream's published
layout, imported by ``ladd import``, against the published algorithms written in the tests (``decoding_reference``:
LLaDA's ``generate()`` and evaluator, Fast-dLLM's three generate functions with threshold and factor, Dream's
``diffusion_generate`` and evaluator) run on the networks written from their architectures (``llada_reference``,
``dream_reference``). Both networks give their own mask weight, so that it is proposed, and their tables hold ids the
tokenizer lacks, so that those are proposed too."""
from __future__ import annotations

import math

import dream_reference
import llada_reference
import pytest
import torch
from decoding_reference import (
    dream_expected_nll,
    dream_generate,
    fast_dllm_generate,
    llada_expected_loglikelihood,
    llada_generate,
    llada_greedy,
)
from lm_eval.api.instance import Instance
from support import import_with

import registry
from ladd_plugins.samplers.confidence import ConfidenceSampler
from registry.engine.likelihood import bound
from registry.engine.loading import load_trained
from registry.harness import HarnessSettings, LaddLM
from registry.toolkit.options import ConfidenceConfig

PROMPT, GEN = 4, 12
#: each family's own mask id in its network's table
MASKS = {"llada": llada_reference.OWN_MASK, "dream": dream_reference.MASK}
#: requests over the test tokenizers' words: (context, continuation)
LLADA_REQUESTS = [("what is one plus two ?", " three"), ("say", " hello ."), ("one plus", " one is two .")]
DREAM_REQUESTS = [("hi the", " there"), ("was one", " two!"), ("two", " was the one?")]


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def _with_bos(folder):
    """The test tokenizer, made to put its BOS before what it encodes with special tokens (as LLaDA's evaluator
    encodes)."""
    from tokenizers import Tokenizer, processors

    backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    backend.save(str(folder / "tokenizer.json"))


@pytest.fixture(scope="module")
def llada(reg, tmp_path_factory):
    """A tiny LLaDA checkpoint whose network often proposes its own mask, imported at PROMPT + GEN positions."""
    root = tmp_path_factory.mktemp("llada_family")
    tensors = llada_reference.random_tensors(mask_weight=6.0)
    llada_reference.write_checkpoint(root / "src", tensors)
    _with_bos(root / "src")
    out = import_with("llada", str(root / "src"), root / "out", [f"dataset.seq_len={PROMPT + GEN}"], reg)
    return (*load_trained(out, reg), llada_reference.Network(tensors))


@pytest.fixture(scope="module")
def dream(reg, tmp_path_factory):
    """A tiny Dream checkpoint whose network often proposes its own mask, imported at PROMPT + GEN positions."""
    root = tmp_path_factory.mktemp("dream_family")
    tensors = dream_reference.random_tensors(mask_weight=6.0)
    dream_reference.write_checkpoint(root / "src", tensors)
    out = import_with("dream", str(root / "src"), root / "out", [f"dataset.seq_len={PROMPT + GEN}"], reg)
    return (*load_trained(out, reg), dream_reference.Network(tensors))


def _prompts(vocabulary: int, seed: int) -> torch.Tensor:
    """Three prompts of ids below ``vocabulary``, the network's own mask left out (a prompt holds no mask)."""
    ids = torch.randint(vocabulary - 1, (3, PROMPT), generator=torch.Generator().manual_seed(seed))
    return ids + (ids >= MASKS["llada"]).long() if vocabulary == 26 else ids


def _decode(model, prompt: torch.Tensor, steps: int, **options) -> torch.Tensor:
    """ladd's confidence sampler at temperature 0 given ``prompt``; the network's own mask where ladd's is left."""
    fixed = torch.full((prompt.shape[0], PROMPT + GEN), model.vocab_size)
    fixed[:, :PROMPT] = prompt
    sampler = ConfidenceSampler(ConfidenceConfig(temperature=0.0, **options))
    with torch.no_grad():
        tokens = sampler.sample(model, prompt.shape[0], steps, torch.Generator().manual_seed(0), fixed=fixed).tokens
    return tokens.masked_fill(tokens == model.vocab_size, model.mask_column)  # ladd's mask as the network's own


LLADA_CASES = [(12, 12), (12, 4), (6, 6), (3, 4)]


@pytest.mark.parametrize(("steps", "block_length"), LLADA_CASES)
def test_llada_decodes_as_lladas_generate(llada, steps, block_length):
    experiment, _, net = llada
    prompt = _prompts(26, steps + block_length)
    with torch.no_grad():
        expected = llada_generate(net, prompt, steps, GEN, block_length, MASKS["llada"])
    assert torch.equal(_decode(experiment.model, prompt, steps, block_length=block_length), expected)


def test_the_llada_cases_propose_the_mask_and_ids_the_tokenizer_lacks(llada):
    _, _, net = llada
    with torch.no_grad():
        tokens = torch.cat([llada_generate(net, _prompts(26, steps + block), steps, GEN, block, MASKS["llada"])
                            for steps, block in LLADA_CASES])
    assert bool((tokens == MASKS["llada"]).any()), "some committed proposal was the mask: it stays masked"
    assert bool((tokens >= 26).any()), "some committed proposal is an id the tokenizer lacks (a placeholder)"


FAST_DLLM_CASES = [
    ({"threshold": 0.3}, "none"), ({"threshold": 0.3}, "prefix"), ({"threshold": 0.3}, "dual"),
    ({"factor": 1.0}, "none"), ({"factor": 1.0}, "prefix"), ({"factor": 2.0}, "dual"),
]


@pytest.mark.parametrize(("rule", "cache"), FAST_DLLM_CASES)
def test_llada_decodes_as_fast_dllms_functions(llada, rule, cache):
    experiment, _, net = llada
    prompt = _prompts(26, 5)
    with torch.no_grad():
        expected = fast_dllm_generate(net, prompt, 12, GEN, 4, MASKS["llada"], cache=cache, **rule)
    ours = _decode(experiment.model, prompt, 12, block_length=4, bounded=False, cache=cache, **rule)
    assert torch.equal(ours, expected)


@pytest.fixture(scope="module")
def llada_plain(reg, tmp_path_factory):
    """A tiny LLaDA checkpoint whose network seldom proposes its own mask: Fast-dLLM's step counts, which index past
    their end when a block still holds a mask after its steps, run to their end on it."""
    root = tmp_path_factory.mktemp("llada_plain")
    tensors = llada_reference.random_tensors(seed=1)
    llada_reference.write_checkpoint(root / "src", tensors)
    out = import_with("llada", str(root / "src"), root / "out", [f"dataset.seq_len={PROMPT + GEN}"], reg)
    return (*load_trained(out, reg), llada_reference.Network(tensors))


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_llada_decodes_as_fast_dllms_functions_with_step_counts(llada_plain, cache):
    experiment, _, net = llada_plain
    prompt = _prompts(26, 7)
    with torch.no_grad():
        expected = fast_dllm_generate(net, prompt, 12, GEN, 4, MASKS["llada"], cache=cache)
    assert torch.equal(_decode(experiment.model, prompt, 12, block_length=4, cache=cache), expected)


def test_fast_dllms_threshold_ignores_the_step_count(llada):
    experiment, _, net = llada
    prompt = _prompts(26, 5)
    with torch.no_grad():
        expected = fast_dllm_generate(net, prompt, 3, GEN, 4, MASKS["llada"], threshold=0.99)
    assert torch.equal(_decode(experiment.model, prompt, 3, block_length=4, threshold=0.99, bounded=False), expected)
    bounded = _decode(experiment.model, prompt, 3, block_length=4, threshold=0.99)
    assert not torch.equal(bounded, expected), "ladd's bounded rule commits more to end each block in its step"


def _encode_llada(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """``eval_llada.py``'s ``_encode_pair``: the tokenizer called as it calls it, special tokens and all."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenizer(context + continuation)["input_ids"]
    head = tokenizer(context)["input_ids"]
    return head, whole[len(head) :]


def _lm(family, **settings) -> LaddLM:
    experiment, config, _ = family
    return LaddLM(experiment=experiment, settings=HarnessSettings(**settings), scoring=config.harness)


def _scores(lm: LaddLM, requests: list[tuple[str, str]]) -> list[tuple[float, bool]]:
    return lm.loglikelihood([Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(requests)])


def test_llada_scores_as_lladas_evaluator(llada):
    experiment, _, net = llada
    lm = _lm(llada, likelihood="exact", batch_size=64)
    tokenizer = experiment.dataset.tokenizer
    for (context, continuation), (value, greedy) in zip(LLADA_REQUESTS, _scores(lm, LLADA_REQUESTS), strict=True):
        head, tail = _encode_llada(tokenizer, context, continuation)
        assert head[0] == tokenizer.bos_token_id, "the evaluator's encoding puts the tokenizer's BOS first"
        assert [w.tokens for w in lm._pair_rows(context, continuation)] == [(*head, *tail)], "no padding"
        with torch.no_grad():
            assert value == pytest.approx(llada_expected_loglikelihood(net, head, tail, MASKS["llada"]), abs=2e-5)
            assert greedy == llada_greedy(net, head, tail, MASKS["llada"])


def _draws(family, row, count: int) -> torch.Tensor:
    experiment = family[0]
    tokens, scored = torch.tensor([row.tokens]), torch.tensor([row.scored])
    return bound(experiment.model, tokens, scored, count, 0, False, 64, "32-true")[0]


def test_lladas_monte_carlo_estimate_centres_on_the_evaluators_expectation(llada):
    experiment, _, net = llada
    context, continuation = LLADA_REQUESTS[2]
    (row,) = _lm(llada)._pair_rows(context, continuation)
    draws = _draws(llada, row, 512)
    head, tail = _encode_llada(experiment.dataset.tokenizer, context, continuation)
    with torch.no_grad():
        expected = -llada_expected_loglikelihood(net, head, tail, MASKS["llada"])
    assert abs(float(draws.mean()) - expected) < 4 * float(draws.std()) / math.sqrt(draws.numel())


DREAM_CASES = [
    ("maskgit_plus", "low_confidence", 12, {}), ("topk_margin", "margin", 12, {}), ("entropy", "entropy", 12, {}),
    ("entropy", "entropy", 5, {}), ("maskgit_plus", "low_confidence", 7, {"top_p": 0.5}),
    ("entropy", "entropy", 6, {"top_k": 3}), ("topk_margin", "margin", 4, {"top_p": 0.8, "top_k": 5}),
]


@pytest.mark.parametrize(("alg", "remasking", "steps", "filters"), DREAM_CASES)
def test_dream_decodes_as_dreams_diffusion_generate(dream, alg, remasking, steps, filters):
    experiment, _, net = dream
    prompt = _prompts(dream_reference.MASK - 4, steps)
    with torch.no_grad():  # a row at a time: Dream counts a batch's mean masked count, ladd each row's own
        expected = torch.cat([dream_generate(net, row[None], GEN, steps, MASKS["dream"], alg, **filters)
                              for row in prompt])
    ours = _decode(experiment.model, prompt, steps, schedule="dream", remasking=remasking, **filters)
    assert torch.equal(ours, expected)


def test_the_dream_cases_propose_the_mask(dream):
    experiment, _, net = dream
    with torch.no_grad():
        tokens = torch.cat([dream_generate(net, row[None], GEN, steps, MASKS["dream"], alg, **filters)
                            for alg, _, steps, filters in DREAM_CASES
                            for row in _prompts(dream_reference.MASK - 4, steps)])
    assert bool((tokens == MASKS["dream"]).any()), "some committed proposal was the mask: it stays masked"


def _encode_dream(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Dream's evaluator's ``_encode_pair`` with ``add_bos_token``: the BOS text first, EOS after the continuation."""
    context = tokenizer.bos_token + context
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenizer.encode(context + continuation) + [tokenizer.eos_token_id]
    head = tokenizer.encode(context)
    return head, whole[len(head) :]


def test_dream_scores_as_dreams_evaluator(dream):
    experiment, _, net = dream
    lm = _lm(dream, likelihood="exact", batch_size=64)
    tokenizer = experiment.dataset.tokenizer
    for (context, continuation), (value, _) in zip(DREAM_REQUESTS, _scores(lm, DREAM_REQUESTS), strict=True):
        head, tail = _encode_dream(tokenizer, context, continuation)
        assert tail[-1] == dream_reference.EOS and head[0] == tokenizer.bos_token_id
        (row,) = lm._pair_rows(context, continuation)
        assert row.tokens == (*head, *tail) and not row.scored[-1], "EOS closes the row, given and unscored"
        with torch.no_grad():
            assert value == pytest.approx(-dream_expected_nll(net, head, tail, MASKS["dream"], 1e-3), abs=2e-5)


def test_dreams_monte_carlo_estimate_centres_on_the_evaluators_expectation(dream):
    experiment, _, net = dream
    context, continuation = DREAM_REQUESTS[2]
    (row,) = _lm(dream)._pair_rows(context, continuation)
    draws = _draws(dream, row, 512)
    head, tail = _encode_dream(experiment.dataset.tokenizer, context, continuation)
    with torch.no_grad():
        expected = dream_expected_nll(net, head, tail, MASKS["dream"], 1e-3)
    assert abs(float(draws.mean()) - expected) < 4 * float(draws.std()) / math.sqrt(draws.numel())


def test_results_say_how_the_family_is_scored(llada, dream):
    for family, bos in ((llada, False), (dream, True)):
        record = _lm(family).get_model_info()["scoring"]
        assert record["length"] == "variable" and record["special_tokens"] and record["bos"] == bos
        assert record["mask_column"].startswith("kept in the softmax")
