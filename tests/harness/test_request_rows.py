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


def test_a_model_trained_at_any_length_is_scored_over_its_context_and_continuation_alone():
    (row,) = windows([1, 2, 3], [4, 5], 8, UNKNOWN, fill=False)
    assert row == Window((1, 2, 3, 4, 5), (False,) * 3 + (True,) * 2, False)
    rows = windows([], list(range(10)), 4, UNKNOWN, fill=False)
    assert [r.tokens for r in rows] == [(0, 1, 2, 3), (4, 5, 6, 7), (6, 7, 8, 9)], "long documents: as before"


def test_tokens_given_after_the_continuation_close_its_last_row_unscored():
    (row,) = windows([1, 2], [3, 4], 8, UNKNOWN, fill=False, after=[0])
    assert row == Window((1, 2, 3, 4, 0), (False, False, True, True, False), False)
    (row,) = windows([1, 2], [3, 4], 6, UNKNOWN, after=[0])
    assert row.tokens == (1, 2, 3, 4, 0, UNKNOWN) and row.scored == (False, False, True, True, False, False)
    rows = windows([], [3, 4, 5, 6], 4, UNKNOWN, fill=False, after=[0])  # the full last chunk leaves room for it
    assert [r.tokens for r in rows] == [(3, 4, 5), (4, 5, 6, 0)]
    assert [t for r in rows for t, s in zip(r.tokens, r.scored, strict=True) if s] == [3, 4, 5, 6]


class Bos(Characters):
    """Characters, with a BOS (id 1) first when special tokens are asked for."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [1] * add_special_tokens + super().__call__(text)["input_ids"]}


def test_with_special_tokens_the_pair_is_encoded_as_lladas_evaluator_calls_its_tokenizer():
    assert encode_pair(Bos(), "ab", "c", special_tokens=True) == ([1, 97, 98], [99])
    assert encode_pair(Bos(), "", "c", special_tokens=True) == ([1], [99])
    assert encode_pair(Bos(), "ab", "c") == ([97, 98], [99])
