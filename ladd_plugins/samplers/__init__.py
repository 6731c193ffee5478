"""Reverse-process samplers: MDLM ancestral, confidence decoding (LLaDA, Fast-dLLM), LADD joint and sequential,
left-to-right autoregressive, block diffusion (BD3-LM)."""
from __future__ import annotations

from registry import ComponentSpec

from .config import (
    AncestralConfig,
    AutoregressiveConfig,
    BlockwiseConfig,
    ConfidenceConfig,
    JointConfig,
    SequentialConfig,
)

#: this subpackage's components, registered by ladd's plugin (``ladd_plugins.ladd_components``)
SPECS = [
    ComponentSpec("sampler", "ancestral", "ladd_plugins.samplers.ancestral:AncestralSampler", AncestralConfig,
                  "MDLM ancestral sampling with the exact masked bridge"),
    ComponentSpec("sampler", "confidence", "ladd_plugins.samplers.confidence:ConfidenceSampler", ConfidenceConfig,
                  "confidence decoding: LLaDA's remasking and blocks, Fast-dLLM's threshold, factor and KV cache, "
                  "Dream's generation"),
    ComponentSpec("sampler", "joint", "ladd_plugins.samplers.joint:JointSampler", JointConfig,
                  "LADD joint inference: both channels at every step"),
    ComponentSpec("sampler", "sequential", "ladd_plugins.samplers.sequential:SequentialSampler", SequentialConfig,
                  "LADD sequential inference: latent first (T^Y steps), then tokens (T^X)"),
    ComponentSpec("sampler", "blockwise", "ladd_plugins.samplers.blockwise:BlockwiseSampler", BlockwiseConfig,
                  "block diffusion (BD3-LM): blocks left to right by a token decoder, exact KV cache, any length"),
    ComponentSpec("sampler", "autoregressive", "ladd_plugins.samplers.autoregressive:AutoregressiveSampler",
                  AutoregressiveConfig, "left to right, one token per network call (always S steps), exact KV cache"),
]
