"""The built-in rewards: the final answer against the data's (by each extractor), the format, the task's own checker;
and what ladd does with a reward that misbehaves (one line naming it and the row, never a silent zero)."""
from __future__ import annotations

import math

import pytest

import registry
from registry.errors import IncompatibleComponentsError, InvalidConfigError, LaddError
from registry.toolkit.rollouts import scored


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def _reward(reg, name, dataset=None, **options):
    return reg.get("reward", name).build(options, dataset=dataset)


def test_exact_match_compares_the_last_numbers_as_numbers(reg):
    reward = _reward(reg, "exact_match")
    completions = [" 18 plus 31 is 49.", " 18 plus 31 is 48.", " it is 49.0", "no number", " 49 then 50"]
    assert reward(["q"] * 5, completions, [" 18 plus 31 is 49."] * 5) == [1.0, 0.0, 1.0, 0.0, 0.0]


def test_exact_match_by_a_regex_group_and_whole(reg):
    tagged = _reward(reg, "exact_match", extract="regex", pattern=r"<answer>(.*?)</answer>", score=2.0)
    assert tagged(["q"] * 3, ["<answer> 7 </answer>", "<answer>8</answer>", "7"], ["<answer>7</answer>"] * 3) == [
        2.0, 0.0, 0.0,
    ]
    whole = _reward(reg, "exact_match", extract="whole")
    assert whole(["q"] * 2, ["  yes ", "no"], ["yes"] * 2) == [1.0, 0.0]


def test_exact_match_refuses_data_answers_it_cannot_read_instead_of_scoring_zero(reg):
    reward = _reward(reg, "exact_match")
    with pytest.raises(LaddError, match="holds no answer for extract=last_number"):
        reward(["q"], [" 5"], [" no number here"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"extract": "regex"}, "extract=regex needs pattern"),
        ({"extract": "regex", "pattern": "("}, "is no regular expression"),
        ({"extract": "regex", "pattern": "a"}, "has no group"),
        ({"pattern": "(a)"}, "applies to extract=regex only"),
        ({"extract": "first"}, "extract='first' is not valid"),
    ],
)
def test_bad_extractor_options_are_one_line(reg, options, message):
    with pytest.raises(InvalidConfigError, match=message):
        _reward(reg, "exact_match", **options)


def test_format_matches_the_whole_completion(reg):
    reward = _reward(reg, "format")  # d1's reasoning and answer tags
    texts = [
        "<reasoning>\nadd\n</reasoning>\n<answer>\n5\n</answer>", "<answer>5</answer>", "x <reasoning>a</reasoning>"
    ]
    assert reward(["q"] * 3, texts, ["r"] * 3) == [1.0, 0.0, 0.0]


class _Task:
    """A dataset shipping its own checker: the answer must be the prompt's number doubled."""

    verifies = True

    def verify(self, prompt, completion, reference):
        return 1.0 if completion.strip() == str(2 * int(prompt)) else -1.0


def test_checker_runs_the_tasks_own_check(reg):
    reward = _reward(reg, "checker", dataset=_Task())
    assert reward(["3", "4"], ["6", "9"], ["", ""]) == [1.0, -1.0]


def test_checker_refuses_a_dataset_without_one(reg):
    with pytest.raises(IncompatibleComponentsError, match=r"reward 'checker' .* ships none \(Dataset.verifies\)"):
        _reward(reg, "checker", dataset=object())


class _Bad:
    def __init__(self, values=None, error=None):
        self.values, self.error = values, error

    def __call__(self, prompts, completions, references):
        if self.error is not None:
            raise self.error
        return self.values


@pytest.mark.parametrize(
    ("reward", "message"),
    [
        (_Bad(error=ZeroDivisionError("division by zero")), "reward 'bad' raised ZeroDivisionError: division by zero"),
        (_Bad([1.0, math.nan]), "reward 'bad' gave nan for row 1"),
        (_Bad([1.0, "1"]), "reward 'bad' gave '1' for row 1"),
        (_Bad([None, 1.0]), "reward 'bad' gave None for row 0"),
        (_Bad([1.0, math.inf]), "reward 'bad' gave inf for row 1"),
        (_Bad([True, 1.0]), "reward 'bad' gave True for row 0"),
        (_Bad([1.0]), "reward 'bad' gave 1 values for 2 completions"),
    ],
)
def test_a_misbehaving_reward_stops_in_one_line_naming_it_and_the_row(reward, message):
    with pytest.raises(LaddError, match=message) as caught:
        scored(reward, "bad", ["p", "p"], ["a", "b"], ["r", "r"])
    assert "\n" not in str(caught.value)
