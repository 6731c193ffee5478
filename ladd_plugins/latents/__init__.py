"""What the latent channel carries: Gaussian vectors (Co-LADD) or codes from a quantiser (Di-LADD: VQ, RVQ, FSQ,
LFQ)."""
from __future__ import annotations

from registry import ComponentSpec

from .config import (
    ContinuousLatentConfig,
    DiscreteLatentConfig,
    FSQLatentConfig,
    LFQLatentConfig,
    ResidualVQLatentConfig,
)

_QUANTIZERS = "ladd_plugins.latents.quantizers"

#: this subpackage's components, registered by ladd's plugin (``ladd_plugins.ladd_components``)
SPECS = [
    ComponentSpec("latent", "continuous", "ladd_plugins.latents.continuous:ContinuousLatent", ContinuousLatentConfig,
                  "vectors: the encoder's Gaussian posterior (Co-LADD; pair with process vp)"),
    ComponentSpec("latent", "discrete", f"{_QUANTIZERS}:VQLatent", DiscreteLatentConfig,
                  "ids: VQ codes, cosine distance, EMA codebook (Di-LADD; pair with process masked)"),
    ComponentSpec("latent", "rvq", f"{_QUANTIZERS}:ResidualVQLatent", ResidualVQLatentConfig,
                  "ids: residual VQ, Q stages of C codes packed into C^Q values (pair with process masked)"),
    ComponentSpec("latent", "fsq", f"{_QUANTIZERS}:FSQLatent", FSQLatentConfig,
                  "ids: finite scalar quantisation, prod(levels) codes (pair with process masked)"),
    ComponentSpec("latent", "lfq", f"{_QUANTIZERS}:LFQLatent", LFQLatentConfig,
                  "ids: lookup-free quantisation, binary codes (pair with process masked)"),
]
