"""A causal LM teacher that scores texts: total negative log-likelihood over its own tokens."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

from registry.errors import LaddError

from ..hub import from_pretrained
from .config import GenPPLConfig

__all__ = ["Teacher"]


class Teacher:
    """A Hugging Face causal LM and its tokenizer, loaded on first use and then kept.

    Each text is tokenised without special tokens and scored after the teacher's start token (its BOS,
    else its EOS, as GPT-2 starts documents with ``<|endoftext|>``), so every text token is scored and
    none is scored twice. Texts longer than the context are cut into consecutive chunks, each restarted
    after the start token. Padding is masked out of both attention and the loss.
    """

    def __init__(self, config: GenPPLConfig) -> None:
        self.config = config
        self._loaded: tuple[Any, Any] | None = None

    @property
    def device(self) -> torch.device:
        """Where the teacher runs."""
        if self.config.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.config.device)

    def load(self) -> tuple[Any, Any]:
        """The (model, tokenizer) pair, loaded from the Hub cache or a local folder the first time."""
        if self._loaded is None:
            name = self.config.teacher
            tokenizer = from_pretrained(AutoTokenizer, "Gen PPL teacher", name, "metric.teacher")
            model = from_pretrained(
                AutoModelForCausalLM, "Gen PPL teacher", name, "metric.teacher", dtype=getattr(torch, self.config.dtype)
            )
            if tokenizer.bos_token_id is None and tokenizer.eos_token_id is None:
                raise LaddError(f"the Gen PPL teacher {name!r} has no BOS or EOS token to start a document with")
            self._loaded = (model.to(self.device).eval(), tokenizer)
        return self._loaded

    def context(self) -> int:
        """Teacher tokens per forward pass, start token included."""
        model, _ = self.load()
        limit = getattr(model.config, "max_position_embeddings", None)
        length = self.config.max_length or limit
        if length is None:
            raise LaddError(f"set metric.max_length: teacher {self.config.teacher!r} does not state its context size")
        if limit is not None and length > limit:
            raise LaddError(f"metric.max_length={length} exceeds the teacher's context of {limit} tokens")
        return length

    def sequences(self, texts: list[str]) -> list[list[int]]:
        """Teacher id sequences to score: each text's chunks, each behind the start token."""
        _, tokenizer = self.load()
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        width = self.context() - 1
        chunks = []
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            chunks += [[start, *ids[i : i + width]] for i in range(0, len(ids), width)]
        return chunks

    @torch.no_grad()
    def score(self, texts: list[str]) -> tuple[float, int]:
        """Total NLL in nats (float64 sum) and number of scored teacher tokens over ``texts``."""
        model, _ = self.load()
        sequences = self.sequences(texts)
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        count = 0
        for first in range(0, len(sequences), self.config.batch_size):
            batch = sequences[first : first + self.config.batch_size]
            longest = max(len(ids) for ids in batch)
            ids = torch.tensor([s + [s[0]] * (longest - len(s)) for s in batch], device=self.device)
            real = torch.tensor([[1] * len(s) + [0] * (longest - len(s)) for s in batch], device=self.device)
            logits = model(input_ids=ids, attention_mask=real).logits[:, :-1]
            log_p = F.log_softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
            log_p = log_p.gather(-1, ids[:, 1:, None])[..., 0]
            scored = real[:, 1:].bool()
            total -= log_p[scored].double().sum()
            count += int(scored.sum())
        return float(total), count
