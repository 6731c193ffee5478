"""``ladd import llada SRC OUT``: a LLaDA checkpoint (GSAI-ML/LLaDA-8B-Base, -Instruct) as a ladd model folder.

SRC is a folder in the published layout (``config.json``, bf16 safetensors shards with their index, the tokenizer's
files), or a hub id where the hub is reachable; what every such import does is :mod:`.published`'s. The model
folder's preset ``llada/llada_8b`` scores lm-eval requests as LLaDA's evaluator does (``harness``) with LLaDA's
continuous-time bound; its weights are float32 (an 8B network: 32 GB).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from registry.errors import LaddError
from registry.toolkit.checkpoints import POSITIVE, Rule

from .. import hub
from . import llada_table
from .llada_table import LLaDAShape, source_shapes
from .published import CONFIG, PublishedImporter
from .shards import INDEX

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def load_tokenizer(folder: Path) -> Any:
    """The checkpoint's tokenizer, loaded without its code."""
    from transformers import AutoTokenizer
    from transformers.utils import logging

    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise LaddError(f"{folder} holds no tokenizer ({', '.join(TOKENIZER_FILES)}); a LLaDA checkpoint ships its own")
    level = logging.get_verbosity()
    logging.set_verbosity_error()  # transformers notes that the folder's config.json is no tokenizer's
    try:  # damaged files come back as one line naming the cause
        return hub.from_pretrained(AutoTokenizer, "LLaDA tokenizer", str(folder), "SRC (a folder with it)")
    finally:
        logging.set_verbosity(level)


class LLaDAImporter(PublishedImporter):
    """LLaDA-8B's published checkpoints as ladd's ``llada``, with their tokenizer."""

    what = "LLaDA"
    preset = "llada/llada_8b"
    patterns = [CONFIG, INDEX, "*.safetensors", "tokenizer*", "special_tokens_map.json", "*.jinja"]
    table = llada_table
    rules = {
        "model_type": Rule(lambda v: v == "llada", "'llada'"),
        **dict.fromkeys(("d_model", "n_layers", "n_heads", "mlp_hidden_size"), POSITIVE),
    }

    def load_tokenizer(self, folder: Path) -> Any:
        return load_tokenizer(folder)

    def example(self, folder: Path) -> str:
        """Two blocks 32 wide over a tiny word tokenizer with a chat template and its own mask, in two shards, as long
        as LLaDA-8B."""
        write_example(folder)
        return str(folder)


#: the example's words: its tokenizer's special tokens (a mask of its own among them, as LLaDA's), then plain words
EXAMPLE_WORDS = ["[UNK]", "<s>", "<eos>", "<|own_mask|>", "<|user|>", "<|assistant|>", "<|end|>", "one", "two", "?"]
EXAMPLE_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def write_example(folder: Path) -> None:
    """A tiny checkpoint in LLaDA's layout with random weights and a word tokenizer: what ``ladd plugins check``
    imports."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    shape = LLaDAShape(hidden=32, layers=2, heads=4, kv_heads=4, mlp_hidden=48, rows=16, mask_id=3, length=4096,
                       rope_theta=500000.0, norm_eps=1e-5, qkv_bias=False)
    generator = torch.Generator().manual_seed(0)
    tensors = {name: (0.2 * torch.randn(size, generator=generator)).to(torch.bfloat16)
               for name, size in source_shapes(shape).items()}
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    weight_map = {name: f"model-0000{1 + index % 2}-of-00002.safetensors" for index, name in enumerate(names)}
    for shard in sorted(set(weight_map.values())):
        save_file({name: tensors[name] for name in names if weight_map[name] == shard}, str(folder / shard))
    (folder / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = {
        "model_type": "llada", "d_model": shape.hidden, "n_layers": shape.layers, "n_heads": shape.heads,
        "n_kv_heads": shape.kv_heads, "mlp_hidden_size": shape.mlp_hidden, "embedding_size": shape.rows,
        "vocab_size": shape.rows, "mask_token_id": shape.mask_id, "max_sequence_length": shape.length,
        "rope_theta": shape.rope_theta, "rms_norm_eps": shape.norm_eps, "block_type": "llama", "weight_tying": False,
    }
    (folder / CONFIG).write_text(json.dumps(config))
    backend = Tokenizer(models.WordLevel({word: i for i, word in enumerate(EXAMPLE_WORDS)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", bos_token="<s>", eos_token="<eos>",
                                        additional_special_tokens=EXAMPLE_WORDS[3:7])
    tokenizer.chat_template = EXAMPLE_TEMPLATE
    tokenizer.save_pretrained(folder)

