"""Where instruction data comes from, row by row, as lists of chat turns with the place each row was read.

A row holds ``messages`` (``[{role, content}, ...]``) or a ``prompt`` and a ``response`` (field names are options),
read from the shipped pairs, local ``.jsonl`` files, or a Hugging Face dataset. Local files form one split called
``train``, sliced as Hugging Face slices splits (``train[:90%]``); a Hugging Face split is sliced by the library.
"""
from __future__ import annotations

import glob
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry.errors import InvalidConfigError, LaddError

from ...hub import hub_cache, locate, unavailable
from ..text.sources import SplitSpec, check_regular, utf8
from .config import ChatDatasetConfig

SHIPPED = {name: Path(__file__).parent / "corpus" / f"{name}.jsonl" for name in ("arithmetic", "increments")}
HF_PREFIX = "hf:"
#: ladd's splits as fractions of the source's ``train`` split, unless ``split_map`` says otherwise
DEFAULT_SPLITS = {"train": "train[:90%]", "validation": "train[90%:95%]", "test": "train[95%:]"}
ROLES = ("system", "user", "assistant")
ASSISTANT = "assistant"

Turn = dict[str, str]


@dataclass(frozen=True)
class Row:
    """One source row's turns and where it was read (``file.jsonl:12``, ``split 'train' row 7``)."""

    where: str
    turns: list[Turn]


def local_files(source: str) -> list[Path] | None:
    """The ``.jsonl`` files a local source names (the shipped pairs, a file, a folder, a glob); None for the hub."""
    if source in SHIPPED:
        return [SHIPPED[source]]
    if source.startswith(HF_PREFIX):
        return None
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
    elif any(c in source for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(str(path)))
    elif path.suffix == ".jsonl" or path.exists():
        files = [path]
    else:
        return None
    for file in files:
        if file.suffix == ".jsonl":
            check_regular(file)
    wrong = [f for f in files if f.suffix != ".jsonl"]
    if not files or wrong:
        what = f"{wrong[0]} is not a .jsonl file" if wrong else "no .jsonl file is there"
        raise InvalidConfigError(
            f"dataset.source={source!r}: {what}; give .jsonl files, a folder of them, a glob, arithmetic, or a "
            f"Hugging Face dataset"
        )
    return files


def fingerprint(config: ChatDatasetConfig, spec: SplitSpec) -> dict[str, Any]:
    """Everything about the source that decides the split's rows."""
    fields = [config.messages_field, config.prompt_field, config.response_field]
    files = local_files(config.source)
    if files is None:
        where: Any = {"hub": config.source, "subset": config.subset, "revision": config.revision}
    else:
        where = [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    return {"source": where, "split": str(spec), "fields": fields}


def rows(config: ChatDatasetConfig, spec: SplitSpec) -> Iterator[Row]:
    """The split's rows as turns, in order; a row that is neither form is refused in one line naming it."""
    files = local_files(config.source)
    records = _hub_records(config, spec) if files is None else _local_records(files, spec)
    for where, record in records:
        yield Row(where, turns(record, config, where))


def _local_records(files: list[Path], spec: SplitSpec) -> Iterator[tuple[str, Any]]:
    if spec.name != "train":
        raise InvalidConfigError(
            f"local files form one split called 'train', not {spec.name!r}; select parts of it with slices in "
            f"dataset.split_map, e.g. +dataset.split_map.validation='train[90%:95%]'"
        )
    lines = []
    for path in files:
        with path.open("rb") as handle:
            offset = 0
            for number, raw in enumerate(handle, 1):
                line, offset = utf8(path, raw, offset), offset + len(raw)  # a byte that is not UTF-8: its line named
                if line.strip():
                    lines.append((f"{path}:{number}", line))
    for index in spec.select(len(lines)):
        where, line = lines[index]
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as error:
            raise LaddError(
                f"{where} is not valid JSON ({error.msg} at column {error.colno}); fix or remove that line"
            ) from None


def _hub_records(config: ChatDatasetConfig, spec: SplitSpec) -> Iterator[tuple[str, Any]]:
    import datasets

    name = config.source.removeprefix(HF_PREFIX)
    try:
        # older versions of datasets could run a loading script shipped with the data: never
        table = datasets.load_dataset(
            locate(name), config.subset, split=str(spec), revision=config.revision, trust_remote_code=False
        )
    except OSError as error:  # ConnectionError when offline or unreachable, FileNotFoundError when unknown
        checked = f"{hub_cache()} and {datasets.config.HF_DATASETS_CACHE}"
        raise unavailable("instruction dataset", name, error, "dataset.source (local .jsonl files)", checked) from None
    except ValueError as error:  # e.g. an unknown split, listed by datasets
        raise LaddError(f"cannot read split {str(spec)!r} of dataset {name!r}: {error}") from None
    for index, record in enumerate(table):
        yield f"{name} split {str(spec)!r} row {index}", record


def turns(record: Any, config: ChatDatasetConfig, where: str) -> list[Turn]:
    """A row's turns: its messages, or its prompt as the user's turn and its response as the assistant's."""
    if not isinstance(record, dict):
        raise LaddError(f"{where} is not a JSON object; each row must be one, e.g. {_EXAMPLE}")
    if config.messages_field in record:
        messages = record[config.messages_field]
        if not isinstance(messages, list) or not all(_is_turn(m) for m in messages):
            raise LaddError(
                f"{where}: {config.messages_field!r} must be a list of {{role, content}} turns with role one of "
                f"{', '.join(ROLES)} and content a string"
            )
        if not any(m["role"] == ASSISTANT for m in messages):
            raise LaddError(
                f"{where} has no assistant turn in {config.messages_field!r}: there is no response to learn"
            )
        return [{"role": m["role"], "content": m["content"]} for m in messages]
    if config.prompt_field not in record:
        raise LaddError(
            f"{where} has neither {config.messages_field!r} nor {config.prompt_field!r} (it has "
            f"{', '.join(map(repr, record)) or 'nothing'}); set dataset.messages_field or dataset.prompt_field"
        )
    prompt, response = record[config.prompt_field], record.get(config.response_field)
    if response is None:
        raise LaddError(
            f"{where} has a {config.prompt_field!r} but no {config.response_field!r}: every pair needs a response "
            f"(or set dataset.response_field)"
        )
    if not isinstance(prompt, str) or not isinstance(response, str):
        raise LaddError(f"{where}: {config.prompt_field!r} and {config.response_field!r} must be strings")
    return [{"role": "user", "content": prompt}, {"role": ASSISTANT, "content": response}]


def _is_turn(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") in ROLES and isinstance(message.get("content"), str)


_EXAMPLE = '{"prompt": "...", "response": "..."} or {"messages": [{"role": "user", "content": "..."}, ...]}'
