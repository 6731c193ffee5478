"""``ladd import``: what an importer declares (``registry.interfaces.Importer``) composed, built, filled, checked and
written as a model folder.

The importer reads and checks its checkpoint, says which config builds the network it fills, fills it and says where
the weights came from; everything else is done here, the same for every importer: the user's overrides checked against
the importer's (one that changes the network is refused naming the option), the config composed with every refused
key named at once, the model's size checked against the memory before it is built, every parameter checked filled,
and the folder written through ladd's marked temporary files, so that a kill leaves nothing a re-import trips on.
"""
from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import torch
from torch import nn

from registry.config.composition import compose, parse_override
from registry.config.settings import Settings
from registry.errors import LaddError
from registry.host.kinds import SLOTS
from registry.host.model_folders import PluginImporter, reading
from registry.host.plugin_code import FAULTS, PluginCode, describe
from registry.host.registry import Registry
from registry.storage.files import check_regular_tree, copy_regular, is_hub_blob
from registry.storage.weights import file_sha256

from .assembly import build_experiment
from .export import EXPORT_FILES, check_destination, write_model
from .memory import GIB, available_bytes

T = TypeVar("T")
#: an import holds the model and, while filling and writing it, about as much again (tensors read, the file written)
_IMPORT_COPIES = 2


def import_checkpoint(
    entry: PluginImporter, source: str, out_dir: Path, overrides: list[str], registry: Registry, overwrite: bool = False
) -> Path:
    """The checkpoint at ``source``, imported by ``entry``'s importer, as a model folder in ``out_dir``."""
    check_destination(out_dir, overwrite)
    if Path(source).exists() or Path(source).is_symlink():  # a local folder: what the importer reads lies inside it
        check_regular_tree(Path(source), "a checkpoint ladd imports")
    importer = entry.importer()
    calling = _Calls(entry)
    checkpoint = calling("read", importer.read, source)
    own = calling("overrides", importer.overrides, checkpoint)
    if not isinstance(own, list) or not all(isinstance(o, str) and "=" in o for o in own):
        raise LaddError(f"{entry.label}: overrides() returned {own!r}; it must return a list of 'KEY=VALUE' strings")
    _refuse_network_changes(entry, own, overrides)
    carried = _carried(entry, calling("carried", importer.carried, checkpoint))
    settings = _composed(entry, own, overrides, registry)
    with _laid_out(carried) as folder, reading(folder):  # the folder's own files (model:PATH) where it will hold them
        _check_memory(settings, registry, entry)
        experiment = build_experiment(settings, registry)
    model = experiment.model
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(math.nan)  # so that a parameter fill() leaves alone is found
        calling("fill", importer.fill, model, checkpoint)
    _check_filled(entry, model, overrides)
    record = calling("record", importer.record, checkpoint)
    files = calling("files", importer.files, checkpoint)
    if not isinstance(record, dict) or not isinstance(files, list) or not all(isinstance(f, Path) for f in files):
        raise LaddError(
            f"{entry.label}: record() must return a dict and files() a list of pathlib.Path, got {record!r} and "
            f"{files!r}"
        )
    source_record = {"importer": entry.qualified, **record, "files": {path.name: file_sha256(path) for path in files}}
    return write_model(out_dir, model, settings, experiment.origins(), overwrite, source=source_record, carried=carried)


class _Calls:
    """Calls into an importer: a ``LaddError`` it raises (a source it refuses) passes as it is; anything else it
    raises is one line naming the importer, its plugin and the method."""

    def __init__(self, entry: PluginImporter) -> None:
        self.entry = entry

    def __call__(self, method: str, function: Callable[..., T], *arguments: Any) -> T:
        with PluginCode() as code:
            try:
                return function(*arguments)
            except LaddError:
                raise
            except FAULTS as error:
                if not code.is_fault(error):
                    raise
                raise LaddError(
                    f"{self.entry.label} failed in {method}(): {describe(error)}; fix or update plugin "
                    f"{self.entry.origin.plugin!r}"
                ) from error


def _carried(entry: PluginImporter, carried: Any) -> dict[str, Path]:
    """What ``carried()`` returned, checked: relative paths inside the folder, none of ladd's own files, each a file."""
    if not isinstance(carried, dict) or not all(isinstance(p, Path) for p in carried.values()):
        raise LaddError(f"{entry.label}: carried() returned {carried!r}; it must return {{PATH: pathlib.Path}}")
    for name, path in carried.items():
        parts = PurePosixPath(name).parts if isinstance(name, str) else ()
        if not parts or PurePosixPath(name).is_absolute() or ".." in parts or parts[0] in EXPORT_FILES:
            raise LaddError(
                f"{entry.label}: carried() names {name!r}, which is no path inside a model folder beside its own files"
            )
        if not path.is_file():
            raise LaddError(f"{entry.label}: carried() gives {path} for {name!r}, which is not a file")
        if path.is_symlink() and not is_hub_blob(path):
            raise LaddError(
                f"{entry.label}: carried() gives {path} for {name!r}, a symbolic link (to {os.readlink(path)}); a "
                f"model folder carries only regular files, never what a link points to"
            )
    return carried


@contextmanager
def _laid_out(carried: dict[str, Path]) -> Iterator[Path]:
    """A scratch folder holding the carried files at their paths, as the model folder will."""
    with tempfile.TemporaryDirectory(prefix="ladd-import-") as scratch:
        for name, path in carried.items():
            target = Path(scratch) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_regular(path, target, f"carried file {name!r}")
        yield Path(scratch)


def _key(override: str) -> str:
    return parse_override(override).key_or_group


def _slot_of(key: str) -> str | None:
    """The config slot a key sets an option of, or selects (None for other keys)."""
    slot = key.lstrip("+~").split(".")[0]
    return slot if slot in SLOTS else None


def _refuse_network_changes(entry: PluginImporter, own: list[str], overrides: list[str]) -> None:
    """Refuse a user's override of a key the importer sets, or of a component whose options it sets: the checkpoint
    fixes that network."""
    fixed = {_key(o): o for o in own}
    slots = {_slot_of(key) for key in fixed} - {None}
    for override in overrides:
        key = _key(override)
        if key in fixed:
            raise LaddError(
                f"{override}: the checkpoint sets {fixed[key]} ({entry.label}), as it fixes the network its weights "
                f"fill; leave {key} out"
            )
        if key.lstrip("+~") in slots:
            raise LaddError(
                f"{override} would replace the {key.lstrip('+~')} whose weights the checkpoint fills ({entry.label} "
                f"sets its options); leave it out"
            )


def _composed(entry: PluginImporter, own: list[str], overrides: list[str], registry: Registry) -> Settings:
    """The model's settings; when they do not compose, every override that ladd refuses named in one line (the
    importer's, naming its plugin, before the user's)."""
    try:
        return compose([*own, *overrides], registry)
    except LaddError as error:
        first = error
    try:
        compose(own, registry)
    except LaddError as error:
        selections = [o for o in own if "." not in _key(o)]
        options = [o for o in own if o not in selections]
        wrong = _refused([], selections, registry) or _refused(selections, options, registry) or [str(error)]
        raise LaddError(
            f"{entry.label} gives config overrides that ladd refuses: {'; '.join(wrong)}; fix or update plugin "
            f"{entry.origin.plugin!r}"
        ) from None
    wrong = _refused(own, overrides, registry) or [str(first)]  # refused only together: the first error says why
    raise LaddError(f"overrides refused: {'; '.join(wrong)}")


def _refused(base: list[str], each: list[str], registry: Registry) -> list[str]:
    """``override (why)`` for every one of ``each`` that does not compose on top of ``base``."""
    wrong = []
    for override in each:
        try:
            compose([*base, override], registry)
        except LaddError as error:
            wrong.append(f"{override} ({error})")
    return wrong


def _check_memory(settings: Settings, registry: Registry, entry: PluginImporter) -> None:
    """Refuse, before building it, a model that the memory cannot hold: its size is read from a build on the meta
    device, which allocates nothing."""
    try:
        with torch.device("meta"):
            probe = build_experiment(settings, registry).model
    except LaddError:
        raise
    except Exception:  # a component that cannot be built on the meta device: its real build is the check
        return
    size = sum(t.numel() * t.element_size() for t in [*probe.parameters(), *probe.buffers()])
    free = available_bytes(torch.device("cpu"))
    if free is not None and _IMPORT_COPIES * size > free:
        raise LaddError(
            f"the model {entry.label} builds holds {_amount(size)} of weights; importing it needs about "
            f"{_amount(_IMPORT_COPIES * size)} but {_amount(free)} is free: free memory or import on a larger machine"
        )


def _amount(size: int) -> str:
    return f"{size / GIB:.1f} GiB" if size >= GIB else f"{size / 2**20:.1f} MiB"


def _check_filled(entry: PluginImporter, model: nn.Module, overrides: list[str]) -> None:
    """Every parameter holds finite values after ``fill``; one left out is named with the override that added it."""
    unfilled = [name for name, parameter in model.named_parameters() if not bool(torch.isfinite(parameter).all())]
    if not unfilled:
        return
    slots = {name.split(".")[0] for name in unfilled}
    added = [o for o in overrides if _slot_of(_key(o)) in slots]
    if added:
        raise LaddError(
            f"{added[0]} adds parameters the checkpoint does not fill ({unfilled[0]}, {len(unfilled)} in all); "
            f"import without it, then change the model with ladd train (train.init_from=FOLDER)"
        )
    raise LaddError(
        f"{entry.label} left {len(unfilled)} parameter(s) unfilled or not finite after fill() (first: {unfilled[0]}): "
        f"fill() must write every parameter of the model its overrides build; fix or update plugin "
        f"{entry.origin.plugin!r}"
    )
