"""Refusing sampling jobs that cannot finish, before they start: the memory they need and the time they would take.

Both are estimates. The memory is a lower bound (the samples kept on the host, and one chunk's activations
and logits), compared with what the device has free. The time is measured: for jobs large enough to matter,
one chunk is sampled with one step and with k steps (k doubling until that call takes a measurable time,
after a first call that pays one-time costs), and the job's length extrapolated from the difference.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from registry.errors import InvalidConfigError

if TYPE_CHECKING:  # torch loads with the model, not when the command line is parsed
    import torch

    from .assembly import Experiment

#: the default of ``ladd sample --max-hours``: longer jobs are refused unless it is raised
DEFAULT_MAX_HOURS = 2.0
MAX_HOURS_FLAG = "--max-hours"
#: chunks x steps below which a job is not timed (a probe would cost more than it could save)
_TIMED_WORK = 2_000
#: the duration of the longest timing call, long enough for the clock's and the machine's noise not to matter
_MEASURED_SECONDS = 0.2
#: values per position that a transformer block holds at once at inference (residual, normed input, attention)
_INFERENCE_WIDTHS = 4
_TOKEN_BYTES = 8  # int64 ids


def sampling_bytes(experiment: Experiment, num_samples: int, batch_size: int, latent_bytes: int = 0) -> int:
    """At least what sampling ``num_samples`` sequences in chunks of ``batch_size`` holds in memory at once, each
    given a clean latent of ``latent_bytes``."""
    from .memory import transformer_shapes

    rows = min(batch_size, num_samples)
    model = experiment.model
    kept = 2 * num_samples * model.seq_len * _TOKEN_BYTES  # the chunks, then their concatenation
    kept += num_samples * latent_bytes
    chunk = 0
    for shape in transformer_shapes(model):
        chunk += rows * shape.length * shape.width * _INFERENCE_WIDTHS * 4
        chunk += rows * shape.head_positions * shape.head_outputs * 4  # float32 logits
    return kept + chunk


def check_sampling_memory(
    experiment: Experiment, num_samples: int, batch_size: int, what: str, latent_bytes: int = 0
) -> None:
    """Refuse sampling whose lower-bound memory exceeds what the model's device (and the host) has free; each sample
    given a clean latent of ``latent_bytes``."""
    from .memory import GIB, available_bytes

    needed = sampling_bytes(experiment, num_samples, batch_size, latent_bytes)
    free = available_bytes(experiment.model.device)
    if free is not None and needed > free:
        rows, length, device = min(batch_size, num_samples), experiment.model.seq_len, experiment.model.device.type
        raise InvalidConfigError(
            f"{what}: {num_samples} samples of length {length} in chunks of {rows} need at least "
            f"{needed / GIB:.1f} GiB (an estimate: the samples and one chunk's activations), but {device} has "
            f"{free / GIB:.1f} GiB free; sample fewer at a time or shorter sequences"
        )


def check_sampling_time(
    experiment: Experiment,
    num_samples: int,
    steps: int,
    batch_size: int,
    max_hours: float,
    fixed: torch.Tensor | None = None,
) -> None:
    """Refuse a job whose measured estimate exceeds ``max_hours`` (jobs too small to matter are not timed)."""
    rows = min(batch_size, num_samples)
    chunks = math.ceil(num_samples / rows)
    if chunks * steps <= _TIMED_WORK:
        return
    fixed_part, per_step = _step_seconds(experiment, rows, steps, fixed)
    estimate = chunks * (fixed_part + steps * per_step)
    if estimate > max_hours * 3600:
        raise InvalidConfigError(
            f"{num_samples} samples at {steps} steps would take about {_duration(estimate)} here ({chunks} chunk(s) of "
            f"{rows}; {1000 * per_step:.2f} ms per step measured); ladd sample refuses jobs estimated past "
            f"{MAX_HOURS_FLAG} {max_hours:g}: give a larger {MAX_HOURS_FLAG} if that is intended"
        )


def _step_seconds(experiment: Experiment, rows: int, steps: int, fixed: torch.Tensor | None) -> tuple[float, float]:
    """The seconds of a call's fixed part and of each step, from calls of f and of k steps (f < k < ``steps``), f the
    fewest steps the sampler takes among 1, 2, 4, ... (a block decoder takes no fewer than its blocks)."""
    first = 1
    while first < steps:
        try:
            _seconds(experiment, rows, first, fixed)  # the first call pays one-time costs (allocations, caches)
            break
        except InvalidConfigError:
            first *= 2
    else:  # no shorter call is taken: the sampler refuses ``steps`` too (its own message), or one call is measured
        return 0.0, _seconds(experiment, rows, steps, fixed) / steps
    one, k = _seconds(experiment, rows, first, fixed), 2 * first
    while (many := _seconds(experiment, rows, k, fixed)) < _MEASURED_SECONDS and 2 * k < steps:
        k *= 2
    per_step = max(many - one, 0.0) / (k - first)
    return max(one - first * per_step, 0.0), per_step


def _seconds(experiment: Experiment, rows: int, steps: int, fixed: torch.Tensor | None) -> float:
    import torch

    model = experiment.model.eval()
    known = None if fixed is None else fixed[:rows].to(model.device)
    generator = torch.Generator(device=model.device).manual_seed(0)
    start = time.perf_counter()
    with torch.no_grad():
        experiment.sampler.sample(model, rows, steps, generator, fixed=known)
    return time.perf_counter() - start


def _duration(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours / 24:,.0f} days" if hours >= 48 else f"{hours:,.1f} hours"
