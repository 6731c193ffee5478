"""Learning-rate schedules of a training stage: linear warm-up, then constant, linear or cosine decay.

Each is a closed-form factor of ``train.lr`` at optimisation step ``k`` (0-based) of a stage of ``T``
steps with ``W`` warm-up steps: ``min(1, (k + 1) / W)`` while warming up, then, with the decay's
progress ``p = (k - W) / (T - W)`` clamped to [0, 1] and ``m = train.min_lr_ratio``:

- ``constant``: 1
- ``linear``: ``1 - (1 - m) p``
- ``cosine``: ``m + (1 - m) (1 + cos(pi p)) / 2``

(They are written out rather than taken from timm, whose warm-up starts one step earlier: ladd's
constant schedule, which every preset has used, keeps its exact values.)
"""
from __future__ import annotations

import math


def _constant(progress: float, min_ratio: float) -> float:
    return 1.0


def _linear(progress: float, min_ratio: float) -> float:
    return 1.0 - (1.0 - min_ratio) * progress


def _cosine(progress: float, min_ratio: float) -> float:
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


_DECAYS = {"constant": _constant, "linear": _linear, "cosine": _cosine}
SCHEDULES = tuple(_DECAYS)


def lr_factor(step: int, warmup: int, total: int, schedule: str, min_ratio: float = 0.0) -> float:
    """The factor of the base learning rate at 0-based ``step`` of a stage of ``total`` steps."""
    if schedule not in _DECAYS:
        raise ValueError(f"unknown learning-rate schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
    warm = min(1.0, (step + 1) / max(1, warmup))
    progress = min(1.0, max(0.0, (step - warmup) / (total - warmup))) if total > warmup else 0.0
    return warm * _DECAYS[schedule](progress, min_ratio)
