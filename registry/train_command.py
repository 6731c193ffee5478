"""``ladd train``'s arguments: Hydra overrides that ladd composes itself, sweeps expanded into jobs.

Hydra's runtime settings (job logging, callbacks, launchers, sweepers, environment variables, the
``.hydra`` output folder) can be set by any preset and create objects or files. ladd composes configs
with Hydra's compose API and runs none of that runtime, so a preset can only set experiment values.
From the command line it takes ``-m`` (a sweep), ``hydra.sweep.dir`` and ``hydra.searchpath``.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path

from hydra.errors import HydraException
from omegaconf import DictConfig

from ._registry import Registry
from .config import compose, composition_error, parse_override
from .errors import InvalidConfigError
from .runs import ALLOW_CHANGES_FLAG

SWEEP_FLAGS = ("-m", "--multirun")
HELP_FLAGS = ("-h", "--help")
SWEEP_DIR = "hydra.sweep.dir"
SEARCHPATH = "hydra.searchpath"
RUN_DIR = "run_dir"
USAGE = (
    f"usage: ladd train [-m] [{ALLOW_CHANGES_FLAG}] [experiment=NAME] [KEY=VALUE ...]\n"
    "  KEY=VALUE        Hydra overrides: components by registry name (backbone=mmdit), options (train.lr=3e-4);\n"
    "                   any component may replace a preset's (its options for the one it replaces are left out)\n"
    "  train.stages.NAME.KEY=VALUE  one stage's setting (stage1, stage2, ...); train.stages=[{steps:N},...] replaces them all\n"
    "  -m, --multirun   one run per combination of comma-separated values (schedule=linear,cosine)\n"
    f"  {ALLOW_CHANGES_FLAG}  continue a run in progress with changed settings (recorded in its run.json)\n"
    f"  {SWEEP_DIR}=DIR  folder of a sweep's runs (DIR/0, DIR/1, ...; default multirun/TIME)\n"
    f"  {SEARCHPATH}=[file://DIR,...]  more folders of presets\n"
    "  run_dir=DIR      the run folder (default runs/TIME); training again with it resumes the run"
)


@dataclass
class TrainCommand:
    """What ``ladd train ARGS`` asks for: experiment overrides, and whether they sweep."""

    overrides: list[str] = field(default_factory=list)
    multirun: bool = False
    allow_changes: bool = False
    sweep_dir: str | None = None
    searchpath: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, args: list[str]) -> TrainCommand:
        """Split flags and Hydra's own keys from the experiment overrides; anything else of Hydra's is refused."""
        command = cls()
        for arg in args:
            if arg in SWEEP_FLAGS:
                command.multirun = True
            elif arg == ALLOW_CHANGES_FLAG:
                command.allow_changes = True
            elif arg.startswith("-"):
                raise InvalidConfigError(f"ladd train does not take {arg!r} (see ladd train --help)")
            else:
                command._add(arg)
        return command

    def _add(self, arg: str) -> None:
        override = parse_override(arg)
        key = override.key_or_group
        if key == SWEEP_DIR:
            self.sweep_dir = str(override.value())
        elif key == SEARCHPATH:
            value = override.value()
            self.searchpath += [str(v) for v in value] if isinstance(value, list) else [str(value)]
        elif key == "hydra" or key.startswith("hydra."):
            raise InvalidConfigError(
                f"{arg!r}: ladd runs none of Hydra's runtime (logging, callbacks, launchers, output folders); "
                f"of Hydra's keys it takes {SWEEP_DIR} and {SEARCHPATH} (the run folder is run_dir=DIR)"
            )
        else:
            self.overrides.append(arg)

    def jobs(self) -> list[list[str]]:
        """The overrides of each run: one run, or one per combination of a sweep's values."""
        if not self.multirun:
            return [list(self.overrides)]
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

        try:
            return BasicSweeper.split_arguments([parse_override(o) for o in self.overrides], None)[0]
        except HydraException as error:
            raise composition_error(error) from None

    def compose(self, job: list[str], number: int, registry: Registry) -> tuple[DictConfig, Path]:
        """The composed config of one job and its run folder (a sweep's jobs go to numbered subfolders)."""
        if self.multirun:
            if self.sweep_dir is None:
                self.sweep_dir = f"multirun/{datetime.datetime.now():%Y-%m-%d_%H-%M-%S}"
            job = [*_without_run_dir(job), f"{RUN_DIR}={Path(self.sweep_dir) / str(number)}"]
        cfg = compose(job, registry, self.searchpath)  # resolved: ${now:...} once, so the folder and the saved config agree
        return cfg, Path(cfg[RUN_DIR])

    def relaunch(self, job: list[str], run_dir: Path) -> list[str]:
        """Arguments that train this one job again in ``run_dir`` (how Lightning starts the other DDP ranks)."""
        searchpath = [f"{SEARCHPATH}=[{','.join(self.searchpath)}]"] if self.searchpath else []
        return [*searchpath, *_without_run_dir(job), f"{RUN_DIR}={run_dir}"]


def _without_run_dir(job: list[str]) -> list[str]:
    return [o for o in job if parse_override(o).key_or_group != RUN_DIR]
