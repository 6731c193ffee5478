"""Importing Dream checkpoints: logits equal a direct implementation of Dream's network, the tokenizer rebuilt from
Dream's files encodes as DreamTokenizer's byte-level BPE written in the test, the chat template is carried, the sampler
starts from what a plain ``diffusion_generate`` call resolves, and bad sources are refused in one line."""
from __future__ import annotations

import json

import pytest
import torch
from dream_reference import ADDED, EOS, MASK, ROWS, SYMBOLS, Network, bpe_encode, config, write_checkpoint
from support import import_with

import registry
from registry.conformance.exercises import exercise_importer
from registry.errors import LaddError

K = ROWS  # the table: the tokenizer's ids and placeholders for those it lacks; ladd's mask is the id after it
TEXTS = ["hi the there", " two was one?", "hi<|im_end|>\n<|im_start|>the", "there!\n\nwas", "<|beginoftext|>hi"]


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.fixture(scope="module")
def imported(reg, tmp_path_factory):
    """A tiny Dream checkpoint in three shards and its import, with the tensors it was made of."""
    root = tmp_path_factory.mktemp("dream")
    tensors = write_checkpoint(root / "src")
    return tensors, import_with("dream", str(root / "src"), root / "out", ["dataset.seq_len=16"], reg)


def test_imported_logits_equal_dreams_forward_read_one_position_late(imported, reg):
    tensors, out = imported
    model = registry.from_pretrained(out, reg).model
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, K, (3, 16), generator=g)
    ids[torch.rand(ids.shape, generator=g) < 0.5] = K  # ladd's mask
    with torch.no_grad():
        ours = model.predict(ids, torch.full((3,), 0.5), None, None).tokens
    raw = Network(tensors)(torch.where(ids == K, MASK, ids))
    reference = torch.cat([raw[:, :1], raw[:, :-1]], dim=1)
    assert ours.shape == (3, 16, K) and (ours - reference).abs().max() < 1e-5
    assert model.mask_column == MASK


def test_the_tokenizer_encodes_as_dreams_byte_level_bpe_and_carries_the_chat_template(imported, reg):
    _, out = imported
    tokenizer = registry.from_pretrained(out, reg).dataset.tokenizer
    for text in TEXTS:
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == bpe_encode(text), text
        assert tokenizer(text)["input_ids"] == bpe_encode(text), "Dream's tokenizer adds no special tokens"
        assert tokenizer.decode(bpe_encode(text)) == text
    assert (tokenizer.bos_token, tokenizer.eos_token_id) == ("<|beginoftext|>", EOS)
    assert tokenizer.convert_ids_to_tokens(list(range(len(SYMBOLS), K + 1))) == [
        *ADDED, *(f"<|ladd_unused_{i}|>" for i in range(len(SYMBOLS) + len(ADDED), K)), "<|ladd_mask|>"
    ]
    framed = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                           add_generation_prompt=True)
    assert framed == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    document = json.loads((out / "config.json").read_text())
    assert document["config"]["dataset"]["tokenizer"] == "model:tokenizer"
    assert document["config"]["backbone"]["shift_logits"] is True and document["config"]["backbone"]["kv_heads"] == 2
    assert len(document["source"]["files"]) == 3 and "tokenizer/tokenizer.json" in document["carries"]


def test_the_sampler_is_what_a_plain_diffusion_generate_call_resolves(imported, reg):
    _, out = imported
    options = json.loads((out / "config.json").read_text())["config"]["sampler"]
    expected = {"name": "builtin:confidence", "schedule": "dream", "remasking": "origin", "temperature": 1.0,
                "top_k": 50, "top_p": None, "eps": 1e-3, "alg_temp": None}
    assert {key: options[key] for key in expected} == expected


@pytest.mark.parametrize(("settings", "expected"), [
    ({"alg": "entropy", "temperature": 0.2, "top_p": 0.95}, ["sampler.remasking=entropy", "sampler.temperature=0.2",
                                                            "sampler.top_p=0.95"]),
    ({"temperature": None, "top_k": None, "eps": 1e-5}, ["sampler.temperature=0.0", "sampler.top_k=null",
                                                        "sampler.eps=1e-05"]),
    ({"alg": "maskgit_plus", "alg_temp": 0.5}, ["sampler.remasking=low_confidence", "sampler.alg_temp=0.5"]),
])
def test_generation_settings_in_config_json_change_the_sampler(reg, tmp_path, settings, expected):
    write_checkpoint(tmp_path / "src", **settings)
    importer = reg.importer("dream").importer()
    checkpoint = importer.read(str(tmp_path / "src"))
    assert importer.overrides(checkpoint)[-len(expected):] == expected


def test_the_example_checkpoint_passes_ladds_importer_check(reg):
    exercise_importer(reg.importer("dream"), reg)


def _no_merges(folder):
    (folder / "merges.txt").unlink()


def _moved_token(folder):
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    decoder = settings["added_tokens_decoder"]
    decoder[str(int(max(decoder, key=int)) + 2)] = decoder.pop(max(decoder, key=int))
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))


@pytest.mark.parametrize(("damage", "message"), [
    (lambda f: (f / "config.json").write_text(json.dumps(config(model_type="qwen2"))),
     "model_type is 'qwen2' (it must be 'Dream')"),
    (lambda f: (f / "config.json").write_text(json.dumps(config(tie_word_embeddings=True))),
     "tie_word_embeddings is True"),
    (lambda f: (f / "config.json").write_text(json.dumps(config(rope_scaling={"type": "yarn"}))), "rope_scaling is"),
    (lambda f: (f / "config.json").write_text(json.dumps(config(use_sliding_window=True))), "use_sliding_window is"),
    (lambda f: (f / "config.json").write_text(json.dumps(config(num_key_value_heads=4, intermediate_size=40))),
     "the config and the weights disagree"),
    (lambda f: (f / "config.json").write_text(json.dumps(config(mask_token_id=ROWS))), "mask_token_id is"),
    (lambda f: (f / "config.json").write_text(json.dumps(config(alg="fastest"))), "alg is 'fastest'"),
    (_no_merges, "lacks merges.txt"),
    (_moved_token, "the tokenizer's files disagree"),
])
def test_a_source_that_is_no_dream_checkpoint_is_refused_in_one_line_before_writing(damage, message, reg, tmp_path):
    write_checkpoint(tmp_path / "src")
    damage(tmp_path / "src")
    with pytest.raises(LaddError) as refused:
        import_with("dream", str(tmp_path / "src"), tmp_path / "out", ["dataset.seq_len=16"], reg)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"], "nothing written"

