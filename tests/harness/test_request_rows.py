"""lm-eval requests as rows of a fixed-length model (registry/harness/requests.py)."""
from __future__ import annotations

from registry.harness.requests import Window, encode_pair, windows

UNKNOWN = 99


def test_a_request_that_fits_keeps_its_whole_context_and_leaves_the_rest_unknown():
    (row,) = windows([1, 2, 3], [4, 5], 8, UNKNOWN)
    assert row == Window((1, 2, 3, 4, 5, *[UNKNOWN] * 3), (False,) * 3 + (True,) * 2 + (False,) * 3, False)


def test_a_long_context_loses_its_oldest_tokens_and_says_so():
    (row,) = windows(list(range(10)), [20, 21], 6, UNKNOWN)
    assert row.tokens == (6, 7, 8, 9, 20, 21) and row.scored == (False,) * 4 + (True,) * 2 and row.cut


def test_a_document_longer_than_the_model_is_scored_chunk_by_chunk_each_token_once():
    rows = windows([], list(range(10)), 4, UNKNOWN)
    assert [r.tokens for r in rows] == [(0, 1, 2, 3), (4, 5, 6, 7), (6, 7, 8, 9)]
    assert [r.scored for r in rows] == [(True,) * 4, (True,) * 4, (False, False, True, True)]
    assert [r.cut for r in rows] == [False, True, True]  # the later chunks see only the tokens that fit
    scored = [t for r in rows for t, s in zip(r.tokens, r.scored, strict=True) if s]
    assert scored == list(range(10))


def test_a_short_document_is_one_row_with_its_end_unknown():
    assert windows([], [7, 8], 4, UNKNOWN) == [Window((7, 8, UNKNOWN, UNKNOWN), (True, True, False, False), False)]


class Characters:
    """A tokenizer of one id per character (spaces included)."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}


def test_a_context_s_trailing_space_moves_to_the_continuation_as_lm_eval_s_causal_models_do():
    assert encode_pair(Characters(), "ab ", "c") == ([97, 98], [32, 99])
    assert encode_pair(Characters(), "", "xy") == ([], [120, 121])
