"""A lower bound on one training step's memory, checked before training: an impossible size is refused, not killed."""
from __future__ import annotations

from pathlib import Path

import torch

from registry.errors import InvalidConfigError
from registry.interfaces import Backbone, TransformerShape

GIB = 2**30
#: float32 weights, gradients and AdamW's two moments
_STATE_BYTES_PER_PARAMETER = 16
#: values a transformer block keeps per position for backward: about 10 widths plus 2 MLP widths
_BLOCK_WIDTHS, _MLP_WIDTHS = 10, 2


def training_bytes(model: torch.nn.Module, batch: int, value_bytes: int) -> int:
    """At least what one step of ``batch`` sequences needs: optimizer state plus the transformer backbones'
    activations."""
    state = _STATE_BYTES_PER_PARAMETER * sum(p.numel() for p in model.parameters())
    activations = 0
    for shape in transformer_shapes(model):
        widths = _BLOCK_WIDTHS + _MLP_WIDTHS * shape.mlp_ratio
        activations += int(batch * shape.length * shape.width * shape.layers * widths * value_bytes)
    return state + activations


def transformer_shapes(model: torch.nn.Module) -> list[TransformerShape]:
    """The shapes of the transformer backbones in ``model`` (those that report one)."""
    found = (module.transformer_shape() for module in model.modules() if isinstance(module, Backbone))
    return [shape for shape in found if shape is not None]


def available_bytes(device: torch.device) -> int | None:
    """Free memory of ``device`` (a GPU's free memory; on the host the smaller of MemAvailable and a cgroup limit)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    limits = [_meminfo_available(), _cgroup_headroom()]
    found = [limit for limit in limits if limit is not None]
    return min(found) if found else None


def check_fits(model: torch.nn.Module, batch: int, value_bytes: int, device: torch.device, batch_key: str) -> None:
    """Refuse a training step whose lower-bound memory exceeds what ``device`` has free."""
    needed, free = training_bytes(model, batch, value_bytes), available_bytes(device)
    if free is not None and needed > free:
        length = max((shape.length for shape in transformer_shapes(model)), default="?")
        raise InvalidConfigError(
            f"{batch_key} ({batch} sequences per process) at length {length} needs at least {needed / GIB:.1f} GiB "
            f"for one training step (an estimate from the backbones' sizes: optimizer state and activations), but "
            f"{device.type} has {free / GIB:.1f} GiB free; reduce {batch_key} or the sequence length"
        )


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _cgroup_headroom() -> int | None:
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else int(limit) - used
