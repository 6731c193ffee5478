"""Loop progress: lines in a log, a bar on a terminal, nothing when disabled."""
from __future__ import annotations

import io
import re

from registry.engine.progress import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_line_per_finished_item(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    assert list(progress([1, 4], "evaluating x", name=lambda s: f"{s} steps")) == [1, 4]
    lines = log.getvalue().splitlines()
    assert [re.sub(r"[\d.]+ s\)", "T s)", line) for line in lines] == [
        "evaluating x: 1 steps done (1/2, T s)",
        "evaluating x: 4 steps done (2/2, T s)",
    ]


def test_a_disabled_loop_prints_nothing(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    assert list(progress(range(3), "budgets", enabled=False)) == [0, 1, 2]
    assert log.getvalue() == ""


def test_a_terminal_gets_a_bar(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert list(progress(range(3), "budgets")) == [0, 1, 2]
    assert "\r" in terminal.getvalue() and "budgets: 100%" in terminal.getvalue()
