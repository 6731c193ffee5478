"""Where documents come from: Hugging Face datasets (by short name or id) and local text files.

A source yields the documents (strings) of a split, described by a :class:`SplitSpec` such as
``train``, ``train[:-100000]`` or ``train[90%:95%]`` (rows, in Hugging Face's slice syntax). A source made
of a single document (text8, a text file read whole) is sliced by characters instead.
"""
from __future__ import annotations

import glob
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry.errors import InvalidConfigError, LaddError

from ...hub import hub_cache, unavailable
from .config import TextDatasetConfig

LOCAL_SUFFIXES = (".txt", ".jsonl", ".parquet")
CORPUS_DIR = Path(__file__).parent / "corpus"
STREAM_SHUFFLE_BUFFER = 10_000
_STANDARD = {"train": "train", "validation": "validation", "test": "test"}
_TEST_AS_VALIDATION = {"train": "train", "validation": "test", "test": "test"}  # no validation split published
_FRACTIONS = {"train": "train[:90%]", "validation": "train[90%:95%]", "test": "train[95%:]"}


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
        "EleutherAI/lambada_openai", detokenizer="lambada", splits={"train": "test", "validation": "test", "test": "test"}
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
                f"split {text!r} is not NAME or NAME[START:STOP] (START/STOP: row indices or percentages, e.g. train[90%:])"
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


def _bound(bound: str | None, n: int) -> int | None:
    if bound is None:
        return None
    if bound.endswith("%"):
        return int(n * int(bound[:-1]) / 100)
    return int(bound)


def _slice_documents(texts: Sequence[str], split: SplitSpec) -> list[str]:
    if not split.sliced:
        return list(texts)
    if len(texts) == 1:
        chars = split.select(len(texts[0]))
        return [texts[0][chars.start : chars.stop]]
    rows = split.select(len(texts))
    return list(texts[rows.start : rows.stop])


class Source(ABC):
    """Documents by split, plus what identifies them for the token cache."""

    label: str  # short, file-name-safe description (cache folder names, messages)
    splits: dict[str, str]  # ladd split -> default source split
    detokenizer: str | None = None
    streams: bool = False  # whether ``stream`` can read the documents on the fly

    @abstractmethod
    def documents(self, split: SplitSpec) -> tuple[Iterable[str], int]:
        """The split's documents and how many there are."""

    @abstractmethod
    def fingerprint(self, split: SplitSpec) -> dict[str, Any]:
        """Everything about the source that decides the split's documents."""

    def stream(self, split: SplitSpec, seed: int) -> Iterator[str]:
        """The split's documents read on the fly in a seeded shuffled order (when ``streams``)."""
        raise NotImplementedError(f"source {self.label!r} cannot be streamed")


class LocalFiles(Source):
    """``.txt`` (documents are paragraphs, lines or whole files), ``.jsonl`` and ``.parquet`` files, one split ``train``."""

    def __init__(self, paths: list[Path], text_field: str, txt_documents: str, label: str) -> None:
        self.paths, self.text_field, self.txt_documents, self.label = paths, text_field, txt_documents, label
        self.splits = dict(_FRACTIONS)

    def documents(self, split: SplitSpec) -> tuple[list[str], int]:
        if split.name != "train":
            raise InvalidConfigError(
                f"local files form one split called 'train', not {split.name!r}; select parts of it with "
                "slices in dataset.split_map, e.g. {train: 'train[:90%]', validation: 'train[90%:95%]', test: 'train[95%:]'}"
            )
        texts = _slice_documents([t for path in self.paths for t in self._read(path)], split)
        return texts, len(texts)

    def _read(self, path: Path) -> list[str]:
        if path.suffix == ".txt":
            return split_text(_utf8(path, path.read_bytes()), self.txt_documents)
        if path.suffix == ".jsonl":
            return list(self._jsonl(path))
        return self._parquet(path)

    def _jsonl(self, path: Path) -> Iterator[str]:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, 1):
                line = _utf8(path, raw, number)
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    raise LaddError(f"{path}:{number} is not valid JSON ({error.msg} at column {error.colno}); fix or remove that line") from None
                if not isinstance(record, dict):
                    raise LaddError(f"{path}:{number} is not a JSON object; each line of a .jsonl file must be one, e.g. {{\"text\": \"...\"}}")
                if self.text_field not in record:
                    raise LaddError(
                        f"{path}:{number} has no field {self.text_field!r} (it has {', '.join(record)}); "
                        "set dataset.text_field"
                    )
                yield record[self.text_field]

    def _parquet(self, path: Path) -> list[str]:
        import pyarrow
        import pyarrow.parquet as pq

        try:
            names = pq.ParquetFile(path).schema_arrow.names
            if self.text_field not in names:
                raise LaddError(f"{path} has no column {self.text_field!r} (it has {', '.join(names)}); set dataset.text_field")
            return pq.read_table(path, columns=[self.text_field]).column(self.text_field).to_pylist()
        except (pyarrow.ArrowException, OSError) as error:
            raise LaddError(f"{path} is not a readable parquet file; replace it or remove it from dataset.source") from error

    def fingerprint(self, split: SplitSpec) -> dict[str, Any]:
        files = [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in self.paths]
        return {"files": files, "text_field": self.text_field, "txt_documents": self.txt_documents, "split": str(split)}


def _utf8(path: Path, data: bytes, first_line_number: int = 1) -> str:
    """``data`` (from line ``first_line_number`` of ``path`` on) decoded as UTF-8, or an error naming the line and the fix."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = first_line_number + data[: error.start].count(b"\n")
        raise LaddError(
            f"{path}:{line} is not UTF-8 text (byte {data[error.start]:#04x}); convert the file, "
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
    """A dataset read with ``datasets.load_dataset`` (a Hub id, or any path it accepts)."""

    streams = True

    def __init__(
        self, path: str, subset: str | None, text_field: str, label: str, known: KnownSource | None = None, revision: str | None = None
    ) -> None:
        self.path, self.subset, self.text_field, self.label, self.revision = path, subset, text_field, label, revision
        self.splits = dict(known.splits) if known else dict(_STANDARD)
        self.detokenizer = known.detokenizer if known else None

    def _load(self, split: str, streaming: bool) -> Any:
        import datasets

        try:
            # older versions of datasets could run a loading script shipped with the data: never
            return datasets.load_dataset(
                self.path, self.subset, split=split, streaming=streaming, revision=self.revision, trust_remote_code=False
            )
        except OSError as error:  # ConnectionError when offline or unreachable, FileNotFoundError when unknown
            checked = f"{hub_cache()} and {datasets.config.HF_DATASETS_CACHE}"
            raise unavailable("dataset", self._name(), error, "dataset.source (a .txt, .jsonl or .parquet path)", checked) from None
        except ValueError as error:  # e.g. an unknown split, listed by datasets
            raise LaddError(f"cannot read split {split!r} of dataset {self._name()!r}: {error}") from None

    def _name(self) -> str:
        return self.path if self.subset is None else f"{self.path} ({self.subset})"

    def _check_field(self, names: Iterable[str]) -> None:
        names = list(names)
        if self.text_field not in names:
            raise LaddError(
                f"dataset {self._name()!r} has no field {self.text_field!r} (it has {', '.join(names)}); set dataset.text_field"
            )

    def documents(self, split: SplitSpec) -> tuple[Iterable[str], int]:
        table = self._load(split.name, streaming=False)
        self._check_field(table.column_names)
        if split.sliced and len(table) == 1:
            return _slice_documents([table[0][self.text_field]], split), 1
        if split.sliced:
            table = table.select(split.select(len(table)))
        return (text for batch in table.iter(batch_size=1000) for text in batch[self.text_field]), len(table)

    def stream(self, split: SplitSpec, seed: int) -> Iterator[str]:
        table = self._load(split.name, streaming=True)
        if split.sliced:
            rows = split.select(self._rows(table, split))
            table = table.skip(rows.start).take(len(rows))
        for number, record in enumerate(table.shuffle(seed=seed, buffer_size=STREAM_SHUFFLE_BUFFER)):
            if number == 0:
                self._check_field(record)
            yield record[self.text_field]

    def _rows(self, table: Any, split: SplitSpec) -> int:
        info = (table.info.splits or {}).get(split.name)
        if info is None or not info.num_examples:
            raise LaddError(
                f"dataset {self._name()!r} does not publish the size of split {split.name!r}, so the slice in "
                f"{split} cannot be streamed; use streaming=false or a split without a slice"
            )
        return info.num_examples

    def fingerprint(self, split: SplitSpec) -> dict[str, Any]:
        return {"dataset": self.path, "subset": self.subset, "revision": self.revision, "text_field": self.text_field, "split": str(split)}


def open_source(config: TextDatasetConfig) -> Source:
    """The source named by ``config.source`` (known name, shipped corpus, ``hf:PATH``, local files, or Hub id)."""
    spec = config.source
    field_ = config.text_field or "text"
    if spec in KNOWN:
        known = KNOWN[spec]
        return HubDataset(known.path, config.subset or known.subset, config.text_field or known.text_field, spec, known, config.revision)
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
        raise LaddError(f"dataset source {spec!r} names no {'/'.join(LOCAL_SUFFIXES)} file (found {len(paths)} other file(s))")
    for p in usable:
        if not p.exists():
            raise LaddError(f"dataset source file {p} does not exist")
        if not p.is_file():
            raise LaddError(f"dataset source {p} is not a regular file (a device, pipe or folder); ladd reads only regular files")
    return usable


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "source"
