"""Turning tokenised documents into rows of exactly ``seq_len`` ids (pure functions).

``wrap`` (MDLM's and the paper's packing): each document is followed by EOS, everything is concatenated
and cut into consecutive rows; the incomplete tail is dropped, so no id is padding.
``pad``: one row per document, truncated to ``seq_len - 1`` ids, then EOS, then ``pad_id`` up to
``seq_len``. The text dataset pads with EOS itself: every id of a row must be a real token (< K, the mask
being K), and a run of EOS reads naturally as "the text has ended"; decoding stops at the first EOS.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence


def wrap(documents: Iterable[Sequence[int]], seq_len: int, eos_id: int) -> Iterator[list[int]]:
    """Rows of ``seq_len`` ids cut from the documents joined as ``doc EOS doc EOS ...``; the tail is dropped."""
    buffer: list[int] = []
    for document in documents:
        buffer.extend(document)
        buffer.append(eos_id)
        whole = len(buffer) - len(buffer) % seq_len
        for start in range(0, whole, seq_len):
            yield buffer[start : start + seq_len]
        del buffer[:whole]


def pad(document: Sequence[int], seq_len: int, eos_id: int, pad_id: int) -> list[int]:
    """``document`` truncated to ``seq_len - 1`` ids, then EOS, then ``pad_id`` up to ``seq_len``."""
    row = [*document[: seq_len - 1], eos_id]
    return row + [pad_id] * (seq_len - len(row))
