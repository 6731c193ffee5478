"""A job that records when it ran and the threads it was given, for the local launcher's tests (its processes import
this module by name, so it imports nothing of the tests')."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path


class TimedJob:
    """Sleeps ``seconds``, then writes its start and end times, ``OMP_NUM_THREADS`` and torch's thread count."""

    def __init__(self, path: Path, seconds: float) -> None:
        self.path, self.seconds = path, seconds

    def __call__(self) -> int:
        start = time.time()
        import torch

        time.sleep(self.seconds)
        seen = {"start": start, "end": time.time(), "omp": os.environ.get("OMP_NUM_THREADS")}
        self.path.write_text(json.dumps({**seen, "torch": torch.get_num_threads()}))
        return 0
