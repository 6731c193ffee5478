"""Options of the RL objectives (torch-free, for fast listing)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from registry.errors import InvalidConfigError
from registry.ranges import check_choice, check_range
from registry.toolkit.options import refers_to

#: the registered reward that scores the rollouts, with its options
REWARD = refers_to("reward", options="reward_options")

#: what SPG maximises for a completion of negative advantage (SPG's ``logp_estimation``): its evidence upper bound,
#: the lower bound as for positive ones, or a mixture of both
NEGATIVE_BOUNDS = ("eubo", "elbo", "mix")


@dataclass
class RolloutOptions:
    """Rollouts and their use, shared by the RL objectives (names as d1's and TRL's options where they have one)."""

    reward: str = field(default="exact_match", metadata=REWARD)  # the reward scoring each completion
    reward_options: dict[str, Any] = field(default_factory=dict)  # its options
    group: int = 6  # G: completions drawn per prompt (num_generations)
    steps: int = 64  # the sampler's token steps per rollout (diffusion_steps)
    # mu: optimisation steps on one batch of rollouts, each with a fresh prompt mask (num_iterations)
    iterations: int = 1
    # prompts whose groups one sampler call draws (d1's generation_batch_size / group); with 1 a prompt's completions
    # depend on its seed alone (any number of processes draws the same), more is faster
    rollout_batch: int = 1
    p_mask_prompt: float = 0.15  # each prompt id masked with this probability in the log-probability passes
    scale_rewards: bool = False  # divide each group's centred rewards by its standard deviation (d1's code: no)
    # with a latent channel (LADD): the latent's log-probability enters the policy, so the plan is credited
    latent_in_policy: bool = True
    record_every: int = 50  # steps between rollouts written to rollouts.jsonl (0: none)
    record_groups: int = 2  # prompts (each with its group) written at such a step

    def __post_init__(self) -> None:
        check_range("group", self.group, 2)
        check_range("steps", self.steps, 1)
        check_range("iterations", self.iterations, 1)
        check_range("rollout_batch", self.rollout_batch, 1)
        check_range("p_mask_prompt", self.p_mask_prompt, 0, 1, high_open=True)
        check_range("record_every", self.record_every, 0)
        check_range("record_groups", self.record_groups, 1)


@dataclass
class GRPOConfig(RolloutOptions):
    """d1's diffu-GRPO: group-relative advantages, one-pass per-token log-probabilities (or passes along the
    rollout's trajectory), the clipped ratio and a KL penalty to the frozen base under LoRA."""

    epsilon: float = 0.2  # the ratio is clipped to [1 - epsilon, 1 + epsilon]
    beta: float = 0.04  # weight of the KL penalty to the reference (the frozen base; 0: no reference)
    # forward passes of a log-probability estimate: 1 is d1's (the completion fully masked); more follow the rollout's
    # trajectory (TraceRL): the sampler's steps in that many spans, a pass scoring the tokens written in its span
    # given those written before it
    passes: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("epsilon", self.epsilon, 0, low_open=True)
        check_range("beta", self.beta, 0)
        check_range("passes", self.passes, 1)
        if self.passes > self.steps:
            raise InvalidConfigError(
                f"passes={self.passes} is more than the rollouts' steps={self.steps}: a pass scores the tokens of at "
                f"least one step; valid: 1 <= passes <= steps"
            )


@dataclass
class SPGConfig(RolloutOptions):
    """SPG (sandwiched policy gradient): a lower bound of the sequence likelihood for completions of positive
    advantage, an upper bound (or a mixture) for the others, each a Monte Carlo estimate over random masks."""

    draws: int = 2  # masks per completion in each estimate (num_t)
    min_fraction: float = 0.0  # a draw masks between min_fraction and max_fraction of a completion (min_t, max_t)
    max_fraction: float = 1.0
    negative: str = "mix"  # eubo | elbo | mix: the bound of completions of negative advantage
    eubo_beta: float = 1.5  # the upper bound's exponent beta (SPG's eubo_beta)
    mix_weight: float = 0.5  # mix: weight of the upper bound (the lower one gets the rest)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("draws", self.draws, 1)
        check_range("min_fraction", self.min_fraction, 0, 1)
        check_range("max_fraction", self.max_fraction, 0, 1, low_open=True)
        if self.min_fraction > self.max_fraction:
            raise InvalidConfigError(
                f"min_fraction={self.min_fraction} is above max_fraction={self.max_fraction}; valid: 0 <= min_fraction "
                f"<= max_fraction <= 1"
            )
        check_choice("negative", self.negative, NEGATIVE_BOUNDS)
        check_range("eubo_beta", self.eubo_beta, 0, low_open=True)
        check_range("mix_weight", self.mix_weight, 0, 1)
