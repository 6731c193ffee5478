"""Run folders: which folders are ladd runs, the settings a run is trained with, and who is training it.

A run folder's ``run.json`` marks it as a ladd run and records the settings that decide its weights
(the config without labels, sampling, evaluation and hardware options) and every change accepted
with ``--allow-changes``. Training checks the folder before writing anything: a folder that is not a
run, a finished run of other settings, or a run in progress of other settings (without the flag) is
refused. While a process trains, it holds an exclusive lock on ``train.lock``; the system releases it
when the process ends, however it ends.
"""
from __future__ import annotations

import datetime
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from registry.config.settings import operational_options, upgraded
from registry.errors import LaddError
from registry.storage.files import check_outside, is_partial, remove_partials, write_text
from registry.storage.records import checked_components, read_json

RECORD_FILE = "run.json"
LOCK_FILE = "train.lock"
CONFIG_FILE = "config.yaml"
COMPONENTS_FILE = "components.json"
WEIGHTS_FILE = "model.safetensors"
CHECKPOINTS = "checkpoints"  # one folder per stage: checkpoints/stageN
STAGE_WEIGHTS = "final.safetensors"  # a finished stage's EMA weights, the next stage's starting point
LAST_CHECKPOINT = "last.ckpt"  # a stage's latest checkpoint, where it resumes
TRACKING_FILE = "tracking.json"  # the logged runs (W&B, MLflow) that a resumed training continues
FORMAT = "ladd-run/1"
ALLOW_CHANGES_FLAG = "--allow-changes"
#: Keys that label, sample or evaluate a run: they never change what is trained.
LABEL_KEYS = ("method", "run_dir", "sampler", "metric", "eval", "harness")


#: differences named in a refusal, and the characters of each
_SHOWN, _SHOWN_CHARACTERS = 3, 100


class RunFolderError(LaddError):
    """A run folder that this training may not write to."""


def training_settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What decides the trained weights: the config without labels, sampler, metric, evaluation and the options
    marked operational (``settings.OPERATIONAL``: hardware, reporting)."""
    settings = {k: v for k, v in cfg.items() if k not in LABEL_KEYS}
    for section, operational in operational_options().items():
        settings[section] = {k: v for k, v in (cfg.get(section) or {}).items() if k not in operational}
    return settings


def training_key(cfg: Mapping[str, Any]) -> str:
    """:func:`training_settings` as a canonical string: equal keys train equal models."""
    return json.dumps(training_settings(cfg), sort_keys=True)


def differences(old: Any, new: Any, key: str = "") -> list[str]:
    """``key: old -> new`` for every leaf that differs (lists compare whole)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        found = []
        for name in sorted(set(old) | set(new), key=str):
            child = f"{key}.{name}" if key else str(name)
            found += differences(old.get(name, "(unset)"), new.get(name, "(unset)"), child)
        return found
    return [] if old == new else [f"{key or 'config'}: {json.dumps(old)} -> {json.dumps(new)}"]


def _listed(found: list[str]) -> str:
    """The first differences, each cut short, for a one-line message (``run.json`` records them all)."""
    shown = [d if len(d) <= _SHOWN_CHARACTERS else d[: _SHOWN_CHARACTERS - 3] + "..." for d in found[:_SHOWN]]
    return "; ".join(shown) + (f"; and {len(found) - _SHOWN} more" if len(found) > _SHOWN else "")


class RunFolder:
    """A run folder and the checks that guard it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def finished(self) -> bool:
        """Whether the run's final weights exist."""
        return (self.path / WEIGHTS_FILE).is_file()

    def stage_dir(self, index: int) -> Path:
        """The folder of stage ``index`` (its position, from 1): its checkpoint and, once finished, its weights."""
        return self.path / CHECKPOINTS / f"stage{index}"

    def stage_weights(self, index: int) -> Path:
        """Stage ``index``'s EMA weights, written when it finishes."""
        return self.stage_dir(index) / STAGE_WEIGHTS

    def last_checkpoint(self, index: int) -> Path:
        """Stage ``index``'s latest checkpoint, where it resumes."""
        return self.stage_dir(index) / LAST_CHECKPOINT

    def check(self, cfg: Mapping[str, Any], allow_changes: bool = False) -> list[str]:
        """The setting changes this training brings (accepted only with ``allow_changes``); raises when refused.

        Reads only: a refused training leaves the folder as it was.
        """
        check_outside(self.path, ((cfg.get("train") or {}).get("init_from"),), "run_dir")
        if not self.path.exists():
            return []
        if not self.path.is_dir():
            raise RunFolderError(f"run_dir {self.path} is a file, not a folder; choose another run_dir")
        if not [p for p in self.path.iterdir() if p.name != LOCK_FILE and not is_partial(p)]:
            return []  # new, or a first training killed before it recorded anything
        record = self.record()
        links = self.links()
        if links:
            raise RunFolderError(
                f"{self.path} holds a symbolic link ({links[0]}); ladd writes no links and never writes through one: "
                f"remove it, or train into a new run_dir"
            )
        # the record through this ladd's reading too: an option since marked operational is no change
        recorded = training_settings(upgraded(record["settings"]))
        found = differences(recorded, json.loads(json.dumps(training_settings(cfg))))
        if not found:
            return []
        listed = _listed(found)
        if self.finished:
            raise RunFolderError(
                f"{self.path} holds a finished run trained with other settings ({listed}); it is left as it is: "
                f"train into a new run_dir"
            )
        if not allow_changes:
            raise RunFolderError(
                f"{self.path} holds a run in progress trained with other settings ({listed}); train into a new "
                f"run_dir, or continue this run with the new settings with `ladd train {ALLOW_CHANGES_FLAG} ...` "
                f"(the change is recorded in {RECORD_FILE})"
            )
        return found

    def links(self) -> list[Path]:
        """Symbolic links anywhere in the folder (not followed)."""
        found = []
        for root, dirs, files in os.walk(self.path):
            found += [Path(root) / name for name in dirs + files if (Path(root) / name).is_symlink()]
        return found

    def record(self) -> dict[str, Any]:
        """The folder's ``run.json``; a folder without a readable one is not a ladd run."""
        path = self.path / RECORD_FILE
        if not path.is_file() or path.is_symlink():
            raise RunFolderError(
                f"{self.path} is not empty and is not a ladd run folder (it has no {RECORD_FILE}); ladd does not "
                f"write into it: choose a new or empty run_dir"
            )
        fix = "restore it or train into a new run_dir"
        try:
            record = read_json(path, "a run record", fix)
        except LaddError as error:
            raise RunFolderError(str(error)) from None
        ours = isinstance(record, dict) and record.get("format") == FORMAT
        if not ours or not isinstance(record.get("settings"), dict):
            raise RunFolderError(f"{path} is not a ladd run record of format {FORMAT!r}; train into a new run_dir")
        if not record["settings"]:
            raise RunFolderError(f"{path} is damaged: it records no training settings; {fix}")
        if not isinstance(record.get("changes", []), list):
            changes = type(record["changes"]).__name__
            raise RunFolderError(f"{path} is damaged: its changes are {changes}, not a list; {fix}")
        return record

    @contextmanager
    def claim(self, cfg: Mapping[str, Any], allow_changes: bool = False) -> Iterator[None]:
        """Lock the folder for this process, check it again, clear partial files of killed writers, record settings and
        config."""
        self.check(cfg, allow_changes)
        self.path.mkdir(parents=True, exist_ok=True)
        with _exclusive(self.path / LOCK_FILE):
            changes = self.check(cfg, allow_changes)
            remove_partials(self.path)  # left by a process killed while writing; this one holds the lock
            record: dict[str, Any] = self.record() if (self.path / RECORD_FILE).exists() else {"format": FORMAT}
            record["settings"] = training_settings(cfg)
            if changes:
                record.setdefault("changes", []).append(
                    {"time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "changes": changes}
                )
            write_text(self.path / RECORD_FILE, json.dumps(record, indent=2))
            write_text(self.path / CONFIG_FILE, OmegaConf.to_yaml(OmegaConf.create(dict(cfg))))
            yield


def is_ladd_folder(path: str | Path) -> bool:
    """Whether ``path`` is a run folder or a model folder: it holds a run record or a model's weights."""
    return (Path(path) / RECORD_FILE).is_file() or (Path(path) / WEIGHTS_FILE).is_file()


def recorded_components(run_dir: str | Path) -> dict[str, dict[str, Any]] | None:
    """The checked component record of a run folder (None for a run of a ladd that did not write one)."""
    path = Path(run_dir) / COMPONENTS_FILE
    if not path.is_file():
        return None
    fix = f"the run folder is damaged; restore {COMPONENTS_FILE} from a copy"
    components = read_json(path, "a component record", fix)
    return checked_components(components, f"run {run_dir}", path)


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (opened without following links) or refuse at once."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderError(
                f"{path.parent} is being trained by another process (it holds {path.name}); wait for it to finish, "
                f"or train into another run_dir"
            ) from None
        yield
    finally:
        os.close(descriptor)
