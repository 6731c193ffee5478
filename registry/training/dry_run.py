"""``ladd train --dry-run``: what a run would train and the memory one step needs, checked as training checks them,
without reading weights, training or writing anything.

The network is built on torch's meta device (shapes, no values), so a model far larger than this machine's memory
is described in seconds; a component that reads pretrained weights while it is built (a Hugging Face model) loads
them in memory, and one that cannot be built on the meta device at all has the whole network built in memory.
"""
from __future__ import annotations

import sys

import lightning as L
import torch

from registry.config.settings import Settings
from registry.engine.adapters import Base, adapt
from registry.engine.assembly import Experiment, build_experiment
from registry.engine.memory import GIB, available_bytes, check_fits
from registry.errors import ComponentError, InvalidConfigError
from registry.host.registry import Registry

from .strategy import Hardware, check_layers


def dry_run(settings: Settings, registry: Registry) -> None:
    """Print what the run ``settings`` asks for would train and need; a refusal (an impossible size among them)
    raises after it, as training would before it wrote anything."""
    train = settings.train
    hardware = Hardware(train)
    if train.batch_size % hardware.world:
        raise InvalidConfigError(
            f"train.batch_size={train.batch_size} is the global batch and must split evenly over {hardware.world} "
            f"processes (train.devices x train.num_nodes)"
        )
    experiment = _shapes(settings, registry)
    base = adapt(experiment.model, train, identify=False)
    check_layers(experiment.model, train.activation_checkpointing, hardware.shards > 1)
    memory = hardware.estimate(experiment.model, base, train.batch_size // hardware.world)
    free = available_bytes(hardware.device)
    where = f"{hardware.world} x {hardware.device.type} ({hardware.precision})"
    lines = [
        f"dry run of {settings.method} (run_dir {settings.run_dir}): nothing is trained or written",
        f"processes: {where}, strategy {train.strategy}" + _options(settings, base),
        *memory.lines(),
        f"{hardware.device.type} has {'an unknown amount of memory' if free is None else f'{free / GIB:.1f} GiB'} "
        f"free" + ("" if free is None else (": it fits" if memory.total <= free else ": it does not fit")),
    ]
    print("\n".join(lines), flush=True)
    check_fits(memory, hardware.device)


def _shapes(settings: Settings, registry: Registry) -> Experiment:
    """The experiment with its network on the meta device, or in memory when a component must read weights."""
    L.seed_everything(settings.seed, workers=True, verbose=False)
    try:
        with torch.device("meta"):
            return build_experiment(settings, registry)
    except ComponentError:
        print("ladd: note: a component reads pretrained weights as it is built: the network is built in memory",
              file=sys.stderr)
        return build_experiment(settings, registry)


def _options(settings: Settings, base: Base | None) -> str:
    """The memory options in force, as a tail of the processes line."""
    train = settings.train
    parts = []
    if train.lora.rank:
        assert base is not None
        parts.append(f"LoRA rank {train.lora.rank} on {base.adapted} modules")
    if train.freeze:
        parts.append(f"frozen by name: {', '.join(train.freeze)}")
    if base is not None:
        parts.append(f"frozen weights in {train.frozen_dtype}")
    if train.activation_checkpointing:
        parts.append("activation checkpointing")
    return "; " + "; ".join(parts) if parts else ""
