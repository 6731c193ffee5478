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


def test_plugin_check_passes_good_plugins(plugin_path):
    example = run_ladd("plugins", "check", "example", env={"PYTHONPATH": plugin_path})
    assert example.returncode == 0, example.stderr
    assert "plugin 'example': 2 components import and match their configs; 2 built and ran" in example.stdout
    builtin = run_ladd("plugins", "check", "builtin", env={"PYTHONPATH": plugin_path})
    assert builtin.returncode == 0, builtin.stderr
    # offline, the pretrained encoder's default model is missing and Gen PPL needs a text tokenizer: noted, not failed
    assert "2 need downloads or text data" in builtin.stdout
    assert "note: encoder 'pretrained': not exercised" in builtin.stderr and "note: metric 'gen_ppl'" in builtin.stderr


def test_plugin_check_reports_each_problem_precisely(tmp_path):
    broken = _fake_distribution(tmp_path / "bad", "shoddy_plugin", """
        from dataclasses import dataclass

        import torch

        from registry import ComponentSpec, hookimpl


        @dataclass
        class Options:
            size: int = 3


        def needs_rate(rate):
            return None


        def no_context(config):
            return None


        class WrongShape:
            vocab_size, seq_len = 2, 4

            def __init__(self, config):
                pass

            def batches(self, batch_size, seed, split="train"):
                while True:
                    yield torch.zeros(batch_size, 5, dtype=torch.long)


        @hookimpl
        def ladd_components():
            return [
                ComponentSpec("backbone", "ghost", "no_such_module_anywhere:Ghost", Options),
                ComponentSpec("schedule", "needy", needs_rate),
                ComponentSpec("process", "deaf", no_context, Options),
                ComponentSpec("dataset", "skewed", WrongShape, Options),
            ]
    """)
    out = run_ladd("plugins", "check", "shoddy_plugin", env={"PYTHONPATH": broken})
    assert out.returncode == 2
    assert "4 problem(s)" in out.stderr
    assert "backbone 'ghost': factory 'no_such_module_anywhere:Ghost' does not import: ModuleNotFoundError" in out.stderr
    assert "schedule 'needy': has no config but its factory requires rate" in out.stderr
    assert "process 'deaf': its factory does not accept the keyword(s) schedule, vocab_size" in out.stderr
    assert "dataset 'skewed': fails when built and run at a tiny size: AssertionError: batch of shape (3, 5)" in out.stderr


def test_pytest_helper_flags_a_broken_plugin(monkeypatch, tmp_path):
    import registry
    from registry import testing

    broken = _fake_distribution(tmp_path / "bad2", "hollow_plugin", """
        from registry import ComponentSpec, hookimpl

        @hookimpl
        def ladd_components():
            return [ComponentSpec("metric", "hollow", "no_such_module_either:Metric")]
    """)
    monkeypatch.syspath_prepend(broken)
    registry.load(reload=True)
    try:
        with pytest.raises(AssertionError, match="metric 'hollow': factory .* does not import"):
            testing.assert_valid_plugin("hollow_plugin")
        testing.assert_valid_plugin("builtin")
    finally:
        monkeypatch.undo()
        registry.load(reload=True)
