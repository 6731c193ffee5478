"""lm-eval's requests as rows of a model of length ``S``: a context kept clean, a continuation scored, the rest unknown.

A model of length ``S`` scores at most ``S`` positions at a time. A continuation is cut into chunks of at most ``S``
tokens from its start; each chunk is scored after the tokens just before it (context, then earlier chunks), as many
as fit in ``S``. A model trained at one length (``harness.length=fixed``, MDLM) gets each row filled up to ``S`` with
the mask id (unknown: never revealed, never scored); a model trained at any length (``variable``: LLaDA, Dream) is
scored over the row's own tokens, as their evaluators do. So a request that fits keeps its whole context, a context
too long for the row loses its oldest tokens, and a document longer than ``S`` (``loglikelihood_rolling``) is scored
chunk by chunk, each chunk given the tokens before it that fit: the chain rule over windows, no token scored twice or
left out. Tokens given ``after`` the continuation (Dream's evaluator appends EOS) close the last row, clean and
unscored. A request whose row lost preceding tokens is counted (``Window.cut``) and reported.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from registry.errors import LaddError


@dataclass(frozen=True)
class Window:
    """One row: ``tokens`` (the given ids, then the scored ones, then the mask id) and which positions are scored."""

    tokens: tuple[int, ...]
    scored: tuple[bool, ...]
    cut: bool  # the row conditions on fewer preceding tokens than the request holds


def windows(
    context: Sequence[int], continuation: Sequence[int], length: int, unknown: int, fill: bool = True,
    after: Sequence[int] = (),
) -> list[Window]:
    """The rows that score ``continuation`` after ``context`` with a model of ``length`` positions, filled with
    ``unknown`` up to the length when ``fill`` (see the module)."""
    whole, start, stop = [*context, *continuation], len(context), len(context) + len(continuation)
    if len(after) >= length:
        raise LaddError(f"{len(after)} tokens given after each continuation leave no room in rows of {length}")
    rows, begin = [], start
    while begin < stop:
        end = min(begin + length, stop)
        tail = tuple(after) if end == stop else ()
        if end - begin + len(tail) > length:  # the last chunk leaves room for the tokens after it
            end, tail = begin + length - len(after), ()
        room = length - (end - begin) - len(tail)
        given = whole[max(0, begin - room) : begin]
        free = room - len(given) if fill else 0
        tokens = (*given, *whole[begin:end], *tail, *([unknown] * free))
        scored = (False,) * len(given) + (True,) * (end - begin) + (False,) * (len(tail) + free)
        rows.append(Window(tokens, scored, len(given) < begin))
        begin = end
    return rows


def encode_pair(
    tokenizer: Any, context: str, continuation: str, special_tokens: bool = False
) -> tuple[list[int], list[int]]:
    """Ids of a (context, continuation) pair as lm-eval's causal models make them: a context's trailing spaces move
    to the continuation, and the continuation's ids are those the whole text has after the context's."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole, head = encode(tokenizer, context + continuation, special_tokens), encode(tokenizer, context, special_tokens)
    return head, whole[len(head) :]


def encode(tokenizer: Any, text: str, special_tokens: bool = False) -> list[int]:
    """The ids of ``text``, with the special tokens the tokenizer adds when ``special_tokens`` (special-token strings
    in a task's text read as those tokens, as lm-eval's models read them)."""
    return list(tokenizer(text, add_special_tokens=special_tokens)["input_ids"])


def check_ids(ids: Sequence[int], vocab_size: int, what: str) -> None:
    """Refuse text that encodes to the diffusion mask id (or beyond the model's vocabulary)."""
    if any(i >= vocab_size or i < 0 for i in ids):
        raise LaddError(
            f"{what} encodes to an id outside the model's {vocab_size} tokens (the mask token's text?); a task's text "
            f"cannot hold the diffusion mask"
        )
