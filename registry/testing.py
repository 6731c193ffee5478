"""Test helpers for plugin authors."""
from __future__ import annotations

from registry.conformance.validation import check_plugin
from registry.host.registry import load


def assert_valid_plugin(name: str) -> None:
    """Fail (for pytest) with every problem ``ladd plugins check NAME`` would report."""
    problems = check_plugin(name, load())
    assert not problems, f"plugin {name!r}:\n  " + "\n  ".join(problems)
