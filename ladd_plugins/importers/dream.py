"""``ladd import dream SRC OUT``: a Dream checkpoint (Dream-org/Dream-v0-Base-7B, -Instruct-7B) as a ladd model folder.

SRC is a folder in the published layout (``config.json``, bf16 safetensors shards with their index, ``vocab.json``,
``merges.txt`` and ``tokenizer_config.json``), or a hub id where the hub is reachable; what every such import does is
:mod:`.published`'s. The network is ladd's ``llada`` with Dream's options (grouped-query attention, biased q/k/v,
logits shifted by one position); the tokenizer is rebuilt from its files without Dream's Python class
(:func:`.tokenizers.byte_level_bpe`), with the chat template of ``tokenizer_config.json``. The model folder's preset
``dream/dream_7b`` samples with Dream's generation as a call without a generation config does
(:mod:`.dream_table`) and scores lm-eval requests as Dream's evaluator does; its weights are float32 (30 GB).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from registry.toolkit.checkpoints import POSITIVE, Rule

from . import dream_table
from .dream_table import FAMILY, GENERATION_DEFAULTS, generation, sampler_options, source_shapes
from .llada_table import LLaDAShape
from .published import CONFIG, Checkpoint, PublishedImporter
from .shards import INDEX
from .tokenizers import byte_level_bpe

PRESET = "dream/dream_7b"


class DreamImporter(PublishedImporter):
    """Dream-7B's published checkpoints as ladd's ``llada`` with Dream's options, with their tokenizer."""

    what = FAMILY
    preset = PRESET
    patterns = [CONFIG, INDEX, "*.safetensors", "vocab.json", "merges.txt", "tokenizer_config.json",
                "special_tokens_map.json", "*.jinja"]
    table = dream_table
    rules = {
        "model_type": Rule(lambda v: v == FAMILY, repr(FAMILY)),
        **dict.fromkeys(("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"), POSITIVE),
    }

    def load_tokenizer(self, folder: Path) -> Any:
        return byte_level_bpe(folder)

    def family_overrides(self, checkpoint: Checkpoint) -> list[str]:
        """The sampler options a config.json with its own generation settings changes from the preset's."""
        where = f"{checkpoint.origin} config.json"
        preset = sampler_options(GENERATION_DEFAULTS, where)
        own = sampler_options(generation(checkpoint.config), where)
        return [f"sampler.{key}={_value(value)}" for key, value in own.items() if value != preset[key]]

    def example(self, folder: Path) -> str:
        """Two layers 32 wide with grouped-query attention over a tiny byte-level BPE with a chat template and its
        own mask, in two shards."""
        write_example(folder)
        return str(folder)


def _value(value: Any) -> str:
    return "null" if value is None else str(value)


#: the example's byte-level vocabulary: a few symbols and merges, then the added tokens (Dream's special tokens)
EXAMPLE_SYMBOLS = ["h", "i", "Ġ", "t", "e", "r", "hi", "Ġt", "Ġth", "re", "Ġthe"]
EXAMPLE_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>", "<|mask|>"]
EXAMPLE_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_example(folder: Path) -> None:
    """A tiny checkpoint in Dream's layout with random weights and a byte-level BPE tokenizer in Dream's files: what
    ``ladd plugins check`` imports."""
    vocab = {symbol: index for index, symbol in enumerate(EXAMPLE_SYMBOLS)}
    added = {str(len(vocab) + i): {"content": token, "special": True, "normalized": False, "lstrip": False,
                                   "rstrip": False, "single_word": False} for i, token in enumerate(EXAMPLE_ADDED)}
    rows = len(vocab) + len(added) + 3  # a table larger than the tokenizer, as Dream-7B's
    shape = LLaDAShape(hidden=32, layers=2, heads=4, kv_heads=2, mlp_hidden=48, rows=rows,
                       mask_id=len(vocab) + EXAMPLE_ADDED.index("<|mask|>"), length=2048, rope_theta=1e6,
                       norm_eps=1e-6, qkv_bias=True, shift_logits=True)
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
        "model_type": FAMILY, "hidden_size": shape.hidden, "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads,
        "intermediate_size": shape.mlp_hidden, "vocab_size": rows, "mask_token_id": shape.mask_id,
        "max_position_embeddings": shape.length, "rope_theta": shape.rope_theta, "rms_norm_eps": shape.norm_eps,
        "tie_word_embeddings": False, "hidden_act": "silu", "use_sliding_window": False,
    }
    (folder / CONFIG).write_text(json.dumps(config))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    merges = ["#version: 0.2", "h i", "Ġ t", "Ġt h", "r e", "Ġth e"]
    (folder / "merges.txt").write_text("\n".join(merges) + "\n")
    settings = {"added_tokens_decoder": added, "bos_token": "<|beginoftext|>", "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>", "mask_token": "<|mask|>", "chat_template": EXAMPLE_TEMPLATE,
                "tokenizer_class": "DreamTokenizer", "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer",
                                                                                    None]}}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
