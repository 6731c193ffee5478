"""``ladd import mdlm SRC OUT``: an MDLM checkpoint in the published layout as an ordinary ladd model folder.

SRC is a folder holding MDLM's ``config.json`` and ``model.safetensors`` (kuleshov-group/mdlm-owt's layout),
or a Hugging Face hub id where the hub is reachable. Only the JSON config and the safetensors tensors are
read: nothing in the source runs. Every check (config, tensor names and shapes, finite values, the rotary
frequencies) passes before anything is written. The model folder records where the weights came from and
the SHA-256 of their file.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from registry.config.composition import compose
from registry.config.settings import Settings
from registry.engine.assembly import build_experiment
from registry.engine.export import write_model
from registry.errors import LaddError, first_line
from registry.host.registry import Registry
from registry.storage.records import read_json
from registry.storage.weights import file_sha256
from registry.toolkit.layers import TimestepEmbedder

from .. import hub
from .mdlm_table import (
    CONDITION,
    PREFIX,
    ROTARY_BUFFER,
    SIGMA_MAP,
    MDLMShape,
    backbone_options,
    check_layout,
    copies,
    read_shape,
)

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
PRESET = "owt/mdlm_published"
#: a hub id as the hub spells them: owner/name
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def locate(source: str, what: str = "MDLM") -> tuple[Path, dict[str, str]]:
    """The folder holding the checkpoint (of library ``what``) and what names it: the folder as given, or the hub id
    and its revision."""
    path = Path(source)
    if path.is_dir():
        return path, {"folder": path.name or str(path)}
    if path.exists() or not _HUB_ID.fullmatch(source):
        raise LaddError(
            f"{source!r} is neither a folder holding an {what} checkpoint nor a Hugging Face hub id (owner/name)"
        )
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(source, allow_patterns=[CONFIG, WEIGHTS], local_files_only=hub.offline()))
    except Exception as error:  # the hub client's errors (offline, not found, HTTP) have no common base but Exception
        fix = "SRC (a local folder with config.json and model.safetensors)"
        raise hub.unavailable(f"{what} checkpoint", source, error, fix) from None
    return folder, {"hub": source, "revision": folder.name}


def read_checkpoint_config(folder: Path, what: str = "MDLM") -> Any:
    """The folder's ``config.json`` (parsed), after checking both files of an ``what`` checkpoint are there."""
    for name in (CONFIG, WEIGHTS):
        if not (folder / name).is_file():
            raise LaddError(f"{folder} is not an {what} checkpoint: it has no {name} (expected {CONFIG} and {WEIGHTS})")
    return read_json(folder / CONFIG, f"an {what} config", f"give the folder of an {what} checkpoint")


def read_checkpoint_shape(folder: Path) -> MDLMShape:
    """The sizes in the folder's ``config.json``, after checking both files are there."""
    return read_shape(read_checkpoint_config(folder), str(folder / CONFIG))


@contextmanager
def opened_weights(path: Path) -> Iterator[Any]:
    """The safetensors file open for reading tensors lazily; a damaged or truncated one is refused in one line."""
    try:
        with safe_open(str(path), "pt") as opened:
            yield opened
    except (SafetensorError, OSError) as error:
        why = first_line(error)
        raise LaddError(f"cannot read {path}: {why}; it is truncated, damaged or not safetensors") from None


def check_weights(
    opened: Any, shape: MDLMShape, path: Path, others: Mapping[str, tuple[int, ...]] | None = None
) -> None:
    """Names and shapes against the table (and the tensors ``others`` a library adds), and MDLM's rotary frequencies
    when the file holds them."""
    found = {name: tuple(opened.get_slice(name).get_shape()) for name in opened.keys()}
    check_layout(found, shape, str(path), others)
    if PREFIX + ROTARY_BUFFER in found:
        held = opened.get_tensor(PREFIX + ROTARY_BUFFER).double()
        expected = 1.0 / 10_000 ** (torch.arange(0, shape.head_dim, 2, dtype=torch.float64) / shape.head_dim)
        if not torch.allclose(held, expected, rtol=1e-6, atol=0.0):
            raise LaddError(
                f"{path}: {PREFIX + ROTARY_BUFFER} is not RoPE with base 10000, which MDLM's DiT and ladd's use"
            )


def _read(path: Path, name: str, rows: tuple[int, int] | None) -> torch.Tensor:
    # the file is mapped for one tensor at a time: pages read through a mapping count as the process's memory
    with opened_weights(path) as opened:
        tensor = opened.get_tensor(name) if rows is None else opened.get_slice(name)[rows[0] : rows[1]]
    if not tensor.is_floating_point():
        raise LaddError(f"{path}: {name} holds {tensor.dtype} values; an MDLM checkpoint holds floating-point weights")
    if not bool(torch.isfinite(tensor).all()):
        raise LaddError(f"{path}: {name} holds NaN or infinite values; the file is damaged")
    return tensor


def untimed_condition(path: Path, shape: MDLMShape) -> torch.Tensor:
    """MDLM's conditioning of an untimed checkpoint: its sigma map at sigma = 0, which ladd holds as a constant."""
    embedder = TimestepEmbedder(shape.cond, scale=1.0)
    state = {key: _read(path, PREFIX + name, None) for key, name in zip(embedder.state_dict(), SIGMA_MAP, strict=True)}
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
        raise LaddError(
            f"backbone.{uncovered[0]} {where}: the import fills ladd's dit as MDLM's DiT; keep the overrides to "
            f"settings other than the network"
        )
    with torch.no_grad():
        for name, param in params.items():
            if name == CONDITION:
                value = untimed_condition(path, shape)
            else:
                copy = plan[name]
                value = _read(path, PREFIX + copy.source, copy.rows)
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


def import_mdlm(source: str, out_dir: Path, overrides: list[str], registry: Registry, overwrite: bool = False) -> Path:
    """``ladd import mdlm``: check the checkpoint whole, fill ladd's ``dit`` from it, write the model folder."""
    folder, origin = locate(source)
    shape = read_checkpoint_shape(folder)
    settings = compose([*model_overrides(shape), *overrides], registry)
    return write_filled(settings, registry, folder, shape, {"importer": "mdlm", **origin}, out_dir, overwrite)


def write_filled(
    settings: Settings, registry: Registry, folder: Path, shape: MDLMShape, record: dict[str, str], out_dir: Path,
    overwrite: bool, others: Mapping[str, tuple[int, ...]] | None = None,
) -> Path:
    """The model of ``settings`` with ladd's ``dit`` filled from the checkpoint of MDLM's layout in ``folder`` (checked
    whole first; ``others``: tensors a library adds to the layout), written as a model folder recording where its
    weights came from."""
    weights = folder / WEIGHTS
    with opened_weights(weights) as opened:
        check_weights(opened, shape, weights, others)
    experiment = build_experiment(settings, registry)
    outside = sorted(name for name in experiment.model.state_dict() if not name.startswith(PREFIX))
    if outside:
        raise LaddError(
            f"{outside[0]} is outside the token denoiser an MDLM-layout checkpoint fills: import without a latent "
            "channel"
        )
    fill(experiment.model.backbone, shape, weights)
    record = {**record, "file": WEIGHTS, "sha256": file_sha256(weights)}
    return write_model(out_dir, experiment.model, settings, experiment.origins(), overwrite, source=record)
