"""The shipped increments pairs: every answer right, every question distinct, and the file the script writes."""
from __future__ import annotations

import json
import re
import sys

from support import ROOT

CORPUS = ROOT / "ladd_plugins" / "datasets" / "chat" / "corpus" / "increments.jsonl"


def test_every_answer_is_right_and_every_question_distinct():
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    questions = set()
    for row in rows:
        number, operation, digit = re.fullmatch(r"What is (\d+) (plus|minus) (\d)\?", row["prompt"]).groups()
        answer = int(number) + int(digit) if operation == "plus" else int(number) - int(digit)
        assert row["response"] == f" {number} {operation} {digit} is {answer}." and answer >= 0 and int(number) < 1000
        questions.add(row["prompt"])
    assert len(rows) == len(questions) == 5000


def test_the_script_writes_the_shipped_file():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from make_increments import rows
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert "".join(json.dumps(pair) + "\n" for pair in rows()) == CORPUS.read_text(encoding="utf-8")
