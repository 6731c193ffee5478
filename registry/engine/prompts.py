"""Text in and out of a sampler: prompts and infills as fixed tokens, samples as text."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from registry.errors import LaddError
from registry.interfaces import Dataset, mask_id

_MOST_CHARACTERS_PER_ID = 1000  # far beyond any tokenizer's longest token


def _tokenizer(dataset: Dataset):
    if dataset.tokenizer is None:
        raise LaddError(f"{type(dataset).__name__} has no tokenizer, so prompts and text output do not apply")
    return dataset.tokenizer


def fixed_tokens(dataset: Dataset, num_samples: int, prefix: str | None = None, suffix: str | None = None) -> Tensor:
    """``[num_samples, S]`` ids: ``prefix`` at the start, ``suffix`` at the end, the mask id in between."""
    head = text_ids(dataset, prefix, f"the prompt {prefix!r}") if prefix else []
    tail = text_ids(dataset, suffix, f"the prompt {suffix!r}") if suffix else []
    free = dataset.seq_len - len(head) - len(tail)
    if free < 1:
        raise LaddError(
            f"prompt and suffix take {len(head) + len(tail)} tokens, leaving nothing to generate in {dataset.seq_len}"
        )
    row = torch.tensor(head + [mask_id(dataset.vocab_size)] * free + tail, dtype=torch.long)
    return row.expand(num_samples, -1).clone()


def text_ids(dataset: Dataset, text: str, what: str, limit: int | None = None) -> list[int]:
    """Ids of ``text`` with special-token strings read as plain text, as the data is: a typed mask token is no mask.

    ``what`` names the text in a refusal (``the prompt '...'``, ``line 3 of refs.txt``). With ``limit``, a long text
    is tokenised only as far as its first ``limit + 1`` ids (those kept, and one that says it was longer), so a
    line of megabytes costs what its first tokens cost.
    """
    tokenizer = _tokenizer(dataset)
    text = text if limit is None else _leading(tokenizer, text, limit + 1)
    ids = tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    if any(i >= dataset.vocab_size for i in ids):
        raise LaddError(f"{what} encodes to the mask id {dataset.vocab_size}; remove the mask token's text from it")
    unknown = _unknown_parts(tokenizer, text, ids)
    if unknown:
        raise LaddError(
            f"{what} holds text the tokenizer does not know ({', '.join(map(_shown, unknown[:5]))}), which "
            f"would become its unknown token {tokenizer.unk_token!r}; remove or replace it"
        )
    return ids if limit is None else ids[: limit + 1]


def _shown(part: str) -> str:
    return repr(part if len(part) <= 20 else f"{part[:20]}...")


def _leading(tokenizer: Any, text: str, count: int) -> str:
    """A prefix of ``text`` that tokenises to more than ``count`` ids, grown fourfold from ``8 count`` characters and
    cut at a space where there is one: its first ``count`` ids are the whole text's (the cut can change only the ids
    of the word or the spaces before it). No id covers more than ``_MOST_CHARACTERS_PER_ID`` characters: a text that
    would need more per id (a word of a million letters) is cut there."""
    most = _MOST_CHARACTERS_PER_ID * count
    size = 8 * count
    while size < min(len(text), most):
        cut = text.rfind(" ", 0, size)
        prefix = text[: cut if cut > 0 else size]
        if len(tokenizer(prefix, add_special_tokens=False, split_special_tokens=True)["input_ids"]) > count:
            return prefix
        size *= 4
    return text[:most]


def _unknown_parts(tokenizer: Any, text: str, ids: list[int]) -> list[str]:
    """The pieces of ``text`` that encode to the tokenizer's unknown token, in order, each once."""
    unk = tokenizer.unk_token_id
    if unk is None or unk not in ids:
        return []
    if tokenizer.is_fast:
        spans = tokenizer(text, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=True)
        parts = [text[start:end] for i, (start, end) in zip(ids, spans["offset_mapping"], strict=True) if i == unk]
    else:
        encoded = tokenizer(list(text), add_special_tokens=False, split_special_tokens=True)["input_ids"]
        parts = [c for c, ids in zip(text, encoded, strict=True) if unk in ids]
    return list(dict.fromkeys(parts))


def decode(dataset: Dataset, tokens: Tensor) -> list[str]:
    """Each sequence as text, special tokens (EOS between documents) kept visible."""
    return _tokenizer(dataset).batch_decode(tokens.tolist(), skip_special_tokens=False)
