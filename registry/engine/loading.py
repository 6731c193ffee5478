"""Reading trained models back: a run folder or an exported model folder, rebuilt and ready to sample.

Nothing here imports Lightning: reading a run needs no training loop.
"""
from __future__ import annotations

from pathlib import Path

from registry.config.saved import saved_settings
from registry.config.settings import Settings
from registry.errors import LaddError
from registry.host.model_folders import reading
from registry.host.registry import Registry, load
from registry.storage.weights import load_weights

from .adapters import adapt, load_adapted, load_state, merge_adapters, seed_for_building, start
from .assembly import Experiment, build_experiment, check_installed
from .documents import (
    ADAPTER_JSON,
    ADAPTER_WEIGHTS,
    CONFIG_JSON,
    check_folder,
    check_own_files,
    is_model_folder,
    read_adapter_document,
    read_config,
    read_document,
)
from .runs import CONFIG_FILE, WEIGHTS_FILE, recorded_components

#: what a command that reads a trained model is given
TRAINED = "a finished run (ladd train) or a model folder (ladd export, ladd import)"


def load_run(run_dir: str | Path, registry: Registry) -> tuple[Experiment, Settings]:
    """Rebuild a trained experiment from its run folder (config + EMA weights).

    A run over a frozen base (``train.lora``, ``train.freeze``) saved only what it trained: its base is made again
    where the run started (``train.init_from``, or the seeded initialisation) and checked against the one it was
    trained over, then the adapters are merged into the layers they adapt.
    """
    run_dir = Path(run_dir)
    check_folder(run_dir, TRAINED)
    config_path, weights_path = run_dir / CONFIG_FILE, run_dir / WEIGHTS_FILE
    if not config_path.is_file() or not weights_path.is_file():
        raise LaddError(f"{run_dir} is not a finished ladd run (expected {CONFIG_FILE} and {WEIGHTS_FILE} inside)")
    settings = saved_settings(read_config(config_path), registry, config_path)
    origins = recorded_components(run_dir) or {}
    check_installed(origins, registry, f"run {run_dir}")
    if settings.train.adapted:
        seed_for_building(settings.seed)
    experiment = build_experiment(settings, registry, origins)
    base, _ = start(experiment, settings, registry) if settings.train.adapted else (None, None)
    load_state(experiment.model, base, weights_path, f"run {run_dir}", settings)
    merge_adapters(experiment.model)
    experiment.model.eval()
    return experiment, settings


def from_pretrained(
    path: str | Path, registry: Registry | None = None, adapter: str | Path | None = None
) -> Experiment:
    """Rebuild a model folder (written by ``ladd export`` or ``ladd import``), ready to sample; with ``adapter`` (a
    folder ``ladd export --adapter`` wrote), that adapter merged into it."""
    registry = registry or load()
    experiment = load_model_folder(Path(path), registry)[0]
    if adapter is not None:
        add_adapter(experiment, Path(adapter), registry)
    return experiment


def add_adapter(experiment: Experiment, folder: Path, registry: Registry) -> None:
    """Merge an exported adapter into the model it was trained over; any other model is refused by the SHA-256 of
    the frozen weights the adapter was trained over, before anything is changed."""
    check_folder(folder, "the folder ladd export --adapter wrote")
    if not (folder / ADAPTER_JSON).is_file() or not (folder / ADAPTER_WEIGHTS).is_file():
        raise LaddError(f"{folder} is not an exported adapter (expected {ADAPTER_JSON} and {ADAPTER_WEIGHTS})")
    document = read_adapter_document(folder / ADAPTER_JSON)
    settings = saved_settings(document["config"], registry, folder / ADAPTER_JSON)
    start = document["base"].get("init_from") or "the seeded initialisation of its config"
    what, fix = f"adapter {folder}", f"load it onto the model it was trained over ({start})"
    base = adapt(experiment.model, settings.train, expected=(document["base"]["sha256"], what, fix))
    if base is None:
        raise LaddError(f"{folder / ADAPTER_JSON} trains every weight (no train.lora or train.freeze): it is damaged")
    load_adapted(experiment.model, base, folder / ADAPTER_WEIGHTS, what, fix)
    merge_adapters(experiment.model)
    experiment.model.eval()


def load_model_folder(path: Path, registry: Registry) -> tuple[Experiment, Settings]:
    """A model folder's experiment (EMA weights, eval mode) and its config, as :func:`load_run` gives a run's."""
    check_folder(path, TRAINED)
    if not (path / CONFIG_JSON).is_file() or not (path / WEIGHTS_FILE).is_file():
        raise LaddError(f"{path} is not an exported ladd model (expected {CONFIG_JSON} and {WEIGHTS_FILE})")
    document = read_document(path / CONFIG_JSON)
    check_installed(document["components"], registry, f"model {path}")
    settings = saved_settings(document["config"], registry, path / CONFIG_JSON)
    check_own_files(path, settings.plain())
    with reading(path):  # files the folder carries (``model:PATH``), e.g. an imported model's tokenizer
        experiment = build_experiment(settings, registry, document["components"])
    load_weights(experiment.model, path / WEIGHTS_FILE)
    experiment.model.eval()
    return experiment, settings


def load_trained(path: str | Path, registry: Registry) -> tuple[Experiment, Settings]:
    """A finished run or a model folder, rebuilt with its weights, and its config."""
    return load_model_folder(Path(path), registry) if is_model_folder(path) else load_run(path, registry)
