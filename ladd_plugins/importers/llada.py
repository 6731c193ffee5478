"""``ladd import llada SRC OUT``: a LLaDA checkpoint (GSAI-ML/LLaDA-8B-Base, -Instruct) as a ladd model folder.

SRC is a folder in the published layout (``config.json``, bf16 safetensors shards with their index, the tokenizer's
files), or a hub id where the hub is reachable. Only the JSON config, the safetensors tensors and the tokenizer's
data are read: nothing in the source runs. Every check (the config, every tensor's name and shape against it, the
tokenizer) passes before anything is built; the network's table is then checked against the tokenizer as ladd
builds the model. The model folder carries the tokenizer (``tokenizer/``, named ``model:tokenizer`` in its config)
and records each shard's SHA-256; its weights are float32 (an 8B network: 32 GB).
"""
from __future__ import annotations

import json
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from registry.errors import LaddError
from registry.interfaces import Importer
from registry.toolkit.checkpoints import POSITIVE, Rule, read_config

from .. import hub
from .llada_table import LLaDAShape, backbone_options, check_layout, copies, read_shape, source_shapes
from .shards import INDEX, Shards, checkpoint_folder

CONFIG = "config.json"
PRESET = "llada/llada_8b"
TOKENIZER = "tokenizer"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
#: what a hub download fetches: the config, the weights and the tokenizer's data, never Python files
PATTERNS = [CONFIG, INDEX, "*.safetensors", "tokenizer*", "special_tokens_map.json", "*.jinja"]
#: what ladd reads of LLaDA's config.json before its sizes are checked against each other (read_shape)
RULES = {
    "model_type": Rule(lambda v: v == "llada", "'llada'"),
    **dict.fromkeys(("d_model", "n_layers", "n_heads", "mlp_hidden_size"), POSITIVE),
}


def read_checkpoint_shape(folder: Path) -> LLaDAShape:
    """The sizes in the folder's ``config.json``."""
    if not (folder / CONFIG).is_file():
        raise LaddError(f"{folder} is not a LLaDA checkpoint: it has no {CONFIG}")
    config = read_config(folder / CONFIG, "a LLaDA checkpoint's config", RULES, "give the folder of a LLaDA checkpoint")
    return read_shape(config, str(folder / CONFIG))


def save_tokenizer(folder: Path, out: Path) -> list[Path]:
    """The checkpoint's tokenizer, loaded without its code and saved to ``out``; the files written."""
    from transformers import AutoTokenizer
    from transformers.utils import logging

    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise LaddError(f"{folder} holds no tokenizer ({', '.join(TOKENIZER_FILES)}); a LLaDA checkpoint ships its own")
    level = logging.get_verbosity()
    logging.set_verbosity_error()  # transformers notes that the folder's config.json is no tokenizer's
    try:  # damaged files come back as one line naming the cause
        tokenizer = hub.from_pretrained(AutoTokenizer, "LLaDA tokenizer", str(folder), "SRC (a folder with it)")
    finally:
        logging.set_verbosity(level)
    return [Path(name) for name in tokenizer.save_pretrained(out) if Path(name).is_file()]


def fill(backbone: nn.Module, shape: LLaDAShape, shards: Shards) -> None:
    """Every parameter of ladd's ``llada`` from the checkpoint, by the table; a network it does not cover is refused."""
    plan = copies(shape)
    params = dict(backbone.named_parameters())
    uncovered = sorted(set(params) ^ set(plan))
    if uncovered:
        where = "is not in the table" if uncovered[0] in params else "is not in this network"
        raise LaddError(f"backbone.{uncovered[0]} {where}: the import fills ladd's llada as LLaDA's network")
    for name, param in params.items():
        param.copy_(shards.tensor(plan[name]))


def model_overrides(shape: LLaDAShape) -> list[str]:
    """The config of the imported model: LLaDA-8B's preset with the checkpoint's sizes and the carried tokenizer."""
    values = {key: "null" if value is None else str(value).lower() if isinstance(value, bool) else value
              for key, value in backbone_options(shape).items()}
    backbone = [f"backbone.{key}={value}" for key, value in values.items()]
    return [f"experiment={PRESET}", f"dataset.tokenizer=model:{TOKENIZER}", *backbone]


@dataclass
class Checkpoint:
    """A LLaDA checkpoint, checked: what names it, its sizes, its weights, and its tokenizer saved aside."""

    origin: dict[str, str]
    shape: LLaDAShape
    shards: Shards
    tokenizer: list[Path]
    scratch: Path = field(repr=False)  # holds the saved tokenizer; removed with the checkpoint


class LLaDAImporter(Importer):
    """LLaDA-8B's published checkpoints as ladd's ``llada``, with their tokenizer."""

    def read(self, source: str) -> Checkpoint:
        folder, origin = checkpoint_folder(source, "LLaDA", PATTERNS)
        shape = read_checkpoint_shape(folder)
        shards = Shards(folder)
        check_layout(shards.shapes(), shape, str(folder))
        scratch = Path(tempfile.mkdtemp(prefix="ladd-llada-tokenizer-"))
        try:
            tokenizer = save_tokenizer(folder, scratch / TOKENIZER)
        except BaseException:
            shutil.rmtree(scratch, True)
            raise
        checkpoint = Checkpoint(origin, shape, shards, tokenizer, scratch)
        weakref.finalize(checkpoint, shutil.rmtree, scratch, True)  # quietly, when the checkpoint is let go
        return checkpoint

    def overrides(self, checkpoint: Checkpoint) -> list[str]:
        return model_overrides(checkpoint.shape)

    def carried(self, checkpoint: Checkpoint) -> dict[str, Path]:
        return {f"{TOKENIZER}/{path.name}": path for path in checkpoint.tokenizer}

    def fill(self, model: nn.Module, checkpoint: Checkpoint) -> None:
        length = getattr(model, "seq_len", 0)
        if length > checkpoint.shape.length:
            raise LaddError(
                f"dataset.seq_len={length} is longer than the {checkpoint.shape.length} positions the network was "
                f"trained on (max_sequence_length); choose at most {checkpoint.shape.length}"
            )
        fill(model.get_submodule("backbone"), checkpoint.shape, checkpoint.shards)

    def record(self, checkpoint: Checkpoint) -> dict[str, str]:
        return checkpoint.origin

    def files(self, checkpoint: Checkpoint) -> list[Path]:
        return checkpoint.shards.paths()

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

