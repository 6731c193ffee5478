"""What the registry noticed while loading plugins (notes, failed plugins, name clashes), printed to stderr."""
from __future__ import annotations

import sys

from registry.host.presets import preset_clashes
from registry.host.registry import Registry, clash_message


def clash_lines(registry: Registry) -> list[str]:
    """One line per component name or preset that two plugins register."""
    return [clash_message(found) for found in registry.clashes()] + preset_clashes(registry)


def print_problems(registry: Registry) -> None:
    """Notes, plugins that failed to load and clashes, each a ``ladd:`` line on stderr."""
    for note in registry.notes:
        print(f"ladd: note: {note}", file=sys.stderr)
    for failure in registry.failures:
        print(f"ladd: warning: {failure.message}", file=sys.stderr)
    for line in clash_lines(registry):
        print(f"ladd: warning: {line}", file=sys.stderr)
