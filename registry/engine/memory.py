"""An estimate of one training step's memory, checked before training: an impossible size is refused, not killed.

It counts what trains (weights, gradients, AdamW's two moments, the EMA) apart from frozen weights (a base under
LoRA or ``train.freeze``, in ``train.frozen_dtype``), the transformer backbones' activations (a block's input per
block and one block recomputed under activation checkpointing), and under sharding the state split over the
processes plus the largest block gathered whole. It leaves out the output head's logits, allocator slack and
what torch's kernels borrow.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from registry.errors import InvalidConfigError
from registry.interfaces import Backbone, TransformerShape

GIB = 2**30
#: AdamW's two moments per trained value
_MOMENTS = 2
#: values a transformer block keeps per position for backward: about 10 widths plus 2 MLP widths
_BLOCK_WIDTHS, _MLP_WIDTHS = 10, 2


@dataclass(frozen=True)
class TrainingMemory:
    """An estimate of one training step's memory on one process, by what holds it (bytes), and what it assumed."""

    frozen: int  # weights that do not train (a frozen base): no gradient, optimiser state or average
    trained: int  # weights that train
    gradients: int
    optimizer: int  # AdamW's two moments
    average: int  # the EMA of the weights that train
    activations: int  # what the backbones keep for the backward pass
    gathered: int  # under sharding: the largest block's whole weights, gathered for its forward and backward
    trained_parameters: int
    frozen_parameters: int
    batch: int  # sequences per process
    length: int  # positions of the longest transformer backbone (0 when none reports a shape)
    shards: int  # the weights, gradients, optimiser state and average are split into this many parts
    checkpointing: bool

    @property
    def total(self) -> int:
        return sum((self.frozen, self.trained, self.gradients, self.optimizer, self.average, self.activations,
                    self.gathered))

    def lines(self) -> list[str]:
        """The estimate as lines for a person: parameters, then memory by what holds it."""
        parameters = self.trained_parameters + self.frozen_parameters
        share = self.trained_parameters / parameters if parameters else 0.0
        kept = "a block's input per block, one block recomputed" if self.checkpointing else "every block's activations"
        split = f", split over {self.shards} processes" if self.shards > 1 else ""
        parts = [
            ("frozen weights", self.frozen), ("trained weights", self.trained), ("gradients", self.gradients),
            ("optimiser state", self.optimizer), ("EMA", self.average),
            (f"activations ({self.batch} x {self.length} positions, {kept})" if self.length else
             "activations (no backbone reports its transformer shape: not counted)", self.activations),
        ] + ([("the largest block gathered whole", self.gathered)] if self.shards > 1 else [])
        return [
            f"parameters: {parameters:,} ({self.trained_parameters:,} trained, {share:.2%}; "
            f"{self.frozen_parameters:,} frozen)",
            f"one training step needs at least {self.total / GIB:.2f} GiB per process{split} (an estimate):",
            *(f"  {name}: {size / GIB:.2f} GiB" for name, size in parts),
        ]


def training_memory(
    model: torch.nn.Module, batch: int, value_bytes: int, checkpointing: bool = False, shards: int = 1,
    frozen_dtype: torch.dtype | None = None, blocks: list[torch.nn.Module] | None = None,
) -> TrainingMemory:
    """What one step of ``batch`` sequences needs on one process: weights, gradients, AdamW's state and the EMA of
    what trains (parameters that require gradients), frozen weights (in ``frozen_dtype`` when given), and the
    transformer backbones' activations; under ``shards`` > 1 the state is split and the largest of ``blocks`` is
    gathered whole."""
    trained = [p for p in model.parameters() if p.requires_grad]
    frozen = [p for p in model.parameters() if not p.requires_grad]
    trained_bytes = sum(p.numel() * p.element_size() for p in trained)
    frozen_bytes = sum(p.numel() * (frozen_dtype.itemsize if frozen_dtype else p.element_size()) for p in frozen)
    activations = 0
    shapes = transformer_shapes(model)
    for shape in shapes:
        widths = _BLOCK_WIDTHS + _MLP_WIDTHS * shape.mlp_ratio
        per_block = batch * shape.length * shape.width * widths * value_bytes
        inputs = batch * shape.length * shape.width * value_bytes
        activations += int(inputs * shape.layers + per_block if checkpointing else per_block * shape.layers)
    largest = max((sum(p.numel() * p.element_size() for p in block.parameters()) for block in blocks or []), default=0)
    return TrainingMemory(
        frozen=frozen_bytes // shards,
        trained=trained_bytes // shards,
        gradients=trained_bytes // shards,
        optimizer=_MOMENTS * trained_bytes // shards,
        average=trained_bytes // shards,
        activations=activations,
        gathered=largest if shards > 1 else 0,
        trained_parameters=sum(p.numel() for p in trained),
        frozen_parameters=sum(p.numel() for p in frozen),
        batch=batch,
        length=max((shape.length for shape in shapes), default=0),
        shards=shards,
        checkpointing=checkpointing,
    )


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


def check_fits(memory: TrainingMemory, device: torch.device, batch_key: str = "train.batch_size") -> None:
    """Refuse a training step whose estimated memory exceeds what ``device`` has free."""
    needed, free = memory.total, available_bytes(device)
    state = needed - memory.activations
    if free is not None and state > free:
        raise InvalidConfigError(
            f"the {memory.trained_parameters:,} trained and {memory.frozen_parameters:,} frozen parameters need at "
            f"least {state / GIB:.1f} GiB per process before any activation (weights, gradients, AdamW's moments, the "
            f"EMA), but {device.type} has {free / GIB:.1f} GiB free: train fewer parameters (a smaller "
            f"train.lora.rank, train.freeze), hold frozen weights in bfloat16 or shard them (train.strategy=fsdp)"
        )
    if free is not None and needed > free:
        raise InvalidConfigError(
            f"{batch_key} ({memory.batch} sequences per process) at length {memory.length or '?'} needs at least "
            f"{needed / GIB:.1f} GiB for one training step (an estimate from the backbones' sizes: optimizer state "
            f"and activations), but {device.type} has {free / GIB:.1f} GiB free; reduce {batch_key} or the sequence "
            f"length"
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
