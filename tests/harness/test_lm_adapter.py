"""The lm-eval model of registry/harness: its rolling bound is ladd eval's, its requests batch-free, its refusals."""
from __future__ import annotations

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.registry import get_model
from support import ROOT, redraw_weights

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.evaluation import bound_per_token
from registry.errors import LaddError
from registry.harness import HarnessSettings, LaddLM, adapter, tasks

S = 16
SMALL = [f"dataset.seq_len={S}", "backbone.hidden=32", "backbone.layers=1", "backbone.heads=2", "backbone.cond_dim=32"]
CORPUS = ROOT / "ladd_plugins" / "datasets" / "text" / "corpus" / "shakespeare.txt"


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.fixture(scope="module")
def document(tmp_path_factory, reg):
    """A document whose ids and EOS fill whole rows, as a text dataset's only (validation) text, and its model."""
    tokenizer = build_experiment(compose(["experiment=demo/mdlm", *SMALL], reg), reg).dataset.tokenizer
    words = CORPUS.read_text().split()[200:]
    count = 3 * S - 1  # ids of the document: with its EOS, three rows
    text = " ".join(words[:count])
    while len(tokenizer(text, add_special_tokens=False)["input_ids"]) > count:
        text = text.rsplit(" ", 1)[0]
    extra = 0
    while len(tokenizer(text, add_special_tokens=False)["input_ids"]) < count:
        text += " " + words[count + extra]
        extra += 1
    assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) == count, "pick another passage"
    path = tmp_path_factory.mktemp("document") / "document.txt"
    path.write_text(text)
    options = [f"dataset.source={path}", "dataset.txt_documents=file", "+dataset.split_map.validation=train"]
    experiment = build_experiment(compose(["experiment=demo/mdlm", *SMALL, *options], reg), reg)
    redraw_weights(experiment.model, 0.2)
    return text, experiment


def rolling(text: str) -> Instance:
    return Instance("loglikelihood_rolling", {}, (text,), 0)


def pair(context: str, continuation: str, index: int = 0) -> Instance:
    return Instance("loglikelihood", {}, (context, continuation), index)


def test_the_rolling_bound_of_a_document_is_ladd_eval_s_bound_on_the_same_text_and_seed(document):
    text, experiment = document
    rows = experiment.dataset.rows("validation")
    assert rows.shape == (3, S)
    per_token = bound_per_token(experiment, batches=3, batch_size=1, seed=5, draws=4)
    lm = LaddLM(experiment=experiment, settings=HarnessSettings(mc_num=4, seed=5, batch_size=7))
    (log_likelihood,) = lm.loglikelihood_rolling([rolling(text + " [SEP]")])  # the EOS ladd eval's rows end with
    assert -log_likelihood / (3 * S) == pytest.approx(per_token, rel=1e-5)
    assert lm.counts.rows == 3 and lm.counts.cut == 1  # three whole rows; the later ones see no earlier text


def test_requests_score_alike_in_any_order_and_batch_and_equal_rows_are_scored_once(document):
    _, experiment = document
    requests = [pair("Now, fair Hippolyta, our nuptial", " hour draws on"), pair("To be or", " not"),
                pair("To be or", " not")]
    one = LaddLM(experiment=experiment, settings=HarnessSettings(mc_num=6, seed=1, batch_size=3))
    other = LaddLM(experiment=experiment, settings=HarnessSettings(mc_num=6, seed=1, batch_size=64))
    forward = one.loglikelihood(requests)
    backward = other.loglikelihood(requests[::-1])[::-1]
    assert [f[0] for f in forward] == pytest.approx([b[0] for b in backward], rel=1e-5)
    assert [f[1] for f in forward] == [b[1] for b in backward]
    assert forward[1] == forward[2] and one.counts.rows == 2
    assert all(value < 0 for value, _ in forward)


def test_generation_fixes_the_context_and_cuts_at_every_stop_string(document, monkeypatch):
    _, experiment = document
    tokenizer = experiment.dataset.tokenizer
    said = tokenizer("to be. or not", add_special_tokens=False)["input_ids"]
    seen = {}

    def sample(experiment, num, steps, batch_size, seed, progress, fixed, precision):
        seen["fixed"] = fixed
        out = fixed.clone()
        for row in out:
            start = int((row != experiment.model.vocab_size).sum())
            row[start : start + len(said)] = torch.tensor(said)
        return out, steps

    monkeypatch.setattr(adapter, "sample", sample)
    lm = LaddLM(experiment=experiment, settings=HarnessSettings(seed=2))
    request = Instance("generate_until", {}, ("whether", {"until": ["."], "max_gen_toks": 8, "temperature": 0}), 0)
    assert lm.generate_until([request]) == ["to be"]
    context = tokenizer("whether", add_special_tokens=False)["input_ids"]
    assert seen["fixed"][0, : len(context)].tolist() == context
    assert (seen["fixed"][0, len(context) :] == experiment.model.vocab_size).all()  # the rest is free
    assert lm.counts.ignored_generation_kwargs == {"temperature"}


def test_the_model_registers_as_ladd_in_lm_eval():
    assert get_model("ladd") is LaddLM


def test_a_model_without_a_tokenizer_and_a_bad_draw_count_are_refused(reg):
    binsaw = build_experiment(compose(["experiment=binsaw/mdlm_cpu", "dataset.seq_len=16"], reg), reg)
    with pytest.raises(LaddError, match=r"has no tokenizer: lm-eval's text tasks need a model trained on text"):
        LaddLM(experiment=binsaw)
    with pytest.raises(LaddError, match=r"mc_num=0 is out of range: it must be >= 1"):
        HarnessSettings(mc_num=0)


def test_a_task_lm_eval_does_not_know_is_refused_with_lm_eval_s_own_message(monkeypatch):
    real = tasks.TaskManager

    def local_only(include_path, include_defaults=True):  # lm-eval's own index takes seconds to build
        return real(include_path=include_path, include_defaults=False)

    monkeypatch.setattr(tasks, "TaskManager", local_only)
    with pytest.raises(LaddError) as refused:
        tasks.task_manager(["ladd_demo_choice", "no_such_task"], [])
    assert str(refused.value) == (
        "lm-eval: Spec 'no_such_task' is not a registered task/group/tag name or valid YAML path"
    )
    assert {"ladd_demo_choice", "ladd_demo_exact"} <= set(tasks.task_manager(["ladd_demo_choice"], []).all_tasks)


class _WithBos:
    """The model's tokenizer with a BOS (its EOS token), put first when asked for special tokens (GPT-2's has none)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.bos_token, self.bos_token_id = tokenizer.eos_token, tokenizer.eos_token_id

    def __call__(self, text: str, add_special_tokens: bool = False):
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return {"input_ids": [self.bos_token_id] * add_special_tokens + ids}

    def __getattr__(self, name: str):
        return getattr(self.tokenizer, name)


#: every option of the model's harness settings and another value
HARNESS_VARIATIONS = {"length": "variable", "special_tokens": True, "bos": True, "eos": True}


def test_each_harness_option_changes_the_rows_a_request_is_scored_in(document):
    import dataclasses

    from registry.config.settings import HarnessConfig

    _, experiment = document

    def rows(scoring: HarnessConfig):
        lm = LaddLM(experiment=experiment, scoring=scoring)
        lm.tokenizer = _WithBos(lm.tokenizer)
        return lm._pair_rows("The king is", " dead")

    assert set(HARNESS_VARIATIONS) == {option.name for option in dataclasses.fields(HarnessConfig)}
    base = rows(HarnessConfig())
    assert len(base) == 1 and len(base[0].tokens) == S
    for option, value in HARNESS_VARIATIONS.items():
        assert rows(HarnessConfig(**{option: value})) != base, f"harness.{option}={value} changed no row"
    (framed,) = rows(HarnessConfig(length="variable", bos=True, eos=True))
    eos = experiment.dataset.eos_id
    assert framed.tokens[-1] == eos and not framed.scored[-1] and len(framed.tokens) < S
