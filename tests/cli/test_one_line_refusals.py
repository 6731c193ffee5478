"""Mistakes that ended in a traceback, or were taken, now refused in one line naming the bad value: a device this
machine lacks, a negative count, a task file that does not parse, a folder that does not exist, a stage the
experiment does not have."""
from __future__ import annotations

import pytest
from support import ladd_in_process

from registry.engine.devices import checked_device
from registry.errors import LaddError


@pytest.fixture
def no_gpu(monkeypatch):
    """A machine without CUDA, whatever this one has."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.mark.parametrize("given, message", [
    ("cuda", "--device cuda: this machine has no CUDA device that torch can use; choose cpu"),
    ("cuda:7", "--device cuda:7: this machine has no CUDA device that torch can use; choose cpu"),
    ("bogus", "--device 'bogus' is not a device: choose cpu, cuda, cuda:N (N from 0) or mps"),
])
def test_ladd_harness_refuses_a_device_this_machine_lacks_in_one_line(given, message, no_gpu, capsys, tmp_path):
    status, out, err = ladd_in_process(capsys, "harness", tmp_path / "run", "--tasks", "ladd_demo_choice", "--device",
                                       given, "--out", tmp_path / "out")
    assert (status, err) == (2, f"ladd: error: {message}\n")
    assert not (tmp_path / "out").exists()


def test_a_cuda_index_past_this_machines_devices_is_refused(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(LaddError) as refused:
        checked_device("cuda:7", "--device")
    assert str(refused.value) == (
        "--device cuda:7: this machine has 2 CUDA device(s) (cuda:0 to cuda:1); choose one of those"
    )
    assert checked_device("cuda:1", "--device") == torch.device("cuda", 1)
    assert checked_device("cpu", "--device") == torch.device("cpu")


def test_a_negative_few_shot_count_is_refused(capsys, tmp_path):
    status, _, err = ladd_in_process(capsys, "harness", tmp_path, "--tasks", "ladd_demo_choice", "--num-fewshot", "-1")
    assert status == 2
    assert err == "ladd: error: argument --num-fewshot: '-1' is not a whole number >= 0 (see ladd harness --help)\n"


@pytest.mark.slow  # an unknown name makes lm-eval index its thousands of own tasks
def test_an_unknown_task_names_the_task_yaml_that_does_not_parse(tmp_path):
    pytest.importorskip("lm_eval")
    from registry.harness.tasks import task_manager

    (tmp_path / "mytask.yaml").write_text("task: mytask\ndataset_path: json\n  bad: [oops\n")
    with pytest.raises(LaddError) as refused:
        task_manager(["mytask"], [tmp_path])
    assert str(refused.value).endswith(
        f"; {tmp_path / 'mytask.yaml'}:3 does not parse as task YAML (mapping values are not allowed in this context): "
        f"fix it, or name another task"
    )


@pytest.mark.parametrize("command", [
    ["sample"], ["eval"], ["export", "{tmp}/out"], ["export", "{tmp}/out", "--adapter"], ["zero-shot", "shakespeare"],
    ["encode", "--input", "{tmp}/refs.txt", "--out", "{tmp}/latents.safetensors"],
])
def test_a_model_folder_that_does_not_exist_is_said_not_to(command, capsys, tmp_path):
    missing = tmp_path / "runs" / "mdlm"
    arguments = [part.format(tmp=tmp_path) for part in command]
    status, _, err = ladd_in_process(capsys, arguments[0], missing, *arguments[1:])
    assert status == 2
    assert err.startswith(f"ladd: error: {missing} does not exist: give a finished run (ladd train)"), err


def _raises_keyboard_interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_a_keyboard_interrupt_that_code_raises_itself_in_a_command_is_one_line(monkeypatch, capsys, tmp_path):
    import registry.cli.sample

    monkeypatch.setattr(registry.cli.sample, "run", _raises_keyboard_interrupt)
    status, _, err = ladd_in_process(capsys, "sample", tmp_path)
    assert status == 2
    assert err == (
        f"ladd: error: KeyboardInterrupt raised at {__file__}:{_raises_keyboard_interrupt.__code__.co_firstlineno + 1} "
        f"(_raises_keyboard_interrupt), though no Ctrl-C was pressed: the code there (a plugin's, or ladd's) ends the "
        f"command itself; what ladd had written is intact\n"
    )


def test_a_keyboard_interrupt_that_a_component_raises_while_training_is_one_line(monkeypatch, capsys, tmp_path):
    from support import TINY

    from ladd_plugins.processes.masked import MaskedProcess

    monkeypatch.setattr(MaskedProcess, "corrupt", _raises_keyboard_interrupt)
    status, _, err = ladd_in_process(capsys, "train", "experiment=binsaw/mdlm_cpu", *TINY, f"run_dir={tmp_path}")
    assert status == 2
    lines = err.strip().splitlines()
    assert lines[-1].startswith("ladd: error: KeyboardInterrupt raised at ")
    assert "(_raises_keyboard_interrupt)" in lines[-1]
    assert lines[-1].endswith("run the same command to resume (LADD_DEBUG=1 shows the traceback)")
    assert not [line for line in lines if "KeyboardInterrupt" in line and not line.startswith("ladd: error: ")]


@pytest.mark.parametrize("flag", ["--repeats", "--floor-draws"])
def test_eval_counts_are_refused_as_the_flags_the_user_typed(flag, capsys, tmp_path):
    status, _, err = ladd_in_process(capsys, "eval", tmp_path, flag, "-1")
    assert status == 2
    assert err == f"ladd: error: argument {flag}: '-1' is not a whole number >= 1 (see ladd eval --help)\n"


def test_a_list_of_device_indices_on_a_cpu_is_one_line(no_gpu):
    from registry.config.composition import compose
    from registry.errors import InvalidConfigError
    from registry.host.registry import load
    from registry.training.strategy import Hardware

    settings = compose(["experiment=binsaw/mdlm_cpu", "train.devices=[3]"], load())
    with pytest.raises(InvalidConfigError) as refused:
        Hardware(settings.train)
    assert str(refused.value) == (
        "train.accelerator=auto, devices=[3], strategy=auto: `devices` selected with `CPUAccelerator` should be an int "
        "> 0."
    )


def test_lm_evals_own_device_argument_is_checked_before_the_model_loads(no_gpu, tmp_path):
    pytest.importorskip("lm_eval")
    from registry.harness.adapter import LaddLM

    with pytest.raises(LaddError) as refused:
        LaddLM(pretrained=str(tmp_path / "missing"), device="cuda:0")
    assert str(refused.value) == "device cuda:0: this machine has no CUDA device that torch can use; choose cpu"
