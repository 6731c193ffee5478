"""Writes ``ladd_plugins/datasets/chat/corpus/increments.jsonl``: 5,000 distinct questions adding a digit to, or taking
one from, a whole number below 1000 (never below zero), drawn with Python's ``random.Random`` seeded 20261210.

    python bench/make_increments.py
"""
from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "ladd_plugins" / "datasets" / "chat" / "corpus" / "increments.jsonl"
ROWS, SEED = 5000, 20261210


def rows() -> list[dict[str, str]]:
    """The corpus's pairs, in the order drawn."""
    rng, seen, pairs = random.Random(SEED), set(), []
    while len(pairs) < ROWS:
        number, digit, operation = rng.randrange(1000), rng.randrange(1, 10), rng.choice(("plus", "minus"))
        if (operation == "minus" and number < digit) or (number, operation, digit) in seen:
            continue
        seen.add((number, operation, digit))
        answer = number + digit if operation == "plus" else number - digit
        pairs.append({
            "prompt": f"What is {number} {operation} {digit}?",
            "response": f" {number} {operation} {digit} is {answer}.",
        })
    return pairs


if __name__ == "__main__":
    OUT.write_text("".join(json.dumps(pair) + "\n" for pair in rows()), encoding="utf-8")
    print(f"{ROWS} pairs: {OUT}")
