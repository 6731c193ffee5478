"""``ladd import mdlm SRC OUT``: an MDLM checkpoint in the published layout as an ordinary ladd model folder.

SRC is a folder holding MDLM's ``config.json`` and ``model.safetensors`` (kuleshov-group/mdlm-owt's layout),
or a Hugging Face hub id where the hub is reachable. Only the JSON config and the safetensors tensors are
read: nothing in the source runs. Every check (config, tensor names, shapes and dtypes, the rotary
frequencies) passes before anything is built. ladd then builds its ``dit`` as MDLM's network, this importer fills
it, and ladd checks and writes the model folder, recording where the weights came from and the file's SHA-256.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from registry.errors import LaddError
from registry.interfaces import Importer
from registry.toolkit.checkpoints import POSITIVE, Rule, TensorHeader, read_config, read_tensor, tensor_headers
from registry.toolkit.layers import TimestepEmbedder

from .. import hub
from .mdlm_table import (
    CONDITION,
    PREFIX,
    REQUIRED,
    ROTARY_BUFFER,
    SIGMA_MAP,
    MDLMShape,
    backbone_options,
    check_layout,
    copies,
    read_shape,
    source_shapes,
)

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
PRESET = "owt/mdlm_published"
#: a hub id as the hub spells them: owner/name
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def locate(source: str) -> tuple[Path, dict[str, str]]:
    """The folder holding the checkpoint and what names it: the folder as given, or the hub id and its revision."""
    path = Path(source)
    if path.is_dir():
        return path, {"folder": path.name or str(path)}
    if path.exists() or not _HUB_ID.fullmatch(source):
        raise LaddError(
            f"{source!r} is neither a folder holding an MDLM checkpoint nor a Hugging Face hub id (owner/name)"
        )
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(source, allow_patterns=[CONFIG, WEIGHTS], local_files_only=hub.offline()))
    except Exception as error:  # the hub client's errors (offline, not found, HTTP) have no common base but Exception
        fix = "SRC (a local folder with config.json and model.safetensors)"
        raise hub.unavailable("MDLM checkpoint", source, error, fix) from None
    return folder, {"hub": source, "revision": folder.name}


#: what ladd reads of MDLM's config.json before its sizes are checked against each other
RULES = {"model_type": Rule(lambda v: v == "mdlm", "'mdlm'"), **dict.fromkeys(REQUIRED, POSITIVE)}
#: the dtype of MDLM's published weights (safetensors' name), the only one imported
DTYPE = "F32"


def read_checkpoint_shape(folder: Path) -> MDLMShape:
    """The sizes in the folder's ``config.json``, after checking both files are there."""
    for name in (CONFIG, WEIGHTS):
        if not (folder / name).is_file():
            raise LaddError(f"{folder} is not an MDLM checkpoint: it has no {name} (expected {CONFIG} and {WEIGHTS})")
    fix = "give the folder of an MDLM checkpoint"
    return read_shape(read_config(folder / CONFIG, "an MDLM checkpoint's config", RULES, fix), str(folder / CONFIG))


def check_weights(headers: dict[str, TensorHeader], shape: MDLMShape, path: Path) -> None:
    """Dtypes, names and shapes against the table, and MDLM's rotary frequencies when the file holds them."""
    converted = sorted(name for name, header in headers.items() if header.dtype != DTYPE)
    if converted:
        dtype = headers[converted[0]].dtype
        raise LaddError(
            f"{path} holds {dtype} tensors ({converted[0]} and {len(converted) - 1} more), but MDLM's checkpoint is "
            f"float32 ({DTYPE}): this is a converted copy, which has lost precision; import the float32 original"
        )
    check_layout({name: header.shape for name, header in headers.items()}, shape, str(path))
    if PREFIX + ROTARY_BUFFER in headers:
        held = read_tensor(path, PREFIX + ROTARY_BUFFER).double()
        expected = 1.0 / 10_000 ** (torch.arange(0, shape.head_dim, 2, dtype=torch.float64) / shape.head_dim)
        if not torch.allclose(held, expected, rtol=1e-6, atol=0.0):
            raise LaddError(
                f"{path}: {PREFIX + ROTARY_BUFFER} is not RoPE with base 10000, which MDLM's DiT and ladd's use"
            )


def untimed_condition(path: Path, shape: MDLMShape) -> torch.Tensor:
    """MDLM's conditioning of an untimed checkpoint: its sigma map at sigma = 0, which ladd holds as a constant."""
    embedder = TimestepEmbedder(shape.cond, scale=1.0)
    state = {key: read_tensor(path, PREFIX + name) for key, name in zip(embedder.state_dict(), SIGMA_MAP, strict=True)}
    embedder.load_state_dict(state)
    with torch.no_grad():
        return embedder(torch.zeros(1))[0]


def fill(backbone: nn.Module, shape: MDLMShape, path: Path) -> None:
    """Every parameter of ladd's ``dit`` from the checkpoint, by the table; a network it does not cover is refused."""
    plan = {copy.target: copy for copy in copies(shape)}
    targets = set(plan) | (set() if shape.time_conditioning else {CONDITION})
    params = dict(backbone.named_parameters())
    uncovered = sorted(set(params) ^ targets)
    if uncovered:
        where = "is not in the table" if uncovered[0] in params else "is not in this network"
        raise LaddError(f"backbone.{uncovered[0]} {where}: the import fills ladd's dit as MDLM's DiT")
    for name, param in params.items():
        if name == CONDITION:
            value = untimed_condition(path, shape)
        else:
            copy = plan[name]
            value = read_tensor(path, PREFIX + copy.source, copy.rows)
        if tuple(value.shape) != tuple(param.shape):
            raise LaddError(
                f"{path}: {name} would take shape {list(value.shape)} into {list(param.shape)}; "
                f"the table and the network disagree"
            )
        param.copy_(value)


def model_overrides(shape: MDLMShape) -> list[str]:
    """The config of the imported model: the preset of the published setting with the checkpoint's sizes."""
    options = backbone_options(shape)
    values = {key: str(value).lower() if isinstance(value, bool) else value for key, value in options.items()}
    backbone = [f"backbone.{key}={value}" for key, value in values.items()]
    return [f"experiment={PRESET}", f"dataset.seq_len={shape.length}", *backbone]


def write_checkpoint(folder: Path, shape: MDLMShape, seed: int = 0) -> int:
    """A checkpoint in MDLM's published layout with random weights; its number of parameters (the rotary buffer
    aside)."""
    generator = torch.Generator().manual_seed(seed)
    tensors = {
        PREFIX + name: 0.02 * torch.randn(size, generator=generator) for name, size in source_shapes(shape).items()
    }
    parameters = sum(t.numel() for t in tensors.values())
    tensors[PREFIX + ROTARY_BUFFER] = 1.0 / 10_000 ** (torch.arange(0, shape.head_dim, 2).float() / shape.head_dim)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / WEIGHTS))
    config = {
        "model_type": "mdlm", "hidden_dim": shape.hidden, "cond_dim": shape.cond, "n_blocks": shape.blocks,
        "n_heads": shape.heads, "vocab_size": shape.vocab, "model_length": shape.length, "dropout": shape.dropout,
        "time_conditioning": shape.time_conditioning,
    }
    (folder / CONFIG).write_text(json.dumps(config))
    return parameters


@dataclass(frozen=True)
class Checkpoint:
    """An MDLM checkpoint, checked: where it lies, what names it, its sizes."""

    weights: Path
    origin: dict[str, str]
    shape: MDLMShape


class MDLMImporter(Importer):
    """MDLM's published DiT checkpoints (``kuleshov-group/mdlm-owt``) as ladd's ``dit``."""

    def read(self, source: str) -> Checkpoint:
        folder, origin = locate(source)
        shape = read_checkpoint_shape(folder)
        check_weights(tensor_headers(folder / WEIGHTS), shape, folder / WEIGHTS)
        return Checkpoint(folder / WEIGHTS, origin, shape)

    def overrides(self, checkpoint: Checkpoint) -> list[str]:
        return model_overrides(checkpoint.shape)

    def fill(self, model: nn.Module, checkpoint: Checkpoint) -> None:
        fill(model.get_submodule("backbone"), checkpoint.shape, checkpoint.weights)

    def record(self, checkpoint: Checkpoint) -> dict[str, str]:
        return checkpoint.origin

    def files(self, checkpoint: Checkpoint) -> list[Path]:
        return [checkpoint.weights]

    def example(self, folder: Path) -> str:
        """A two-block checkpoint of GPT-2's vocabulary, 32 wide, for ``ladd plugins check``."""
        write_checkpoint(folder, MDLMShape(hidden=32, cond=16, blocks=2, heads=4, vocab=50258, length=16,
                                           time_conditioning=False))
        return str(folder)
