"""Frozen pretrained text encoder (paper App. D and E.2): a Hugging Face model's last-layer states as latents.

The paper's preset is Qwen3-Embedding-0.6B with ``d_l = 32``; any ``AutoModel`` works.
"""
from __future__ import annotations

import hashlib
import json
import os
from itertools import accumulate, pairwise
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AutoModel, AutoTokenizer

from registry.errors import InvalidConfigError, LaddError
from registry.interfaces import Encoder, mask_id

from ..hub import from_pretrained
from .config import PretrainedEncoderConfig
from .input_dropout import input_dropout
from .latent_cache import LatentCache, cache_namespace, sequence_keys
from .pooling import overlap_weights, pool, weighted_mean

__all__ = ["FrozenTextModel", "PretrainedEncoder", "PretrainedEncoderConfig", "TokenBridge", "input_dropout"]

_DECODE = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The precision ``name`` means on ``device`` ("auto": bfloat16 on CUDA, float32 elsewhere)."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


class FrozenTextModel:
    """A Hugging Face model and its tokenizer, frozen in eval mode, run on the caller's device at the chosen
    precision."""

    def __init__(self, name: str, dtype: str) -> None:
        self.name, self.dtype = name, dtype
        default = resolve_dtype(dtype, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = from_pretrained(AutoTokenizer, "pretrained encoder", name, "encoder.model")
        self.model = from_pretrained(AutoModel, "pretrained encoder", name, "encoder.model", dtype=default)
        self.model.requires_grad_(False).eval()

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenTextModel:
        # copies of the encoder (the EMA model) share the frozen weights instead of duplicating them
        return self

    @property
    def hidden_size(self) -> int:
        """Width of the last-layer states."""
        return self.model.get_input_embeddings().embedding_dim

    @property
    def vocab_rows(self) -> int:
        """Number of input ids the model embeds."""
        return self.model.get_input_embeddings().num_embeddings

    @property
    def max_length(self) -> int:
        """Longest input the model and its tokenizer accept."""
        positions = getattr(self.model.config, "max_position_embeddings", None) or self.tokenizer.model_max_length
        return int(min(positions, self.tokenizer.model_max_length))

    @property
    def pad_id(self) -> int:
        """The id fed at positions the model must not attend to."""
        for candidate in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id):
            if candidate is not None:
                return candidate
        return 0

    def identity(self) -> dict[str, Any]:
        """What names these weights: the Hub name (or absolute folder) and the Hub revision, when known."""
        name = os.path.abspath(self.name) if Path(self.name).is_dir() else self.name
        return {"model": name, "revision": getattr(self.model.config, "_commit_hash", None)}

    @torch.no_grad()
    def states(self, input_ids: Tensor, attention_mask: Tensor, blank: Tensor | None = None) -> Tensor:
        """Last-layer hidden states ``[B, T, hidden]``; ``blank`` zeroes the input embeddings at those positions."""
        device = input_ids.device
        dtype = resolve_dtype(self.dtype, device)
        if self.model.device != device or self.model.dtype != dtype:
            self.model.to(device=device, dtype=dtype)
        # the configured precision holds even inside a bf16-autocast training step
        with torch.autocast(device.type, enabled=False):
            if blank is None:
                return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            embeds = self.model.get_input_embeddings()(input_ids).masked_fill(blank[..., None], 0.0)
            return self.model(inputs_embeds=embeds, attention_mask=attention_mask).last_hidden_state


def same_vocabulary(data_tokenizer: Any, encoder_tokenizer: Any, vocab_size: int) -> bool:
    """True when data ids below ``vocab_size`` name the same tokens in both tokenizers (ids pass through unchanged)."""

    def below(tokenizer: Any) -> dict[str, int]:
        return {token: i for token, i in tokenizer.get_vocab().items() if i < vocab_size}

    return below(data_tokenizer) == below(encoder_tokenizer)


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A digest of a tokenizer's vocabulary."""
    return hashlib.blake2b(json.dumps(sorted(tokenizer.get_vocab().items())).encode(), digest_size=16).hexdigest()


def _common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


class TokenBridge:
    """Data sequences as text for an encoder with its own tokenizer, with both sides' character spans.

    Each sequence is decoded with the data tokenizer (special tokens kept as text) and re-tokenised
    by the encoder's (fast) tokenizer with its offsets. A data token's span is the text its decoding
    adds; when a token decodes to a partial character (a byte-level BPE splitting a UTF-8 character),
    the character goes to the token that completes it and the others get empty spans.
    """

    def __init__(self, data_tokenizer: Any, encoder_tokenizer: Any, max_length: int) -> None:
        if not getattr(encoder_tokenizer, "is_fast", False):
            raise LaddError(
                f"the encoder's tokenizer ({type(encoder_tokenizer).__name__}) differs from the data's and is not a "
                "fast tokenizer, so it gives no character offsets to align the two; use a model with a fast tokenizer"
            )
        self.data_tokenizer, self.encoder_tokenizer, self.max_length = data_tokenizer, encoder_tokenizer, max_length

    def spans(self, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
        """The text of data ``ids`` and each token's ``[start, end)`` in it."""
        text = self.data_tokenizer.decode(ids, **_DECODE)
        pieces = self.data_tokenizer.batch_decode([[i] for i in ids], **_DECODE)
        if "".join(pieces) == text:
            ends = list(accumulate(len(piece) for piece in pieces))
        else:
            prefixes = self.data_tokenizer.batch_decode([ids[: n + 1] for n in range(len(ids))], **_DECODE)
            ends = list(accumulate((_common_prefix(prefix, text) for prefix in prefixes), max))
        return text, list(pairwise([0, *ends]))

    def encode(self, x0: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Encoder ``input_ids``, ``attention_mask`` and spans ``[B, T, 2]``, and data spans ``[B, S, 2]`` (CPU)."""
        texts, data_spans = [], torch.zeros(*x0.shape, 2, dtype=torch.long)
        for row, (ids, keep) in enumerate(zip(x0.tolist(), valid.tolist(), strict=True)):
            text, spans = self.spans([i for i, k in zip(ids, keep, strict=True) if k])
            texts.append(text)
            if spans:
                data_spans[row, torch.tensor(keep)] = torch.tensor(spans)
        batch = self.encoder_tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_offsets_mapping=True,
            return_tensors="pt",
        )
        return batch["input_ids"], batch["attention_mask"], batch["offset_mapping"].long(), data_spans


class PretrainedEncoder(Encoder):
    """A frozen Hugging Face text model: last-layer states, first ``d_l`` dims (Matryoshka), pooled to M, L2-normalised.

    - **Latents.** M = S keeps one latent per token. M < S averages contiguous chunks of the positions
      (``pooling: chunk_mean``), or chunks of all but the last position followed by the last position's
      state, the final EOS (``chunk_mean_eos``, the paper's choice); see :mod:`.pooling`.
    - **Tokenizers.** When the dataset's tokenizer has the encoder's vocabulary (or the dataset has
      none), data ids go straight into the model; positions holding the mask id are left out of
      attention and pooling, and their token-aligned latents are zero. Otherwise each sequence is
      decoded to text and re-tokenised by the encoder's tokenizer (:class:`TokenBridge`); a data
      token's state is the mean of the states of the encoder tokens whose character spans overlap its
      own, or of the nearest encoder token when none does (:func:`.pooling.overlap_weights`). Text
      beyond the encoder's context is cut, and its data tokens take the last encoder token's state.
    - **Frozen.** The model runs under ``no_grad`` in eval mode at ``dtype`` ("auto": bf16 on CUDA,
      fp32 elsewhere), on whatever device the tokens are. It is held outside the module tree, so it
      is not in ``parameters()`` (nor the optimiser), ``state_dict()`` (nor checkpoints and exports),
      and the EMA copy shares it: loading a trained run loads the model again by name.
    - **Encoder-input dropout** (``input_dropout_max > 0``, whenever the model passes ``masked``: while it
      trains, frozen as this encoder is) zeroes the input embeddings of masked positions as the DiT encoder
      does; across tokenizers, of every encoder token a blanked data token reads.
    - **Cache** (``cache_dir``): features are stored per sequence, keyed by the encoder's identity,
      options and precision and by the token ids; a local model changed in place needs a new folder.
    """

    trainable = False

    def __init__(self, config: PretrainedEncoderConfig, vocab_size: int, seq_len: int, tokenizer: Any = None) -> None:
        super().__init__()
        length = seq_len if config.length is None else config.length
        if length > seq_len:
            raise InvalidConfigError(
                f"encoder.length M={length} must be at most seq_len S={seq_len} (None means M = S)"
            )
        self.length, self.width, self.pooling = length, config.width, config.pooling
        self.vocab_size, self.input_dropout_max = vocab_size, config.input_dropout_max
        self.frozen = FrozenTextModel(config.model, config.dtype)
        if self.width > self.frozen.hidden_size:
            raise InvalidConfigError(
                f"encoder.width={self.width} exceeds the hidden size {self.frozen.hidden_size} of {config.model!r}"
            )
        direct = tokenizer is None or same_vocabulary(tokenizer, self.frozen.tokenizer, vocab_size)
        if direct and vocab_size > self.frozen.vocab_rows:
            raise InvalidConfigError(
                f"the data's {vocab_size} token ids cannot be fed to {config.model!r}, which embeds "
                f"{self.frozen.vocab_rows}; "
                "a text dataset must provide its tokenizer so that sequences are re-tokenised for the encoder"
            )
        self.bridge = None if direct else TokenBridge(tokenizer, self.frozen.tokenizer, self.frozen.max_length)
        self.cache = None if config.cache_dir is None else LatentCache(config.cache_dir, config.cache_entries)
        self.identity = (
            {}
            if self.cache is None
            else {
                **self.frozen.identity(),
                "length": self.length,
                "width": self.width,
                "pooling": self.pooling,
                "seq_len": seq_len,
                "data_tokenizer": None if direct else tokenizer_fingerprint(tokenizer),
            }
        )

    def forward(self, x0: Tensor, masked: Tensor | None = None) -> Tensor:
        if masked is not None and self.input_dropout_max > 0:
            return self.features(x0, input_dropout(masked, self.input_dropout_max))
        if self.cache is None:
            return self.features(x0)
        namespace = cache_namespace({**self.identity, "dtype": str(resolve_dtype(self.frozen.dtype, x0.device))})
        rows = self.cache.rows(sequence_keys(namespace, x0), lambda missing: self.features(x0[missing]))
        return rows.to(x0.device)

    def features(self, x0: Tensor, blank: Tensor | None = None) -> Tensor:
        """Unit-norm latents ``[B, M, d_l]`` of ``x0``, with the input embeddings zeroed where ``blank``."""
        valid = x0 != mask_id(self.vocab_size)
        if self.bridge is None:
            ids = x0.masked_fill(~valid, self.frozen.pad_id)
            hidden = self.frozen.states(ids, valid.long(), blank)[..., : self.width].float()
        else:
            input_ids, attention_mask, encoder_spans, data_spans = self.bridge.encode(x0.cpu(), valid.cpu())
            weights = overlap_weights(data_spans, encoder_spans, valid.cpu()).to(x0.device)
            reads = None if blank is None else (weights & blank[..., None]).any(1)
            states = self.frozen.states(input_ids.to(x0.device), attention_mask.to(x0.device), reads)
            hidden = weighted_mean(states[..., : self.width].float(), weights)
        return F.normalize(pool(hidden, self.length, self.pooling, valid), dim=-1)
