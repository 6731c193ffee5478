"""Warm starts (``train.init_from``): a new experiment's parameters taken from a trained model by name and shape.

The source is a model folder (``ladd export``, ``ladd import``) or a finished run. Every tensor of the new
model whose name the source holds (or that a backbone's ``warm_start_names`` maps to a name the source
holds) with the same shape is loaded; the rest keep their initialisation. A source trained on another
vocabulary is refused, since its token embeddings and heads would mean other tokens.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from registry.config.saved import saved_settings
from registry.errors import LaddError
from registry.host.model_folders import reading
from registry.host.registry import Registry
from registry.interfaces import Backbone, Dataset
from registry.storage.weights import check_finite, verify_weights

from .assembly import required_selection
from .documents import CONFIG_JSON, check_own_files, is_model_folder, read_config, read_document
from .runs import CONFIG_FILE, WEIGHTS_FILE

SETTING = "train.init_from"


@dataclass
class WarmStart:
    """What a warm start did: tensors loaded (name here, name in the source), newly initialised, and skipped."""

    source: Path
    loaded: list[tuple[str, str]] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (name, why)

    def table(self) -> str:
        """One table: a row per group of names that differ only in their numbers (block indices), with a count."""
        entries = [("loaded", here, "" if here == there else f"from {_pattern(there)}") for here, there in self.loaded]
        entries += [("new", name, "not in the source") for name in self.new]
        entries += [("skipped", name, why) for name, why in self.skipped]
        rows = Counter((status, _pattern(name), detail) for status, name, detail in entries)
        width = max([len("tensor")] + [len(name) for _, name, _ in rows])
        lines = [
            f"warm start from {self.source}: {len(self.loaded)} tensors loaded, {len(self.new)} newly initialised, "
            f"{len(self.skipped)} skipped",
            f"{'status':<8} {'count':>5}  {'tensor':<{width}}  detail",
        ]
        for (status, name, detail), count in rows.items():
            lines.append(f"{status:<8} {count:>5}  {name:<{width}}  {detail}".rstrip())
        return "\n".join(lines)


def _pattern(name: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", name)


def source_config(path: Path) -> dict[str, Any]:
    """The config of a model folder or a finished run, checked as far as reading no weights allows (``ladd train``
    checks every job of a sweep so before the first trains)."""
    fix = f"set {SETTING} to a model folder (ladd export, ladd import) or a finished run"
    if not path.exists():
        raise LaddError(f"{SETTING}={path} does not exist; {fix}")
    if is_model_folder(path):
        cfg = read_document(path / CONFIG_JSON)["config"]
    elif (path / CONFIG_FILE).is_file():
        cfg = read_config(path / CONFIG_FILE)
    else:
        raise LaddError(
            f"{SETTING}={path} holds neither {CONFIG_JSON} nor {CONFIG_FILE}: it is not a ladd model; {fix}"
        )
    if not (path / WEIGHTS_FILE).is_file():
        raise LaddError(f"{SETTING}={path} has no {WEIGHTS_FILE}: the run has not finished; {fix}")
    return cfg


def source_of(path: Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The weights and the config of a model folder or a finished run, checked."""
    cfg = source_config(path)
    tensors = verify_weights(path / WEIGHTS_FILE)
    check_finite(tensors, path / WEIGHTS_FILE)
    return tensors, cfg


def check_vocabulary(dataset: Dataset, source_cfg: dict[str, Any], registry: Registry, path: Path) -> None:
    """Refuse a source whose data has other tokens: another count, or a tokenizer mapping ids to other strings."""
    # checked as reading a run or a model back checks it: no expressions, known options in range
    name, options = required_selection(saved_settings(source_cfg, registry, f"{SETTING}={path}"), "dataset")
    check_own_files(path, options)
    with reading(path):  # a model folder's own files (``model:PATH``), e.g. an imported model's tokenizer
        theirs = registry.build("dataset", name, options)
    ours_vocab = None if dataset.tokenizer is None else dataset.tokenizer.get_vocab()
    theirs_vocab = None if theirs.tokenizer is None else theirs.tokenizer.get_vocab()
    if theirs.vocab_size != dataset.vocab_size or ours_vocab != theirs_vocab:
        what = "another tokenizer" if theirs.vocab_size == dataset.vocab_size else f"{theirs.vocab_size} tokens"
        raise LaddError(
            f"{SETTING}={path} was trained on another vocabulary ({what}; this experiment's data has "
            f"{dataset.vocab_size}): its embeddings and output heads would mean other tokens; warm-start from a model "
            f"of the same tokenizer"
        )


def other_names(model: nn.Module) -> list[tuple[str, str]]:
    """(prefix here, prefix in a source) of every backbone's ``warm_start_names``, under the backbone's own path."""
    found = []
    for path, module in model.named_modules():
        if isinstance(module, Backbone):
            base = f"{path}." if path else ""
            found += [(base + here, base + there) for here, there in module.warm_start_names().items()]
    return found


def match(model: nn.Module, tensors: dict[str, Tensor], path: Path) -> WarmStart:
    """Which of ``model``'s tensors the source holds with the same shape, under their names or another name."""
    report = WarmStart(path)
    aliases, used = other_names(model), set()
    for name, tensor in model.state_dict().items():
        candidates = [name] + [there + name[len(here):] for here, there in aliases if name.startswith(here)]
        found = next((candidate for candidate in candidates if candidate in tensors), None)
        if found is None:
            report.new.append(name)
            continue
        used.add(found)
        if tuple(tensors[found].shape) != tuple(tensor.shape):
            why = f"shape {list(tensors[found].shape)} in the source, {list(tensor.shape)} here"
            report.skipped.append((name, why if found == name else f"{found}: {why}"))
        else:
            report.loaded.append((name, found))
    report.skipped += [(name, "in the source, not in this model") for name in tensors if name not in used]
    return report


def warm_start(model: nn.Module, dataset: Dataset, source: str | Path, registry: Registry) -> WarmStart:
    """Load every tensor of ``model`` that the source holds with the same name (or another name) and shape."""
    path = Path(source)
    tensors, cfg = source_of(path)
    check_vocabulary(dataset, cfg, registry, path)
    report = match(model, tensors, path)
    state = model.state_dict()
    with torch.no_grad():
        for here, there in report.loaded:
            state[here].copy_(tensors[there].to(state[here].dtype))
    return report
