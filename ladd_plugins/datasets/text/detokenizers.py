"""Undo the word-level tokenisation of classic corpora so a subword tokenizer sees ordinary text.

Each corpus was published with spaces around punctuation and its own escapes (PTB's ``N`` for numbers,
WikiText's ``@-@``); these rules restore the usual spelling, as the MDLM zero-shot evaluation does.
Rules are applied in order.
"""
from __future__ import annotations

import re
from collections.abc import Callable

Rule = tuple[str, str]  # (regular expression, replacement)


def _apply(rules: list[Rule], text: str) -> str:
    for pattern, replacement in rules:
        text = re.sub(pattern, replacement, text)
    return text


def _closing(open_: str, close: str) -> Rule:
    """Drop the spaces just inside a pair of brackets or quotes."""
    o, c = re.escape(open_), re.escape(close)
    return rf"{o}\s*([^{c}]*?)\s*{c}", rf"{open_}\1{close}"


_LM1B: list[Rule] = [
    (r"(https?) : / / ", r"\1://"),
    (r" '(\w+)", r"'\1"),  # contractions and possessives: "it 's" -> "it's"
    (r"(\w) \.(?= |$)", r"\1."),
    (r" ([?!,:;])(?= |$)", r"\1"),
    (r" / ", "/"),
    (r'" ([^"]+) "', r'"\1"'),
    (r"' ([^']+) '", r"'\1'"),
    (r"\( ([^()]+) \)", r"(\1)"),
    (r"\[ ([^\[\]]+) \]", r"[\1]"),
    (r"([$£]) ", r"\1"),
]

_PTB: list[Rule] = [
    (r" 's", "'s"),
    (r"s ' ", "s' "),
    (r" n't", "n't"),
    (r" \n ", "\n"),
    (r"\\/", "/"),
    (r"(?<= )N(?= )", "1"),  # PTB writes every number as N
    (r"([$#]) 1", r"\g<1>1"),
    (r"<unk>", "?"),
]

_WIKITEXT: list[Rule] = [
    (r"s '", "s'"),
    (r" @([-,.])@ ", r"\1"),  # number separators: "1 @,@ 000" -> "1,000"
    (r" ([:;.!?,]) ", r"\1 "),
    _closing("(", ")"),
    _closing("[", "]"),
    _closing("{", "}"),
    _closing('"', '"'),
    _closing("'", "'"),
    (r"= = = =", "===="),
    (r"= = =", "==="),
    (r"= =", "=="),
    (r" ° ", "°"),
    (r" \n", "\n"),
    (r"\n ", "\n"),
    (r"(?<= )N(?= )", "1"),
    (r" 's", "'s"),
]


def lm1b(text: str) -> str:
    """One Billion Words: attach punctuation, contractions, brackets, quotes and currency signs."""
    return _apply(_LM1B, text)


def ptb(text: str) -> str:
    """Penn Treebank: contractions, escaped slashes, ``N`` as a number and ``<unk>`` as ``?``."""
    return _apply(_PTB, text)


def wikitext(text: str) -> str:
    """WikiText: ``@-@``-style separators, spaced punctuation, brackets and heading markers."""
    return _apply(_WIKITEXT, text)


def lambada(text: str) -> str:
    """LAMBADA: straight double quotes, and the passage on a fresh line (GPT-2's zero-shot convention)."""
    return "\n" + text.replace("\u201c", '"').replace("\u201d", '"').strip()


def scientific_papers(text: str) -> str:
    """arXiv and PubMed articles: the WikiText rules, then the LM1B ones."""
    return lm1b(wikitext(text))


DETOKENIZERS: dict[str, Callable[[str], str]] = {
    "lm1b": lm1b,
    "ptb": ptb,
    "wikitext": wikitext,
    "lambada": lambada,
    "scientific_papers": scientific_papers,
}
