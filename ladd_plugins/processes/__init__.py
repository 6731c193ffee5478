"""Token and latent processes: the absorbing mask (MDLM, Di-LADD codes), the VP Gaussian (Co-LADD latents) and
the autoregressive baseline."""
from __future__ import annotations

from registry import ComponentSpec

from .config import MaskedProcessConfig, VPProcessConfig

#: this subpackage's components, registered by ladd's plugin (``ladd_plugins.ladd_components``)
SPECS = [
    ComponentSpec("process", "masked", "ladd_plugins.processes.masked:MaskedProcess", MaskedProcessConfig,
                  "absorbing-mask process on ids (tokens or codes), SUBS parameterisation, ELBO or constant weights"),
    ComponentSpec("process", "vp", "ladd_plugins.processes.vp:VPGaussianProcess", VPProcessConfig,
                  "variance-preserving Gaussian process on vectors, y0-prediction, DDIM(eta)"),
    ComponentSpec("process", "autoregressive", "ladd_plugins.processes.autoregressive:AutoregressiveProcess", None,
                  "autoregressive baseline: teacher-forced next-token loss, left-to-right revealing"),
]
