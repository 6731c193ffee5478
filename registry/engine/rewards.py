"""Held-out reward: a model's completions of held-out prompts, scored by a reward (``ladd reward``)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from registry.errors import InvalidConfigError
from registry.interfaces import Reward, context_of
from registry.toolkit.rollouts import draw_rollouts, prompts_of, row_seed, scored, texts

from .assembly import Experiment
from .sampling import inference_precision


@dataclass(frozen=True)
class RewardResult:
    """The mean reward of ``group`` completions of each of ``prompts`` held-out prompts, and its spread."""

    reward: str
    split: str
    prompts: int
    group: int
    steps: int
    seed: int
    mean: float
    stderr: float  # the standard error of the mean over prompts (each prompt's mean reward one value)
    per_prompt: list[float]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def held_out_reward(
    experiment: Experiment,
    reward: Reward,
    name: str,
    split: str = "test",
    prompts: int = 100,
    group: int = 4,
    steps: int = 32,
    seed: int = 0,
    precision: str = "auto",
) -> tuple[RewardResult, list[dict[str, Any]]]:
    """Score ``group`` completions of each of the first ``prompts`` rows of ``split`` (in the dataset's seeded order),
    each prompt's drawn from a generator of its own; the result and every completion as a record."""
    model, dataset = experiment.model.eval(), experiment.dataset
    rows = sum(prepared.rows for prepared in dataset.prepare([split]))  # 0: a dataset that prepares nothing
    if 0 < rows < prompts:  # its batches would go round the split again: a prompt scored twice as two
        raise InvalidConfigError(
            f"--prompts {prompts} is more than the {rows} rows of split {split!r}: ask for at most {rows}"
        )
    batch = next(iter(dataset.batches(prompts, seed, split)))
    held = prompts_of(batch, context_of(dataset, batch), dataset.tokenizer, model.vocab_size, model.eos_id)
    with inference_precision(model.device, precision):
        drawn = draw_rollouts(
            experiment.sampler, model, held, group, steps, [row_seed(seed, index) for index in range(prompts)]
        )
    completions = texts(dataset.tokenizer, drawn.tokens, drawn.completion, model.eos_id)
    repeated = [text for text in held.texts for _ in range(group)]
    references = [text for text in held.references for _ in range(group)]
    rewards = scored(reward, name, repeated, completions, references)
    per_prompt = rewards.view(prompts, group).mean(dim=1)
    spread = float(per_prompt.std() / math.sqrt(prompts)) if prompts > 1 else 0.0
    result = RewardResult(
        name, split, prompts, group, steps, seed, float(rewards.mean()), spread, per_prompt.tolist()
    )
    records = [
        {"prompt": prompt, "reference": reference, "completion": completion, "reward": float(value)}
        for prompt, reference, completion, value in zip(repeated, references, completions, rewards, strict=True)
    ]
    return result, records


__all__ = ["RewardResult", "held_out_reward"]
