"""Which launcher runs a sweep and with what options: ``launcher=NAME`` or ``launcher=FILE.yaml`` and
``launcher.OPTION=VALUE`` on the command line, typed and checked by the launcher's config.

The launcher is no part of an experiment's config: a preset cannot set it (the config has no such key), no run
records it, and its options are plain values that the launcher's dataclass types, so none names code to import.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from registry.config.composition import LAUNCHER
from registry.config.safety import check_config
from registry.errors import InvalidConfigError, LaddError
from registry.host.registry import Registry
from registry.storage.records import check_yaml

if TYPE_CHECKING:  # annotations only: the interfaces import torch
    from registry.interfaces import Launcher

KEY = LAUNCHER
DEFAULT = "serial"
FILE_SUFFIXES = (".yaml", ".yml")


@dataclass
class LauncherChoice:
    """A launcher's name and options, as the command line (and a user's file it names) gave them."""

    name: str = DEFAULT
    options: dict[str, Any] = field(default_factory=dict)
    given: bool = False  # whether the command line chose a launcher or set an option

    def add(self, key: str, value: Any) -> None:
        """Take ``launcher=NAME``, ``launcher=FILE.yaml`` (its ``name`` and options) or ``launcher.OPTION=VALUE``; later
        arguments override earlier ones."""
        self.given = True
        if key != KEY:
            self.options[key.removeprefix(f"{KEY}.")] = value
        elif isinstance(value, str) and value.endswith(FILE_SUFFIXES):
            name, options = _read(Path(value).expanduser())
            self.name, self.options = name, {**options, **self.options}
        elif isinstance(value, str) and value:
            self.name = value
        else:
            raise InvalidConfigError(
                f"{KEY}={value!r} names no launcher: give {KEY}=NAME (`ladd list-components --kind {KEY}`) or "
                f"{KEY}=FILE.yaml"
            )

    def build(self, registry: Registry) -> Launcher:
        """The launcher, its options checked by its config (an unknown or mistyped option is refused, naming it)."""
        launcher: Launcher = registry.build(KEY, self.name, dict(self.options))
        return launcher

    def as_record(self) -> dict[str, Any]:
        """The name and options, as the sweep's manifest keeps them."""
        return {"name": self.name, "options": dict(self.options)}


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    """A user's launcher file: a mapping with ``name`` and the launcher's options."""
    fix = "write it as `name: NAME` and one `OPTION: VALUE` line per option"
    if not path.is_file():
        raise LaddError(f"{KEY}={path}: no such file; {fix}")
    check_yaml(path, "a launcher file", fix)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise LaddError(f"{KEY}={path} is not a launcher file: {fix}")
    check_config(data, f"{KEY}={path}")
    options = {str(key): value for key, value in data.items() if key != "name"}
    return data["name"], options
