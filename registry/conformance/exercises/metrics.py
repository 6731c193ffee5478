"""The exercise of a metric: two sample sets scored."""
from __future__ import annotations

import torch

from registry.host.component import Component
from registry.host.registry import Registry

from .common import SEQ, during, expect, without_text


def exercise_metric(component: Component, registry: Registry) -> None:
    """Scores of one sample set against another: floats, including the primary one."""
    metric = without_text(component, registry)
    with during("scoring two sample sets"):
        scores = metric(torch.randint(2, (16, SEQ)), torch.randint(2, (16, SEQ)))
    expect(
        isinstance(scores, dict) and metric.primary in scores,
        f"scores {scores} lack the primary score {metric.primary!r}",
    )
    expect(all(isinstance(v, float) for v in scores.values()), f"scores must be floats: {scores}")
