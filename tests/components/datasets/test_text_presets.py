"""The text presets and the whole offline text path: data -> frozen encoder -> train -> sample -> metrics.

Tiny stand-ins replace the downloads: the shipped Shakespeare corpus, the character tokenizer, a
two-layer Qwen3 encoder and a one-layer GPT-2 teacher, both built from configs and saved locally.
"""
from __future__ import annotations

import math

import pytest
import torch
from support import ROOT, assert_trainable_set_is_exact

import registry
from registry.config.composition import compose
from registry.engine.evaluation import evaluate
from registry.engine.prompts import fixed_tokens
from registry.engine.sampling import sample
from registry.interfaces import mask_id
from registry.paper.zeroshot import zero_shot
from registry.storage.results import perplexity
from registry.training.loop import train

CONFIGS = ROOT / "configs" / "experiment"
PRESETS = sorted(f"{p.parent.name}/{p.stem}" for corpus in ("lm1b", "owt") for p in (CONFIGS / corpus).glob("*.yaml"))


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> dict[str, str]:
    """Local folders for the encoder and the teacher, sharing the data's character tokenizer."""
    from transformers import AutoModel, GPT2Config, GPT2LMHeadModel, Qwen3Config

    from ladd_plugins.datasets.text.tokenizer import load_tokenizer

    tokenizer = load_tokenizer("text8")
    rows = len(tokenizer)
    root = tmp_path_factory.mktemp("text_assets")
    torch.manual_seed(0)
    encoder = root / "encoder"
    AutoModel.from_config(
        Qwen3Config(vocab_size=rows, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=8, max_position_embeddings=1024)
    ).save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    teacher = root / "teacher"
    GPT2LMHeadModel(GPT2Config(vocab_size=rows, n_layer=1, n_embd=32, n_head=2, n_positions=1024)).save_pretrained(
        teacher
    )
    tokenizer.save_pretrained(teacher)
    return {"encoder": str(encoder), "teacher": str(teacher), "cache": str(root / "cache")}


def offline_overrides(assets: dict[str, str], preset: str) -> list[str]:
    """Replace every download of a preset by the local stand-ins, and shrink the run."""
    overrides = [
        f"experiment={preset}",
        "dataset.source=shakespeare",
        "dataset.tokenizer=text8",
        "dataset.vocab_size=null",
        f"dataset.cache_dir={assets['cache']}",
        "dataset.progress=false",
        f"metric.teacher={assets['teacher']}",
        "train.batch_size=2",
        "train.warmup_steps=1",
        "train.progress=false",
        "train.log_every=1",
        "train.stages=[{steps:2,lambda_latent:1.0,freeze_encoder:true}]",
        "backbone.hidden=32",
        "backbone.layers=1",
        "backbone.heads=2",
        "train.init_from=null",  # a warm start needs a source model (tests/engine/test_warm_start.py)
    ]
    name = preset.split("/")[1]
    if name not in ("ar", "mdlm", "mdlm_published") and not name.startswith("bd3lm"):  # those with a pretrained encoder
        overrides.append(f"encoder.model={assets['encoder']}")
    return overrides


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_every_text_preset_trains_two_steps_and_samples_offline(preset, assets, reg, tmp_path):
    cfg = compose(offline_overrides(assets, preset), reg)
    experiment = train(cfg, tmp_path, reg)
    assert len((tmp_path / "metrics.csv").read_text().splitlines()) >= 2, "a logged training step"
    tokens, calls = sample(experiment, 2, 2, 2, seed=0)
    seq_len = experiment.dataset.seq_len
    assert tokens.shape == (2, seq_len) and int(tokens.max()) < experiment.dataset.vocab_size
    assert calls >= 1
    assert_trainable_set_is_exact(experiment.model, next(experiment.dataset.batches(2, 0)))


def test_the_paper_presets_keep_the_paper_sizes(reg):
    for preset, (seq_len, hidden, layers, latent) in {
        "lm1b/mdlm": (128, 1024, 13, 0),
        "lm1b/coladd_128": (128, 768, 12, 128),
        "lm1b/diladd_32_seq": (128, 768, 12, 32),
        "owt/diladd_16": (512, 768, 12, 16),
        "lm1b/ccdd": (128, 768, 12, 128),
    }.items():
        cfg = compose([f"experiment={preset}"], reg).plain()
        assert (cfg["dataset"]["seq_len"], cfg["backbone"]["hidden"], cfg["backbone"]["layers"]) == (
            seq_len,
            hidden,
            layers,
        )
        assert cfg["dataset"]["vocab_size"] + 1 == 151_670, "Qwen3 tokens plus the mask"
        assert (cfg["latent"].get("length", 0) if latent else 0) == latent
        assert cfg["train"]["lr"] == 3e-4 and cfg["train"]["ema_decay"] == 0.9999 and cfg["train"]["batch_size"] == 512
        assert cfg["schedule"]["name"] == "builtin:linear", "the token channel's schedule of App. E"


@pytest.mark.slow
def test_text_path_end_to_end_offline(assets, reg, tmp_path):
    """MDLM and Co-LADD: train, sample, Gen PPL + both entropies, validation PPL, zero-shot table, prompts."""
    other = tmp_path / "other.txt"
    other.write_text("an entirely different text.\n\nwith two paragraphs of it, here and there. " * 40)
    small = [
        "dataset.seq_len=64",
        "eval.num_samples=4",
        "eval.batch_size=4",
        "eval.loss_batches=1",
        "eval.budgets=[2,8]",
    ]
    latent = ["latent.length=8", "encoder.length=8"]
    for preset, extra in (("lm1b/mdlm", []), ("lm1b/coladd_32", latent)):
        settings = compose([*offline_overrides(assets, preset), *small, *extra], reg)
        experiment = train(settings, tmp_path / preset.replace("/", "_"), reg)
        result = evaluate(experiment, settings.method, settings.eval, progress=False)
        assert result.metric == "gen_ppl"
        for budget in result.scores:
            scores = budget.scores
            assert {"gen_ppl", "entropy_unigram", "entropy_positional"} <= set(scores)
            assert 1.0 < scores["gen_ppl"] < 10 * len(experiment.dataset.tokenizer)
            assert 0.0 <= scores["entropy_unigram"] <= math.log(64)
        assert math.isclose(result.token_perplexity, math.exp(result.token_loss))
        assert result.data_floor is not None and result.data_floor["gen_ppl"] > 1.0

        fixed = fixed_tokens(experiment.dataset, 3, "to be", "the end")
        tokens, _ = sample(experiment, 3, 4, 3, seed=1, fixed=fixed)
        known = fixed != mask_id(experiment.dataset.vocab_size)
        assert torch.equal(tokens[known], fixed[known]) and not bool(
            (tokens == mask_id(experiment.dataset.vocab_size)).any()
        )

        table = zero_shot(experiment, settings, reg, ["shakespeare", str(other)], "source", 1, 2, 0)
        assert [row.corpus for row in table.rows] == ["shakespeare", str(other)]
        assert all(row.bound is not None and row.perplexity == perplexity(row.bound) > 1 for row in table.rows)
