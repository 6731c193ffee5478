"""Counting the operations that make the host wait for the device, on any device (CPU included).

On a GPU, reading a tensor's value in Python (``.item()``, ``bool(t)``, ``if t:``) or running an op whose
output shape depends on the data (boolean indexing, ``nonzero``, ``unique``) stops the CPU until the GPU has
caught up: a *host synchronisation*. CUDA can report them (``torch.cuda.set_sync_debug_mode``), but only on a
GPU. The same operations pass through PyTorch's dispatcher on every device, so counting them there finds the
synchronisations a training or sampling step would make on a GPU while the tests run on a CPU.

The count errs on the side of too many: a read of a tensor that would stay on the host on a GPU too
(a CPU-side optimiser step counter) counts, and so do the input checks that some ops make on the CPU
only (``one_hot`` reads its indices' range there, not on CUDA).
"""
from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HostReads", "count_host_reads"]

_aten = torch.ops.aten
#: ops whose result the host reads back (a Python number, or a shape only the data decides)
_READS = {
    _aten._local_scalar_dense.default,
    _aten.equal.default,
    _aten.nonzero.default,
    _aten.masked_select.default,
    _aten._unique2.default,
    _aten.unique_dim.default,
    _aten.unique_consecutive.default,
    _aten.repeat_interleave.Tensor,
}
#: ops that read the data only when indexed by a boolean mask (which becomes ``nonzero`` on the device)
_MASK_INDEXED = {_aten.index.Tensor, _aten.index_put.default, _aten.index_put_.default, _aten._index_put_impl_.default}


def _has_mask(indices: Any) -> bool:
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


class HostReads(TorchDispatchMode):
    """A dispatch mode that counts host reads by op (``counts``) and by the code that asked for them (``sites``)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        #: ``path:line`` of the innermost caller outside torch, for each read
        self.sites: Counter[str] = Counter()

    @property
    def total(self) -> int:
        """Host reads counted so far."""
        return sum(self.counts.values())

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in _READS or (func in _MASK_INDEXED and _has_mask(args[1])):
            self.counts[func.__name__] += 1
            self.sites[_caller()] += 1
        return func(*args, **(kwargs or {}))


_TORCH = os.path.dirname(torch.__file__) + os.sep


def _caller() -> str:
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.startswith(_TORCH) or frame.f_code.co_filename == __file__):
        frame = frame.f_back  # type: ignore[assignment]
    return "?" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


@contextmanager
def count_host_reads() -> Iterator[HostReads]:
    """Count, on this thread, every op inside the block that would make the host wait for a GPU."""
    with HostReads() as mode:
        yield mode
