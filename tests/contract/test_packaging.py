"""Packaging: the wheel carries every source package, and ladd installed from it works outside the checkout."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support import ROOT, run_ladd

import registry
from registry import KINDS

pytestmark = pytest.mark.slow  # builds the wheel and installs it

SOURCE_SUFFIXES = {".py", ".yaml", ".jsonl", ".txt", ".md", ".typed"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        check=True, timeout=300, cwd=out,
    )
    return next(out.glob("ladd-*.whl"))


def _source_files() -> set[str]:
    """Where each file of the checkout's packages lands in a wheel (configs/ is installed as ladd_configs/)."""
    found = set()
    for folder, package in (("registry", "registry"), ("ladd_plugins", "ladd_plugins"), ("configs", "ladd_configs")):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts:
                found.add(f"{package}/{path.relative_to(ROOT / folder).as_posix()}")
    return found


def test_wheel_contains_every_source_file_the_config_tree_and_the_entry_points(wheel):
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    assert sorted(_source_files() - names) == []
    assert "ladd_plugins/schedules/closed_form.py" in names and "ladd_configs/train.yaml" in names
    assert {"registry/py.typed", "registry/toolkit/sampling.py"} <= names, "the typed marker and the toolkit ship"
    entry_points = archive.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert (
        "[ladd]" in entry_points
        and "builtin = ladd_plugins" in entry_points
        and "ladd = registry.cli:main" in entry_points
    )


def test_ladd_installed_from_the_wheel_lists_every_component_of_the_checkout(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    # The dependencies (and pip) come from this interpreter's environment; ladd itself only from the wheel.
    paths = subprocess.check_output(
        [sys.executable, "-I", "-c", "import sys; print('\\n'.join(sys.path))"], text=True
    ).split("\n")
    (site / "dependencies.pth").write_text("\n".join(p for p in paths if p and Path(p).resolve() != ROOT))
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
        check=True,
        timeout=300,
        cwd=tmp_path,
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    script = "import registry, ladd_plugins; print(registry.__file__, ladd_plugins.__file__)"
    where = subprocess.check_output([python, "-c", script], text=True, cwd=tmp_path, env=env)
    assert all(path.startswith(str(site)) for path in where.split()), where

    listed = subprocess.run(
        [venv / "bin" / "ladd", "list-components", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    rows = json.loads(listed.stdout)
    assert {r["kind"] for r in rows} == set(KINDS)
    assert {(r["kind"], r["name"]) for r in rows} == {(c.kind, c.name) for c in registry.load()}


def test_builtin_plugin_failing_to_import_is_fatal_with_its_exception(tmp_path):
    shadow = tmp_path / "shadow" / "ladd_plugins"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("from .left_out import config\n")  # as from a wheel that left out a subpackage
    out = run_ladd("list-components", env={"PYTHONPATH": str(shadow.parent)}, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "ladd: error: ladd's own plugin 'builtin' failed to load (ModuleNotFoundError: No module named "
        "'ladd_plugins.left_out'): this installation of ladd is broken; reinstall it (LADD_DEBUG=1 shows the traceback)"
    ]
