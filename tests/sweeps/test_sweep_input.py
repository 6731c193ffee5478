"""Bad input to a sweep is refused in one line before anything is written or started: an unknown launcher or
option, a mistyped or out-of-range one, a launcher outside a sweep or in a preset, Slurm missing, a folder of another
sweep or of no sweep, a folder another `ladd train -m` is launching. A user's launcher file is typed like the
command line and may name no code."""
from __future__ import annotations

import pytest
from support import TINY, ladd_in_process

from registry.cli.train import TrainCommand
from registry.sweeps.folder import Manifest, PlannedJob, SweepFolder

SWEEP = ["train", "-m", *TINY, "train.stages=[{steps:2}]", "schedule=linear,cosine"]


def refused(capsys, *args) -> str:
    """The one line ``ladd ARGS`` is refused with (exit status 2)."""
    status, _, err = ladd_in_process(capsys, *args)
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ladd: error: "), err
    return lines[0].removeprefix("ladd: error: ")


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            ["launcher=slrum"],
            "unknown launcher 'slrum'; did you mean 'slurm'? valid launcher names: local, serial, slurm",
        ),
        (
            ["launcher=local", "launcher.wokers=2"],
            "launcher 'local' has no option 'wokers'; did you mean 'workers'? valid options: workers, gpus_per_job",
        ),
        (
            ["launcher=local", "launcher.workers=two"],
            "invalid option 'workers' of launcher 'local': Value 'two' of type 'str' could not be converted to Integer",
        ),
        (
            ["launcher=local", "launcher.workers=0"],
            "invalid options for launcher 'local': launcher.workers=0 is out of range: it must be >= 1, or null",
        ),
        (
            ["launcher=slurm", "launcher.signal_delay=3600"],
            "invalid options for launcher 'slurm': launcher.signal_delay=3600 is out of range: it must be in [1, 3599]",
        ),
        (
            ["launcher.workers=1,2"],
            "'launcher.workers=1,2': a launcher setting takes one value, the same for every job",
        ),
    ],
)
def test_an_unknown_or_bad_launcher_setting_is_refused_in_one_line_naming_it(capsys, tmp_path, settings, message):
    sweep = tmp_path / "sweep"
    # options are checked before a launcher is built: the Slurm launcher's too, where Slurm is missing
    line = refused(capsys, *SWEEP, *settings, f"hydra.sweep.dir={sweep}")
    assert line == message
    assert not sweep.exists()


def test_launcher_settings_outside_a_sweep_are_refused(capsys, tmp_path):
    line = refused(capsys, "train", *TINY, "launcher=local", f"run_dir={tmp_path / 'run'}")
    assert line == "launcher sets how a sweep's jobs run: give -m (a sweep of one is fine)"
    line = refused(capsys, "train", *TINY, "--metric", "entropy", f"run_dir={tmp_path / 'run'}")
    assert line == "--metric sets how a sweep's jobs run: give -m (a sweep of one is fine)"
    line = refused(capsys, "train", *TINY, "--retries=0", f"run_dir={tmp_path / 'run'}")
    assert line == "--retries sets how a sweep's jobs run: give -m (a sweep of one is fine)"
    line = refused(capsys, "train", "-m", *TINY, "--retries", "-1", f"run_dir={tmp_path / 'run'}")
    assert line == "--retries='-1' is not valid: it must be a whole number >= 0"
    assert not (tmp_path / "run").exists()


def test_slurm_missing_is_refused_naming_its_commands(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, srun, squeue nor scontrol
    line = refused(capsys, *SWEEP, "launcher=slurm", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert line == (
        "launcher 'slurm' runs Slurm's sbatch, srun, squeue, scontrol, not found on PATH: launch from a node of the "
        "cluster, or choose launcher=local"
    )
    assert not (tmp_path / "sweep").exists()


def test_no_slurm_controller_answering_is_refused_with_slurms_words(capsys, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command in ("sbatch", "srun", "squeue"):
        (bin_dir / command).write_text("#!/bin/sh\nexit 0\n")
    unreachable = "echo 'scontrol: error: Unable to contact slurm controller' >&2"
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\n{unreachable}\nexit 1\n")
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    line = refused(capsys, *SWEEP, "launcher=slurm", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert line == (
        "launcher 'slurm' finds no Slurm controller from here (scontrol: error: Unable to contact slurm controller): "
        "launch from a node of the cluster (or set SLURM_CONF), or choose launcher=local"
    )
    assert not (tmp_path / "sweep").exists()


def test_a_preset_cannot_set_the_launcher(capsys, tmp_path):
    (tmp_path / "presets" / "experiment").mkdir(parents=True)
    (tmp_path / "presets" / "experiment" / "cluster.yaml").write_text("# @package _global_\nlauncher:\n  name: slurm\n")
    line = refused(
        capsys, *SWEEP, "experiment=cluster", f"hydra.searchpath=[file://{tmp_path / 'presets'}]",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    assert line == (
        "sweep job 0 (schedule=linear): In 'experiment/cluster': sets 'launcher', which no preset may set: a sweep's "
        "launcher and its settings come from the command line (ladd train -m ... launcher=NAME launcher.OPTION=VALUE) "
        "or a file of yours (launcher=FILE.yaml); no job was trained"
    )
    assert not (tmp_path / "sweep").exists()


def test_a_users_launcher_file_is_typed_and_the_command_line_overrides_it(tmp_path):
    import registry

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("name: local\nworkers: 3\ngpus_per_job: 0\n")
    command = TrainCommand.parse(["-m", f"launcher={cluster}", "launcher.workers=1", "schedule=linear,cosine"])
    assert (command.launcher.name, command.launcher.options) == ("local", {"workers": 1, "gpus_per_job": 0})
    assert command.overrides == ["schedule=linear,cosine"]
    assert command.launcher.build(registry.load()).workers == 1


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: local\n_target_: os.system\n", "key '_target_' is refused"),
        ("name: local\nworkers: ${oc.env:HOME}\n", "holds the expression '${oc.env:HOME}'"),
        ("workers: 2\n", "is not a launcher file: write it as `name: NAME` and one `OPTION: VALUE` line per option"),
    ],
)
def test_a_launcher_file_naming_code_or_no_launcher_is_refused(capsys, tmp_path, text, message):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(text)
    line = refused(capsys, *SWEEP, f"launcher={cluster}", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert message in line
    assert not (tmp_path / "sweep").exists()


def _manifest(*overrides: str) -> Manifest:
    return Manifest([PlannedJob(0, list(overrides), [])])


def test_a_folder_holding_another_sweep_is_refused_and_left_as_it_is(capsys, tmp_path):
    sweep = SweepFolder(tmp_path / "sweep")
    sweep.path.mkdir()
    sweep.write(_manifest("schedule=geometric"))
    before = (sweep.path / "sweep.json").read_bytes()
    line = refused(capsys, *SWEEP, "launcher=local", f"hydra.sweep.dir={sweep.path}")
    assert line == (
        f"{sweep.path} holds another sweep (1 job, not 2); it is left as it is: give this sweep another "
        f"hydra.sweep.dir"
    )
    assert (sweep.path / "sweep.json").read_bytes() == before
    assert sorted(p.name for p in sweep.path.iterdir()) == ["sweep.json", "sweep.lock"]


def test_a_folder_of_other_files_is_refused(capsys, tmp_path):
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "notes.txt").write_text("mine")
    line = refused(capsys, *SWEEP, f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert line == (
        f"{tmp_path / 'sweep'} is not empty (notes.txt) and holds no sweep (sweep.json); ladd writes nothing into it: "
        f"give the sweep a new or empty hydra.sweep.dir"
    )
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir()) == ["notes.txt", "sweep.lock"]


def test_a_sweep_another_ladd_is_launching_is_refused(capsys, tmp_path):
    sweep = SweepFolder(tmp_path / "sweep")
    with sweep.locked():  # as a running `ladd train -m` holds it (a lock of its own open file)
        line = refused(capsys, *SWEEP, "launcher=local", f"hydra.sweep.dir={sweep.path}")
    assert line == (
        f"{sweep.path} is being launched by another `ladd train -m` (it holds sweep.lock); wait for it to end, or give "
        f"this sweep another hydra.sweep.dir"
    )
    assert sorted(p.name for p in sweep.path.iterdir()) == ["sweep.lock"]
