"""Building a token-cache entry with every core, across interruptions, one builder at a time.

The split's documents come as parts (``sources.Part``); worker processes tokenise them into shards in the
entry's build folder ``.NAME.build`` (``shards.write_shard``), which are appended in order to the entry's
``tokens.bin`` (each shard deleted once it is safely there), and the finished entry is renamed into place.
A build cut short keeps its finished shards and the parts' plan: the next build of the entry goes on from
there. One process builds an entry at a time: it holds an exclusive lock on ``.NAME.build/lock``, which the
kernel releases when the process ends, however it ends; every other process that needs the entry (the other
ranks of a distributed run) waits for it on the file system, saying so once a minute.

Memory: each worker holds its part (about ``sources.PART_BYTES`` of text, as bytes, text and documents) and
the ids of one batch of documents; this process holds the plan. Neither grows with the corpus.
"""
from __future__ import annotations

import bisect
import errno
import fcntl
import itertools
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from registry.errors import LaddError
from registry.toolkit.progress import Progress

from . import cache, sources
from .shards import Job, Written, count_documents, shard_paths, write_shard
from .sources import Part, SplitSpec
from .workers import WorkerDied, Workers

LOCK, PLAN, OUT = "lock", "plan.json", "out"
WAIT_LINE_SECONDS = 60.0  # a process waiting for another's build says so this often
POLL_SECONDS = 1.0  # and looks for the finished entry this often


def prepare(
    folder: Path, fingerprint: dict[str, Any], split: SplitSpec, workers: Workers, progress: bool, what: str
) -> dict[str, Any] | None:
    """The description (``meta.json``) of the entry at ``folder``, building it with ``workers`` first if needed; None
    when the split gives no row (nothing is cached then). ``what`` names the split in progress and waiting messages."""
    meta = cache.current(folder, fingerprint)
    if meta is not None:
        return meta
    work = folder.with_name(f".{folder.name}.build")
    lock = _hold(work, lambda: cache.current(folder, fingerprint) is not None, what)
    try:
        meta = cache.current(folder, fingerprint)
        if meta is None:
            cache.sweep_legacy(folder)
            try:
                meta = _build(work, folder, fingerprint, split, workers, progress, what)
            except OSError as error:  # a write that names no file (a full disk): the entry it was building
                if error.filename is not None:
                    raise
                raise OSError(error.errno, error.strerror or str(error), str(work)) from error
        shutil.rmtree(work, ignore_errors=True)
        return meta
    finally:
        if lock is not None:
            os.close(lock)


def _build(
    work: Path, folder: Path, fingerprint: dict[str, Any], split: SplitSpec, workers: Workers, progress: bool, what: str
) -> dict[str, Any] | None:
    """Build the entry in ``work`` (going on from what a build cut short left there) and rename it to ``folder``."""
    for partial in work.glob("*.partial"):  # a dead builder's: the lock says no other builder is alive
        partial.unlink()
    job: Job = workers.job
    parts = _plan(work, fingerprint, job, split, workers, progress, what)
    missing = [i for i in range(len(parts)) if not shard_paths(work, i)[1].is_file()]
    while True:
        if missing:
            _tokenise(work, parts, missing, workers, progress, what)
        missing = _join(work, len(parts), job)
        if not missing:
            break
    written = [Written.read(shard_paths(work, i)[1]) for i in range(len(parts))]
    out = work / OUT
    rows = sum(w.rows for w in written) if job.packing == "pad" else sum(w.tokens for w in written) // job.seq_len
    if rows == 0:
        return None
    with (out / cache.TOKENS).open("r+b") as handle:  # wrap: the incomplete last row is dropped
        handle.truncate(rows * job.seq_len * _itemsize(job))
        os.fsync(handle.fileno())
        crc32 = cache.checksum(handle)
    counts = {"documents": sum(w.documents for w in written), "padding": sum(w.padding for w in written)}
    meta = cache.describe(rows, job.seq_len, job.dtype, fingerprint, crc32, **counts)
    (out / cache.META).write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    _publish(out, folder, work)
    return meta


def _plan(
    work: Path, fingerprint: dict[str, Any], job: Job, split: SplitSpec, workers: Workers, progress: bool, what: str
) -> list[Part]:
    """The parts of the split: the plan a build cut short saved, else a new one (counted for a slice), saved."""
    key = {"key": cache.cache_key(fingerprint), "part_bytes": sources.PART_BYTES}
    try:
        saved = json.loads((work / PLAN).read_text(encoding="utf-8"))
        if {k: saved.get(k) for k in key} == key:
            return [Part(**part) for part in saved["parts"]]
    except (OSError, ValueError, TypeError, KeyError):
        pass
    for stale in work.iterdir() if work.is_dir() else []:  # shards of another plan, or of a damaged one
        if stale.name != LOCK:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()

    def count(parts: list[Part]) -> list[int]:
        counts = [0] * len(parts)
        with Progress(len(parts), f"counting documents of {what}", "parts", enabled=progress) as shown:
            for index, found in workers.run(count_documents, parts, Part.describe):
                counts[index] = found
                shown.update()
        return counts

    parts = job.source.parts(split, count)
    _write_json(work / PLAN, {**key, "parts": [asdict(part) for part in parts]})
    return parts


def _tokenise(work: Path, parts: list[Part], todo: list[int], workers: Workers, progress: bool, what: str) -> None:
    """Write the shards ``todo`` with the workers, showing progress in shards, documents and ids."""
    waiting = set(todo)
    done = [Written.read(shard_paths(work, i)[1]) for i in range(len(parts)) if i not in waiting]
    documents, tokens = sum(w.documents for w in done), sum(w.tokens for w in done)
    tasks = [(parts[i], work, i) for i in todo]
    with Progress(len(parts), f"tokenising {what}", "shards", enabled=progress, initial=len(done)) as shown:
        shown.note(_counts(documents, tokens))
        try:
            for _, written in workers.run(write_shard, tasks, lambda task: f"shard {task[2]} ({task[0].describe()})"):
                documents, tokens = documents + written.documents, tokens + written.tokens
                shown.note(_counts(documents, tokens))
                shown.update()
        except WorkerDied as died:
            finished = sum(1 for _ in work.glob("[0-9]*.json"))
            raise WorkerDied(
                f"{died}; the {finished} shards finished are kept in {work}: run the same command again to go on from "
                "them"
            ) from None


def _join(work: Path, count: int, job: Job) -> list[int]:
    """Append the shards in order to ``work/out/tokens.bin``, deleting each once it is safely there.

    Goes on from a join cut short: the file's size says which shards it holds whole. Returns the shards
    that are needed but gone (they are then written again), else an empty list.
    """
    sizes = [Written.read(shard_paths(work, i)[1]).tokens * _itemsize(job) for i in range(count)]
    bounds = list(itertools.accumulate(sizes, initial=0))
    (work / OUT).mkdir(exist_ok=True)
    target = os.open(work / OUT / cache.TOKENS, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        joined = bisect.bisect_right(bounds, os.fstat(target).st_size) - 1
        os.ftruncate(target, bounds[joined])
        for index in range(joined, count):
            ids_path, description = shard_paths(work, index)
            if not ids_path.is_file() or ids_path.stat().st_size != sizes[index]:
                description.unlink()
                return [index, *[i for i in range(index + 1, count) if not shard_paths(work, i)[0].is_file()]]
            _append(ids_path, target, bounds[index])
            os.fsync(target)  # before the shard goes: a power cut must not lose both
            ids_path.unlink()
    finally:
        os.close(target)
    return []


def _append(source: Path, target: int, offset: int) -> None:
    """Copy the file ``source`` into ``target`` at ``offset`` (in the kernel where it can)."""
    with source.open("rb") as handle:
        size, copied = os.fstat(handle.fileno()).st_size, 0
        while copied < size:
            try:
                step = os.copy_file_range(handle.fileno(), target, size - copied, copied, offset + copied)
            except (AttributeError, OSError):  # no copy_file_range here (or across these file systems)
                handle.seek(copied)
                os.lseek(target, offset + copied, os.SEEK_SET)
                while block := handle.read(1 << 22):
                    os.write(target, block)
                return
            if step == 0:
                raise LaddError(f"{source} shrank while it was joined into the token cache")
            copied += step


def _publish(out: Path, folder: Path, work: Path) -> None:
    """Rename the finished entry ``out`` to ``folder``, replacing one built in another format or from other data."""
    if folder.exists():
        stale = work / "stale"
        shutil.rmtree(stale, ignore_errors=True)
        folder.rename(stale)  # processes reading it keep their memory maps
        shutil.rmtree(stale, ignore_errors=True)
    out.rename(folder)


def _hold(work: Path, ready: Callable[[], bool], what: str) -> int | None:
    """A descriptor of ``work/lock`` that this process holds locked, or None once ``ready()`` is true.

    While another process holds the lock this waits, printing one line a minute; a holder that dies
    releases the lock (the kernel does), and this process then goes on from what it left.
    """
    waited = last_line = 0.0
    while True:
        if ready():
            return None
        work.mkdir(parents=True, exist_ok=True)
        path = work / LOCK
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(descriptor, 4096).decode(errors="replace")
            os.close(descriptor)
            if waited == 0.0 or waited - last_line >= WAIT_LINE_SECONDS:
                last_line = waited
                print(f"ladd: {_waiting_line(work, holder, what, waited)}", file=sys.stderr, flush=True)
            time.sleep(POLL_SECONDS)
            waited += POLL_SECONDS
            continue
        except OSError as error:
            if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            print(
                f"ladd: warning: {work} does not support file locks: only one process may prepare {what} at a time",
                file=sys.stderr,
                flush=True,
            )
        try:
            if os.fstat(descriptor).st_ino != os.stat(path).st_ino:  # the lock of a build that finished and went
                os.close(descriptor)
                continue
        except FileNotFoundError:
            os.close(descriptor)
            continue
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode(), 0)
        return descriptor


def _waiting_line(work: Path, holder: str, what: str, waited: float) -> str:
    try:
        who = json.loads(holder)
        by = f"process {who['pid']} on {who['host']}"
    except (ValueError, KeyError, TypeError):
        by = "another process"
    try:
        total = len(json.loads((work / PLAN).read_text(encoding="utf-8"))["parts"])
        done = sum(1 for _ in work.glob("[0-9]*.json"))
        state = f"{done} of {total} shards tokenised"
    except (OSError, ValueError, KeyError, TypeError):
        state = "planning"
    return f"waiting {int(waited // 60)} min for {what}, which {by} is preparing ({state}); its folder: {work}"


def _write_json(path: Path, value: Any) -> None:
    temporary = path.with_name(f"{path.name}.{os.getpid()}.partial")
    temporary.write_text(json.dumps(value), encoding="utf-8")
    temporary.replace(path)


def _itemsize(job: Job) -> int:
    return np.dtype(job.dtype).itemsize


def _counts(documents: int, tokens: int) -> str:
    return f"{_short(documents)} documents, {_short(tokens)} tokens"


def _short(number: int) -> str:
    for size, suffix in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
        if number >= size:
            return f"{number / size:.1f}{suffix}"
    return str(number)
