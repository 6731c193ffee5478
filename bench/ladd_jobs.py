"""``ladd`` commands run a few at a time by the results scripts, each printed as it starts."""
from __future__ import annotations

import subprocess
import sys
import time


def run_all(
    commands: list[list[str]], jobs: int, log: list[str] | None = None, env: dict[str, str] | None = None
) -> None:
    """Run ``ladd`` commands, ``jobs`` at a time, each printed (and added to ``log``) first, in environment ``env``
    (default: this one); stop on the first failure."""
    running: list[tuple[list[str], subprocess.Popen]] = []
    pending = list(commands)
    while pending or running:
        while pending and len(running) < jobs:
            args = pending.pop(0)
            line = "ladd " + " ".join(args)
            print(line, flush=True)
            if log is not None:
                log.append(line)
            running.append((args, subprocess.Popen([sys.executable, "-m", "registry.cli", *args], env=env)))
        for entry in running:
            if entry[1].poll() is not None:
                running.remove(entry)
                if entry[1].returncode:
                    raise SystemExit(f"ladd {' '.join(entry[0])} failed (exit {entry[1].returncode})")
                break
        else:
            time.sleep(5)
