"""The project's static checks pass: ruff (lint rules in pyproject.toml) over the checkout, mypy over the packages."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from support import ROOT

pytestmark = pytest.mark.slow  # each check runs as a subprocess over the whole code base


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(tool) is None:
        pytest.skip(f"{tool} is not installed in this environment (pip install -e '.[dev]' installs it)")
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_reports_nothing():
    done = _run("ruff", "check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_reports_nothing(tmp_path):
    done = _run("mypy", "--cache-dir", str(tmp_path / "mypy_cache"))  # the files and settings come from pyproject.toml
    assert done.returncode == 0, done.stdout + done.stderr
