"""The tokenizer a published checkpoint ships, carried into the model folder: loaded without running code shipped with
it, and covering the network's whole table.

A published table often holds more ids than the tokenizer names (LLaDA-8B: 126,464 rows for 126,349 tokens; Dream-7B:
152,064 for 151,667). The family's code scores and proposes over every row, so ladd's tokenizer gets a placeholder
special token for each id it lacks (``<|ladd_unused_N|>``, dropped when decoding with ``skip_special_tokens``): the
data's K tokens are then the whole table, the network's own mask among them, and ladd's mask the id after it.

Dream ships its tokenizer as Python code (``tokenization_dream.py``, a ``DreamTokenizer`` named in
``tokenizer_config.json``) over ``vocab.json`` and ``merges.txt``. That class is Qwen2's byte-level BPE: NFC
normalisation, Qwen2's pre-tokenising expression, bytes mapped to characters as GPT-2 does, merges by rank, and the
added tokens of ``tokenizer_config.json`` matched before it, none normalised. :func:`byte_level_bpe` builds the same
tokenizer from those files with the ``tokenizers`` library; nothing in the folder runs.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from registry.errors import LaddError, first_line
from registry.toolkit.checkpoints import MAX_CONFIG_BYTES

#: the placeholder of an id of the network's table that the tokenizer lacks
UNUSED = "<|ladd_unused_{}|>"
#: Qwen2's pre-tokenising expression (contractions, letters, single digits, punctuation runs, newlines, spaces)
QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
    r"""|\s+(?!\S)|\s+"""
)
#: a byte-level BPE tokenizer's files, as Dream ships them
BPE_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")
#: the special tokens a tokenizer_config.json names, as keywords of a transformers tokenizer
_SPECIAL = ("bos_token", "eos_token", "pad_token", "unk_token")


def cover_table(tokenizer: Any, rows: int) -> None:
    """Placeholder special tokens for the ids ``len(tokenizer) .. rows - 1``, each at its own id."""
    from tokenizers import AddedToken

    start = len(tokenizer)
    tokenizer.add_tokens([AddedToken(UNUSED.format(i), special=True) for i in range(start, rows)], special_tokens=True)
    if rows > start and tokenizer.convert_tokens_to_ids(UNUSED.format(rows - 1)) != rows - 1:
        raise LaddError(f"the tokenizer's ids are not contiguous up to {start}: its table cannot be covered")


def save(tokenizer: Any, out: Path) -> list[Path]:
    """``tokenizer`` saved to ``out``; the files written."""
    return [Path(name) for name in tokenizer.save_pretrained(out) if Path(name).is_file()]


def _read_json(path: Path, what: str) -> Any:
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ValueError(f"it holds more than {MAX_CONFIG_BYTES} bytes")
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:
        raise LaddError(f"cannot read {what} {path} ({first_line(error)}); restore the checkpoint's files") from None


def _content(value: Any) -> str | None:
    """A special token as tokenizer_config.json gives it: a string, or an AddedToken's fields."""
    return value.get("content") if isinstance(value, dict) else value


def byte_level_bpe(folder: Path) -> Any:
    """The byte-level BPE tokenizer of ``vocab.json``, ``merges.txt`` and ``tokenizer_config.json`` (Qwen2's
    algorithm, which Dream's ``DreamTokenizer`` implements), with its added tokens at their ids and its chat
    template."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    missing = [name for name in BPE_FILES if not (folder / name).is_file()]
    if missing:
        raise LaddError(
            f"{folder} lacks {missing[0]}: a Dream checkpoint ships its tokenizer as {', '.join(BPE_FILES)}"
        )
    vocab = _read_json(folder / "vocab.json", "the tokenizer's vocabulary")
    settings = _read_json(folder / "tokenizer_config.json", "the tokenizer's config")
    if not isinstance(vocab, dict) or not isinstance(settings, dict):
        raise LaddError(f"{folder}: vocab.json and tokenizer_config.json must each hold one JSON object")
    lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
    if lines and lines[0].startswith("#version:"):  # the header of the merges file, no merge
        lines = lines[1:]
    pairs = [line.split() for line in lines if line.strip()]
    if any(len(pair) != 2 for pair in pairs):
        raise LaddError(f"{folder / 'merges.txt'} holds a line that is no pair of symbols; restore the file")
    merges = [(first, second) for first, second in pairs]
    added = settings.get("added_tokens_decoder") or {}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    backend.decoder = decoders.ByteLevel()
    for index in sorted(added, key=int):
        token = added[index]
        backend.add_tokens([AddedToken(
            token["content"], single_word=token.get("single_word", False), lstrip=token.get("lstrip", False),
            rstrip=token.get("rstrip", False), normalized=token.get("normalized", False),
            special=token.get("special", True),
        )])
        if backend.token_to_id(token["content"]) != int(index):
            raise LaddError(
                f"{folder / 'tokenizer_config.json'} puts {token['content']!r} at id {index}, but the vocabulary "
                f"gives it id {backend.token_to_id(token['content'])}; the tokenizer's files disagree"
            )
    specials = {key: _content(settings.get(key)) for key in _SPECIAL if _content(settings.get(key))}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, clean_up_tokenization_spaces=False, **specials)
    template = settings.get("chat_template")
    if (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    if template:
        tokenizer.chat_template = template
    return tokenizer
