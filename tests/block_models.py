"""Block diffusion models for tests: the sawtooth's block diffusion preset composed once per length, and variants
built from its plain config (composing costs seconds, building a tiny model a fraction of one)."""
from __future__ import annotations

import copy
import functools
from typing import Any

import torch
from support import TINY

import registry
from registry.config.composition import compose
from registry.engine.assembly import Experiment, build_experiment

MASK = 2  # the sawtooth's two tokens, then the mask id


@functools.cache
def _composed(seq_len: int) -> dict[str, Any]:
    return compose(["experiment=binsaw/bd3lm_cpu", *TINY, f"dataset.seq_len={seq_len}"], registry.load()).plain()


def config(seq_len: int = 16, **slots: dict[str, Any]) -> dict[str, Any]:
    """The preset's plain config at ``seq_len`` with options of its slots and settings changed
    (``backbone={"block_size": 8}``), or a slot's component replaced (``sampler={"name": "ancestral"}``)."""
    config = copy.deepcopy(_composed(seq_len))
    for key, options in slots.items():
        config[key] = dict(options) if "name" in options else {**config[key], **options}
    return config


def experiment(seq_len: int = 16, **slots: dict[str, Any]) -> Experiment:
    """The experiment of :func:`config`."""
    return build_experiment(config(seq_len, **slots), registry.load())


def randomised(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """``model`` in eval mode with random (not zero-initialised) weights, so that every head matters."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model.eval()
