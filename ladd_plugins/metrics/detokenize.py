"""Turning generated data-token ids back into documents of text."""
from __future__ import annotations

from itertools import groupby
from typing import Any

from torch import Tensor

from registry.errors import LaddError

__all__ = ["check_finished", "documents"]


def check_finished(samples: Tensor, tokenizer: Any) -> None:
    """Refuse samples that still hold the data tokenizer's mask token (an unfinished sampler run)."""
    mask = None if tokenizer is None else getattr(tokenizer, "mask_token_id", None)
    if mask is not None and bool((samples == mask).any()):
        count = int((samples == mask).sum())
        raise LaddError(
            f"{count} generated token(s) are still the mask token (id {mask}); a finished sample has no masks. "
            "Check that the sampler reveals every position (its last step must reach time 0)."
        )


def documents(samples: Tensor, tokenizer: Any) -> list[str]:
    """The non-empty texts of ``samples [N, S]``: each row split at the data EOS id, special tokens dropped.

    A packed sample ``a b EOS c d`` gives two documents, ``"a b"`` and ``"c d"``; the EOS itself is not text.
    """
    eos = tokenizer.eos_token_id
    texts = []
    for row in samples.tolist():
        for is_eos, piece in groupby(row, key=lambda token: token == eos):
            text = "" if is_eos else tokenizer.decode(list(piece), skip_special_tokens=True)
            if text:
                texts.append(text)
    return texts
