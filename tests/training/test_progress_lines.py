"""Training progress on a terminal is a bar; to a file or a pipe it is one line every ``train.log_every`` steps."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest
from support import TINY, run_ladd

pytestmark = pytest.mark.slow  # trains in subprocesses

ARGS = [
    "train", "experiment=binsaw/mdlm_cpu", *[option for option in TINY if option != "train.progress=false"],
    "train.log_every=3", "train.stages=[{steps:7}]",
]


def test_a_redirected_progress_is_a_line_every_log_every_steps(tmp_path):
    done = run_ladd(*ARGS, f"run_dir={tmp_path / 'run'}")
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stdout
    lines = done.stdout.splitlines()
    steps = [re.fullmatch(r"stage 1: step (\d)/7, loss=[\d.]+, token=[\d.]+ \([\d.]+ s\)", line) for line in lines[:-1]]
    assert all(steps), lines
    assert [int(step[1]) for step in steps if step] == [3, 6, 7]  # every third step and the stage's last
    assert lines[-1] == f"trained mdlm: {tmp_path / 'run'}"


def test_a_terminal_gets_the_bar(tmp_path):
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a bar needs a width
    command = [sys.executable, "-m", "registry.cli", *ARGS, f"run_dir={tmp_path / 'run'}"]
    process = subprocess.Popen(command, stdout=follower, stderr=subprocess.DEVNULL)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert process.wait(timeout=300) == 0
    assert b"\r" in shown and b"stage 1: 100%" in shown
    assert b"loss=" in shown.rsplit(b"7/7", 1)[1], "the finished bar shows the loss terms"
    assert not re.search(rb"stage 1: step \d/7", shown)
