"""Verifiable rewards of completions: the final answer against the data's, the completion's format, and the task's
own checker that a dataset's plugin ships."""
from __future__ import annotations

from registry import ComponentSpec

from .config import ExactMatchConfig, FormatConfig

#: this subpackage's components, registered by ladd's plugin (``ladd_plugins.ladd_components``)
SPECS = [
    ComponentSpec("reward", "exact_match", "ladd_plugins.rewards.answers:ExactMatch", ExactMatchConfig,
                  "the completion's final answer against the data's (last number, a regex group, or the whole text)"),
    ComponentSpec("reward", "format", "ladd_plugins.rewards.answers:Format", FormatConfig,
                  "whether the completion matches a regular expression whole (d1's reasoning/answer tags by default)"),
    ComponentSpec("reward", "checker", "ladd_plugins.rewards.answers:Checker", None,
                  "the task's own checker of an answer, shipped with its dataset (Dataset.verify)"),
]
