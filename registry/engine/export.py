"""Sharing trained models: a Hugging Face style folder of safetensors weights plus a JSON config."""
from __future__ import annotations

import json
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from torch.nn import Module

from registry.config.settings import Settings
from registry.errors import LaddError
from registry.host.registry import Registry
from registry.storage.files import is_abandoned, remove_partials, replacing_all
from registry.storage.records import read_json
from registry.storage.weights import write_weights

from .documents import CONFIG_JSON, FORMAT
from .loading import load_run
from .runs import COMPONENTS_FILE, RECORD_FILE, WEIGHTS_FILE, recorded_components

CARD = "README.md"
OVERWRITE_FLAG = "--overwrite"
EXPORT_FILES = (WEIGHTS_FILE, CONFIG_JSON, CARD)


def export(run_dir: str | Path, out_dir: str | Path, registry: Registry, overwrite: bool = False) -> Path:
    """Write a finished run's EMA weights, its config and component origins as a model folder (:func:`write_model`).

    A folder that holds anything is refused unless ``overwrite`` and it is an earlier export.
    """
    out_dir = Path(out_dir)
    check_destination(out_dir, overwrite)
    experiment, settings = load_run(run_dir, registry)
    components = recorded_components(run_dir)
    if components is None:
        raise LaddError(f"{run_dir} has no {COMPONENTS_FILE} (a run of an older ladd); train it again to export it")
    return write_model(out_dir, experiment.model, settings, components, overwrite)


def write_model(
    out_dir: Path, model: Module, settings: Settings, components: dict[str, Any], overwrite: bool = False,
    source: dict[str, Any] | None = None,
) -> Path:
    """A ladd model folder: ``model``'s weights as safetensors, the config and component origins as JSON, a card.

    ``source``: where the weights came from (an import's checkpoint and its file hash), recorded in the config.
    Absolute local paths in the config and the source are cut to their last part (they name nothing on another
    machine and tell others about this one). The files are written whole before any replaces its namesake, so
    a full disk or an error leaves the folder as it was.
    """
    check_destination(out_dir, overwrite)
    cfg = portable(settings.plain())
    document = {"format": FORMAT, "method": settings.method, "config": cfg, "components": components, "tokenizer": None}
    if source is not None:
        document["source"] = portable(source)
    created = not out_dir.exists()
    if not created:
        remove_partials(out_dir)  # left by an export killed while writing
    try:
        with replacing_all([out_dir / name for name in EXPORT_FILES]) as (weights, config, card):
            write_weights(model, weights)
            config.write_text(json.dumps(document, indent=2), encoding="utf-8")
            card.write_text(_card(settings.method, components, document.get("source")), encoding="utf-8")
    except BaseException:
        if created and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise
    return out_dir


def check_destination(out_dir: Path, overwrite: bool) -> None:
    """Refuse a folder that holds anything, unless ``overwrite`` and it holds an earlier export and nothing else."""
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise LaddError(f"{out_dir} is not a folder (a file or a link); choose a new folder to export to")
    held = sorted(p.name for p in out_dir.iterdir() if not is_abandoned(p)) if out_dir.is_dir() else []
    if not held:
        return
    if not overwrite:
        raise LaddError(
            f"{out_dir} already exists and is not empty; choose a new folder, or replace its files with "
            f"{OVERWRITE_FLAG}"
        )
    refusal = f"{OVERWRITE_FLAG} replaces only a folder written by ladd export: choose a new folder"
    if RECORD_FILE in held:
        raise LaddError(f"{out_dir} is a ladd run folder (it holds {RECORD_FILE}), not an exported model; {refusal}")
    foreign = [name for name in held if name not in EXPORT_FILES or not (out_dir / name).is_file()]
    if foreign or CONFIG_JSON not in held:
        what = f"holds {foreign[0]}, which ladd export does not write" if foreign else f"has no {CONFIG_JSON}"
        raise LaddError(f"{out_dir} is not an exported model (it {what}); {refusal}")
    document = read_json(out_dir / CONFIG_JSON, "an exported model's config", refusal)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise LaddError(f"{out_dir / CONFIG_JSON} is not an exported model's config (format {FORMAT!r}); {refusal}")


def portable(node: Any) -> Any:
    """``node`` with every absolute local path replaced by its last part."""
    if isinstance(node, dict):
        return {key: portable(value) for key, value in node.items()}
    if isinstance(node, list):
        return [portable(value) for value in node]
    if isinstance(node, str) and _is_absolute(node):
        return PureWindowsPath(node).name if PureWindowsPath(node).drive else PurePosixPath(node).name
    return node


def _is_absolute(text: str) -> bool:
    return text.startswith(("/", "~")) or bool(PureWindowsPath(text).drive)


def _card(method: str, components: dict[str, dict[str, Any]], source: dict[str, Any] | None = None) -> str:
    rows = "\n".join(
        f"| {slot} | {c['name']} | {c['plugin']} | {c['distribution']} {c['version']} |"
        for slot, c in components.items()
    )
    origin = "" if source is None else "Imported from " + ", ".join(f"{k} `{v}`" for k, v in source.items()) + ".\n\n"
    return (
        f"---\nlibrary_name: ladd\ntags: [ladd, discrete-diffusion]\n---\n\n# {method}\n\n{origin}"
        f"A ladd model. Load it with `registry.from_pretrained(folder)` or sample with "
        "`ladd sample --model folder`.\n\n| slot | component | plugin | distribution |\n| --- | --- | --- | --- "
        f"|\n{rows}\n"
    )
