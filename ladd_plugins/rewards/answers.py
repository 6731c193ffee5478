"""Rewards that read a completion's text: its final answer against the data's, its format, or the task's own check."""
from __future__ import annotations

import re
from collections.abc import Sequence

from registry.errors import IncompatibleComponentsError, LaddError
from registry.interfaces import Dataset, Reward

from .config import ExactMatchConfig, FormatConfig

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _numeric(text: str) -> float | str:
    """A number's value (``49`` and ``49.0`` are equal), anything else as it is."""
    try:
        return float(text)
    except ValueError:
        return text


class ExactMatch(Reward):
    """The final answer of the completion against the data answer's, by a configurable extractor."""

    def __init__(self, config: ExactMatchConfig, dataset: Dataset | None = None) -> None:
        self.config = config
        self.pattern = None if config.pattern is None else re.compile(config.pattern, re.DOTALL)

    def answer(self, text: str) -> float | str | None:
        """The final answer in ``text`` (None when there is none)."""
        if self.config.extract == "whole":
            return text.strip()
        if self.config.extract == "last_number":
            numbers = _NUMBER.findall(text)
            return _numeric(numbers[-1]) if numbers else None
        assert self.pattern is not None  # the config requires it with extract=regex
        matches = list(self.pattern.finditer(text))
        return _numeric(matches[-1].group(1).strip()) if matches else None

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], references: Sequence[str]) -> list[float]:
        scores = []
        for row, (completion, reference) in enumerate(zip(completions, references, strict=True)):
            wanted = self.answer(reference)
            if wanted is None:
                raise LaddError(
                    f"the data answer of row {row} ({reference[:60]!r}) holds no answer for extract="
                    f"{self.config.extract}: every reward would miss; set reward.extract (and reward.pattern)"
                )
            scores.append(self.config.score if self.answer(completion) == wanted else self.config.miss)
        return scores


class Format(Reward):
    """Whether the completion has the required form: a regular expression matching it whole."""

    def __init__(self, config: FormatConfig, dataset: Dataset | None = None) -> None:
        self.config = config
        self.pattern = re.compile(config.pattern, re.DOTALL)

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], references: Sequence[str]) -> list[float]:
        return [
            self.config.score if self.pattern.fullmatch(text.strip()) else self.config.miss for text in completions
        ]


class Checker(Reward):
    """The task's own checker, shipped by the plugin of its dataset (``Dataset.verify``)."""

    def __init__(self, dataset: Dataset) -> None:
        if not getattr(dataset, "verifies", False):
            raise IncompatibleComponentsError(
                f"reward 'checker' runs the task's own checker, but dataset {type(dataset).__name__} ships none "
                f"(Dataset.verifies); choose a dataset that does, or loss.reward=exact_match"
            )
        self.dataset = dataset

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], references: Sequence[str]) -> list[float]:
        return [
            self.dataset.verify(prompt, completion, reference)
            for prompt, completion, reference in zip(prompts, completions, references, strict=True)
        ]
