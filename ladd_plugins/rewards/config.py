"""Options of the built-in rewards (torch-free, for fast listing)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from registry.errors import InvalidConfigError
from registry.ranges import check_choice

#: how exact_match finds the final answer in a text: its last number, the first group of ``pattern``'s last match, or
#: the whole text (stripped)
EXTRACTORS = ("last_number", "regex", "whole")
#: d1's soft format: reasoning then answer in tags
REASONING_FORMAT = r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>"


def _check_pattern(key: str, pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as error:
        raise InvalidConfigError(f"{key}={pattern!r} is no regular expression ({error})") from None


@dataclass
class ExactMatchConfig:
    """``score`` when the completion's final answer equals the data answer's, found in both by the same extractor
    (numbers compared as numbers), else ``miss``."""

    extract: str = "last_number"  # last_number | regex | whole (see EXTRACTORS)
    pattern: str | None = None  # extract=regex: the answer is the first group of the pattern's last match
    score: float = 1.0
    miss: float = 0.0

    def __post_init__(self) -> None:
        check_choice("extract", self.extract, EXTRACTORS)
        if self.extract == "regex":
            if self.pattern is None:
                raise InvalidConfigError(
                    "extract=regex needs pattern: a regular expression whose first group is the answer"
                )
            _check_pattern("pattern", self.pattern)
            if re.compile(self.pattern).groups < 1:
                raise InvalidConfigError(f"pattern={self.pattern!r} has no group: its first group is the answer")
        elif self.pattern is not None:
            raise InvalidConfigError(f"pattern is set but extract={self.extract}: it applies to extract=regex only")


@dataclass
class FormatConfig:
    """``score`` when the completion (stripped) matches ``pattern`` whole, else ``miss``."""

    pattern: str = REASONING_FORMAT  # a regular expression the whole completion must match (. matches line ends)
    score: float = 1.0
    miss: float = 0.0

    def __post_init__(self) -> None:
        _check_pattern("pattern", self.pattern)
