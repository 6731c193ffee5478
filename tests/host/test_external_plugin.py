"""A third-party plugin package, installed with pip during the test run, extends ladd without touching it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support import FIXTURES, TINY, fake_distribution, install_plugin, run_ladd

pytestmark = pytest.mark.slow  # pip installs a plugin package and runs the ladd command in subprocesses

EXAMPLE = FIXTURES / "plugins" / "example"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> str:
    return install_plugin(EXAMPLE, tmp_path_factory.mktemp("site"))


def test_installed_plugin_is_listed_with_its_origin(plugin_path):
    out = run_ladd("list-components", "--json", env={"PYTHONPATH": plugin_path})
    assert out.returncode == 0, out.stderr
    rows = {(r["kind"], r["name"]): r for r in json.loads(out.stdout)}
    for key in [("schedule", "exponential"), ("backbone", "conv"), ("sampler", "temperature")]:
        assert rows[key]["plugin"] == "example"
        assert rows[key]["distribution"] == "ladd-example-plugin" and rows[key]["version"] == "0.3.0"
    assert rows[("schedule", "linear")]["plugin"] == "builtin"


def test_training_selects_plugin_components_from_config_alone(plugin_path, tmp_path):
    out = run_ladd(
        "train",
        "experiment=example/conv_mdlm",
        *TINY,
        "train.stages=[{steps:3}]",
        f"run_dir={tmp_path}",
        env={"PYTHONPATH": plugin_path},
    )
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert (config["schedule"]["name"], config["backbone"]["name"], config["backbone"]["kernel"]) == (
        "exponential",
        "conv",
        5,
    )
    origins = json.loads((tmp_path / "components.json").read_text())
    assert origins["backbone"]["distribution"] == "ladd-example-plugin"


def test_name_clash_is_reported_and_is_an_error_only_where_the_name_is_used(plugin_path, tmp_path):
    clash = fake_distribution(
        tmp_path / "clash",
        "clashing_plugin",
        """
        from registry import ComponentSpec, hookimpl

        @hookimpl
        def ladd_components():
            return [ComponentSpec("backbone", "conv", "math:sqrt")]
    """,
    )
    env = {"PYTHONPATH": f"{plugin_path}:{clash}"}
    clash_line = (
        "backbone 'conv' is registered by several plugins: 'clashing_plugin' (clashing_plugin 0.0.1), "
        "'example' (ladd-example-plugin 0.3.0); name the one you mean: clashing_plugin:conv or example:conv"
    )
    listed = run_ladd("list-components", env=env)
    assert listed.returncode == 0, listed.stderr
    assert clash_line in listed.stderr and "exponential" in listed.stdout
    plugins = run_ladd("plugins", env=env)
    assert plugins.returncode == 0 and f"CLASH: {clash_line}" in plugins.stdout
    short = [*TINY, "train.stages=[{steps:1}]"]
    unclashed = run_ladd("train", "schedule=exponential", *short, f"run_dir={tmp_path / 'unclashed'}", env=env)
    assert unclashed.returncode == 0, unclashed.stderr
    assert yaml.safe_load((tmp_path / "unclashed" / "config.yaml").read_text())["schedule"]["name"] == "exponential"
    used = run_ladd("train", "backbone=conv", *short, f"run_dir={tmp_path / 'used'}", env=env)
    assert used.returncode == 2 and not (tmp_path / "used").exists()
    assert used.stderr.strip().splitlines()[-1] == f"ladd: error: {clash_line}"
    chosen = run_ladd(
        "train",
        "experiment=example/conv_mdlm",
        *short,
        f"run_dir={tmp_path / 'chosen'}",
        env={**env, "LADD_PLUGINS_BLOCK": "clashing_plugin"},
    )
    assert chosen.returncode == 0, chosen.stderr
    assert yaml.safe_load((tmp_path / "chosen" / "config.yaml").read_text())["backbone"]["name"] == "conv"


def test_plugin_that_fails_to_import_is_reported_and_others_work(tmp_path):
    broken = fake_distribution(tmp_path / "broken", "broken_plugin", "import module_that_does_not_exist\n")
    out = run_ladd("list-components", env={"PYTHONPATH": broken})
    assert out.returncode == 0
    assert "plugin 'broken_plugin' (broken_plugin) failed to load: ModuleNotFoundError" in out.stderr
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
    # ladd's own plugin is checked beside every fixture plugin in tests/conformance/test_fixture_plugins.py
    example = run_ladd("plugins", "check", "example", env={"PYTHONPATH": plugin_path})
    assert example.returncode == 0, example.stderr
    assert "plugin 'example': 3 components import and match their configs; 3 built and ran" in example.stdout


def test_plugin_check_reports_each_problem_precisely(tmp_path):
    broken = fake_distribution(
        tmp_path / "bad",
        "shoddy_plugin",
        """
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
    """,
    )
    out = run_ladd("plugins", "check", "shoddy_plugin", env={"PYTHONPATH": broken})
    assert out.returncode == 2
    assert "4 problem(s)" in out.stderr
    assert (
        "backbone 'shoddy_plugin:ghost': factory 'no_such_module_anywhere:Ghost' does not import: ModuleNotFoundError"
        in out.stderr
    )
    assert "schedule 'shoddy_plugin:needy': has no config but its factory requires rate" in out.stderr
    assert "process 'shoddy_plugin:deaf': its factory does not accept the keyword(s) schedule, vocab_size" in out.stderr
    assert "dataset 'shoddy_plugin:skewed': fails in a tiny model: batch of shape (3, 5), expected (3, 4)" in out.stderr


def test_pytest_helper_flags_a_broken_plugin(monkeypatch, tmp_path):
    import registry
    from registry import testing

    broken = fake_distribution(
        tmp_path / "bad2",
        "hollow_plugin",
        """
        from registry import ComponentSpec, hookimpl

        @hookimpl
        def ladd_components():
            return [ComponentSpec("metric", "hollow", "no_such_module_either:Metric")]
    """,
    )
    monkeypatch.syspath_prepend(broken)
    registry.load(reload=True)
    try:
        with pytest.raises(AssertionError, match="metric 'hollow_plugin:hollow': factory .* does not import"):
            testing.assert_valid_plugin("hollow_plugin")
        testing.assert_valid_plugin("builtin")
    finally:
        monkeypatch.undo()
        registry.load(reload=True)


MISTAKES = {
    "undecorated_plugin": """
        from registry import ComponentSpec

        def ladd_components():
            return [ComponentSpec("schedule", "plain", "math:sqrt")]
    """,
    "misspelt_plugin": """
        from registry import hookimpl

        @hookimpl
        def ladd_component():
            return []
    """,
    "wrong_kind_plugin": """
        from registry import ComponentSpec, hookimpl

        @hookimpl
        def ladd_components():
            return [ComponentSpec("schedul", "warm", "math:sqrt")]
    """,
    "bad_dirs_plugin": """
        from registry import ComponentSpec, hookimpl

        @hookimpl
        def ladd_components():
            return [ComponentSpec("schedule", "dusk", "math:sqrt")]

        @hookimpl
        def ladd_config_dirs():
            raise FileNotFoundError("conf/ was not packaged")
    """,
}
MISTAKE_ERRORS = {
    "undecorated_plugin": "it defines ladd_components() without the @hookimpl decorator, so ladd would ignore it: "
        "decorate it with @registry.hookimpl",
    "misspelt_plugin": "@hookimpl function 'ladd_component' is not a ladd hook; did you mean 'ladd_components'",
    "wrong_kind_plugin": "ValueError: component 'warm' has unknown kind 'schedul'; did you mean 'schedule'?",
    "bad_dirs_plugin": "FileNotFoundError: conf/ was not packaged",
}


@pytest.fixture(scope="module")
def faulty_plugins(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("faulty")
    return ":".join(fake_distribution(root / name, name, source) for name, source in MISTAKES.items())


def test_each_plugin_mistake_is_named_and_the_rest_of_ladd_works(faulty_plugins):
    env = {"PYTHONPATH": faulty_plugins}
    plugins = run_ladd("plugins", env=env)
    assert plugins.returncode == 0, plugins.stderr
    assert plugins.stdout.startswith("builtin ")
    for name, error in MISTAKE_ERRORS.items():
        assert f"{name:<16} {name:<24} {'-':<10} FAILED: {error}" in plugins.stdout
    listed = run_ladd("list-components", env=env)
    assert listed.returncode == 0 and "mmdit" in listed.stdout
    for name, error in MISTAKE_ERRORS.items():
        assert f"ladd: warning: plugin {name!r} ({name}) failed to load: {error}" in listed.stderr
        assert f"hide it with LADD_PLUGINS_BLOCK={name}" in listed.stderr
    strict = run_ladd(
        "list-components", env={**env, "LADD_STRICT_PLUGINS": "1", "LADD_PLUGINS_ALLOW": "undecorated_plugin"}
    )
    assert (
        strict.returncode == 2
        and "@hookimpl decorator" in strict.stderr
        and "LADD_STRICT_PLUGINS is set" in strict.stderr
    )


def test_training_a_component_of_a_plugin_that_failed_to_load_says_so(faulty_plugins):
    out = run_ladd("train", "schedule=warm", env={"PYTHONPATH": faulty_plugins})
    assert out.returncode == 2
    *warnings, line = out.stderr.strip().splitlines()
    assert line.startswith("ladd: error: unknown schedule 'warm'")
    assert (
        "plugin 'wrong_kind_plugin' (wrong_kind_plugin) failed to load: ValueError: component 'warm' has unknown kind "
        "'schedul'"
        in line
    )
    assert len(warnings) == len(MISTAKES) and all(w.startswith("ladd: warning: plugin ") for w in warnings)

    preset = run_ladd("train", "experiment=example/conv_mdlm", env={"PYTHONPATH": faulty_plugins})
    assert preset.returncode != 0, "the example plugin is not installed here"
    assert "ladd: warning: plugin 'wrong_kind_plugin'" in preset.stderr, (
        "a missing preset comes with the plugins that failed"
    )


FRAGILE = """
    import os

    from ladd_plugins.backbones.config import DiTConfig
    from registry import ComponentSpec, hookimpl


    def fragile(config, channels):
        if os.environ.get("FRAGILE_BREAK"):
            raise RuntimeError("weights server unreachable")
        from ladd_plugins.backbones.dit import DiT

        return DiT(config, channels)


    @hookimpl
    def ladd_components():
        return [
            ComponentSpec("backbone", "fragile", fragile, DiTConfig, "a DiT that fails to build when told to"),
            ComponentSpec("backbone", "absent", "fragile_parts_not_installed:Net", DiTConfig),
        ]
"""


@pytest.fixture(scope="module")
def fragile_run(tmp_path_factory) -> tuple[str, Path]:
    path = fake_distribution(tmp_path_factory.mktemp("fragile"), "fragile_plugin", FRAGILE)
    run = tmp_path_factory.mktemp("runs") / "fragile"
    out = run_ladd(
        "train", "backbone=fragile", *TINY, "train.stages=[{steps:2}]", f"run_dir={run}", env={"PYTHONPATH": path}
    )
    assert out.returncode == 0, out.stderr
    return path, run


def test_a_factory_that_fails_to_import_or_build_in_train_gives_one_line_and_no_run_folder(fragile_run, tmp_path):
    path, _ = fragile_run
    # the preset's backbone.layers was set for dit, which the command line replaces
    note = "ladd: note: left out options that presets set for other components than the ones selected: backbone.layers"
    absent = run_ladd("train", "backbone=absent", *TINY, f"run_dir={tmp_path / 'a'}", env={"PYTHONPATH": path})
    assert absent.returncode == 2
    assert absent.stderr.strip().splitlines() == [
        note,
        "ladd: error: backbone 'absent' of plugin 'fragile_plugin' (fragile_plugin 0.0.1) factory "
        "'fragile_parts_not_installed:Net' does not import: ModuleNotFoundError: No module named "
        "'fragile_parts_not_installed'; fix or update plugin 'fragile_plugin', or choose another backbone "
        "(`ladd list-components --kind backbone`) (LADD_DEBUG=1 shows the traceback)",
    ]
    assert not (tmp_path / "a").exists()

    env = {"PYTHONPATH": path, "FRAGILE_BREAK": "1"}
    broken = run_ladd("train", "backbone=fragile", *TINY, f"run_dir={tmp_path / 'b'}", env=env)
    assert broken.returncode == 2 and broken.stderr.strip().splitlines()[:-1] == [note]
    assert (
        "backbone 'fragile' of plugin 'fragile_plugin' (fragile_plugin 0.0.1) failed to build: RuntimeError: weights "
        "server unreachable"
        in broken.stderr
    )
    assert not (tmp_path / "b").exists()
    debug = run_ladd("train", "backbone=fragile", *TINY, f"run_dir={tmp_path / 'b'}", env={**env, "LADD_DEBUG": "1"})
    assert debug.returncode == 2 and "Traceback" in debug.stderr and "weights server unreachable" in debug.stderr


def test_a_factory_that_fails_in_sample_eval_or_export_gives_one_line(fragile_run, tmp_path):
    path, run = fragile_run
    env = {"PYTHONPATH": path, "FRAGILE_BREAK": "1"}
    for command in (
        ["sample", str(run), "--steps", "2"],
        ["eval", str(run)],
        ["export", str(run), str(tmp_path / "out")],
    ):
        out = run_ladd(*command, env=env)
        assert out.returncode == 2, command
        [line] = out.stderr.strip().splitlines()
        assert line.startswith(
            "ladd: error: backbone 'fragile' of plugin 'fragile_plugin' (fragile_plugin 0.0.1) failed to build: "
            "RuntimeError"
        )
    assert not (tmp_path / "out").exists()


def test_run_folder_of_a_plugin_not_installed_or_blocked_names_the_plugin(fragile_run):
    path, run = fragile_run
    missing = run_ladd("sample", str(run))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"ladd: error: run {run}'s backbone is backbone 'fragile' from plugin 'fragile_plugin' (distribution "
        f"fragile_plugin 0.0.1), which is not installed: pip install 'fragile_plugin==0.0.1'"
    ]
    blocked = run_ladd("eval", str(run), env={"PYTHONPATH": path, "LADD_PLUGINS_BLOCK": "fragile_plugin"})
    assert blocked.returncode == 2
    assert blocked.stderr.strip().splitlines() == [
        f"ladd: error: run {run}'s backbone is backbone 'fragile' from plugin 'fragile_plugin' (distribution "
        "fragile_plugin 0.0.1), which is not available: plugin 'fragile_plugin' is not loaded (blocked by "
        "LADD_PLUGINS_BLOCK)"
    ]


@pytest.mark.parametrize("order", ["readme", "flag_last"])
def test_sweeps_work_with_a_plugin_that_contributes_config_folders(plugin_path, tmp_path, order):
    if order == "readme":  # the README's sweep command, verbatim, then tiny sizes
        arguments = ["-m", "experiment=binsaw/mdlm_cpu", "schedule=linear,cosine,polynomial"]
        expected = [("builtin:dit", "cosine"), ("builtin:dit", "linear"), ("builtin:dit", "polynomial")]
    else:  # the plugin's own preset, the sweep flag after the overrides
        arguments = ["experiment=example/conv_mdlm", "schedule=linear,exponential", "-m"]
        expected = [("conv", "exponential"), ("conv", "linear")]
    out = run_ladd(
        "train",
        *arguments,
        *TINY,
        "train.stages=[{steps:2}]",
        f"hydra.sweep.dir={tmp_path}",
        env={"PYTHONPATH": plugin_path},
    )
    assert out.returncode == 0, out.stderr
    configs = [yaml.safe_load((tmp_path / str(job) / "config.yaml").read_text()) for job in range(len(expected))]
    assert sorted((c["backbone"]["name"], c["schedule"]["name"]) for c in configs) == expected


FLAWED_LATENTS = """
    from torch import nn

    from ladd_plugins.latents.quantizers import DiscreteLatentConfig, VQLatent
    from registry import ComponentSpec, hookimpl
    from registry.interfaces import LatentCode


    class Int32Codes(VQLatent):
        def encode(self, features):
            code = super().encode(features)
            return LatentCode(code.y0.int(), code.aux_loss, code.embedding)


    class ShortHead(VQLatent):
        def output_layer(self, width):
            return nn.Linear(width, self.values - 1)


    @hookimpl
    def ladd_components():
        return [
            ComponentSpec("latent", "int32_codes", Int32Codes, DiscreteLatentConfig),
            ComponentSpec("latent", "short_head", ShortHead, DiscreteLatentConfig),
        ]
"""


def test_plugin_check_rejects_int32_codes_and_a_head_one_code_short(tmp_path):
    path = fake_distribution(tmp_path, "flawed_latents", FLAWED_LATENTS)
    out = run_ladd("plugins", "check", "flawed_latents", env={"PYTHONPATH": path})
    assert out.returncode == 2
    assert "plugin 'flawed_latents' has 2 problem(s)" in out.stderr
    assert (
        "latent 'flawed_latents:int32_codes': fails in a tiny model: encode gives codes of dtype torch.int32; "
        "discrete codes must be torch.long (int64)"
    ) in out.stderr
    assert (
        "latent 'flawed_latents:short_head': fails in a tiny model: with process 'masked' and process "
        "'autoregressive', a training step of a joint model: "
        "IncompatibleComponentsError: the masked process over 2048 values got predictions over 2047"
    ) in out.stderr


def test_a_sampler_written_with_the_toolkit_alone_matches_the_builtin_chain(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import torch
    from ladd_example_plugin.components import TemperatureSampler
    from ladd_example_plugin.options import TemperatureConfig

    import registry
    from registry.config.composition import compose
    from registry.engine.assembly import build_experiment

    reg = registry.load()
    torch.manual_seed(0)
    model = build_experiment(compose(["experiment=binsaw/mdlm_cpu", *TINY], reg).plain(), reg).model.eval()
    with torch.no_grad():  # away from the zero-initialised head, whose uniform logits no temperature changes
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    builtin = reg.build("sampler", "ancestral").sample(model, 64, 4, torch.Generator().manual_seed(1))
    plain, cold = (
        TemperatureSampler(TemperatureConfig(temperature)).sample(model, 64, 4, torch.Generator().manual_seed(1))
        for temperature in (1.0, 0.05)
    )
    assert torch.equal(plain.tokens, builtin.tokens) and plain.network_calls == builtin.network_calls
    assert not torch.equal(cold.tokens, builtin.tokens)
