"""A third-party latent: FSQ-style codes from rounding each of a few bounded projections to L levels."""
from __future__ import annotations

from registry import ComponentSpec, hookimpl

from .options import RoundingConfig


@hookimpl
def ladd_components():
    return [
        ComponentSpec(
            kind="latent",
            name="rounding",
            factory="ladd_rounding_plugin.latent:RoundedCodes",
            config=RoundingConfig,
            description="ids: tanh-bounded projections rounded to L levels each (L^dims codes); pair with process masked",
        ),
    ]
