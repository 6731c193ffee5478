"""``ladd train`` with a process group timeout of a few seconds and a data preparation that takes longer.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/slow_preparation.py SECONDS ARGS...

The process that prepares the token cache sleeps SECONDS before building it; process groups time out
after 5 seconds; rank 1 starts a second after rank 0, so rank 0 usually prepares; a waiting process says so every
second. Training must still start: the ranks wait for the cache on the file system, not in the group.
"""
from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

from lightning.pytorch.strategies import ddp

from ladd_plugins.datasets.text import build
from registry.cli import main

TIMEOUT = timedelta(seconds=5)


def _short_timeout() -> None:
    init = ddp.DDPStrategy.__init__

    def with_timeout(self, *args, **kwargs) -> None:
        init(self, *args, **{**kwargs, "timeout": TIMEOUT})

    ddp.DDPStrategy.__init__ = with_timeout


def _slow_build(seconds: float) -> None:
    build_entry = build._build

    def slow(*args, **kwargs):
        print(f"rank {os.environ.get('RANK')} prepares", file=sys.stderr, flush=True)
        time.sleep(seconds)
        return build_entry(*args, **kwargs)

    build._build = slow


if __name__ == "__main__":
    _short_timeout()
    _slow_build(float(sys.argv[1]))
    build.WAIT_LINE_SECONDS = 1.0
    if os.environ.get("RANK") == "1":
        time.sleep(1.0)
    sys.exit(main(["train", *sys.argv[2:]]))
