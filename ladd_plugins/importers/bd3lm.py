"""``ladd import bd3lm SRC OUT``: a BD3-LM checkpoint (kuleshov-group/bd3lm-owt-block_size{4,8,16}) as a ladd model.

BD3-LM's checkpoints hold MDLM's DiT in MDLM's layout (``mdlm_table``), trained with block-causal attention in blocks
of the config's ``block_size``, plus two scalar buffers, ``sampling_eps_min`` and ``sampling_eps_max``: the clipped
range of training times the authors' variance search settled on. ladd fills its ``dit`` with
``attention=block_causal`` from the tensors (only ``config.json`` and the safetensors tensors are read: nothing in
the source runs), and keeps the clipped range as ``objective.time_min`` and ``objective.time_max``. The block size,
the attention and the length are the checkpoint's, so ladd refuses an override of any of them; a config whose block
size does not tile its length is refused.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry.errors import LaddError
from registry.toolkit.checkpoints import POSITIVE, Rule, TensorHeader, read_tensor, tensor_headers

from .mdlm import (
    CONFIG,
    RULES,
    WEIGHTS,
    Checkpoint,
    MDLMImporter,
    check_weights,
    locate,
    model_overrides,
    read_checkpoint_config,
)
from .mdlm_table import MDLMShape, read_shape

PRESET = "owt/bd3lm_published"
#: what ladd reads of BD3-LM's config.json before its sizes are checked against each other
BD3LM_RULES = {**RULES, "model_type": Rule(lambda v: v == "bd3lm", "'bd3lm'"), "block_size": POSITIVE}
#: the clipped training times, held as scalar buffers outside MDLM's layout (and as config keys)
TIMES = ("sampling_eps_min", "sampling_eps_max")
#: BD3-LM's defaults when neither the weights nor the config give them
DEFAULT_TIMES = (1e-3, 1.0)


@dataclass(frozen=True)
class BlockCheckpoint(Checkpoint):
    """A BD3-LM checkpoint, checked: MDLM's, its block size and its clipped range of training times."""

    block: int
    times: tuple[float, float]


class BD3LMImporter(MDLMImporter):
    """BD3-LM's published DiT checkpoints as ladd's block-causal ``dit``."""

    def read(self, source: str) -> BlockCheckpoint:
        folder, origin = locate(source, "BD3-LM")
        config = read_checkpoint_config(folder, BD3LM_RULES, "BD3-LM")
        shape, block = read_blocks(config, str(folder / CONFIG))
        weights = folder / WEIGHTS
        headers = tensor_headers(weights)
        times = training_times(weights, headers, config)
        check_weights({name: header for name, header in headers.items() if name not in TIMES}, shape, weights)
        return BlockCheckpoint(weights, origin, shape, block, times)

    def overrides(self, checkpoint: Checkpoint) -> list[str]:
        assert isinstance(checkpoint, BlockCheckpoint)
        low, high = checkpoint.times
        return [
            *[f"experiment={PRESET}" if o.startswith("experiment=") else o for o in model_overrides(checkpoint.shape)],
            "backbone.attention=block_causal", f"backbone.block_size={checkpoint.block}",
            f"objective.time_min={low}", f"objective.time_max={high}",
        ]

    def example(self, folder: Path) -> str:
        """MDLM's example as a BD3-LM of blocks of 4 (its clipped times the config's defaults), for ``ladd plugins
        check``."""
        source = super().example(folder)
        config = json.loads((folder / CONFIG).read_text())
        (folder / CONFIG).write_text(json.dumps({**config, "model_type": "bd3lm", "block_size": 4, "cross_attn": True}))
        return source


def read_blocks(config: Mapping[str, Any], where: str) -> tuple[MDLMShape, int]:
    """The sizes and the block size of a BD3-LM ``config.json``, refusing what ladd's block-causal DiT cannot be."""
    shape, block = read_shape(config, where), config["block_size"]
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


def training_times(
    weights: Path, headers: Mapping[str, TensorHeader], config: Mapping[str, Any]
) -> tuple[float, float]:
    """The clipped range of training times: the weights' buffers, else the config's keys, else BD3-LM's defaults.
    The config's keys, where given, must be a range too (the buffers hold the range its training moved them to)."""
    stated = tuple(config.get(name, default) for name, default in zip(TIMES, DEFAULT_TIMES, strict=True))
    _check_range(stated, weights.parent / CONFIG)
    held = [name for name in TIMES if name in headers]
    if not held:
        return float(stated[0]), float(stated[1])
    if len(held) < len(TIMES) or any(math.prod(headers[name].shape) != 1 for name in TIMES):
        raise LaddError(f"{weights}: {' and '.join(TIMES)} must both be scalars when either is there")
    times = tuple(float(read_tensor(weights, name)) for name in TIMES)
    _check_range(times, weights)
    return times[0], times[1]


def _check_range(times: tuple[Any, ...], where: Path) -> None:
    """Refuse clipped training times that are not numbers ``0 <= low <= high <= 1``, naming the file they are in."""
    low, high = times
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in times)
    if not numbers or not 0 <= low <= high <= 1:
        raise LaddError(
            f"{where}: the clipped training times {TIMES[0]}={low!r}, {TIMES[1]}={high!r} are not a range within "
            "[0, 1]"
        )
