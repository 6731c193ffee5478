"""What sampling spends: network calls, FLOPs and positions, counted at every backbone call a model makes.

FLOPs count two per multiply-add, as ``FlopCounterMode`` and the 2x column of ``ladd flops`` do. A transformer
backbone (one that reports a ``TransformerShape``) is charged for what a call computes: its blocks over the
positions it runs (a cached pass: its window's, attending to the whole sequence), its token head at the rows it
runs at, and the rest (adaLN, time embedding, latent layers: a cost per sequence) as measured once in a full
pass at batch 1. Any other network is charged its full pass at batch 1, measured once, per sequence. Counting
reads nothing back from the device until the caller asks for the totals.
"""
from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch.utils.flop_counter import FlopCounterMode

from registry.interfaces import Backbone, Channels, TransformerShape
from registry.toolkit.attention import attention

if TYPE_CHECKING:  # annotations only
    from .model import DiffusionModel

__all__ = ["Meter", "Spent", "counting", "counts_attention", "head_macs", "measure_flops", "transformer_macs"]


def transformer_macs(shape: TransformerShape, queries: int | None = None, keys: int | None = None) -> float:
    """Multiply-adds of the transformer blocks for one sequence: ``n_l ((4 + 2r) Q d^2 + 2 Q K d)``, with ``Q``
    positions computed (all ``L`` by default) attending to ``K`` (all ``L``)."""
    width = shape.width
    queries = shape.length if queries is None else queries
    keys = shape.length if keys is None else keys
    return shape.layers * ((4 + 2 * shape.mlp_ratio) * queries * width**2 + 2 * queries * keys * width)


def head_macs(shape: TransformerShape, rows: float | None = None) -> float:
    """Multiply-adds of the token output head at ``rows`` positions (all ``head_positions`` by default)."""
    return (shape.head_positions if rows is None else rows) * shape.width * shape.head_outputs


def measure_flops(backbone: Backbone, channels: Channels) -> int:
    """FLOPs (two per multiply-add) that one forward pass at batch 1 performs, counted by FlopCounterMode."""
    device = next(backbone.parameters(), torch.empty(0, device="meta")).device
    tau = torch.ones(1, device=device)
    x_t = torch.zeros(1, channels.seq_len, dtype=torch.long, device=device) if channels.tokens else None
    latent = channels.latent
    y_t = None if latent is None else latent.backbone_input(latent.null(1, device))
    # with gradients on: FlopCounterMode's module tracker fails on parameters used without a graph
    with torch.enable_grad(), FlopCounterMode(display=False) as counter:
        backbone(x_t, tau if x_t is not None else None, y_t, tau if y_t is not None else None)
    return counter.get_total_flops()


@dataclass(frozen=True)
class Spent:
    """Totals of the calls counted: network calls, FLOPs and backbone positions (token forwards), all sequences."""

    calls: int
    flops: float
    positions: int


def counts_attention(device: torch.device) -> bool:
    """Whether FlopCounterMode counts ``attention`` on ``device`` (not PyTorch's fused CPU kernel, for one)."""
    q = torch.zeros(1, 2, 1, 2, device=device)
    with FlopCounterMode(display=False) as counter:
        attention(q, q, q)
    return counter.get_total_flops() > 0


@dataclass
class _Cost:
    """A network's cost model: its shape (None: charged whole) and its measured full pass at batch 1."""

    shape: TransformerShape | None
    full: float
    attention_counted: bool = True  # whether the measured pass counted the attention's products

    @property
    def rest(self) -> float:
        """What a sequence costs outside the blocks and the token head (adaLN, time embedding, latent layers)."""
        shape = self.shape
        assert shape is not None
        attention = 2 * shape.layers * shape.length**2 * shape.width  # multiply-adds of QK^T and AV
        counted = transformer_macs(shape) - (0 if self.attention_counted else attention)
        return self.full - 2 * (counted + head_macs(shape))


@dataclass
class Meter:
    """Counts the backbone calls of a model while it is counting (:func:`counting`)."""

    calls: int = 0
    _flops: float = 0.0
    _positions: int = 0
    _head_rows: list[tuple[torch.Tensor, float]] = field(default_factory=list)  # (rows counted on the device, FLOPs)

    def spend(
        self, backbone: Backbone, channels: Channels, batch: int, window: slice | None, rows: torch.Tensor | None
    ) -> None:
        """Charge one call of ``backbone`` over ``batch`` sequences (positions ``window``, token head at ``rows``)."""
        cost = self._cost(backbone, channels)
        self.calls += 1
        shape = cost.shape
        if shape is None:
            self._flops += batch * cost.full
            self._positions += batch * (channels.seq_len or (channels.latent.length if channels.latent else 0))
            return
        queries = len(range(shape.length)[window]) if window is not None else shape.length
        self._positions += batch * queries
        self._flops += batch * (2 * transformer_macs(shape, queries) + cost.rest)
        per_row = 2 * head_macs(shape, 1)
        if rows is not None:
            self._head_rows.append((rows.sum(), per_row))
        else:
            head_positions = shape.head_positions if window is None else len(range(shape.head_positions)[window])
            self._flops += batch * head_positions * per_row

    def spent(self) -> Spent:
        """The totals so far (reads the head rows counted on the device: call it once sampling is done)."""
        heads = sum(float(rows) * per_row for rows, per_row in self._head_rows)
        return Spent(self.calls, self._flops + heads, self._positions)

    def _cost(self, backbone: Backbone, channels: Channels) -> _Cost:
        if backbone not in _COSTS:  # measured once per network, outside any count
            device = next(backbone.parameters(), torch.empty(0)).device
            full = float(measure_flops(backbone, channels))
            _COSTS[backbone] = _Cost(backbone.transformer_shape(), full, counts_attention(device))
        return _COSTS[backbone]


#: each network's cost model, measured the first time it is counted
_COSTS: weakref.WeakKeyDictionary[Backbone, _Cost] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def counting(model: DiffusionModel, meter: Meter | None = None) -> Iterator[Meter]:
    """Count every backbone call ``model`` makes inside the block (into ``meter``, or a new one)."""
    meter = Meter() if meter is None else meter
    previous, model.meter = model.meter, meter
    try:
        yield meter
    finally:
        model.meter = previous
