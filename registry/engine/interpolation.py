"""Paths between two clean latents, read only from what a latent declares: the state kind it produces.

Vectors (``VECTORS``): each latent vector moves along the great circle between its two ends, its length changing
linearly, so L2-normalised latents (Co-LADD's) stay on the unit sphere: spherical interpolation. Ids (``IDS``): the
path of code sequences that changes one position at a time, left to right, from the first latent's codes to the
second's; the points are spread evenly along it (consecutive points differ in one position when there are as
many points as differing positions plus one).
"""
from __future__ import annotations

import torch
from torch import Tensor

from registry.errors import LaddError
from registry.interfaces import IDS, VECTORS, Latent

#: below this sine of the angle between two vectors, their great circle is taken as the straight line
_PARALLEL = 1e-6


def interpolate(latent: Latent, start: Tensor, end: Tensor, points: int) -> Tensor:
    """``points`` latents ``[points, ...]`` from ``start`` to ``end`` (each the shape of one latent), both included."""
    if points < 2:
        raise LaddError(f"an interpolation needs at least 2 points (its two ends), got {points}")
    if latent.produces == VECTORS:
        return spherical(start, end, torch.linspace(0.0, 1.0, points, dtype=torch.float64))
    if latent.produces == IDS:
        return code_path(start, end, points)
    raise LaddError(
        f"latent {type(latent).__name__} produces {latent.produces!r} states; ladd interpolates latents of "
        f"{VECTORS!r} (along great circles) and of {IDS!r} (one position at a time)"
    )


def spherical(start: Tensor, end: Tensor, fractions: Tensor) -> Tensor:
    """Per vector (the last dimension): the great-circle point at each fraction, its norm interpolated linearly."""
    a, b = start.double(), end.double()
    norm_a, norm_b = a.norm(dim=-1, keepdim=True), b.norm(dim=-1, keepdim=True)
    unit_a, unit_b = a / norm_a.clamp_min(1e-12), b / norm_b.clamp_min(1e-12)
    cosine = (unit_a * unit_b).sum(-1, keepdim=True).clamp(-1.0, 1.0)
    angle = torch.arccos(cosine)
    sine = torch.sin(angle)
    t = fractions.view(-1, *([1] * start.dim()))
    curved = (torch.sin((1 - t) * angle) * unit_a + torch.sin(t * angle) * unit_b) / sine.clamp_min(_PARALLEL)
    straight = (1 - t) * unit_a + t * unit_b
    direction = torch.where(sine > _PARALLEL, curved, straight)
    direction = direction / direction.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return (direction * ((1 - t) * norm_a + t * norm_b)).to(start.dtype)


def code_path(start: Tensor, end: Tensor, points: int) -> Tensor:
    """Code sequences from ``start`` to ``end``: point k holds ``end``'s codes at the first k d / (points - 1) (rounded
    half up) of the d positions where the two differ, in flattened order, and ``start``'s elsewhere."""
    differing = (start != end).flatten().nonzero().flatten()
    path = start.flatten().repeat(points, 1)
    for k in range(points):
        changed = differing[: (2 * k * len(differing) + points - 1) // (2 * (points - 1))]
        path[k, changed] = end.flatten()[changed]
    return path.view(points, *start.shape)
