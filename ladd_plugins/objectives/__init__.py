"""Training objectives besides the model's own bound: reinforcement learning from verifiable rewards (d1's
diffu-GRPO and SPG), over rollouts of the experiment's sampler scored by the reward each names (its option
``reward``)."""
from __future__ import annotations

from registry import ComponentSpec

from .config import GRPOConfig, SPGConfig

#: this subpackage's components, registered by ladd's plugin (``ladd_plugins.ladd_components``)
SPECS = [
    ComponentSpec("objective", "grpo", "ladd_plugins.objectives.grpo:DiffuGRPO", GRPOConfig,
                  "d1's diffu-GRPO: group advantages, one-pass log-probabilities, clipped ratio, KL to the LoRA base"),
    ComponentSpec("objective", "spg", "ladd_plugins.objectives.spg:SPG", SPGConfig,
                  "SPG: the ELBO for positive advantages, an upper bound (or a mixture) for negative ones"),
]
