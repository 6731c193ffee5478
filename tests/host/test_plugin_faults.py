"""Faulty plugins installed next to ladd: each is left out and named, or its clash reported, and ladd keeps working."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from support import TINY, fake_distribution, run_ladd

pytestmark = pytest.mark.slow  # the ladd command in subprocesses, and tiny training runs

SHORT = [*TINY, "train.stages=[{steps:2}]"]
#: the line `ladd plugins` prints for a failed plugin whose distribution has the same name
FAILED = "{name:<16} {name:<24} {dash:<10} FAILED: {error}"

FAULTS = {
    "typeless_plugin": """
        from dataclasses import dataclass, field

        from registry import ComponentSpec, hookimpl


        @dataclass
        class Tagged:
            tags: set[str] = field(default_factory=set)


        @hookimpl
        def ladd_components():
            return [ComponentSpec("schedule", "tagged", "ladd_plugins.schedules.closed_form:LinearSchedule", Tagged)]
    """,
    "quitting_plugin": "import sys\nsys.exit(0)\n",
    "interrupting_plugin": "raise KeyboardInterrupt\n",
    "chatty_plugin": """
        from registry import ComponentSpec, hookimpl

        print("chatty plugin loading")


        @hookimpl
        def ladd_components():
            print("chatty plugin declaring")
            return [ComponentSpec("schedule", "chatty", "ladd_plugins.schedules.closed_form:LinearSchedule")]
    """,
}
FAULT_ERRORS = {
    "typeless_plugin": (
        "config Tagged of schedule 'tagged' is not a type OmegaConf can check (field 'tags': Unexpected type "
        "annotation: set[str]): use bool, int, float, str, an Enum, a Literal of str, int or bool values, a list, "
        "a dict or a dataclass "
        "(or Optional of one)"
    ),
    "quitting_plugin": "SystemExit: it calls sys.exit(0), which would end every ladd command",
    "interrupting_plugin": (
        "KeyboardInterrupt: it raises it itself (no Ctrl-C was pressed), which would end every ladd command"
    ),
}


@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("faulty")
    return ":".join(fake_distribution(root / name, name, source) for name, source in FAULTS.items())


def test_each_faulty_plugin_is_left_out_named_and_ladd_keeps_working(faulty, tmp_path):
    env = {"PYTHONPATH": faulty}
    plugins = run_ladd("plugins", env=env)
    assert plugins.returncode == 0, plugins.stderr
    for name, error in FAULT_ERRORS.items():
        assert FAILED.format(name=name, dash="-", error=error) in plugins.stdout.splitlines()
    assert "chatty_plugin    chatty_plugin            0.0.1      1 component; contract not declared" in plugins.stdout

    listed = run_ladd("list-components", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)  # what the chatty plugin prints went to stderr
    assert {(r["kind"], r["name"], r["plugin"]) for r in rows} >= {
        ("schedule", "chatty", "chatty_plugin"),
        ("backbone", "dit", "builtin"),
    }
    assert "chatty plugin loading\nchatty plugin declaring\n" in listed.stderr
    for name, error in FAULT_ERRORS.items():
        assert (
            f"ladd: warning: plugin {name!r} ({name}) failed to load: {error}; fix or uninstall it, or hide it "
            f"with LADD_PLUGINS_BLOCK={name}"
            in listed.stderr
        )

    trained = run_ladd("train", *SHORT, f"run_dir={tmp_path / 'run'}", env=env)
    assert trained.returncode == 0, trained.stderr
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["schedule"]["name"] == "builtin:linear"


def test_the_users_ctrl_c_while_a_plugin_loads_still_ends_ladd(tmp_path):
    started = tmp_path / "started"
    slow = fake_distribution(
        tmp_path / "slow",
        "slow_plugin",
        f"""
        import pathlib
        import time

        pathlib.Path({str(started)!r}).touch()
        time.sleep(60)
    """,
    )
    command = [sys.executable, "-m", "registry.cli", "plugins"]
    # a terminal's SIGINT disposition, also when the tests themselves run in the background (which ignores it)
    process = subprocess.Popen(
        command,
        env={**os.environ, "PYTHONPATH": slow},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), "the plugin never started loading"
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGINT, (out, err)  # Python's exit on an uncaught KeyboardInterrupt
    assert "KeyboardInterrupt" in err and "FAILED" not in out


LITERAL = """
    from dataclasses import dataclass
    from typing import Literal, Optional

    from registry import ComponentSpec, hookimpl
    from registry.interfaces import Schedule


    @dataclass
    class CurveConfig:
        shape: Literal["linear", "square"] = "linear"  # the curve of the signal
        power: Optional[Literal[1, 2, 3]] = None  # unused


    class Curve(Schedule):
        def __init__(self, config):
            self.shape = config.shape

        def signal(self, tau):
            return 1 - tau if self.shape == "linear" else 1 - tau * tau


    @hookimpl
    def ladd_components():
        return [ComponentSpec("schedule", "curve", Curve, CurveConfig, "a linear or square signal")]
"""


def test_a_literal_option_is_a_choice_checked_where_the_experiment_assembles(tmp_path):
    env = {"PYTHONPATH": fake_distribution(tmp_path / "literal", "literal_plugin", LITERAL)}
    shown = run_ladd("show", "schedule", "curve", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "  shape   Literal['linear', 'square']  linear   the curve of the signal" in shown.stdout.splitlines()
    wrong = run_ladd("train", "schedule=curve", "schedule.shape=cube", *SHORT, f"run_dir={tmp_path / 'wrong'}", env=env)
    assert wrong.returncode == 2
    assert wrong.stderr.strip().splitlines()[-1] == (
        "ladd: error: invalid options for schedule 'curve': shape='cube' is not valid: it must be one of linear, square"
    )
    assert not (tmp_path / "wrong").exists()
    number = run_ladd("train", "schedule=curve", "schedule.power=4", *SHORT, f"run_dir={tmp_path / 'wrong'}", env=env)
    assert (
        number.stderr.strip().splitlines()[-1]
        == "ladd: error: invalid options for schedule 'curve': power=4 is not valid: it must be one of 1, 2, 3"
    )
    good = run_ladd(
        "train",
        "schedule=curve",
        "schedule.shape=square",
        "schedule.power=2",
        *SHORT,
        f"run_dir={tmp_path / 'good'}",
        env=env,
    )
    assert good.returncode == 0, good.stderr
    assert yaml.safe_load((tmp_path / "good" / "config.yaml").read_text())["schedule"] == {
        "shape": "square",
        "power": 2,
        "name": "curve",
    }


SAME_NAME = """
    from dataclasses import dataclass

    from registry import ComponentSpec, hookimpl


    @dataclass
    class Wide:
        width: int = 8


    @hookimpl
    def ladd_components():
        return [ComponentSpec("backbone", "dit", "ladd_plugins.backbones.mlp:MLPDenoiser", Wide)]
"""
SAME_PRESET = "# @package _global_\ndefaults:\n  - /experiment/binsaw/mdlm\n  - _self_\nmethod: impostor\n"


@pytest.fixture(scope="module")
def impostor(tmp_path_factory) -> str:
    """A plugin registering backbone 'dit' and shipping a preset named experiment/binsaw/mdlm_cpu."""
    root = tmp_path_factory.mktemp("impostor")
    path = fake_distribution(
        root,
        "impostor_plugin",
        SAME_NAME
        + """

    @hookimpl
    def ladd_config_dirs():
        import pathlib

        return [pathlib.Path(__file__).parent / "impostor_conf"]
    """,
    )
    (root / "impostor_conf" / "experiment" / "binsaw").mkdir(parents=True)
    (root / "impostor_conf" / "experiment" / "binsaw" / "mdlm_cpu.yaml").write_text(SAME_PRESET)
    return path


IMPOSTOR_LINES = [
    "backbone 'dit' is registered by several plugins: 'builtin' (ladd 0.1.0), 'impostor_plugin' (impostor_plugin "
    "0.0.1); name the one you mean: builtin:dit or impostor_plugin:dit",
    "config experiment/binsaw/mdlm_cpu of plugin 'impostor_plugin' has the name of one in ladd's own configs, "
    "which is used; rename it",
]


def test_a_plugin_taking_builtin_names_is_reported_and_builtin_runs_still_train_and_sample(impostor, tmp_path):
    run = tmp_path / "run"
    assert run_ladd("train", *SHORT, f"run_dir={run}").returncode == 0
    alone = run_ladd("sample", str(run), "--steps", "4", "--num", "8", "--out", str(tmp_path / "alone.txt"))
    assert alone.returncode == 0, alone.stderr

    env = {"PYTHONPATH": impostor}
    beside = run_ladd("sample", str(run), "--steps", "4", "--num", "8", "--out", str(tmp_path / "beside.txt"), env=env)
    assert beside.returncode == 0, beside.stderr
    assert (tmp_path / "beside.txt").read_text() == (tmp_path / "alone.txt").read_text()

    plugins = run_ladd("plugins", env=env)
    assert plugins.returncode == 0 and [f"CLASH: {line}" for line in IMPOSTOR_LINES] == plugins.stdout.splitlines()[-2:]
    trained = run_ladd("train", "experiment=binsaw/mdlm_cpu", *SHORT, f"run_dir={tmp_path / 'again'}", env=env)
    assert trained.returncode == 0, trained.stderr
    assert [f"ladd: warning: {line}" for line in IMPOSTOR_LINES] == trained.stderr.splitlines()[:2]
    saved = yaml.safe_load((tmp_path / "again" / "config.yaml").read_text())
    assert (saved["method"], saved["backbone"]["name"]) == ("mdlm", "builtin:dit") and "hidden" in saved["backbone"]
    assert json.loads((tmp_path / "again" / "components.json").read_text())["backbone"]["plugin"] == "builtin"
    refused = run_ladd("train", "experiment=binsaw/mdlm_cpu", "backbone=dit", *SHORT, f"run_dir={tmp_path / 'x'}",
                       env=env)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == f"ladd: error: {IMPOSTOR_LINES[0]}"
    theirs = run_ladd("show", "backbone", "impostor_plugin:dit", env=env)
    assert theirs.returncode == 0 and theirs.stdout.startswith("backbone 'dit' of plugin 'impostor_plugin'")


TWIN = """
    from ladd_plugins.backbones.config import {config}
    from registry import ComponentSpec, hookimpl


    @hookimpl
    def ladd_components():
        return [ComponentSpec("backbone", "twin", "{factory}", {config})]
"""


def test_a_run_loads_the_component_of_the_plugin_it_recorded_when_two_plugins_register_its_name(tmp_path):
    first = fake_distribution(
        tmp_path / "a", "twin_a", TWIN.format(config="DiTConfig", factory="ladd_plugins.backbones.dit:DiT")
    )
    second = fake_distribution(
        tmp_path / "b",
        "twin_b",
        TWIN.format(config="MLPDenoiserConfig", factory="ladd_plugins.backbones.mlp:MLPDenoiser"),
    )
    both = {"PYTHONPATH": f"{first}:{second}"}
    run = tmp_path / "run"
    trained = run_ladd("train", "backbone=twin", *SHORT, f"run_dir={run}", env={**both, "LADD_PLUGINS_BLOCK": "twin_b"})
    assert trained.returncode == 0, trained.stderr
    sampled = run_ladd("sample", str(run), "--steps", "2", "--num", "2", "--out", str(tmp_path / "s.txt"), env=both)
    assert sampled.returncode == 0, sampled.stderr
    unrecorded = run_ladd("train", "backbone=twin", *SHORT, f"run_dir={tmp_path / 'new'}", env=both)
    assert unrecorded.returncode == 2 and unrecorded.stderr.strip().splitlines()[-1] == (
        "ladd: error: backbone 'twin' is registered by several plugins: 'twin_a' (twin_a 0.0.1), 'twin_b' (twin_b "
        "0.0.1); name the one you mean: twin_a:twin or twin_b:twin"
    )


def test_a_factory_returning_the_wrong_type_is_named_in_one_line(tmp_path):
    path = fake_distribution(
        tmp_path / "wrong",
        "wrong_type_plugin",
        """
        from registry import ComponentSpec, hookimpl


        def words(channels):
            return "not a network"


        @hookimpl
        def ladd_components():
            return [ComponentSpec("backbone", "words", words, None)]
    """,
    )
    out = run_ladd("train", "backbone=words", *SHORT, f"run_dir={tmp_path / 'run'}", env={"PYTHONPATH": path})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "ladd: error: backbone 'words' of plugin 'wrong_type_plugin' (wrong_type_plugin 0.0.1) factory returned str, "
        "expected registry.interfaces.Backbone (it lacks torch.nn.Module, forward); fix or update plugin "
        "'wrong_type_plugin', or choose "
        "another backbone (`ladd list-components --kind backbone`)"
    )
    assert not (tmp_path / "run").exists()


def test_blocking_ladds_own_plugin_leaves_it_loaded_with_a_note():
    out = run_ladd("plugins", env={"LADD_PLUGINS_BLOCK": "builtin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("builtin          ladd ") and "BLOCKED" not in out.stdout
    assert out.stderr == "ladd: note: LADD_PLUGINS_BLOCK names ladd's own plugin 'builtin', which always loads\n"
    listed = run_ladd("list-components", "--kind", "backbone", env={"LADD_PLUGINS_BLOCK": "builtin"})
    assert listed.returncode == 0 and "mmdit" in listed.stdout
