"""The exercise of a dataset: its stream, its resumption, its context and its device stream."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import torch

from registry.host.component import Component
from registry.host.registry import Registry
from registry.interfaces import batches_from, context_of, device_batches

from .common import BATCH, CPU, during, expect

#: the promise of a dataset that resumes: ``batches_from(k, ...)`` is the stream from its batch k
RESUMES = "Dataset.batches_from (the stream from batch k)"


def exercise_dataset(component: Component, registry: Registry) -> None:
    """Token ids ``[B, seq_len]`` inside the vocabulary; the same seed gives the same stream, also resumed at batch 2;
    a batch's context (``Dataset.context``) leaves every row something to score.

    A dataset that draws on the training device (``device_batches``) is checked the same way, on the CPU.
    """
    dataset = registry.instantiate(component)[0]
    with during("batches"):
        streams = [dataset.batches(BATCH, 0) for _ in range(2)]
    with during("batches_from"):
        resumed = next(batches_from(dataset, 2, BATCH, 0))
    _check_stream(dataset, streams, resumed, "", "batches_from(2, ...)")
    with during("context"):
        context = context_of(dataset, resumed)
    expect(
        context is None
        or (context.dtype == torch.bool and context.shape == resumed.shape and bool((~context).any(dim=1).all())),
        f"context of a batch must be None or bool {tuple(resumed.shape)} leaving each row a position to score",
    )
    with during("device_batches"):
        on_device = [device_batches(dataset, start, BATCH, 0, CPU) for start in (0, 0, 2)]
    if on_device[0] is None:
        return
    expect(
        all(stream is not None for stream in on_device),
        "device_batches returns a stream for some starts and None for others",
    )
    with during("device_batches"):
        resumed = next(cast(Iterator[torch.Tensor], on_device[2]))
    _check_stream(dataset, on_device[:2], resumed, "device_batches: ", "device_batches(2, ...)")


def _check_stream(dataset: Any, streams: list[Any], resumed: torch.Tensor, prefix: str, resumed_name: str) -> None:
    """Two streams of one seed agree, hold ``[B, seq_len]`` token ids, and their third batch is ``resumed``."""
    with during(prefix.rstrip(": ") or "batches"):
        batch, again = next(streams[0]), [next(streams[1]) for _ in range(3)]
    expect(
        tuple(batch.shape) == (BATCH, dataset.seq_len),
        f"{prefix}batch of shape {tuple(batch.shape)}, expected {(BATCH, dataset.seq_len)}",
    )
    expect(batch.dtype == torch.long, f"{prefix}batch of dtype {batch.dtype}, expected torch.int64")
    expect(
        bool(((batch >= 0) & (batch < dataset.vocab_size)).all()),
        f"{prefix}batch holds ids outside 0..{dataset.vocab_size - 1}",
    )
    expect(torch.equal(batch, again[0]), f"{prefix}the same seed and split give different batches")
    expect(
        torch.equal(resumed, again[2]),
        f"{resumed_name} is not the stream's third batch: resuming would train on other data",
        RESUMES,
    )
