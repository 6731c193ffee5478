"""``ladd import bd3lm SRC OUT``: a BD3-LM checkpoint (kuleshov-group/bd3lm-owt-block_size{4,8,16}) as a ladd model.

BD3-LM's checkpoints hold MDLM's DiT in MDLM's layout (``mdlm_table``), trained with block-causal attention in blocks
of the config's ``block_size``, plus two scalar buffers, ``sampling_eps_min`` and ``sampling_eps_max``: the clipped
range of training times the authors' variance search settled on. ladd fills its ``dit`` with
``attention=block_causal`` from the tensors (only ``config.json`` and the safetensors tensors are read: nothing in
the source runs), and keeps the clipped range as ``objective.time_min`` and ``objective.time_max``. The block size
and the length are the checkpoint's: an override of either is refused, as is a config whose block size does not tile
its length.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from registry.config.composition import compose
from registry.config.settings import Settings
from registry.errors import LaddError
from registry.host.registry import Registry

from .mdlm import CONFIG, WEIGHTS, locate, model_overrides, opened_weights, read_checkpoint_config, write_filled
from .mdlm_table import MDLMShape, read_shape

PRESET = "owt/bd3lm_published"
#: the clipped training times, held as scalar buffers outside MDLM's layout (and as config keys)
TIMES = ("sampling_eps_min", "sampling_eps_max")
#: BD3-LM's defaults when neither the weights nor the config give them
DEFAULT_TIMES = (1e-3, 1.0)


def import_bd3lm(source: str, out_dir: Path, overrides: list[str], registry: Registry, overwrite: bool = False) -> Path:
    """``ladd import bd3lm``: check the checkpoint whole, fill ladd's block-causal ``dit`` from it, write the folder."""
    folder, origin = locate(source, "BD3-LM")
    config = read_checkpoint_config(folder, "BD3-LM")
    shape, block = read_blocks(config, str(folder / CONFIG))
    times = training_times(folder / WEIGHTS, config)
    own = [
        *[f"experiment={PRESET}" if o.startswith("experiment=") else o for o in model_overrides(shape)],
        f"backbone.block_size={block}", f"objective.time_min={times[0]}", f"objective.time_max={times[1]}",
    ]
    settings = compose([*own, *overrides], registry)
    check_kept(settings, shape, block)
    others = dict.fromkeys(TIMES, ())
    return write_filled(settings, registry, folder, shape, {"importer": "bd3lm", **origin}, out_dir, overwrite, others)


def read_blocks(config: Any, where: str) -> tuple[MDLMShape, int]:
    """The sizes and the block size of a BD3-LM ``config.json``, refusing what ladd's block-causal DiT cannot be."""
    shape = read_shape(config, where, "bd3lm")
    block = config.get("block_size")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise LaddError(f"{where}: block_size is {block!r}; a BD3-LM config gives it as a whole number >= 1")
    if shape.length % block:
        raise LaddError(
            f"{where}: block_size {block} does not divide model_length {shape.length}, so its blocks would not tile "
            f"the sequence the network was trained on; the config does not belong to these weights"
        )
    if config.get("cross_attn", True) is not True:
        raise LaddError(
            f"{where}: cross_attn is {config.get('cross_attn')!r}; ladd imports BD3-LMs trained on the view of noisy "
            "blocks given the clean ones (cross_attn true)"
        )
    if shape.time_conditioning:
        raise LaddError(
            f"{where}: time_conditioning is true, but block-causal training gives every block its own time, which "
            "a time embedding per sequence cannot take; ladd imports the published, untimed BD3-LMs"
        )
    return shape, block


def training_times(weights: Path, config: Mapping[str, Any]) -> tuple[float, float]:
    """The clipped range of training times: the weights' buffers, else the config's keys, else BD3-LM's defaults."""
    with opened_weights(weights) as opened:
        held = {name: opened.get_tensor(name) for name in TIMES if name in opened.keys()}
    if held:
        missing = [name for name in TIMES if name not in held]
        if missing or any(value.numel() != 1 for value in held.values()):
            raise LaddError(f"{weights}: {' and '.join(TIMES)} must both be scalars when either is there")
        low, high = (float(held[name]) for name in TIMES)
    else:
        low, high = (config.get(name, default) for name, default in zip(TIMES, DEFAULT_TIMES, strict=True))
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (low, high)) or \
            not 0 <= low <= high <= 1:
        raise LaddError(
            f"{weights.parent}: the clipped training times {TIMES[0]}={low!r}, {TIMES[1]}={high!r} are not a range "
            "within [0, 1]"
        )
    return float(low), float(high)


def check_kept(settings: Settings, shape: MDLMShape, block: int) -> None:
    """Refuse overrides that change what the weights were trained as: the block size, the attention, the length."""
    backbone, dataset = settings.selection("backbone") or {}, settings.selection("dataset") or {}
    held = {
        "backbone.attention": (backbone.get("attention"), "block_causal"),
        "backbone.block_size": (backbone.get("block_size"), block),
        "dataset.seq_len": (dataset.get("seq_len"), shape.length),
    }
    for key, (value, checkpoint) in held.items():
        if value != checkpoint:
            raise LaddError(
                f"{key}={value} disagrees with the BD3-LM checkpoint, whose network was trained with {checkpoint} "
                f"(block_size {block}, model_length {shape.length} in its config.json); leave {key} out"
            )
