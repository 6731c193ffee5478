"""Reference sequences from a file, one per line: text for a dataset with a tokenizer, token ids for one without.

Text lines are tokenised as the text dataset tokenises documents; a ``.jsonl`` file holds one JSON object per
line, read by its ``ids`` when it has them (as ``ladd sample`` writes them for text data), else by its ``text``.
Id lines are whole numbers separated by spaces, as ``ladd sample`` writes them. Blank lines are skipped. A
reference longer than the model's sequence is cut (with one note for all of them); a shorter one ends with the
dataset's end-of-document id and is filled with it, as the text dataset's ``packing=pad`` rows are, and is
refused for a dataset without one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from registry.errors import LaddError
from registry.interfaces import Dataset

from .prompts import text_ids

JSON_LINES = ".jsonl"
_SHOWN = 5  # lines named in the note on cut references


@dataclass
class References:
    """``tokens`` ``[R, S]``, one row per reference in file order, and the notes on how they were fitted to S."""

    tokens: Tensor
    notes: list[str] = field(default_factory=list)


def read_references(path: str | Path, dataset: Dataset) -> References:
    """The references of ``path`` as rows of the model's length, or a LaddError naming the line and the fix."""
    path = Path(path)
    lines = _lines(path)
    texts = dataset.tokenizer is not None
    ids = [
        _text_ids(path, number, line, dataset) if texts else _ids(path, number, line, dataset.vocab_size)
        for number, line in lines
    ]
    rows = [_fitted(path, number, row, dataset) for (number, _), row in zip(lines, ids, strict=True)]
    cut = [number for (number, _), row in zip(lines, ids, strict=True) if len(row) > dataset.seq_len]
    notes = [] if not cut else [_cut_note(path, cut, dataset.seq_len)]
    return References(torch.tensor(rows, dtype=torch.long), notes)


def _lines(path: Path) -> list[tuple[int, str]]:
    """The non-blank lines of a UTF-8 file with their 1-based numbers."""
    if not path.is_file():
        what = "is not a regular file (a device, pipe or folder)" if path.exists() else "does not exist"
        raise LaddError(f"reference file {path} {what}: give a file with one reference per line")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise LaddError(
            f"{path} is not UTF-8 text (byte {data[error.start]:#04x} at offset {error.start}): save it as UTF-8"
        ) from None
    lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise LaddError(f"{path} holds no reference (it is empty or blank): write one reference per line")
    return lines


def _text_ids(path: Path, number: int, line: str, dataset: Dataset) -> list[int]:
    where = f"line {number} of {path}"
    if path.suffix != JSON_LINES:
        return text_ids(dataset, line, where, dataset.seq_len)
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if isinstance(record, dict) and isinstance(record.get("ids"), list):
        return _checked(where, record["ids"], dataset.vocab_size)
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise LaddError(f"{where} is not a JSON object with a 'text' string (or 'ids'): write one such object per line")
    return text_ids(dataset, record["text"], where, dataset.seq_len)


def _ids(path: Path, number: int, line: str, vocab_size: int) -> list[int]:
    where = f"line {number} of {path}"
    for word in line.split():
        if not word.isdigit():
            raise LaddError(
                f"{where}: {word!r} is not a token id; this model's dataset has no tokenizer, so a reference is "
                f"whole numbers separated by spaces (as `ladd sample` writes them)"
            )
    return _checked(where, [int(word) for word in line.split()], vocab_size)


def _checked(where: str, ids: list, vocab_size: int) -> list[int]:
    """``ids`` if each is a token id of the vocabulary, else a LaddError naming the first that is not."""
    for value in ids:
        if type(value) is not int or not 0 <= value < vocab_size:
            raise LaddError(
                f"{where} holds id {value!r}, outside this model's vocabulary of {vocab_size} ids "
                f"(0 to {vocab_size - 1}): give sequences of this model's dataset"
            )
    return ids


def _fitted(path: Path, number: int, row: list[int], dataset: Dataset) -> list[int]:
    """``row`` cut to the model's length, or ended with the end-of-document id and filled with it."""
    length = dataset.seq_len
    if len(row) >= length:
        return row[:length]
    if dataset.eos_id is None:
        raise LaddError(
            f"line {number} of {path} holds {len(row)} tokens but the model's sequences have {length}, and its "
            f"dataset has no end-of-document id to pad with: give references of {length} tokens"
        )
    return row + [dataset.eos_id] * (length - len(row))


def _cut_note(path: Path, lines: list[int], length: int) -> str:
    shown = ", ".join(map(str, lines[:_SHOWN])) + (f" and {len(lines) - _SHOWN} more" if len(lines) > _SHOWN else "")
    return f"{len(lines)} reference(s) longer than the model's {length} tokens cut to {length} (line {shown} of {path})"
