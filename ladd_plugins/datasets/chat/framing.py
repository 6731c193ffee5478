"""Turns as token ids: the tokenizer's chat template around them, or plain (each turn's text, no roles).

Each assistant turn is one training pair: the prompt is every turn before it framed as the template frames a
conversation waiting for the assistant (``add_generation_prompt``), the response the ids the template adds for the
turn itself (its end-of-turn token included). A template must render the conversation with the turn as the prompt
followed by the turn's ids; one that renders earlier turns differently once a later one exists is refused.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from registry.errors import InvalidConfigError, LaddError

from .conversations import ASSISTANT, Turn

Pair = tuple[list[int], list[int]]  # (prompt ids, response ids)


class Framing:
    """How turns become ids: with the tokenizer's chat template (``templated``) or plain."""

    def __init__(self, tokenizer: Any, chat_template: str, name: str) -> None:
        self.tokenizer = tokenizer
        held = bool(getattr(tokenizer, "chat_template", None))
        if chat_template == "tokenizer" and not held:
            raise InvalidConfigError(
                f"dataset.chat_template=tokenizer but tokenizer {name!r} has no chat template; choose a tokenizer "
                f"with one, or dataset.chat_template=auto (plain framing where there is none)"
            )
        self.templated = held and chat_template != "none"
        specials = sorted(tokenizer.added_tokens_encoder, key=len, reverse=True)
        # the text of a special token inside a turn would become that token under a template
        self._special = re.compile("|".join(map(re.escape, specials))) if specials and self.templated else None

    def pairs(self, turns: list[Turn], where: str) -> Iterator[Pair]:
        """(prompt, response) ids of every assistant turn given the turns before it."""
        for index, turn in enumerate(turns):
            if turn["role"] == ASSISTANT:
                yield self._pair(turns[:index], turn, where)

    def holds_special_text(self, turns: list[Turn]) -> bool:
        """Whether a turn's text spells a special token, which a template would read as the token itself."""
        return self._special is not None and any(self._special.search(turn["content"]) for turn in turns)

    def prompt(self, text: str) -> list[int] | None:
        """The ids of a user's ``text`` framed as the assistant's turn to come; None without a template."""
        if not self.templated:
            return None
        return self._render([{"role": "user", "content": text}], opened=True)

    def _pair(self, before: list[Turn], turn: Turn, where: str) -> Pair:
        if not self.templated:
            return [i for earlier in before for i in self._text(earlier["content"])], self._text(turn["content"])
        prompt, whole = self._render(before, opened=True), self._render([*before, turn], opened=False)
        if whole[: len(prompt)] != prompt:
            raise LaddError(
                f"{where}: the tokenizer's chat template renders the turns before an assistant turn differently once "
                f"the turn follows, so the prompt is no prefix of the conversation; use dataset.chat_template=none "
                f"or another tokenizer"
            )
        return prompt, whole[len(prompt):]

    def _render(self, turns: list[Turn], opened: bool) -> list[int]:
        text = self.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=opened)
        # the template writes its own special tokens (BOS, role headers) as text: they are read as tokens here
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _text(self, text: str) -> list[int]:
        # plain text, as the text dataset reads it: a typed special token stays text
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])
