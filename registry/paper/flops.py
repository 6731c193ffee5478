"""FLOPs of one sampling step: the paper's closed form for a transformer backbone, and a measured count.

The paper's Table ``gflops-per-step`` counts one multiply-add (MAC) as ONE operation:
``n_l ((4 + 2r) L d^2 + 2 L^2 d)`` for the attention projections, attention mixing and MLP, leaving
out the output head, adaLN, embeddings and the timestep MLP. This module reports that figure, the
same at two FLOPs per MAC, the output head's cost, and an independent count measured with
``torch.utils.flop_counter.FlopCounterMode`` over one whole forward pass at batch 1 (two FLOPs per
MAC; every matrix product and attention, head at all S positions included; elementwise work such as
norms and activations is not counted). A backbone of a block attention pattern (``Backbone.attention``) also gets
the costs of block-causal attention, counting only the query-key pairs the pattern attends over: a sampling step
of one block with the key-value cache of the blocks before it (a mean over the blocks), a full pass, and the training
pass over ``[x_t ; x0]``. Backbones are built on the meta device: no memory, no weights, and no dataset or encoder is
loaded when the dataset config declares ``vocab_size`` and ``seq_len``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from registry.config.settings import Settings, checked
from registry.engine.assembly import selection
from registry.engine.compute import head_macs, measure_flops, transformer_macs
from registry.host.component import split_name
from registry.host.kinds import SLOTS
from registry.host.registry import Registry
from registry.interfaces import AttentionPattern, Backbone, Channels, Latent, TransformerShape

__all__ = [
    "CONVENTION",
    "FlopsReport",
    "NetworkFlops",
    "flops_report",
    "head_macs",
    "measure_flops",
    "transformer_macs",
]

CONVENTION = (
    "gflops_per_step (the paper's Table gflops-per-step) counts one multiply-add as ONE operation; "
    "the 2x, head, other and measured figures count two FLOPs per multiply-add, as FlopCounterMode does"
)
GIGA = 1e9


@dataclass(frozen=True)
class NetworkFlops:
    """Per-step cost of one network: its transformer shape (None if it has none) and its measured FLOPs."""

    slot: str
    component: str
    shape: TransformerShape | None
    measured_flops: int
    attention: AttentionPattern = AttentionPattern()

    @property
    def gflops_per_step(self) -> float | None:
        """The paper's figure: GFLOPs per step at one operation per multiply-add, head excluded."""
        return None if self.shape is None else transformer_macs(self.shape) / GIGA

    @property
    def gflops_per_step_2x(self) -> float | None:
        """The same transformer blocks at two FLOPs per multiply-add."""
        return None if self.shape is None else 2 * transformer_macs(self.shape) / GIGA

    @property
    def head_gflops_2x(self) -> float | None:
        """The token output head at two FLOPs per multiply-add (halve it for the paper's convention)."""
        return None if self.shape is None else 2 * head_macs(self.shape) / GIGA

    @property
    def measured_gflops(self) -> float:
        return self.measured_flops / GIGA

    @property
    def block_step_gflops(self) -> float | None:
        """A block pattern's sampling step of one block with the cache of the blocks before it, mean over the blocks
        of the model's length, at one operation per multiply-add (the paper's convention), head excluded."""
        block, shape = self.attention.block, self.shape
        if block is None or shape is None:
            return None
        blocks = -(-shape.length // block)
        pairs = self.attention.pairs(shape.length) / blocks
        return transformer_macs(shape, shape.length / blocks, pairs=pairs) / GIGA

    @property
    def block_pass_gflops(self) -> float | None:
        """A block pattern's full pass over the model's length, over the pairs it attends alone (1 op per MAC)."""
        shape = self.shape
        if self.attention.block is None or shape is None:
            return None
        return transformer_macs(shape, pairs=self.attention.pairs(shape.length)) / GIGA

    @property
    def block_training_gflops(self) -> float | None:
        """A block pattern's training pass over ``[x_t ; x0]`` (2L positions; each half attends over the pattern's
        pairs), at one operation per multiply-add."""
        shape = self.shape
        if self.attention.block is None or shape is None:
            return None
        return transformer_macs(shape, 2 * shape.length, pairs=2 * self.attention.pairs(shape.length)) / GIGA

    @property
    def other_gflops_2x(self) -> float | None:
        """Measured minus blocks and head: adaLN, timestep MLP, latent input and output layers."""
        blocks, head = self.gflops_per_step_2x, self.head_gflops_2x
        if blocks is None or head is None:  # no transformer shape
            return None
        return self.measured_gflops - blocks - head

    def as_dict(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "component": self.component,
            "shape": None if self.shape is None else asdict(self.shape),
            "gflops_per_step": self.gflops_per_step,
            "gflops_per_step_2x": self.gflops_per_step_2x,
            "head_gflops_2x": self.head_gflops_2x,
            "measured_gflops": self.measured_gflops,
            "other_gflops_2x": self.other_gflops_2x,
            "attention": asdict(self.attention),
            "block_step_gflops": self.block_step_gflops,
            "block_pass_gflops": self.block_pass_gflops,
            "block_training_gflops": self.block_training_gflops,
        }


@dataclass(frozen=True)
class FlopsReport:
    """Per-step FLOPs of an experiment's main backbone and, for sequential sampling, its latent backbone."""

    method: str
    vocab_size: int
    seq_len: int
    latent_length: int
    backbone: NetworkFlops
    latent_backbone: NetworkFlops | None = None

    def networks(self) -> list[NetworkFlops]:
        return [n for n in (self.backbone, self.latent_backbone) if n is not None]

    def as_dict(self) -> dict[str, Any]:
        return {
            "convention": CONVENTION,
            "method": self.method,
            "vocab_size": self.vocab_size,
            "seq_len": self.seq_len,
            "latent_length": self.latent_length,
            "backbone": self.backbone.as_dict(),
            "latent_backbone": None if self.latent_backbone is None else self.latent_backbone.as_dict(),
        }

    def table(self) -> str:
        """A plain-text table, one column per network, with the convention spelled out."""
        rows = [
            ("component", lambda n: n.component),
            ("layers x L x d (r)", _shape_cell),
            ("GFLOPs/step, 1 op per MAC (paper)", lambda n: _gflops(n.gflops_per_step)),
            ("GFLOPs/step, 2 FLOPs per MAC", lambda n: _gflops(n.gflops_per_step_2x)),
            ("output head, 2 FLOPs per MAC", lambda n: _gflops(n.head_gflops_2x)),
            ("other (adaLN, time MLP, latent layers)", lambda n: _gflops(n.other_gflops_2x)),
            ("measured forward, FlopCounterMode", lambda n: _gflops(n.measured_gflops)),
        ]
        networks = self.networks()
        if any(n.attention.block is not None for n in networks):
            rows += [
                ("block step with cache, mean (1 op per MAC)", lambda n: _gflops(n.block_step_gflops)),
                ("full pass, block pairs only (1 op per MAC)", lambda n: _gflops(n.block_pass_gflops)),
                ("training [x_t ; x0] pass (1 op per MAC)", lambda n: _gflops(n.block_training_gflops)),
            ]
        width = max(len(label) for label, _ in rows)
        lines = [
            f"{self.method}: K={self.vocab_size}, S={self.seq_len}, M={self.latent_length}, one sample, one step",
            f"{'':<{width}}  " + "  ".join(f"{n.slot:>16}" for n in networks),
        ]
        lines += [f"{label:<{width}}  " + "  ".join(f"{cell(n):>16}" for n in networks) for label, cell in rows]
        return "\n".join(lines + CONVENTION.split("; "))


def _gflops(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _shape_cell(network: NetworkFlops) -> str:
    s = network.shape
    return "-" if s is None else f"{s.layers}x{s.length}x{s.width} ({s.mlp_ratio:g})"


def flops_report(cfg: Settings | Mapping[str, Any], registry: Registry) -> FlopsReport:
    """Per-step FLOPs of the backbones an experiment selects (settings, or a plain config checked here), built on
    the meta device."""
    settings = cfg if isinstance(cfg, Settings) else checked(cfg)
    vocab_size, seq_len = _data_size(settings, registry)
    with torch.device("meta"):
        latent: Latent | None = _build(settings, registry, "latent")
        backbone = _network(settings, registry, "backbone", Channels(vocab_size, seq_len, latent))
        latent_backbone = None
        if latent is not None and settings.selection("latent_backbone") is not None:
            latent_backbone = _network(settings, registry, "latent_backbone", Channels(0, 0, latent))
    latent_length = 0 if latent is None else latent.length
    return FlopsReport(settings.method, vocab_size, seq_len, latent_length, backbone, latent_backbone)


def _data_size(settings: Settings, registry: Registry) -> tuple[int, int]:
    """K and S from the dataset config when it declares them (text data: no download), else from the dataset."""
    node = settings.selection("dataset") or {}
    if node.get("vocab_size") and node.get("seq_len"):
        return int(node["vocab_size"]), int(node["seq_len"])
    dataset = _build(settings, registry, "dataset")
    return dataset.vocab_size, dataset.seq_len


def _build(settings: Settings, registry: Registry, slot: str, **context: Any) -> Any:
    chosen = selection(settings, slot)
    if chosen is None:
        return None
    name, options = chosen
    return registry.build(SLOTS[slot].kind, name, options, **context)


def _network(settings: Settings, registry: Registry, slot: str, channels: Channels) -> NetworkFlops:
    backbone: Backbone = _build(settings, registry, slot, channels=channels)
    name = split_name(settings.selection(slot)["name"])[1]  # type: ignore[index]  # built: its slot is filled
    pattern = getattr(backbone, "attention", AttentionPattern())
    return NetworkFlops(slot, name, backbone.transformer_shape(), measure_flops(backbone, channels), pattern)
