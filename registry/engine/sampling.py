"""Sampling a trained model: chunks of samples, each from its own seed, at the precision asked for."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from registry.config.settings import INFERENCE_PRECISIONS, resolve_precision
from registry.distributed import gather_rows, share
from registry.errors import InvalidConfigError, LaddError
from registry.host.component import Component
from registry.interfaces import Sampler
from registry.toolkit.progress import progress as shown

from .compute import counting

if TYPE_CHECKING:  # annotations only
    from .assembly import Experiment


#: how torch's categorical draw refuses probabilities that are NaN, infinite or negative
_NOT_FINITE = "probability tensor contains"
#: Seed distance between sample chunks (and loss batches): far beyond the step budgets added to the seed.
CHUNK_SEED_STRIDE = 1_000_003


@contextlib.contextmanager
def inference_precision(device: torch.device, precision: str) -> Iterator[None]:
    """Run the networks under bf16 autocast or in full precision (categorical draws stay float64 either way)."""
    if precision not in INFERENCE_PRECISIONS:
        raise InvalidConfigError(f"inference precision {precision!r}; valid: {', '.join(INFERENCE_PRECISIONS)}")
    with torch.autocast(
        device.type, dtype=torch.bfloat16, enabled=resolve_precision(precision, device.type) == "bf16-mixed"
    ):
        yield


@dataclass(frozen=True)
class Cost:
    """What sampling spent per sample: network calls (of the last chunk, as its sampler reports them), FLOPs (two per
    multiply-add, every backbone call of every chunk) and backbone positions run (token forwards)."""

    network_calls: int
    flops: float
    positions: float


@torch.no_grad()
def sample(
    experiment: Experiment,
    num_samples: int,
    steps: int,
    batch_size: int,
    seed: int,
    progress: bool = False,
    fixed: torch.Tensor | None = None,
    precision: str = "auto",
    latent: torch.Tensor | None = None,
) -> tuple[torch.Tensor, int]:
    """``num_samples`` sequences (keeping ``fixed``'s known tokens; given the clean ``latent`` of each row, when given);
    returns them and the network calls per sample (:func:`sample_rows` also gives the FLOPs).

    Chunk ``k`` of ``batch_size`` samples draws from its own generator (seeded ``seed`` for the first), so the samples
    do not depend on how many processes share the chunks (each rank draws its share; all are gathered in order).
    """
    tokens, cost, _ = sample_rows(experiment, num_samples, steps, batch_size, seed, progress, fixed, precision, latent)
    return tokens, cost.network_calls


@torch.no_grad()
def sample_rows(
    experiment: Experiment,
    num_samples: int,
    steps: int,
    batch_size: int,
    seed: int,
    progress: bool = False,
    fixed: torch.Tensor | None = None,
    precision: str = "auto",
    latent: torch.Tensor | None = None,
    length: int | None = None,
) -> tuple[torch.Tensor, Cost, torch.Tensor | None]:
    """:func:`sample`, with what it spent per sample (every backbone call of any sampler counted as the model makes it,
    ``engine.compute``, over every process's chunks), at ``length`` positions (a sampler declaring
    ``variable_length``; the model's length when None), and the length of each sample when the sampler stops some
    early (None when every one fills it)."""
    model, component = experiment.model.eval(), experiment.components.get("sampler")
    if latent is not None:
        check_takes_latent(experiment.sampler, component)
    sized: dict[str, Any] = {} if length is None else {"length": check_length(experiment.sampler, length, component)}
    width = model.seq_len if length is None else length
    starts = range(0, num_samples, batch_size)
    chunks, ends, calls = [], [], 0
    with counting(model) as meter:
        for k in shown(share(len(starts)), f"sampling {steps} steps", progress, name=lambda k: f"chunk {k + 1}"):
            start = starts[k]
            size = min(batch_size, num_samples - start)
            generator = torch.Generator(device=model.device).manual_seed(seed + k * CHUNK_SEED_STRIDE)
            known = None if fixed is None else fixed[start : start + size].to(model.device)
            given = {} if latent is None else {"latent": latent[start : start + size].to(model.device)}
            with inference_precision(model.device, precision):
                try:
                    out = experiment.sampler.sample(model, size, steps, generator, fixed=known, **given, **sized)
                except RuntimeError as error:
                    if _NOT_FINITE not in str(error):
                        raise
                    raise LaddError(_not_finite(k, latent)) from None
            chunks.append(out.tokens.cpu())
            ends.append(torch.full((size,), width) if out.lengths is None else out.lengths.cpu())
            calls = out.network_calls
    local = torch.cat(chunks) if chunks else torch.zeros(0, width, dtype=torch.long)
    spent = meter.spent()
    totals = gather_rows(torch.tensor([[spent.flops, spent.positions, len(local)]], dtype=torch.float64)).sum(0)
    per_sample = totals / totals[2].clamp(min=1)
    lengths = gather_rows(torch.cat(ends) if ends else torch.zeros(0, dtype=torch.long))
    stopped = None if bool((lengths == width).all()) else lengths
    return gather_rows(local), Cost(calls, float(per_sample[0]), float(per_sample[1])), stopped


def check_length(sampler: Sampler, length: int, component: Component | None = None) -> int:
    """``length``, after refusing a sampler that generates the model's length only, or a length below 1.

    ``component``: the registered sampler, whose plugin the message names."""
    if not sampler.variable_length:
        raise LaddError(
            f"{sampler_label(sampler, component)} generates sequences of the model's length only; a length of your "
            f"choice needs a sampler that declares variable_length"
        )
    if length < 1:
        raise InvalidConfigError(f"length={length} is not valid: it must be a whole number >= 1")
    return length


def _not_finite(chunk: int, latent: torch.Tensor | None) -> str:
    """Why a chunk's categorical draw met NaN or infinite probabilities, and what to do about it."""
    if latent is not None and latent.is_floating_point():
        cause = (
            f"the clean latents given reach {float(latent.abs().max()):.3g} in magnitude, beyond what the network's "
            f"float arithmetic holds: sample at latents that `ladd encode` or --like made"
        )
    else:
        cause = "the weights may have diverged: evaluate the model's loss (ladd eval), or train it again"
    overflow = "NaN or infinite probabilities (the network's predictions overflowed)"
    return f"sampling chunk {chunk + 1} met {overflow}: {cause}"


def takes_latent(sampler: Sampler) -> bool:
    """Whether ``sampler.sample`` takes a clean latent (``latent=``), as the sampler declares (``takes_latent``)."""
    return getattr(sampler, "takes_latent", False) is True


def sampler_label(sampler: Sampler, component: Component | None = None) -> str:
    """What a message calls ``sampler``: its registered name and plugin where known, else its class."""
    return component.label if component is not None else f"sampler {type(sampler).__name__}"


def check_takes_latent(sampler: Sampler, component: Component | None = None) -> None:
    """Refuse a sampler that does not declare it takes a clean latent (``latent=``): it could only ignore one.

    ``component``: the registered sampler, whose plugin the message names."""
    if not takes_latent(sampler):
        raise LaddError(
            f"{sampler_label(sampler, component)} cannot draw samples given a latent: it does not declare "
            f"`takes_latent = True` (since plugin contract 3 a sampler declares it; ladd no longer reads its sample() "
            f"signature: docs/contract.md); "
            f"choose one that does, e.g. --sampler sequential or --sampler joint"
        )
