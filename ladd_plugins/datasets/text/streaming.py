"""Streamed splits: documents read on the fly from the source's shards, in lanes that resume without tokenising again.

A streamed split of ``L`` shards (the files a Hugging Face dataset is stored in) is read in ``L`` lanes: in
epoch ``e``, lane ``l`` reads the shard at position ``l`` of that epoch's seeded order of the shards, its
documents in blocks of ``BLOCK`` shuffled within each block, and packs them on their own (the shard's
incomplete last row is dropped). Row ``g`` of the stream is the next row of lane ``g mod L``: the stream does
not depend on the number of processes, and a process that trains on some rows of each batch makes only the
lanes those rows come from.

Resuming: an index beside the token cache records how many rows each shard gives and, at the end of each
block, the rows made so far, the documents read and the ids carried into the next row. A lane resumes by
skipping whole shards, then the documents before its last mark (read, not tokenised), and tokenises at most
one block again. Without the index (another machine's cache folder) a lane tokenises its shards again to
find its place.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from registry.errors import LaddError

from . import packing
from .shards import Job, clean_documents
from .sources import SplitSpec

BLOCK = 1000  # documents shuffled together, and read between two marks


@dataclass
class Stream:
    """The rows of one streamed split under one seed."""

    job: Job
    split: SplitSpec
    seed: int
    index: Path  # the folder of the stream index
    empty: LaddError  # raised when the split gives no row

    @property
    def lanes(self) -> int:
        """L: the shards of the split, read side by side."""
        return self.job.source.stream_shards(self.split)

    def batches(self, start: int, batch_size: int, rank: int = 0, world: int = 1) -> Iterator[Tensor]:
        """Batches from batch ``start`` on; with ``world`` processes, only rows ``rank, rank + world, ...`` are made."""
        if batch_size % world:
            raise ValueError(f"a batch of {batch_size} rows does not split evenly over {world} processes")
        lanes = self.lanes
        step = math.gcd(lanes, world)
        first = start * batch_size
        mine = [lane for lane in range(lanes) if (lane - rank) % step == 0]
        read = {lane: self._lane(lane, _before(first, lane, lanes)) for lane in mine}
        row = first
        while True:
            batch = torch.zeros((batch_size, self.job.seq_len), dtype=torch.long)
            for position in range(batch_size):
                lane = (row + position) % lanes
                if lane in read:
                    ids = next(read[lane])
                    if position % world == rank:
                        batch[position] = torch.tensor(ids)
            row += batch_size
            yield batch

    def _lane(self, lane: int, skip: int) -> Iterator[list[int]]:
        """Lane ``lane``'s rows from its row ``skip`` on, endless."""
        epoch = 0
        while True:
            shard = self._order(epoch)[lane]
            known = self._rows(shard)
            if known is None or skip < known:
                yield from self._shard_rows(epoch, shard, skip)
                known = self._rows(shard) or 0
            skip = max(0, skip - known)
            if known == 0 and all(self._rows(other) == 0 for other in range(self.lanes)):
                raise self.empty
            epoch += 1

    def _shard_rows(self, epoch: int, shard: int, skip: int) -> Iterator[list[int]]:
        """The rows of ``shard`` in ``epoch``'s order from its row ``skip`` on; records the marks and the count."""
        order = _seed("order", self.seed, epoch, shard)
        made, read, carry = self._mark(shard, order, skip)
        texts = self.job.source.stream_shard(self.split, shard, read)
        job, block = self.job, read // BLOCK
        while documents := list(islice(texts, BLOCK)):
            generator = torch.Generator().manual_seed(_seed("block", order, block))
            shuffled = torch.randperm(len(documents), generator=generator)
            for ids in job.encoder.ids(clean_documents([documents[i] for i in shuffled.tolist()], job.detokenizer)):
                if job.packing == "pad":
                    rows = [packing.pad(ids, job.seq_len, job.eos_id, job.eos_id)]
                else:
                    carry = carry + ids + [job.eos_id]
                    whole = len(carry) - len(carry) % job.seq_len
                    rows, carry = [carry[s : s + job.seq_len] for s in range(0, whole, job.seq_len)], carry[whole:]
                for row in rows:
                    if made >= skip:
                        yield row
                    made += 1
            read, block = read + len(documents), block + 1
            self.index.mkdir(parents=True, exist_ok=True)
            with (self.index / f"marks-{shard}-{order}.jsonl").open("a", encoding="utf-8") as marks:
                marks.write(json.dumps({"made": made, "read": read, "carry": carry}) + "\n")
        _write(self.index / f"rows-{shard}.json", {"rows": made})

    def _mark(self, shard: int, order: int, row: int) -> tuple[int, int, list[int]]:
        """The last mark of ``shard`` read in ``order`` at or before ``row``: (rows made, documents read, carry)."""
        best: tuple[int, int, list[int]] = (0, 0, [])
        try:
            lines = (self.index / f"marks-{shard}-{order}.jsonl").read_text(encoding="utf-8").splitlines()
        except OSError:
            return best
        for line in lines:
            try:
                mark = json.loads(line)
                made, read, carry = int(mark["made"]), int(mark["read"]), [int(i) for i in mark["carry"]]
            except (ValueError, KeyError, TypeError):  # a line cut by a kill
                continue
            if best[0] < made <= row:
                best = (made, read, carry)
        return best

    def _rows(self, shard: int) -> int | None:
        try:
            return int(json.loads((self.index / f"rows-{shard}.json").read_text(encoding="utf-8"))["rows"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _order(self, epoch: int) -> list[int]:
        """The shards in epoch ``epoch``'s seeded order."""
        generator = torch.Generator().manual_seed(_seed("shards", self.seed, epoch))
        return torch.randperm(self.lanes, generator=generator).tolist()


def _before(first: int, lane: int, lanes: int) -> int:
    """The rows of ``lane`` among the stream's first ``first`` rows."""
    return max(0, -(-(first - lane) // lanes))


def _seed(*key: Any) -> int:
    """A 63-bit seed from a key, stable across processes and Python versions."""
    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "little") >> 1


def _write(path: Path, value: Any) -> None:
    """A small record, written whole (several processes may write the same one, with the same content)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    temporary.write_text(json.dumps(value), encoding="utf-8")
    temporary.replace(path)
