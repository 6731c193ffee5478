"""A pretrained Hugging Face masked language model as MDLM's token denoiser (``backbone=hf_masked_lm``).

The data must be tokenised with the model's own tokenizer (``dataset.tokenizer`` = ``backbone.model``). ladd
gives that tokenizer a mask at its last id K when its own sits elsewhere (BERT's ``[MASK]`` is id 103), so the
network sees ladd's mask K as the model's own mask token and returns its logits over the K real tokens, with
the model's mask token given no probability (SUBS). Like MDLM's published model the network is not told the
time. The whole model is fine-tuned, or LoRA adapters on its attention (``train.lora``). A checkpoint without a
masked-LM head (a sentence encoder such as all-MiniLM-L6-v2) gets the head Hugging Face builds for it: the output
layer tied to the input embeddings, the rest newly initialised; a one-line note says so. Loaded with
``trust_remote_code=False``.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from registry.errors import IncompatibleComponentsError, LaddError, MissingResourceError
from registry.interfaces import Backbone, Channels, Denoised
from registry.toolkit.tokens import at_rows

from ..hub import from_pretrained
from .config import HFMaskedLMConfig

__all__ = ["HFMaskedLM", "HFMaskedLMConfig"]

_SETTING = "backbone.model"
_NO_LIMIT = 1 << 30  # tokenizers without a length limit report a huge sentinel


def data_vocabulary(tokenizer: Any) -> int:
    """K, the real tokens of text data tokenised with ``tokenizer``: ladd keeps its ids and puts the mask last,
    its own when that is already the last id, else one appended."""
    size = len(tokenizer)
    return size - 1 if tokenizer.mask_token_id == size - 1 else size


def _quietly(load: Any) -> Any:
    """``load()`` with the transformers loading report silenced (ladd states what matters in one line)."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        return load()
    finally:
        logging.set_verbosity(level)


class HFMaskedLM(Backbone):
    """``AutoModelForMaskedLM`` over ladd's token ids: mask K in, logits over the K real tokens out, no time input."""

    token_time_conditioned = False

    def __init__(self, config: HFMaskedLMConfig, channels: Channels):
        super().__init__()
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        if not channels.tokens or channels.latent is not None:
            raise IncompatibleComponentsError(
                "backbone 'hf_masked_lm' denoises the token channel alone (MDLM): set latent=null"
            )
        tokenizer = _quietly(lambda: from_pretrained(AutoTokenizer, "masked LM tokenizer", config.model, _SETTING))
        if tokenizer.mask_token_id is None:
            raise LaddError(
                f"the tokenizer of {config.model!r} has no mask token: choose a masked language model "
                f"(BERT, RoBERTa, ...)"
            )
        self.source_mask = int(tokenizer.mask_token_id)
        limit = tokenizer.model_max_length if tokenizer.model_max_length < _NO_LIMIT else _NO_LIMIT
        self.vocab_size = data_vocabulary(tokenizer)
        if channels.vocab_size != self.vocab_size:
            raise MissingResourceError(
                f"backbone hf_masked_lm needs data tokenised with the tokenizer of {config.model!r} "
                f"({self.vocab_size} real tokens with ladd's mask), this data has {channels.vocab_size}: "
                f"set dataset.tokenizer={config.model}"
            )
        self.model, info = _quietly(lambda: from_pretrained(
            AutoModelForMaskedLM, "masked language model", config.model, _SETTING, output_loading_info=True,
            dtype=torch.float32,
        ))
        limit = min(limit, getattr(self.model.config, "max_position_embeddings", None) or _NO_LIMIT)
        if channels.seq_len > limit:
            raise IncompatibleComponentsError(
                f"{config.model!r} reads at most {limit} positions, the data has {channels.seq_len}: "
                f"lower dataset.seq_len"
            )
        rows = self.model.get_input_embeddings().num_embeddings
        if rows <= max(self.source_mask, self.vocab_size - 1) or self.model.config.vocab_size < self.vocab_size:
            raise LaddError(
                f"{config.model!r} embeds {rows} ids, fewer than its tokenizer's {self.vocab_size}: the model and "
                f"tokenizer do not match"
            )
        new = sorted(info.get("missing_keys") or [])
        if new:
            head = self.model.get_output_embeddings()
            tied = head is not None and head.weight is self.model.get_input_embeddings().weight
            print(
                f"ladd: note: {config.model} lacks {len(new)} tensors of a masked LM ({new[0]}, ...), which start "
                f"random" + ("; its output layer is tied to its input embeddings" if tied else ""),
                file=sys.stderr,
            )
        self.mask = channels.vocab_size

    def forward(
        self, x_t: Tensor | None, tau_x: Tensor | None, y_t: Tensor | None, tau_y: Tensor | None,
        rows: Tensor | None = None,
    ) -> Denoised:
        if x_t is None:
            raise ValueError("backbone 'hf_masked_lm' predicts tokens: it needs x_t")
        ids = torch.where(x_t.eq(self.mask), self.source_mask, x_t)  # [B, S]: ladd's mask as the model's own
        # [B, S, K]: the real tokens' logits
        logits = self.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[..., : self.vocab_size]
        if self.source_mask < self.vocab_size:  # the model's own mask token is no real token of the data
            logits = logits.index_fill(-1, torch.tensor([self.source_mask], device=logits.device), float("-inf"))
        return Denoised(tokens=at_rows(logits, rows))

    def layers(self) -> Iterable[nn.Module]:
        """The model's transformer layers: its one list of ``num_hidden_layers`` modules."""
        count = getattr(self.model.config, "num_hidden_layers", None)
        found = [m for m in self.model.modules() if isinstance(m, nn.ModuleList) and len(m) == count]
        return found[0] if len(found) == 1 else ()

    def adapter_targets(self) -> tuple[str, ...]:
        """peft's default LoRA targets for the model's architecture (BERT's: query, value); none for one it lacks."""
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

        return tuple(DEFAULTS.get(self.model.config.model_type, ()))
