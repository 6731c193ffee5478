"""Text in and out of a sampler: prompts and infills as fixed tokens, samples as text."""
from __future__ import annotations

import torch
from torch import Tensor

from .errors import LaddError
from .interfaces import Dataset, mask_id


def _tokenizer(dataset: Dataset):
    if dataset.tokenizer is None:
        raise LaddError(f"{type(dataset).__name__} has no tokenizer, so prompts and text output do not apply")
    return dataset.tokenizer


def fixed_tokens(dataset: Dataset, num_samples: int, prefix: str | None = None, suffix: str | None = None) -> Tensor:
    """``[num_samples, S]`` ids: ``prefix`` at the start, ``suffix`` at the end, the mask id in between."""
    head, tail = _encode(dataset, prefix), _encode(dataset, suffix)
    free = dataset.seq_len - len(head) - len(tail)
    if free < 1:
        raise LaddError(
            f"prompt and suffix take {len(head) + len(tail)} tokens, leaving nothing to generate in {dataset.seq_len}"
        )
    row = torch.tensor(head + [mask_id(dataset.vocab_size)] * free + tail, dtype=torch.long)
    return row.expand(num_samples, -1).clone()


def _encode(dataset: Dataset, text: str | None) -> list[int]:
    """Ids of ``text`` with special-token strings read as plain text, as the data is: a typed mask token is no mask."""
    if not text:
        return []
    ids = _tokenizer(dataset)(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    if any(i >= dataset.vocab_size for i in ids):
        raise LaddError(f"the prompt {text!r} encodes to the mask id {dataset.vocab_size}; remove the mask token's text from it")
    return ids


def decode(dataset: Dataset, tokens: Tensor) -> list[str]:
    """Each sequence as text, special tokens (EOS between documents) kept visible."""
    return _tokenizer(dataset).batch_decode(tokens.tolist(), skip_special_tokens=False)
