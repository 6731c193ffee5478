"""Where documents come from: Hugging Face datasets (by short name or id) and local text files.

A source yields the documents (strings) of a split, described by a :class:`SplitSpec` such as
``train``, ``train[:-100000]`` or ``train[90%:95%]`` (rows, in Hugging Face's slice syntax). A source made
of a single document (text8, a text file read whole) is sliced by characters instead. The documents come
as :class:`Part` s, consecutive runs of documents that worker processes read on their own.
"""
from __future__ import annotations

import glob
import io
import itertools
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO

from registry.errors import InvalidConfigError, LaddError

from ...hub import hub_cache, unavailable
from .config import TextDatasetConfig

LOCAL_SUFFIXES = (".txt", ".jsonl", ".parquet")
CORPUS_DIR = Path(__file__).parent / "corpus"
_STANDARD = {"train": "train", "validation": "validation", "test": "test"}
_TEST_AS_VALIDATION = {"train": "train", "validation": "test", "test": "test"}  # no validation split published
_FRACTIONS = {"train": "train[:90%]", "validation": "train[90%:95%]", "test": "train[95%:]"}
#: a part of a text file holds about this many bytes, cut at a document boundary
PART_BYTES = 1 << 22
_BLOCK = 1 << 20  # bytes read at a time while looking for a document boundary
_PARQUET_BATCH = _TABLE_BATCH = 1000  # rows read at a time
_LINE_END = re.compile(rb"\n")
_PARAGRAPH_END = re.compile(rb"\n[ \t]*\n")


@dataclass(frozen=True)
class KnownSource:
    """A Hugging Face dataset under a short name, with its text field, detokeniser and split names."""

    path: str
    subset: str | None = None
    text_field: str = "text"
    detokenizer: str | None = None
    splits: dict[str, str] = field(default_factory=lambda: dict(_STANDARD))


# Hub ids: MDLM's datasets at their current (organisation-prefixed) locations on the Hub.
KNOWN: dict[str, KnownSource] = {
    "lm1b": KnownSource("lm1b", detokenizer="lm1b", splits=_TEST_AS_VALIDATION),
    "openwebtext": KnownSource(
        "Skylion007/openwebtext",
        splits={"train": "train[:-100000]", "validation": "train[-100000:]", "test": "train[-100000:]"},
    ),
    "text8": KnownSource("afmck/text8", splits=_FRACTIONS),  # one 100M-character document: 90M / 5M / 5M
    "ptb": KnownSource("ptb-text-only/ptb_text_only", text_field="sentence", detokenizer="ptb"),
    "wikitext103": KnownSource("Salesforce/wikitext", "wikitext-103-raw-v1", detokenizer="wikitext"),
    "wikitext2": KnownSource("Salesforce/wikitext", "wikitext-2-raw-v1", detokenizer="wikitext"),
    "lambada": KnownSource(
        "EleutherAI/lambada_openai",
        detokenizer="lambada",
        splits={"train": "test", "validation": "test", "test": "test"},
    ),
    "ag_news": KnownSource("fancyzhx/ag_news", splits=_TEST_AS_VALIDATION),
    "pubmed": KnownSource("armanc/scientific_papers", "pubmed", "article", "scientific_papers"),
    "arxiv": KnownSource("armanc/scientific_papers", "arxiv", "article", "scientific_papers"),
}
#: Corpora shipped inside the package, usable offline.
SHIPPED: dict[str, Path] = {"shakespeare": CORPUS_DIR / "shakespeare.txt"}

_SPLIT = re.compile(r"(?P<name>[^\[\]:]+)(?:\[(?P<start>-?\d+%?)?:(?P<stop>-?\d+%?)?\])?")


@dataclass(frozen=True)
class SplitSpec:
    """A source split and an optional slice of it (row indices, or percentages when they end in %)."""

    name: str
    start: str | None = None
    stop: str | None = None

    @classmethod
    def parse(cls, text: str) -> SplitSpec:
        """``train``, ``train[:-100000]``, ``train[90%:95%]``..."""
        match = _SPLIT.fullmatch(text.strip())
        if match is None:
            raise InvalidConfigError(
                f"split {text!r} is not NAME or NAME[START:STOP] (START/STOP: row indices or percentages, e.g. "
                "train[90%:])"
            )
        return cls(match["name"], match["start"], match["stop"])

    @property
    def sliced(self) -> bool:
        return self.start is not None or self.stop is not None

    def select(self, n: int) -> range:
        """The indices of this slice among ``n`` rows (or characters)."""
        return range(n)[slice(_bound(self.start, n), _bound(self.stop, n))]

    def __str__(self) -> str:
        return f"{self.name}[{self.start or ''}:{self.stop or ''}]" if self.sliced else self.name


def mapped_split(split: str, mapping: dict[str, str], source: str) -> SplitSpec:
    """The source split (and slice) that ladd's ``split`` reads by ``mapping``; ``floor`` reads the validation one."""
    if split not in mapping and split == "floor":
        split = "validation"
    if split not in mapping:
        raise InvalidConfigError(
            f"split {split!r} is not in dataset.split_map for source {source!r} (known: {', '.join(mapping)}); add "
            f"it, e.g. +dataset.split_map.{split}='train[95%:]'"
        )
    return SplitSpec.parse(mapping[split])


def _bound(bound: str | None, n: int) -> int | None:
    if bound is None:
        return None
    if bound.endswith("%"):
        return int(n * int(bound[:-1]) / 100)
    return int(bound)


@dataclass(frozen=True)
class Part:
    """Consecutive documents of a source that one worker reads alone: a byte range of a file, a row group, table rows.

    ``where`` is the file (local sources) or the source split (Hugging Face datasets); ``count`` the number of
    documents in ``[start, stop)`` when it is known without reading them. ``skip`` and ``take`` select some of
    them (a slice of the split); ``chars`` slices the characters of a split that is a single document.
    """

    where: str
    start: int
    stop: int
    count: int | None = None
    unit: str = "bytes"
    skip: int = 0
    take: int | None = None
    chars: str | None = None

    def describe(self) -> str:
        """E.g. ``bytes 0-16777216 of /data/owt.jsonl`` or ``rows 0-50000 of split 'train'``."""
        where = self.where if self.unit != "rows" else f"split {self.where!r}"
        span = f"{self.unit} {self.start}" if self.unit == "row group" else f"{self.unit} {self.start}-{self.stop}"
        return f"{span} of {where}"


class Source(ABC):
    """Documents by split, as parts that worker processes read alone, plus what identifies them for the token cache."""

    label: str  # short, file-name-safe description (cache folder names, messages)
    splits: dict[str, str]  # ladd split -> default source split
    detokenizer: str | None = None
    streams: bool = False  # whether ``stream`` can read the documents on the fly

    @abstractmethod
    def whole_parts(self, name: str) -> list[Part]:
        """The documents of source split ``name``, all of them, as consecutive parts."""

    @abstractmethod
    def documents_of(self, part: Part) -> Iterator[str]:
        """Every document of ``part``'s range, its selection (``skip``, ``take``, ``chars``) ignored."""

    @abstractmethod
    def fingerprint(self, split: SplitSpec) -> dict[str, Any]:
        """Everything about the source that decides the split's documents."""

    def count(self, part: Part) -> int:
        """The documents in ``part``'s range (read when the part does not know it)."""
        return part.count if part.count is not None else sum(1 for _ in self.documents_of(part))

    def parts(self, split: SplitSpec, count: Callable[[list[Part]], list[int]] | None = None) -> list[Part]:
        """The documents of ``split`` (a slice of a source split) as consecutive parts, in order.

        A slice needs the number of documents of each part: ``count`` counts those that do not know it (all
        at once, e.g. in worker processes; by default one after another here). A split that is a single
        document is sliced by its characters.
        """
        whole = self.whole_parts(split.name)
        if not split.sliced:
            return whole
        unknown = [part for part in whole if part.count is None]
        counted = iter((count or (lambda parts: [self.count(p) for p in parts]))(unknown))
        counts = [part.count if part.count is not None else next(counted) for part in whole]
        if sum(counts) == 1:
            return [replace(part, chars=str(split)) for part, n in zip(whole, counts, strict=True) if n == 1]
        return _select(whole, counts, split.select(sum(counts)))

    def read(self, part: Part) -> Iterator[str]:
        """The selected documents of ``part``, in order."""
        if part.chars is not None:
            (text,) = [t for t in self.documents_of(part)]
            chars = SplitSpec.parse(part.chars).select(len(text))
            return iter([text[chars.start : chars.stop]])
        return islice(self.documents_of(part), part.skip, None if part.take is None else part.skip + part.take)

    def documents(self, split: SplitSpec) -> tuple[Iterator[str], int]:
        """The split's documents read in this process, one part after another, and how many there are."""
        parts = self.parts(split)
        total = sum(_selected(part, self) for part in parts)
        return (text for part in parts for text in self.read(part)), total

    def stream_shards(self, split: SplitSpec) -> int:
        """The shards of the split read on the fly (when ``streams``), each readable apart."""
        raise NotImplementedError(f"source {self.label!r} cannot be streamed")

    def stream_shard(self, split: SplitSpec, shard: int, skip: int) -> Iterator[str]:
        """The documents of one shard of the split, in order, read on the fly after the first ``skip``."""
        raise NotImplementedError(f"source {self.label!r} cannot be streamed")


def _select(parts: list[Part], counts: list[int], rows: range) -> list[Part]:
    """The parts holding documents ``rows`` of their concatenation, each told which of its documents those are."""
    chosen, first = [], 0
    for part, n in zip(parts, counts, strict=True):
        low, high = max(rows.start - first, 0), min(rows.stop - first, n)
        if low < high:
            chosen.append(replace(part, count=n, skip=low, take=high - low))
        first += n
    return chosen


def _selected(part: Part, source: Source) -> int:
    if part.chars is not None:
        return 1
    return part.take if part.take is not None else source.count(part) - part.skip


class LocalFiles(Source):
    """``.txt`` (documents: paragraphs, lines or whole files), ``.jsonl`` and ``.parquet`` files, one split ``train``.

    Text files are cut into parts of about ``PART_BYTES`` at document boundaries (after a line end, or after
    a blank line for paragraphs), parquet files into their row groups.
    """

    def __init__(self, paths: list[Path], text_field: str, txt_documents: str, label: str) -> None:
        self.paths, self.text_field, self.txt_documents, self.label = paths, text_field, txt_documents, label
        self.splits = dict(_FRACTIONS)

    def whole_parts(self, name: str) -> list[Part]:
        if name != "train":
            raise InvalidConfigError(
                f"local files form one split called 'train', not {name!r}; select parts of it with "
                "slices in dataset.split_map, e.g. {train: 'train[:90%]', validation: 'train[90%:95%]', test: "
                "'train[95%:]'}"
            )
        return [part for path in self.paths for part in self._file_parts(path)]

    def _file_parts(self, path: Path) -> list[Part]:
        if path.suffix == ".parquet":
            groups = self._parquet(path).metadata
            return [
                Part(str(path), i, i + 1, groups.row_group(i).num_rows, unit="row group")
                for i in range(groups.num_row_groups)
            ]
        size = path.stat().st_size
        if path.suffix == ".txt" and self.txt_documents == "file":
            return [Part(str(path), 0, size)]
        cuts = _cuts(path, paragraphs=path.suffix == ".txt" and self.txt_documents == "paragraph")
        return [Part(str(path), start, stop) for start, stop in itertools.pairwise(cuts)]

    def count(self, part: Part) -> int:
        if part.count is not None or Path(part.where).suffix != ".jsonl":
            return super().count(part)
        data = _read_range(Path(part.where), part.start, part.stop)
        return sum(1 for line in data.split(b"\n") if utf8(Path(part.where), line, part.start).strip())

    def documents_of(self, part: Part) -> Iterator[str]:
        path = Path(part.where)
        if path.suffix == ".parquet":
            return self._parquet_rows(path, part.start)
        if path.suffix == ".jsonl":
            return self._jsonl(path, part.start, part.stop)
        return iter(split_text(utf8(path, _read_range(path, part.start, part.stop), part.start), self.txt_documents))

    def _jsonl(self, path: Path, start: int, stop: int) -> Iterator[str]:
        offset = start
        for raw in io.BytesIO(_read_range(path, start, stop)):
            line, at = utf8(path, raw, offset), offset
            offset += len(raw)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise LaddError(
                    f"{path}:{_line_at(path, at)} is not valid JSON ({error.msg} at column {error.colno}); fix or "
                    "remove that line"
                ) from None
            if not isinstance(record, dict):
                raise LaddError(
                    f'{path}:{_line_at(path, at)} is not a JSON object; each line of a .jsonl file must be one, e.g. '
                    f'{{"text": "..."}}'
                )
            if self.text_field not in record:
                raise LaddError(
                    f"{path}:{_line_at(path, at)} has no field {self.text_field!r} (it has {', '.join(record)}); "
                    "set dataset.text_field"
                )
            yield record[self.text_field]

    def _parquet(self, path: Path) -> Any:
        """The open parquet file, after checking that it has the text column."""
        import pyarrow
        import pyarrow.parquet as pq

        try:
            handle = pq.ParquetFile(path)
        except (pyarrow.ArrowException, OSError) as error:
            raise LaddError(
                f"{path} is not a readable parquet file; replace it or remove it from dataset.source"
            ) from error
        names = handle.schema_arrow.names
        if self.text_field not in names:
            raise LaddError(
                f"{path} has no column {self.text_field!r} (it has {', '.join(names)}); set dataset.text_field"
            )
        return handle

    def _parquet_rows(self, path: Path, group: int) -> Iterator[str]:
        import pyarrow

        try:
            for batch in self._parquet(path).iter_batches(
                batch_size=_PARQUET_BATCH, row_groups=[group], columns=[self.text_field]
            ):
                yield from batch.column(0).to_pylist()
        except (pyarrow.ArrowException, OSError) as error:
            raise LaddError(
                f"{path} is not a readable parquet file; replace it or remove it from dataset.source"
            ) from error

    def fingerprint(self, split: SplitSpec) -> dict[str, Any]:
        files = [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in self.paths]
        return {"files": files, "text_field": self.text_field, "txt_documents": self.txt_documents, "split": str(split)}


def _read_range(path: Path, start: int, stop: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(start)
        return handle.read(stop - start)


def _cuts(path: Path, paragraphs: bool) -> list[int]:
    """Offsets cutting ``path`` into parts of about ``PART_BYTES``, each after a line end (a blank line's: paragraphs).

    ``split_text`` gives the same documents for the parts as for the whole: a cut after a blank line separates
    two paragraphs, and only whitespace, which ``split_text`` strips, lies around it.
    """
    size = path.stat().st_size
    cuts = [0]
    with path.open("rb") as handle:
        while size - cuts[-1] > PART_BYTES:
            cut = _boundary_after(handle, cuts[-1] + PART_BYTES, _PARAGRAPH_END if paragraphs else _LINE_END)
            if cut is None or cut >= size:
                break
            cuts.append(cut)
    return [*cuts, size]


def _boundary_after(handle: BinaryIO, position: int, boundary: re.Pattern[bytes]) -> int | None:
    """The end of the first match of ``boundary`` at or after ``position``, or None if there is none."""
    handle.seek(position)
    carry, base = b"", position
    while block := handle.read(_BLOCK):
        data = carry + block
        match = boundary.search(data)
        if match:
            return base + match.end()
        keep = data.rfind(b"\n")  # a boundary may begin at the last line end
        keep = len(data) if keep < 0 else keep
        carry, base = data[keep:], base + keep
    return None


def _line_at(path: Path, offset: int) -> int:
    """The number of the line of ``path`` holding byte ``offset`` (1 for the first)."""
    lines, read = 1, 0
    with path.open("rb") as handle:
        while read < offset and (block := handle.read(min(_BLOCK, offset - read))):
            lines += block.count(b"\n")
            read += len(block)
    return lines


def utf8(path: Path, data: bytes, offset: int = 0) -> str:
    """``data`` (from byte ``offset`` of ``path`` on) decoded as UTF-8, or an error naming the line and the fix."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise LaddError(
            f"{path}:{_line_at(path, offset + error.start)} is not UTF-8 text (byte {data[error.start]:#04x}); convert "
            "the file, "
            f"e.g. iconv -f latin1 -t utf-8"
        ) from None


def split_text(text: str, unit: str) -> list[str]:
    """The non-blank documents of a text file: its paragraphs (blank-line separated), lines, or the whole file."""
    if unit == "file":
        parts = [text]
    elif unit == "line":
        parts = text.splitlines()
    else:
        parts = re.split(r"\n[ \t]*\n", text)
    return [p.strip() for p in parts if p.strip()]


class HubDataset(Source):
    """A dataset read with ``datasets.load_dataset`` (a Hub id, or any path it accepts); parts are row ranges."""

    streams = True

    def __init__(
        self,
        path: str,
        subset: str | None,
        text_field: str,
        label: str,
        known: KnownSource | None = None,
        revision: str | None = None,
    ) -> None:
        self.path, self.subset, self.text_field, self.label, self.revision = path, subset, text_field, label, revision
        self.splits = dict(known.splits) if known else dict(_STANDARD)
        self.detokenizer = known.detokenizer if known else None
        self._tables: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tables": {}}  # a worker process opens the tables itself

    def _load(self, split: str, streaming: bool) -> Any:
        import datasets

        try:
            # older versions of datasets could run a loading script shipped with the data: never
            return datasets.load_dataset(
                self.path,
                self.subset,
                split=split,
                streaming=streaming,
                revision=self.revision,
                trust_remote_code=False,
            )
        except OSError as error:  # ConnectionError when offline or unreachable, FileNotFoundError when unknown
            checked = f"{hub_cache()} and {datasets.config.HF_DATASETS_CACHE}"
            raise unavailable(
                "dataset", self._name(), error, "dataset.source (a .txt, .jsonl or .parquet path)", checked
            ) from None
        except ValueError as error:  # e.g. an unknown split, listed by datasets
            raise LaddError(f"cannot read split {split!r} of dataset {self._name()!r}: {error}") from None

    def _table(self, name: str) -> Any:
        """Source split ``name`` (memory-mapped), its text column alone, opened once per process."""
        if name not in self._tables:
            table = self._load(name, streaming=False)
            self._check_field(table.column_names)
            self._tables[name] = table.select_columns([self.text_field])
        return self._tables[name]

    def _name(self) -> str:
        return self.path if self.subset is None else f"{self.path} ({self.subset})"

    def _check_field(self, names: Iterable[str]) -> None:
        names = list(names)
        if self.text_field not in names:
            raise LaddError(
                f"dataset {self._name()!r} has no field {self.text_field!r} (it has {', '.join(names)}); set "
                "dataset.text_field"
            )

    def whole_parts(self, name: str) -> list[Part]:
        table = self._table(name)
        total = len(table)
        size = max(1, int(PART_BYTES * total / max(table.data.nbytes, 1)))  # rows of about PART_BYTES
        return [
            Part(name, start, min(start + size, total), min(size, total - start), unit="rows")
            for start in range(0, total, size)
        ]

    def documents_of(self, part: Part) -> Iterator[str]:
        return self._rows(part.where, part.start, part.stop)

    def read(self, part: Part) -> Iterator[str]:
        if part.chars is not None:
            return super().read(part)
        first = part.start + part.skip
        return self._rows(part.where, first, part.stop if part.take is None else first + part.take)

    def _rows(self, name: str, start: int, stop: int) -> Iterator[str]:
        table = self._table(name)
        for first in range(start, stop, _TABLE_BATCH):
            yield from table[first : min(first + _TABLE_BATCH, stop)][self.text_field]

    def stream_shards(self, split: SplitSpec) -> int:
        return 1 if split.sliced else self._stream(split).n_shards

    def stream_shard(self, split: SplitSpec, shard: int, skip: int) -> Iterator[str]:
        table = self._stream(split)
        if not split.sliced:
            table = table.shard(num_shards=table.n_shards, index=shard)
        for number, record in enumerate(table.skip(skip) if skip else table):
            if number == 0:
                self._check_field(record)
            yield record[self.text_field]

    def _stream(self, split: SplitSpec) -> Any:
        """The split read on the fly (its slice taken), opened once per process."""
        key = f"stream:{split}"
        if key not in self._tables:
            table = self._load(split.name, streaming=True)
            if split.sliced:
                rows = split.select(self._published_rows(table, split))
                table = table.skip(rows.start).take(len(rows))
            self._tables[key] = table
        return self._tables[key]

    def _published_rows(self, table: Any, split: SplitSpec) -> int:
        info = (table.info.splits or {}).get(split.name)
        if info is None or not info.num_examples:
            raise LaddError(
                f"dataset {self._name()!r} does not publish the size of split {split.name!r}, so the slice in "
                f"{split} cannot be streamed; use streaming=false or a split without a slice"
            )
        return info.num_examples

    def fingerprint(self, split: SplitSpec) -> dict[str, Any]:
        return {
            "dataset": self.path,
            "subset": self.subset,
            "revision": self.revision,
            "text_field": self.text_field,
            "split": str(split),
        }


def open_source(config: TextDatasetConfig) -> Source:
    """The source named by ``config.source`` (known name, shipped corpus, ``hf:PATH``, local files, or Hub id)."""
    spec = config.source
    field_ = config.text_field or "text"
    if spec in KNOWN:
        known = KNOWN[spec]
        return HubDataset(
            known.path,
            config.subset or known.subset,
            config.text_field or known.text_field,
            spec,
            known,
            config.revision,
        )
    if spec in SHIPPED:
        return LocalFiles([SHIPPED[spec]], field_, config.txt_documents, spec)
    if spec.startswith("hf:"):
        return HubDataset(spec[3:], config.subset, field_, _safe(spec[3:]), revision=config.revision)
    paths = local_paths(spec)
    if paths is not None:
        return LocalFiles(paths, field_, config.txt_documents, _safe(Path(spec).stem or "files"))
    return HubDataset(spec, config.subset, field_, _safe(spec), revision=config.revision)


def local_paths(spec: str) -> list[Path] | None:
    """The files a local source names (a file, a folder or a glob), or None when ``spec`` is not local."""
    path = Path(spec).expanduser()
    if any(c in spec for c in "*?["):
        paths = [Path(p) for p in sorted(glob.glob(str(path), recursive=True))]
    elif path.is_dir():
        paths = sorted(p for p in path.rglob("*") if p.is_file())
    elif path.is_file() or path.suffix in LOCAL_SUFFIXES:
        paths = [path]
    else:
        return None
    usable = [p for p in paths if p.suffix in LOCAL_SUFFIXES]
    if not usable:
        raise LaddError(
            f"dataset source {spec!r} names no {'/'.join(LOCAL_SUFFIXES)} file (found {len(paths)} other file(s))"
        )
    for p in usable:
        check_regular(p)
    return usable


def check_regular(path: Path) -> None:
    """Refuse a source file that does not exist or is no regular file (a device such as ``/dev/zero``, a pipe, a
    folder), which ladd would never finish reading."""
    if not path.exists():
        raise LaddError(f"dataset source file {path} does not exist")
    if not path.is_file():
        raise LaddError(
            f"dataset source {path} is not a regular file (a device, pipe or folder); ladd reads only regular files"
        )


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "source"
