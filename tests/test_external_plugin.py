"""A third-party plugin package, installed with pip during the test run, extends ladd without touching it."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from conftest import TINY, run_ladd

EXAMPLE = Path(__file__).parent / "plugins" / "example"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> str:
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target", str(target), str(EXAMPLE)],
        check=True,
        timeout=300,
    )
    return str(target)


def _fake_distribution(root: Path, name: str, module_source: str) -> str:
    """A minimal installed distribution (dist-info with an entry point in group ``ladd``) on a fresh path."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{name}.py").write_text(textwrap.dedent(module_source))
    info = root / f"{name}-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(f"[ladd]\n{name} = {name}\n")
    return str(root)


def test_installed_plugin_is_listed_with_its_origin(plugin_path):
    out = run_ladd("list-components", "--json", env={"PYTHONPATH": plugin_path})
    assert out.returncode == 0, out.stderr
    rows = {(r["kind"], r["name"]): r for r in json.loads(out.stdout)}
    for key in [("schedule", "exponential"), ("backbone", "conv")]:
        assert rows[key]["plugin"] == "example"
        assert rows[key]["distribution"] == "ladd-example-plugin" and rows[key]["version"] == "0.3.0"
    assert rows[("schedule", "linear")]["plugin"] == "builtin"


def test_training_selects_plugin_components_from_config_alone(plugin_path, tmp_path):
    out = run_ladd(
        "train", "experiment=example/conv_mdlm", *TINY, "train.stages=[{steps:3}]", f"run_dir={tmp_path}",
        env={"PYTHONPATH": plugin_path},
    )
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert (config["schedule"]["name"], config["backbone"]["name"], config["backbone"]["kernel"]) == ("exponential", "conv", 5)
    origins = json.loads((tmp_path / "components.json").read_text())
    assert origins["backbone"]["distribution"] == "ladd-example-plugin"


def test_name_clash_names_both_plugins(plugin_path, tmp_path):
    clash = _fake_distribution(tmp_path / "clash", "clashing_plugin", """
        from registry import ComponentSpec, hookimpl

        @hookimpl
        def ladd_components():
            return [ComponentSpec("backbone", "conv", "math:sqrt")]
    """)
    out = run_ladd("list-components", env={"PYTHONPATH": f"{plugin_path}:{clash}"})
    assert out.returncode == 2
    assert "backbone 'conv'" in out.stderr and "'example'" in out.stderr and "'clashing_plugin'" in out.stderr


def test_plugin_that_fails_to_import_is_reported_and_others_work(tmp_path):
    broken = _fake_distribution(tmp_path / "broken", "broken_plugin", "import module_that_does_not_exist\n")
    out = run_ladd("list-components", env={"PYTHONPATH": broken})
    assert out.returncode == 0
    assert "plugin 'broken_plugin' failed to load: ModuleNotFoundError" in out.stderr
    assert "mmdit" in out.stdout
    strict = run_ladd("list-components", env={"PYTHONPATH": broken, "LADD_STRICT_PLUGINS": "1"})
    assert strict.returncode == 2 and "broken_plugin" in strict.stderr


def test_blocked_and_non_autoloaded_plugins_are_absent_and_reported(plugin_path):
    blocked = run_ladd("list-components", "--json", env={"PYTHONPATH": plugin_path, "LADD_PLUGINS_BLOCK": "example"})
    names = {r["name"] for r in json.loads(blocked.stdout)}
    assert "conv" not in names and "exponential" not in names and "mmdit" in names
    shown = run_ladd("plugins", env={"PYTHONPATH": plugin_path, "LADD_PLUGINS_BLOCK": "example"})
    assert "example" in shown.stdout and "BLOCKED: blocked by LADD_PLUGINS_BLOCK" in shown.stdout

    off = run_ladd("plugins", env={"PYTHONPATH": plugin_path, "LADD_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "BLOCKED: autoloading disabled" in off.stdout and "builtin" in off.stdout

    allowed = run_ladd("list-components", "--json", env={"PYTHONPATH": plugin_path, "LADD_PLUGINS_ALLOW": "example"})
    assert "conv" in {r["name"] for r in json.loads(allowed.stdout)}
