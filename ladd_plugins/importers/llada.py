"""``ladd import llada SRC OUT``: a LLaDA checkpoint (GSAI-ML/LLaDA-8B-Base, -Instruct) as a ladd model folder.

SRC is a folder in the published layout (``config.json``, bf16 safetensors shards with their index, the tokenizer's
files), or a hub id where the hub is reachable. Only the JSON config, the safetensors tensors and the tokenizer's
data are read: nothing in the source runs. Every check (the config, every tensor's name and shape against it,
finite values, the tokenizer against the network's table) passes before anything is written. The model folder
carries the tokenizer (``tokenizer/``, named ``model:tokenizer`` in its config) and records where the weights came
from with each file's SHA-256; its weights are float32 (an 8B network: 32 GB).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from torch import nn

from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.export import write_model
from registry.errors import LaddError, first_line
from registry.host.model_folders import reading
from registry.host.registry import Registry
from registry.storage.records import read_json

from .. import hub
from .llada_table import LLaDAShape, backbone_options, check_layout, copies, read_shape
from .shards import INDEX, Shards, checkpoint_folder

CONFIG = "config.json"
PRESET = "llada/llada_8b"
TOKENIZER = "tokenizer"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
BACKBONE = "backbone."
#: what a hub download fetches: the config, the weights and the tokenizer's data, never Python files
PATTERNS = [CONFIG, INDEX, "*.safetensors", "tokenizer*", "special_tokens_map.json", "*.jinja"]


def read_checkpoint_shape(folder: Path) -> LLaDAShape:
    """The sizes in the folder's ``config.json``."""
    if not (folder / CONFIG).is_file():
        raise LaddError(f"{folder} is not a LLaDA checkpoint: it has no {CONFIG}")
    return read_shape(read_json(folder / CONFIG, "a LLaDA config", "give the folder of a LLaDA checkpoint"),
                      str(folder / CONFIG))


def save_tokenizer(folder: Path, out: Path) -> list[Path]:
    """The checkpoint's tokenizer, loaded without its code and saved to ``out``; the files written."""
    from transformers import AutoTokenizer
    from transformers.utils import logging

    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise LaddError(f"{folder} holds no tokenizer ({', '.join(TOKENIZER_FILES)}); a LLaDA checkpoint ships its own")
    level = logging.get_verbosity()
    logging.set_verbosity_error()  # transformers notes that the folder's config.json is no tokenizer's
    try:
        tokenizer = hub.from_pretrained(AutoTokenizer, "LLaDA tokenizer", str(folder), "SRC (a folder with it)")
    except (ValueError, KeyError, TypeError) as error:  # tokenizer files transformers cannot read
        raise LaddError(f"cannot load the tokenizer of {folder}: {first_line(error)}; its files are damaged") from None
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
        raise LaddError(
            f"backbone.{uncovered[0]} {where}: the import fills ladd's llada as LLaDA's network; keep the overrides "
            f"to settings other than the network"
        )
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(shards.tensor(plan[name]))


def model_overrides(shape: LLaDAShape) -> list[str]:
    """The config of the imported model: LLaDA-8B's preset with the checkpoint's sizes and the carried tokenizer."""
    values = {key: "null" if value is None else str(value).lower() if isinstance(value, bool) else value
              for key, value in backbone_options(shape).items()}
    backbone = [f"backbone.{key}={value}" for key, value in values.items()]
    return [f"experiment={PRESET}", f"dataset.tokenizer=model:{TOKENIZER}", *backbone]


def import_llada(source: str, out_dir: Path, overrides: list[str], registry: Registry, overwrite: bool = False) -> Path:
    """``ladd import llada``: check the checkpoint whole, fill ladd's ``llada`` from it, write the model folder."""
    folder, origin = checkpoint_folder(source, "LLaDA", PATTERNS)
    shape = read_checkpoint_shape(folder)
    shards = Shards(folder)
    check_layout(shards.shapes(), shape, str(folder))
    settings = compose([*model_overrides(shape), *overrides], registry)
    with tempfile.TemporaryDirectory() as staging:
        tokenizer = save_tokenizer(folder, Path(staging) / TOKENIZER)
        with reading(staging):  # the folder as it will be: its tokenizer under tokenizer/
            experiment = build_experiment(settings, registry)
        if experiment.dataset.seq_len > shape.length:
            raise LaddError(
                f"dataset.seq_len={experiment.dataset.seq_len} is longer than the {shape.length} positions the "
                f"network was trained on (max_sequence_length); choose at most {shape.length}"
            )
        others = sorted(name for name in experiment.model.state_dict() if not name.startswith(BACKBONE))
        if others:
            raise LaddError(
                f"{others[0]} is outside the token denoiser a LLaDA checkpoint fills: import without a latent "
                f"channel, then warm-start LADD from the imported folder (train.init_from)"
            )
        fill(experiment.model.backbone, shape, shards)
        record = {"importer": "llada", **origin, **shards.record()}
        carried = {f"{TOKENIZER}/{path.name}": path for path in tokenizer}
        return write_model(out_dir, experiment.model, settings, experiment.origins(), overwrite, record, carried)
