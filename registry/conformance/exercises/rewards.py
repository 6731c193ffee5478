"""The exercise of a reward: completions of arithmetic questions scored against the data's answers."""
from __future__ import annotations

import math

from registry.errors import IncompatibleComponentsError, MissingResourceError
from registry.host.component import Component
from registry.host.registry import Registry

from .common import Companions, built, during, expect

#: completions of arithmetic questions (a right answer, a wrong one, an empty one) and the data's answers
PROMPTS = ("What is 2 plus 3?", "What is 9 minus 4?", "What is 7 plus 1?")
COMPLETIONS = (" 2 plus 3 is 5.", " 9 minus 4 is 6.", "")
ANSWERS = (" 2 plus 3 is 5.", " 9 minus 4 is 5.", " 7 plus 1 is 8.")


def exercise_reward(component: Component, registry: Registry) -> None:
    """Three completions scored (a right answer, a wrong one, an empty one): one finite number each."""
    dataset = built(Companions(registry, component), "dataset")[0][1]
    try:
        reward = registry.instantiate(component, dataset=dataset)[0]
    except IncompatibleComponentsError as error:
        raise MissingResourceError(f"needs a dataset that ladd's tiny check cannot supply ({error})") from None
    with during("scoring three completions"):
        scores = list(reward(list(PROMPTS), list(COMPLETIONS), list(ANSWERS)))
    expect(
        len(scores) == len(PROMPTS)
        and all(isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) for s in scores),
        f"a reward gives one finite number per completion, got {scores}",
    )
