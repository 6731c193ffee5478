"""Sharing trained models: a Hugging Face style folder of safetensors weights plus a JSON config; or, for a run that
trained adapters over a frozen base, the adapters alone, loadable onto that base."""
from __future__ import annotations

import json
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from torch.nn import Module

from registry.config.saved import saved_settings
from registry.config.settings import Settings
from registry.errors import LaddError
from registry.host.registry import Registry
from registry.storage.files import check_outside, copy_regular, is_leftover, remove_partials, replacing_all
from registry.storage.records import read_json
from registry.storage.weights import read_tensors, write_tensors, write_weights

from .adapters import BASE_KEY
from .documents import ADAPTER_FORMAT, ADAPTER_JSON, ADAPTER_WEIGHTS, CONFIG_JSON, FORMAT, check_folder, read_config
from .loading import load_run
from .runs import COMPONENTS_FILE, CONFIG_FILE, RECORD_FILE, WEIGHTS_FILE, recorded_components

CARD = "README.md"
CARRIES = "carries"  # the document's list of files the folder carries besides its own (an imported tokenizer)
OVERWRITE_FLAG = "--overwrite"
EXPORT_FILES = (WEIGHTS_FILE, CONFIG_JSON, CARD)
ADAPTER_FILES = (ADAPTER_WEIGHTS, ADAPTER_JSON, CARD)


def export(
    run_dir: str | Path, out_dir: str | Path, registry: Registry, overwrite: bool = False, adapter: bool = False
) -> Path:
    """Write a finished run's EMA weights, its config and component origins as a model folder (:func:`write_model`),
    adapters merged into the layers they adapt; with ``adapter``, what a run over a frozen base trained, alone.

    A folder that holds anything is refused unless ``overwrite`` and it is an earlier export of the same kind.
    """
    out_dir = Path(out_dir)
    check_outside(out_dir, (run_dir,), "out_dir")
    if adapter:
        return _export_adapter(Path(run_dir), out_dir, registry, overwrite)
    check_destination(out_dir, overwrite)
    experiment, settings = load_run(run_dir, registry)
    return write_model(out_dir, experiment.model, settings, _components(run_dir), overwrite)


def _components(run_dir: str | Path) -> dict[str, Any]:
    components = recorded_components(run_dir)
    if components is None:
        raise LaddError(f"{run_dir} has no {COMPONENTS_FILE} (a run of an older ladd); train it again to export it")
    return components


def _export_adapter(run_dir: Path, out_dir: Path, registry: Registry, overwrite: bool) -> Path:
    """An adapter folder: what the run trained over its frozen base (EMA weights, the base's SHA-256 in their
    metadata), the config it was trained with and its components, and a card. The base is not read: the run's
    weights file holds none of it."""
    check_destination(out_dir, overwrite, ADAPTER_FILES, ADAPTER_JSON, ADAPTER_FORMAT, "an exported adapter")
    check_folder(run_dir, "a finished run (ladd train)")
    if not (run_dir / CONFIG_FILE).is_file() or not (run_dir / WEIGHTS_FILE).is_file():
        raise LaddError(f"{run_dir} is not a finished ladd run (expected {CONFIG_FILE} and {WEIGHTS_FILE} inside)")
    settings = saved_settings(read_config(run_dir / CONFIG_FILE), registry, run_dir / CONFIG_FILE)
    if not settings.train.adapted:
        raise LaddError(
            f"{run_dir} trained every weight (no train.lora or train.freeze): there is no adapter to export alone; "
            f"ladd export without --adapter writes its whole model"
        )
    components = _components(run_dir)
    tensors, metadata = read_tensors(run_dir / WEIGHTS_FILE)
    if BASE_KEY not in metadata:
        raise LaddError(f"{run_dir / WEIGHTS_FILE} does not name the base it was trained over; the run is damaged")
    base: dict[str, Any] = {"sha256": metadata[BASE_KEY], "init_from": settings.train.init_from}
    document = {
        "format": ADAPTER_FORMAT, "method": settings.method, "base": portable(base),
        "config": portable(settings.plain()), "components": components,
    }
    _write_folder(out_dir, ADAPTER_FILES, lambda weights: write_tensors(tensors, weights, {BASE_KEY: base["sha256"]}),
                  document, _adapter_card(settings.method, base))
    return out_dir


def write_model(
    out_dir: Path, model: Module, settings: Settings, components: dict[str, Any], overwrite: bool = False,
    source: dict[str, Any] | None = None, carried: dict[str, Path] | None = None,
) -> Path:
    """A ladd model folder: ``model``'s weights as safetensors, the config and component origins as JSON, a card.

    ``source``: where the weights came from (an import's checkpoint and its file hash), recorded in the config.
    ``carried``: files the folder carries besides (an imported model's tokenizer), by their path inside it, copied
    from the given files; its config names them ``model:PATH``. Absolute local paths in the config and the source
    are cut to their last part (they name nothing on another machine and tell others about this one). The files
    are written whole before any replaces its namesake, so a full disk or an error leaves the folder as it was.
    """
    check_destination(out_dir, overwrite)
    carried = carried or {}
    cfg = portable(settings.plain())
    document = {"format": FORMAT, "method": settings.method, "config": cfg, "components": components, "tokenizer": None}
    if source is not None:
        document["source"] = portable(source)
    if carried:
        document[CARRIES] = sorted(carried)
    card = _card(settings.method, components, document.get("source"))
    _write_folder(out_dir, EXPORT_FILES, lambda weights: write_weights(model, weights), document, card, carried)
    return out_dir


def _write_folder(
    out_dir: Path, files: tuple[str, str, str], weights: Any, document: dict[str, Any], card: str,
    carried: dict[str, Path] | None = None,
) -> None:
    """The three files of an export (``files``: weights, document, card) and the ``carried`` copies, written whole
    before any replaces its namesake; ``weights`` writes the first to the path it is given."""
    carried = carried or {}
    created = not out_dir.exists()
    if not created:
        remove_partials(out_dir)  # left by an export killed while writing
    targets = [out_dir / name for name in files] + [out_dir / name for name in carried]
    try:
        with replacing_all(targets) as (weights_path, document_path, card_path, *copies):
            weights(weights_path)
            document_path.write_text(json.dumps(document, indent=2), encoding="utf-8")
            card_path.write_text(card, encoding="utf-8")
            for (name, original), copy in zip(carried.items(), copies, strict=True):
                copy_regular(original, copy, f"carried file {name!r}")
    except BaseException:
        if created and out_dir.is_dir():
            for folder in sorted((p for p in out_dir.rglob("*") if p.is_dir()), reverse=True):
                if not any(folder.iterdir()):
                    folder.rmdir()  # made for a carried file that was never written
            if not any(out_dir.iterdir()):
                out_dir.rmdir()
        raise


def check_destination(
    out_dir: Path, overwrite: bool, files: tuple[str, ...] = EXPORT_FILES, document: str = CONFIG_JSON,
    kind: str = FORMAT, noun: str = "an exported model",
) -> None:
    """Refuse a folder that holds anything, unless ``overwrite`` and it holds an earlier export of the same kind
    (``files``, ``document`` of format ``kind``) and nothing else."""
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise LaddError(f"{out_dir} is not a folder (a file or a link); choose a new folder to export to")
    held = sorted(p.name for p in out_dir.iterdir() if not is_leftover(p)) if out_dir.is_dir() else []
    if not held:
        return
    if not overwrite:
        raise LaddError(
            f"{out_dir} already exists and is not empty; choose a new folder, or replace its files with "
            f"{OVERWRITE_FLAG}"
        )
    refusal = f"{OVERWRITE_FLAG} replaces only a folder written by ladd export: choose a new folder"
    if RECORD_FILE in held:
        raise LaddError(f"{out_dir} is a ladd run folder (it holds {RECORD_FILE}), not {noun}; {refusal}")
    if document not in held:
        raise LaddError(f"{out_dir} is not {noun} (it has no {document}); {refusal}")
    found = read_json(out_dir / document, f"{noun}'s config", refusal)
    if not isinstance(found, dict) or found.get("format") != kind:
        raise LaddError(f"{out_dir / document} is not {noun}'s config (format {kind!r}); {refusal}")
    listed = found.get(CARRIES)
    carried = listed if isinstance(listed, list) else []
    ours = {*files, *(PurePosixPath(str(name)).parts[0] for name in carried)}
    foreign = [name for name in held if name not in ours or (name in files and not (out_dir / name).is_file())]
    if foreign:
        raise LaddError(f"{out_dir} is not {noun} (it holds {foreign[0]}, which ladd export does not write); {refusal}")


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


def _adapter_card(method: str, base: dict[str, Any]) -> str:
    start = base["init_from"] or "the seeded initialisation of its config"
    return (
        f"---\nlibrary_name: ladd\ntags: [ladd, discrete-diffusion, lora]\n---\n\n# {method} (adapter)\n\n"
        f"What a ladd run trained over a frozen base: LoRA adapters and any parameters trained beside them. It loads "
        f"onto that base alone, {start} (whose frozen weights have SHA-256 `{base['sha256']}`): "
        f"`registry.from_pretrained(base, adapter=folder)`, or `ladd sample --model base --adapter folder`.\n"
    )


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
