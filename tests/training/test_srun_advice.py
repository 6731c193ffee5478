"""Where Slurm's ``srun`` is installed, Lightning warns each time a Trainer is built or fitted that the process was
not started by ``srun``: outside a Slurm job ladd's training shows no such line; inside one (an allocation's shell
starting python by hand, where the advice is right) Lightning's warning is kept."""
from __future__ import annotations

import os
import warnings

import pytest
from support import TINY

import registry
from registry.config.composition import compose
from registry.config.settings import TrainConfig
from registry.training.console import SRUN_ADVICE
from registry.training.loop import train
from registry.training.strategy import Hardware


@pytest.fixture
def srun_installed(tmp_path, monkeypatch):
    """An ``srun`` first on the PATH, and no Slurm job's variables."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for name in [name for name in os.environ if name.startswith("SLURM_")]:
        monkeypatch.delenv(name)


def _advice(shown: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in shown if str(w.message).startswith(SRUN_ADVICE)]


def test_training_outside_a_slurm_job_shows_no_srun_advice_though_lightning_gives_it(srun_installed, tmp_path):
    from lightning.fabric.plugins.environments import SLURMEnvironment

    reg = registry.load()
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        SLURMEnvironment.detect()  # what Lightning does as a Trainer is built: here it advises srun
        lightning_gives = _advice(shown)
        del shown[:]
        train(compose(["experiment=binsaw/mdlm_cpu", *TINY, "train.stages=[{steps:2}]"], reg), tmp_path / "run", reg)
    assert len(lightning_gives) == 1
    assert _advice(shown) == []
    assert (tmp_path / "run" / "model.safetensors").is_file()


def test_the_hardware_a_dry_run_reads_outside_a_slurm_job_shows_no_srun_advice(srun_installed):
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        Hardware(TrainConfig())
    assert _advice(shown) == []


def test_inside_a_slurm_job_not_started_by_srun_lightnings_advice_is_kept(srun_installed, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_JOB_NAME", "interactive")  # an allocation's shell (salloc), python started by hand
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        Hardware(TrainConfig())
    assert _advice(shown) != []
