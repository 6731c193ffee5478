"""Sharing trained models: a Hugging Face style folder of safetensors weights plus a JSON config."""
from __future__ import annotations

import json
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from ._registry import Registry, load
from .assembly import Experiment, build_experiment, check_installed
from .config import check_values, upgraded
from .errors import LaddError
from .files import is_abandoned, remove_partials, replacing_all
from .kinds import SLOTS
from .records import read_json
from .runs import COMPONENTS_FILE, RECORD_FILE, recorded_components
from .safety import without_local_paths
from .training import load_run
from .weights import load_weights, write_weights

CONFIG_JSON = "config.json"
WEIGHTS = "model.safetensors"
CARD = "README.md"
FORMAT = "ladd-model/1"
OVERWRITE_FLAG = "--overwrite"
EXPORT_FILES = (WEIGHTS, CONFIG_JSON, CARD)


def export(run_dir: str | Path, out_dir: str | Path, registry: Registry, overwrite: bool = False) -> Path:
    """Write a finished run's EMA weights as safetensors, its config and component origins as JSON.

    Absolute local paths in the config are cut to their last part (they name nothing on another machine
    and tell others about this one). A folder that holds anything is refused unless ``overwrite`` and it
    is an earlier export. The files are written whole before any replaces its namesake, so a full disk or
    an error leaves the folder as it was.
    """
    out_dir = Path(out_dir)
    _check_destination(out_dir, overwrite)
    experiment, cfg = load_run(run_dir, registry)
    components = recorded_components(run_dir)
    if components is None:
        raise LaddError(f"{run_dir} has no {COMPONENTS_FILE} (a run of an older ladd); train it again to export it")
    cfg = portable(cfg)
    document = {"format": FORMAT, "method": cfg["method"], "config": cfg, "components": components, "tokenizer": None}
    created = not out_dir.exists()
    if not created:
        remove_partials(out_dir)  # left by an export killed while writing
    try:
        with replacing_all([out_dir / name for name in EXPORT_FILES]) as (weights, config, card):
            write_weights(experiment.model, weights)
            config.write_text(json.dumps(document, indent=2), encoding="utf-8")
            card.write_text(_card(cfg["method"], components), encoding="utf-8")
    except BaseException:
        if created and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise
    return out_dir


def _check_destination(out_dir: Path, overwrite: bool) -> None:
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


def from_pretrained(path: str | Path, registry: Registry | None = None) -> Experiment:
    """Rebuild an exported model (any folder written by :func:`export`), ready to sample."""
    path = Path(path)
    registry = registry or load()
    if not (path / CONFIG_JSON).is_file() or not (path / WEIGHTS).is_file():
        raise LaddError(f"{path} is not an exported ladd model (expected {CONFIG_JSON} and {WEIGHTS})")
    document = read_document(path / CONFIG_JSON)
    check_installed(document["components"], registry, f"model {path}")
    experiment = build_experiment(without_local_paths(document["config"], registry), registry, document["components"])
    load_weights(experiment.model, path / WEIGHTS)
    experiment.model.eval()
    return experiment


def read_document(path: Path) -> dict[str, Any]:
    """An exported ``config.json``, checked: JSON, this format, a valid config, and components that agree with it."""
    document = read_json(path, "an exported model's config", "the export is damaged")
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise LaddError(f"{path} has format {found!r}; this ladd reads {FORMAT!r}")
    config, components = document.get("config"), document.get("components")
    if not isinstance(config, dict) or not isinstance(components, dict):
        raise LaddError(f"{path} lacks its 'config' or 'components' section; the export is damaged")
    config = document["config"] = upgraded(config)
    check_values(config)
    _check_agreement(config, components, path)
    return document


def _check_agreement(config: dict[str, Any], components: dict[str, Any], path: Path) -> None:
    """Every slot the config fills is recorded in ``components`` under the same kind and name, and nothing else is."""
    for slot, kind in ((s.name, s.kind) for s in SLOTS.values()):
        node = config.get(slot)
        chosen = node.get("name") if isinstance(node, dict) else node
        recorded = components.get(slot)
        if chosen is None and recorded is None:
            continue
        if not isinstance(recorded, dict) or (recorded.get("kind"), recorded.get("name")) != (kind, chosen):
            described = None if not isinstance(recorded, dict) else f"{recorded.get('kind')} {recorded.get('name')!r}"
            raise LaddError(
                f"{path}: the config's {slot} is {kind} {chosen!r} but its components record {described}; "
                f"the export was edited or damaged"
            )
    unknown = sorted(set(components) - set(SLOTS))
    if unknown:
        raise LaddError(f"{path}: components records unknown slots {', '.join(unknown)}; the export was edited or damaged")


def _card(method: str, components: dict[str, dict[str, Any]]) -> str:
    rows = "\n".join(
        f"| {slot} | {c['name']} | {c['plugin']} | {c['distribution']} {c['version']} |" for slot, c in components.items()
    )
    return (
        f"---\nlibrary_name: ladd\ntags: [ladd, discrete-diffusion]\n---\n\n# {method}\n\n"
        f"A ladd model. Load it with `registry.from_pretrained(folder)` or sample with "
        f"`ladd sample --model folder`.\n\n| slot | component | plugin | distribution |\n| --- | --- | --- | --- |\n{rows}\n"
    )
