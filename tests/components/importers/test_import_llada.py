"""Importing LLaDA checkpoints: logits equal a direct implementation of LLaDA's network, the folder carries its
tokenizer and samples anywhere with its chat template, it warm-starts SFT and LADD (the whole token stream), and bad
sources are refused in one line."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from llada_reference import OWN_MASK, SIZES, P, config, random_tensors, reference_logits, write_checkpoint
from support import import_llada

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.warm_start import warm_start
from registry.errors import LaddError

#: the network's table: the test tokenizer's 26 ids and placeholders for the 6 it lacks; ladd's mask is id 32, fed to
#: the network as its own mask 3
K = 32


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.fixture(scope="module")
def imported(reg, tmp_path_factory):
    """A tiny LLaDA checkpoint in three shards and its import, with the tensors it was made of."""
    root = tmp_path_factory.mktemp("llada")
    tensors = write_checkpoint(root / "src")
    out = import_llada(str(root / "src"), root / "out", ["dataset.seq_len=16"], reg)
    return tensors, out


def test_imported_logits_equal_llada_forward(imported, reg):
    tensors, out = imported
    model = registry.from_pretrained(out, reg).model
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, K, (3, 16), generator=g)
    ids[torch.rand(ids.shape, generator=g) < 0.5] = K  # ladd's mask
    with torch.no_grad():
        ours = model.predict(ids, torch.full((3,), 0.5), None, None).tokens
    reference = reference_logits(tensors, torch.where(ids == K, OWN_MASK, ids))
    assert ours.shape == (3, 16, K) and ours.dtype == torch.float32
    assert (ours - reference).abs().max() < 1e-5, "the whole output, the network's own mask included, as LLaDA's"
    assert model.mask_column == OWN_MASK
    rows = ids == K
    with torch.no_grad():
        at_rows = model.predict(ids, torch.full((3,), 0.5), None, None, rows).tokens
    assert torch.equal(at_rows, ours[rows])


def test_the_folder_carries_its_tokenizer_and_records_its_shards(imported):
    import hashlib

    _, out = imported
    document = json.loads((out / "config.json").read_text())
    assert document["config"]["dataset"]["tokenizer"] == "model:tokenizer"
    assert document["config"]["backbone"]["vocab_rows"] == 32 and document["config"]["backbone"]["mask_id"] == 3
    assert document["config"]["backbone"]["mask_logit"] is True
    assert "tokenizer/tokenizer.json" in document["carries"] and (out / "tokenizer" / "tokenizer.json").is_file()
    tokenizer = registry.from_pretrained(out).dataset.tokenizer
    assert tokenizer.convert_ids_to_tokens([25, 26, 31, 32]) == [
        "nine", "<|ladd_unused_26|>", "<|ladd_unused_31|>", "<|mask|>"
    ], "placeholders cover the table's ids the tokenizer lacks; ladd's mask follows the table"
    plain = tokenizer.decode([7, 16], skip_special_tokens=True)
    assert tokenizer.decode([7, 26, 16], skip_special_tokens=True) == plain, "decoding skips the placeholders"
    files = document["source"]["files"]
    assert len(files) == 3
    for name, digest in files.items():
        assert hashlib.sha256((out.parent / "src" / name).read_bytes()).hexdigest() == digest


@pytest.mark.slow
def test_a_moved_folder_samples_with_the_chat_template(imported, ladd, tmp_path):
    _, out = imported
    moved = tmp_path / "elsewhere" / "llada"
    shutil.copytree(out, moved)
    samples = tmp_path / "samples.jsonl"
    done = ladd("sample", str(moved), "--prompt", "what is one plus two ?", "--steps", "4", "--num", "2",
                "--out", str(samples), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    framed = ["<s>", "<|user|>", "what", "is", "one", "plus", "two", "?", "<|end|>", "<|assistant|>"]
    experiment = registry.from_pretrained(moved)
    tokenizer = experiment.dataset.tokenizer
    assert all(tokenizer.convert_ids_to_tokens(row["ids"][: len(framed)]) == framed for row in rows)


@pytest.mark.parametrize("preset", ["llada/sft_cpu", "llada/coladd_from_llada_cpu"])
def test_sft_and_ladd_warm_start_whole_token_streams_from_the_imported_folder(preset, imported, reg, tmp_path):
    _, out = imported
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"say {w}", "response": w}) + "\n" for w in ["one", "two"] * 8))
    overrides = [
        f"experiment={preset}", f"dataset.tokenizer={out / 'tokenizer'}", f"dataset.source={pairs}",
        "dataset.seq_len=16", f"dataset.cache_dir={tmp_path / 'cache'}", "backbone.hidden=32", "backbone.heads=4",
        "backbone.mlp_hidden=48", "backbone.vocab_rows=32", "backbone.mask_id=3",
    ]
    experiment = build_experiment(compose(overrides, reg).plain(), reg)
    report = warm_start(experiment.model, experiment.dataset, out, reg)
    stream = experiment.model.state_dict()
    token_stream = [name for name in stream if not name.startswith(("backbone.latent.", "encoder."))]
    assert sorted(here for here, _ in report.loaded) == sorted(token_stream) and not report.skipped
    assert all(here == there for here, there in report.loaded), "the llada backbone keeps its names beside a latent"
    assert bool(report.new) == (preset != "llada/sft_cpu")
    source = registry.from_pretrained(out, reg).model.backbone.state_dict()
    assert all(torch.equal(stream[name], source[name.removeprefix("backbone.")]) for name in token_stream)


def _pickled(folder):
    for path in folder.glob("model*.safetensors*"):
        path.unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not read")


def _index_drops(folder):
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"].pop(P + "ln_f.weight")
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "config.json").write_text(json.dumps(config(d_model=48, n_heads=4))),
     "has shape [32, 32] but config.json's sizes give [32, 48]; the config and the weights disagree"),
    (lambda f: (f / "config.json").write_text(json.dumps(config(mlp_hidden_size=64))), "the config and the weights"),
    (lambda f: (f / "config.json").write_text(json.dumps(config(model_type="llama"))),
     "model_type is 'llama' (it must be 'llada')"),
    (lambda f: (f / "config.json").write_text(json.dumps(config(weight_tying=True))), "weight_tying is True"),
    (lambda f: (f / "config.json").write_text(json.dumps(config(embedding_size=20, vocab_size=20))),
     "has shape [32, 32] but config.json's sizes give [20, 32]"),
    (_pickled, "holds its weights only as pickles (pytorch_model.bin)"),
    (_index_drops, "says otherwise; the shards and their index disagree"),
    (lambda f: (f / "model-00002-of-00003.safetensors").unlink(), "lists the shard 'model-00002-of-00003"),
    (lambda f: (f / "tokenizer.json").unlink() or (f / "tokenizer_config.json").unlink(), "holds no tokenizer"),
    (lambda f: (f / "tokenizer.json").write_text("{}"), "cannot load LLaDA tokenizer"),
])
def test_a_source_that_is_no_llada_checkpoint_is_refused_in_one_line_before_writing(damage, message, reg, tmp_path):
    write_checkpoint(tmp_path / "src")
    damage(tmp_path / "src")
    with pytest.raises(LaddError) as refused:
        import_llada(str(tmp_path / "src"), tmp_path / "out", ["dataset.seq_len=16"], reg)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"], "nothing written"


def test_a_table_smaller_than_the_tokenizer_is_refused(reg, tmp_path):
    tensors = random_tensors()
    tensors[P + "wte.weight"] = tensors[P + "wte.weight"][:20]
    tensors[P + "ff_out.weight"] = tensors[P + "ff_out.weight"][:20]
    write_checkpoint(tmp_path / "src", tensors, embedding_size=20, vocab_size=20)
    with pytest.raises(LaddError, match="holds fewer ids than the data's 26 tokens"):
        import_llada(str(tmp_path / "src"), tmp_path / "out", ["dataset.seq_len=16"], reg)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    assert SIZES["embedding_size"] == 32



def test_plugins_check_imports_the_llada_example_and_reads_it_back(reg):
    from registry.conformance.exercises import exercise_importer

    exercise_importer(reg.importer("llada"), reg)  # raises, naming what failed, where `ladd plugins check` would fail


def test_the_harness_frames_a_request_in_the_chat_template_as_sampling_frames_a_prompt(imported):
    from registry.harness import HarnessSettings, LaddLM
    from registry.harness.requests import encode

    _, out = imported
    experiment = registry.from_pretrained(out)
    lm = LaddLM(experiment=experiment, settings=HarnessSettings())
    text = lm.apply_chat_template([{"role": "user", "content": "what is one plus two ?"}])
    assert text == "<s><|user|> what is one plus two ? <|end|> <|assistant|> "
    assert encode(lm.tokenizer, text) == experiment.dataset.prompt_ids("what is one plus two ?")
    assert lm.chat_template(True) == lm.tokenizer.chat_template and lm.chat_template(False) is None


def test_the_chat_template_asked_of_a_tokenizer_without_one_is_refused_in_one_line():
    from types import SimpleNamespace

    from registry.harness.adapter import check_chat_template

    with pytest.raises(LaddError, match=r"^--chat-template: the model's tokenizer gpt2 has no chat template; leave"):
        check_chat_template(SimpleNamespace(chat_template=None, name_or_path="gpt2"))


@pytest.mark.parametrize("name, options", [
    ("ancestral", {}),
    ("confidence", {"temperature": 0.0, "block_length": 3}),  # LLaDA's own low-confidence remasking, in blocks
    ("confidence", {"remasking": "entropy", "threshold": 0.5}),  # Dream's order, Fast-dLLM's parallel threshold
])
def test_the_imported_model_samples_with_each_decoder_keeping_the_prompt(name, options, imported, reg):
    from registry.engine.assembly import with_sampler
    from registry.engine.prompts import fixed_tokens
    from registry.engine.sampling import sample

    _, out = imported
    experiment = with_sampler(registry.from_pretrained(out, reg), reg, name, options)
    fixed = fixed_tokens(experiment.dataset, 2, "what is one plus two ?")
    tokens, _ = sample(experiment, 2, 8, 2, seed=0, fixed=fixed)
    known = fixed != K
    assert torch.equal(tokens[known], fixed[known])
    assert bool(((tokens >= 0) & (tokens < K) & (tokens != OWN_MASK)).all()), "every position a real token"


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_the_imported_model_decodes_with_a_cache_that_refreshed_every_step_gives_the_uncached_tokens(
    cache, imported, reg
):
    from registry.engine.assembly import with_sampler
    from registry.engine.prompts import fixed_tokens
    from registry.engine.sampling import sample

    _, out = imported

    def decode(**options):
        decoder = {"temperature": 0.0, "block_length": 3, **options}
        experiment = with_sampler(registry.from_pretrained(out, reg), reg, "confidence", decoder)
        fixed = fixed_tokens(experiment.dataset, 2, "what is one plus two ?")
        return sample(experiment, 2, 6, 2, seed=0, fixed=fixed)[0], fixed

    (plain, fixed), (refreshed, _), (approximate, _) = decode(), decode(cache=cache, refresh=1), decode(cache=cache)
    assert torch.equal(refreshed, plain)
    known = fixed != K
    assert torch.equal(approximate[known], fixed[known])
    assert bool(((approximate >= 0) & (approximate < K) & (approximate != OWN_MASK)).all())
