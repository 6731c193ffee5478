"""Progress on stderr: lines in a log (per item, or at most every few seconds and at the end), a bar on a terminal."""
from __future__ import annotations

import io
import re

from registry.toolkit.progress import Progress, progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _lines(log: io.StringIO) -> list[str]:
    return [re.sub(r"\([\d.]+ s\)$", "(T s)", line) for line in log.getvalue().splitlines()]


def test_a_log_gets_a_line_per_finished_item(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    assert list(progress([1, 4], "evaluating x", name=lambda s: f"{s} steps")) == [1, 4]
    assert _lines(log) == ["evaluating x: 1/2, 1 steps done (T s)", "evaluating x: 2/2, 4 steps done (T s)"]


def test_counts_in_a_log_are_a_line_at_most_every_so_often_and_one_at_the_end(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    with Progress(10, "tokenising", "shards", initial=3, every=3600) as shown:
        for done in range(4, 8):
            shown.note(f"{done}k documents")
            shown.update()
    assert _lines(log) == ["tokenising: 7/10 shards, 7k documents (T s)"], "within the hour: only the last count"
    with Progress(2, "counting", every=0) as shown:
        shown.update()
        shown.update()
    assert _lines(log)[1:] == ["counting: 1/2 (T s)", "counting: 2/2 (T s)"], "the end repeats no line"


def test_nothing_when_disabled_or_when_nothing_was_done(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    assert list(progress(range(3), "budgets", enabled=False)) == [0, 1, 2]
    with Progress(5, "tokenising", initial=5):
        pass
    assert log.getvalue() == ""


def test_a_terminal_gets_a_bar(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert list(progress(range(3), "budgets")) == [0, 1, 2]
    assert "\r" in terminal.getvalue() and "budgets: 100%" in terminal.getvalue()
