"""Runs the ladd command and sends it a signal at one chosen file write: kills at exact points of a run.

    python tests/kill_switch.py SIGNAL:WHEN:COUNT[:PATH] ARGS...

ladd writes every file under a temporary name and renames it into place; at the COUNT-th rename onto a
path ending with PATH (``checkpoints/stage1/last.ckpt``), the process sends itself SIGNAL (``SIGKILL``,
``SIGTERM``, ...) ``before`` the rename (the file is written in full but not in place) or ``after`` it.
WHEN ``mkstemp``: just after the COUNT-th file is created in the system's temporary folder (``$TMPDIR``).
"""
from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any


def _arm(spec: str) -> None:
    name, when, count, *target = spec.split(":", 3)
    if when == "mkstemp":
        _arm_temporary_files(getattr(signal, name), int(count))
    else:
        _arm_renames(getattr(signal, name), when, int(count), target[0])


def _arm_temporary_files(number: int, count: int) -> None:
    seen, create = [0], tempfile.mkstemp

    def mkstemp(*args: Any, **kwargs: Any) -> Any:
        made = create(*args, **kwargs)
        seen[0] += 1
        if seen[0] == count:
            os.kill(os.getpid(), number)
        return made

    tempfile.mkstemp = mkstemp


def _arm_renames(number: int, when: str, count: int, target: str) -> None:
    seen, rename = [0], os.replace

    def replace(source: Any, destination: Any, *args: Any, **kwargs: Any) -> None:
        hit = Path(destination).as_posix().endswith(target)
        if hit:
            seen[0] += 1
        if hit and seen[0] == count and when == "before":
            os.kill(os.getpid(), number)
        rename(source, destination, *args, **kwargs)
        if hit and seen[0] == count and when == "after":
            os.kill(os.getpid(), number)

    os.replace = replace


if __name__ == "__main__":
    _arm(sys.argv[1])
    from registry.cli import main

    sys.argv = ["ladd", *sys.argv[2:]]
    sys.exit(main())
