"""Runs the ladd command and sends it a signal at one chosen file write: kills at exact points of a run.

    python tests/kill_switch.py SIGNAL:WHEN:COUNT:PATH ARGS...

ladd writes every file under a temporary name and renames it into place; at the COUNT-th rename onto a
path ending with PATH (``checkpoints/stage1/last.ckpt``), the process sends itself SIGNAL (``SIGKILL``,
``SIGTERM``, ...) ``before`` the rename (the file is written in full but not in place) or ``after`` it.
"""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any


def _arm(spec: str) -> None:
    name, when, count, target = spec.split(":", 3)
    number, seen, rename = getattr(signal, name), [0], os.replace

    def replace(source: Any, destination: Any, *args: Any, **kwargs: Any) -> None:
        hit = Path(destination).as_posix().endswith(target)
        if hit:
            seen[0] += 1
        if hit and seen[0] == int(count) and when == "before":
            os.kill(os.getpid(), number)
        rename(source, destination, *args, **kwargs)
        if hit and seen[0] == int(count) and when == "after":
            os.kill(os.getpid(), number)

    os.replace = replace


if __name__ == "__main__":
    _arm(sys.argv[1])
    from registry.cli import main

    sys.argv = ["ladd", *sys.argv[2:]]
    sys.exit(main())
