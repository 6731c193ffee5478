"""Sample metrics: sliced Wasserstein distance (App. F), sample entropies and Gen PPL under a teacher."""
from __future__ import annotations

from registry import ComponentSpec

from .config import GenPPLConfig, SlicedWassersteinConfig

#: this subpackage's components, registered by ladd's plugin (``ladd_plugins.ladd_components``)
SPECS = [
    ComponentSpec("metric", "swd", "ladd_plugins.metrics.swd:SlicedWasserstein", SlicedWassersteinConfig,
                  "sliced Wasserstein distance SWD_1 over Gaussian (App. F) or unit directions"),
    ComponentSpec("metric", "entropy", "ladd_plugins.metrics.entropy:Entropy", None,
                  "sample entropies in nats: per-sequence unigram (MDLM literature) and positional (App. F)"),
    ComponentSpec("metric", "gen_ppl", "ladd_plugins.metrics.gen_ppl:GenerativePerplexity", GenPPLConfig,
                  "Gen PPL under a causal LM teacher (default gpt2-large) after re-tokenising, with entropies"),
]
