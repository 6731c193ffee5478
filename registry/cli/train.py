"""``ladd train``: Hydra overrides that ladd composes itself, sweeps expanded into jobs, each trained in turn.

Hydra's runtime settings (job logging, callbacks, launchers, sweepers, environment variables, the
``.hydra`` output folder) can be set by any preset and create objects or files. ladd composes configs
with Hydra's compose API and runs none of that runtime, so a preset can only set experiment values.
From the command line it takes ``-m`` (a sweep), ``hydra.sweep.dir`` and ``hydra.searchpath``.

Folders (``run_dir``, ``hydra.sweep.dir``) are taken as written: quoted for Hydra's grammar, which
rejects ``~`` and non-ASCII letters in plain values, with ``~`` expanded. A sweep's jobs are all
composed, and their run folders checked, before the first one trains.
"""
from __future__ import annotations

import argparse
import datetime
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hydra.errors import HydraException

from registry.config.composition import check_selections, compose, composition_error, parse_override
from registry.config.settings import TIME_FORMAT, Settings
from registry.engine.runs import ALLOW_CHANGES_FLAG, RunFolder
from registry.errors import InvalidConfigError, LaddError
from registry.host.kinds import SLOTS
from registry.host.registry import Registry
from registry.training.stopping import check, stopping_on_signals

from .notices import print_problems

NAME = "train"
SWEEP_FLAGS = ("-m", "--multirun")
DRY_RUN_FLAG = "--dry-run"
HELP_FLAGS = ("-h", "--help")
SWEEP_DIR = "hydra.sweep.dir"
SEARCHPATH = "hydra.searchpath"
RUN_DIR = "run_dir"
USAGE = (
    f"usage: ladd train [-m] [{ALLOW_CHANGES_FLAG}] [{DRY_RUN_FLAG}] [experiment=NAME] [KEY=VALUE ...]\n"
    "  KEY=VALUE        Hydra overrides: components by registry name (backbone=mmdit), options (train.lr=3e-4);\n"
    "                   any component may replace a preset's (its options for the one it replaces are left out)\n"
    "  train.stages.NAME.KEY=VALUE  one stage's setting (stage1, stage2, ...); train.stages=[{steps:N},...] replaces "
    "them all\n"
    "  -m, --multirun   one run per combination of comma-separated values (schedule=linear,cosine)\n"
    f"  {ALLOW_CHANGES_FLAG}  continue a run in progress with changed settings (recorded in its run.json)\n"
    f"  {DRY_RUN_FLAG}        check the run and print its trained and frozen parameters and one step's memory\n"
    "                   estimate on this machine, without reading weights, training or writing anything\n"
    f"  {SWEEP_DIR}=DIR  folder of a sweep's runs (DIR/0, DIR/1, ...; default multirun/TIME)\n"
    f"  {SEARCHPATH}=[file://DIR,...]  more folders of presets\n"
    "  run_dir=DIR      the run folder (default runs/TIME), as written (~ expanded); training again with it resumes\n"
    "                   the run; in a sweep, the folder of its runs (DIR/0, DIR/1, ...)"
)
FOLDER_KEYS = (RUN_DIR, SWEEP_DIR)


@dataclass
class Job:
    """One run of ``ladd train``: its overrides, its composed config and its run folder."""

    overrides: list[str]
    settings: Settings
    run_dir: Path
    swept: list[str]  # the overrides in which this job of a sweep differs from the others


@dataclass
class TrainCommand:
    """What ``ladd train ARGS`` asks for: experiment overrides, and whether they sweep."""

    overrides: list[str] = field(default_factory=list)
    multirun: bool = False
    allow_changes: bool = False
    dry_run: bool = False
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
            elif arg == DRY_RUN_FLAG:
                command.dry_run = True
            elif arg.startswith("-"):
                raise InvalidConfigError(f"ladd train does not take {arg!r} (see ladd train --help)")
            else:
                command._add(quoted_folder(arg))
        if command.multirun and command.sweep_dir is not None and command._given_run_dir() is not None:
            raise InvalidConfigError(f"a sweep goes to one folder: give {RUN_DIR}=DIR or {SWEEP_DIR}=DIR, not both")
        return command

    def _add(self, arg: str) -> None:
        override = parse_override(arg)
        key = override.key_or_group
        if key == SWEEP_DIR:
            self.sweep_dir = str(Path(str(override.value())).expanduser())
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

    def resumed_with(self, registry: Registry) -> Registry:
        """``registry`` looking bare names up as the run being resumed recorded them (its ``components.json``), so a
        plugin installed since cannot change or refuse what it trains with; ``registry`` itself for a new run."""
        from registry.engine.runs import recorded_components  # reads the run's record: only when one is named

        given = self._given_run_dir()
        recorded = None if self.multirun or given is None else recorded_components(Path(given).expanduser())
        return registry if recorded is None else registry.pinned(recorded)

    def jobs(self) -> list[list[str]]:
        """The overrides of each run: one run, or one per combination of a sweep's values."""
        if not self.multirun:
            return [list(self.overrides)]
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

        try:
            return BasicSweeper.split_arguments([parse_override(o) for o in self.overrides], None)[0]
        except HydraException as error:
            raise composition_error(error) from None

    def prepared(self, registry: Registry) -> list[Job]:
        """Every job composed and checked before any trains: a sweep's bad value stops it before job 0."""
        jobs = self.jobs()
        common = set.intersection(*(set(job) for job in jobs))
        prepared = []
        for number, overrides in enumerate(jobs):
            swept = [o for o in overrides if o not in common and parse_override(o).key_or_group != RUN_DIR]
            try:
                settings, run_dir = self.compose(overrides, number, registry)
                _check_options(settings, registry)
                RunFolder(run_dir).check(settings.plain(), self.allow_changes)
                if settings.train.init_from is not None and _reads_source(settings, run_dir):
                    from registry.engine.warm_start import source_config  # torch: only when a job warm-starts

                    source_config(Path(settings.train.init_from))
            except LaddError as error:
                if not self.multirun:
                    raise
                values = " ".join(swept) or "nothing swept"
                raise LaddError(f"sweep job {number} ({values}): {error}; no job was trained") from None
            prepared.append(Job(overrides, settings, run_dir, swept))
        return prepared

    def compose(self, job: list[str], number: int, registry: Registry) -> tuple[Settings, Path]:
        """The settings of one job and its run folder (a sweep's jobs go to numbered subfolders)."""
        if self.multirun:
            if self.sweep_dir is None:
                self.sweep_dir = self._given_run_dir() or f"multirun/{datetime.datetime.now():{TIME_FORMAT}}"
            job = [*_without_run_dir(job), quoted_folder(f"{RUN_DIR}={Path(self.sweep_dir) / str(number)}")]
        # resolved: ${now:...} once, so the folder and the saved config agree
        settings = compose(job, registry, self.searchpath)
        return settings, Path(settings.run_dir).expanduser()

    def _given_run_dir(self) -> str | None:
        """The ``run_dir`` the command line gives (the last one), or None."""
        given = [override for override in map(parse_override, self.overrides) if override.key_or_group == RUN_DIR]
        return str(given[-1].value()) if given else None

    def relaunch(self, job: list[str], run_dir: Path) -> list[str]:
        """Arguments that train this one job again in ``run_dir`` (how Lightning starts the other DDP ranks)."""
        searchpath = [f"{SEARCHPATH}=[{','.join(self.searchpath)}]"] if self.searchpath else []
        return [*searchpath, *_without_run_dir(job), quoted_folder(f"{RUN_DIR}={run_dir}")]


def _reads_source(settings: Settings, run_dir: Path) -> bool:
    """Whether the job reads ``train.init_from``: a run that begins does, and so does a resumed run over a frozen base;
    a resumed run of whole weights continues from its own checkpoints and never reads it again."""
    from registry.training.resume import has_saved_state  # Lightning: only when a job warm-starts

    return settings.train.adapted or not has_saved_state(RunFolder(run_dir), len(settings.train.stages_to_run()))


def _check_options(settings: Settings, registry: Registry) -> None:
    """Every selected component's options, checked as its config checks them when it is built."""
    for slot in SLOTS.values():
        node = settings.selection(slot.name)
        if node is not None and "name" in node:
            options = {k: v for k, v in node.items() if k != "name"}
            registry.check_options(registry.get(slot.kind, node["name"]), options)


def quoted_folder(arg: str) -> str:
    """``run_dir=DIR`` or ``hydra.sweep.dir=DIR`` with DIR quoted for Hydra's grammar (``~`` expanded); other
    arguments, and folders the user quoted, as given."""
    key, sep, value = arg.partition("=")
    if not sep or key not in FOLDER_KEYS or value[:1] in ("'", '"'):
        return arg
    if value.strip() in ("", "null"):  # Hydra's null, or nothing: no folder (quoted, 'null' is a folder's name)
        default = ", or leave it out for runs/TIME" if key == RUN_DIR else ""
        raise InvalidConfigError(f"{arg!r} names no folder: give {key}=DIR{default}")
    # in Hydra's quoted strings a quote is escaped with a backslash, and so are the backslashes before one
    escaped = re.sub(r"(\\*)('|$)", lambda m: m[1] * 2 + ("\\'" if m[2] else ""), str(Path(value).expanduser()))
    return f"{key}='{escaped}'"


def _without_run_dir(job: list[str]) -> list[str]:
    return [o for o in job if parse_override(o).key_or_group != RUN_DIR]


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command; its arguments are Hydra overrides and flags that argparse leaves as they are."""
    p = sub.add_parser(
        NAME,
        add_help=False,
        prefix_chars="\0",
        help="train an experiment: ladd train [experiment=NAME] [key=value ...] (Hydra overrides, -m for sweeps)",
    )
    p.add_argument("arguments", nargs="*")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Train every job the arguments ask for (one, or a sweep's), each checked before the first trains."""
    if any(arg in HELP_FLAGS for arg in args.arguments):
        print(USAGE)
        return
    print_problems(registry)  # a preset of a plugin that failed to load is missing too, not only its components
    command = TrainCommand.parse(args.arguments)
    registry = command.resumed_with(registry)
    check_selections(command.overrides, registry)  # every value of a sweep, before its first run trains
    jobs = command.prepared(registry)
    if command.dry_run:
        from registry.training.dry_run import dry_run  # Lightning: only once every job is checked

        for job in jobs:
            dry_run(job.settings, registry)
        return
    from registry.training.loop import train  # Lightning: only once every job is checked

    with stopping_on_signals():
        for number, job in enumerate(jobs):
            check()  # a signal that came as the last job's last stage ended
            if command.multirun:
                swept = " ".join(job.swept) or "(nothing swept)"
                print(f"job {number} of {len(jobs)}: {swept} -> {job.run_dir}", flush=True)
            # Lightning's DDP launcher starts the other ranks by running this process's command line again.
            sys.argv = [sys.argv[0], NAME, *command.relaunch(job.overrides, job.run_dir)]
            train(job.settings, job.run_dir, registry, command.allow_changes)
            print(f"trained {job.settings.method}: {job.run_dir}")
