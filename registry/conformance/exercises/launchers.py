"""The exercise of a launcher: two jobs of no work launched, each named by an id and run exactly once."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from registry.host.component import Component
from registry.host.registry import Registry

from ..jobs import MarkingJob
from .common import during, expect

#: how long a check waits for a queueing launcher's two jobs to end
_QUEUED_SECONDS = 600.0


def exercise_launcher(component: Component, registry: Registry) -> None:
    """Two jobs launched: each is named by an id as it is handed over and runs exactly once (a launcher that queues
    them is followed with ``alive`` until both have left its queue). The folder is a temporary one, which a cluster's
    nodes must see (``TMPDIR``)."""
    launcher = component.build({})
    with tempfile.TemporaryDirectory() as scratch:
        marks = [Path(scratch) / f"job{index}" for index in range(2)]
        ids: dict[int, str] = {}
        with during("launching two jobs"):
            launcher.launch([MarkingJob(mark) for mark in marks], Path(scratch) / "launcher", ids.__setitem__)
        expect(
            sorted(ids) == [0, 1] and all(isinstance(i, str) and i for i in ids.values()),
            f"launch must call started(position, job_id) once for each job, with a non-empty id; it gave {ids}",
        )
        deadline = time.monotonic() + _QUEUED_SECONDS
        while not launcher.waits and time.monotonic() < deadline:
            with during("asking which jobs are alive"):
                if not launcher.alive(list(ids.values()), Path(scratch) / "launcher"):
                    break
            time.sleep(1.0)
        ran = [mark.read_text() if mark.is_file() else "" for mark in marks]
        expect(ran == ["ran\n", "ran\n"], f"each job must run exactly once; their marks hold {ran}")
