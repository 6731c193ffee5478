"""Sharing trained models: a Hugging Face style folder of safetensors weights plus a JSON config."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors.torch import load_model

from ._registry import Registry, load
from .assembly import Experiment, build_experiment, check_installed
from .errors import LaddError
from .training import COMPONENTS_FILE, load_run, save_weights

CONFIG_JSON = "config.json"
WEIGHTS = "model.safetensors"
CARD = "README.md"
FORMAT = "ladd-model/1"


def export(run_dir: str | Path, out_dir: str | Path, registry: Registry) -> Path:
    """Write a finished run's EMA weights as safetensors, its config and component origins as JSON."""
    experiment, cfg = load_run(run_dir, registry)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_weights(experiment.model, out_dir / WEIGHTS)
    components = json.loads((Path(run_dir) / COMPONENTS_FILE).read_text())
    document = {"format": FORMAT, "method": cfg["method"], "config": cfg, "components": components, "tokenizer": None}
    (out_dir / CONFIG_JSON).write_text(json.dumps(document, indent=2))
    (out_dir / CARD).write_text(_card(cfg["method"], components))
    return out_dir


def from_pretrained(path: str | Path, registry: Registry | None = None) -> Experiment:
    """Rebuild an exported model (any folder written by :func:`export`), ready to sample."""
    path = Path(path)
    registry = registry or load()
    if not (path / CONFIG_JSON).is_file() or not (path / WEIGHTS).is_file():
        raise LaddError(f"{path} is not an exported ladd model (expected {CONFIG_JSON} and {WEIGHTS})")
    document = json.loads((path / CONFIG_JSON).read_text())
    if document.get("format") != FORMAT:
        raise LaddError(f"{path / CONFIG_JSON} has format {document.get('format')!r}; this ladd reads {FORMAT!r}")
    check_installed(document["components"], registry, f"model {path}")
    experiment = build_experiment(document["config"], registry)
    load_model(experiment.model, path / WEIGHTS)
    experiment.model.eval()
    return experiment


def _card(method: str, components: dict[str, dict[str, Any]]) -> str:
    rows = "\n".join(
        f"| {slot} | {c['name']} | {c['plugin']} | {c['distribution']} {c['version']} |" for slot, c in components.items()
    )
    return (
        f"---\nlibrary_name: ladd\ntags: [ladd, discrete-diffusion]\n---\n\n# {method}\n\n"
        f"A ladd model. Load it with `registry.from_pretrained(folder)` or sample with "
        f"`ladd sample --model folder`.\n\n| slot | component | plugin | distribution |\n| --- | --- | --- | --- |\n{rows}\n"
    )
