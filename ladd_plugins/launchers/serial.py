"""The serial launcher: a sweep's jobs one after another in ladd's own process."""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from registry.interfaces import Launcher


class SerialLauncher(Launcher):
    """Each job in turn, in this process; a signal that stops one (its status 128 + N) stops the sweep there."""

    waits = True

    def launch(self, jobs: Sequence[Callable[[], int]], folder: Path, started: Callable[[int, str], None]) -> None:
        for position, job in enumerate(jobs):
            started(position, str(os.getpid()))  # the job runs as this process
            if job() > 128:
                return
