"""The documents of run and model folders: a run's saved ``config.yaml`` and a model folder's ``config.json``, read
back and checked, without building anything from them."""
from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from registry.config.settings import upgraded
from registry.errors import LaddError, first_line
from registry.host.component import split_name
from registry.host.kinds import SLOTS
from registry.host.model_folders import MODEL_PREFIX, reading, resolve
from registry.storage.files import check_regular_tree
from registry.storage.records import check_yaml, read_json

from .runs import CONFIG_FILE

CONFIG_JSON = "config.json"
FORMAT = "ladd-model/1"
#: an exported adapter's document and weights (``ladd export --adapter``)
ADAPTER_JSON = "adapter.json"
ADAPTER_WEIGHTS = "adapter.safetensors"
ADAPTER_FORMAT = "ladd-adapter/1"


def read_config(path: Path) -> dict[str, Any]:
    """A saved run config as plain data (it was saved resolved: nothing in it is evaluated), in this ladd's form."""
    check_yaml(path, "a ladd config", "restore it from a copy of the run")
    try:
        plain = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException) as error:
        raise LaddError(f"cannot read {path}: it is not a ladd config ({first_line(error)})") from None
    if not isinstance(plain, dict):
        raise LaddError(f"cannot read {path}: it is not a ladd config (a mapping of options)")
    return upgraded(cast(dict[str, Any], plain))  # a YAML mapping of option names


def check_folder(path: Path, what: str) -> None:
    """Refuse a ``path`` that does not exist or is no folder, in words that say so (``what``: what it must be)."""
    if not path.exists():
        raise LaddError(f"{path} does not exist: give {what}")
    if not path.is_dir():
        raise LaddError(f"{path} is a file, not a folder: give {what}")


def check_own_files(folder: Path, config: Any) -> None:
    """Every ``model:PATH`` the config names is regular files inside ``folder``: a shared folder whose carried files
    link elsewhere (its tokenizer's chat template to a private file) is refused before anything reads them."""
    if isinstance(config, dict):
        for value in config.values():
            check_own_files(folder, value)
    elif isinstance(config, list):
        for value in config:
            check_own_files(folder, value)
    elif isinstance(config, str) and config.startswith(MODEL_PREFIX):
        with reading(folder):
            start = Path(resolve(config, {}))
        check_regular_tree(folder, f"what a model folder carries ({config})", start)


def is_model_folder(path: str | Path) -> bool:
    """Whether ``path`` is a model folder (written by ``ladd export`` or ``ladd import``) rather than a run."""
    return (Path(path) / CONFIG_JSON).is_file() and not (Path(path) / CONFIG_FILE).is_file()


def read_document(path: Path) -> dict[str, Any]:
    """An exported ``config.json``, checked: JSON, this format, and components that agree with its config (which
    the caller checks as settings)."""
    document = read_json(path, "an exported model's config", "the export is damaged")
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise LaddError(f"{path} has format {found!r}; this ladd reads {FORMAT!r}")
    config, components = document.get("config"), document.get("components")
    if not isinstance(config, dict) or not isinstance(components, dict):
        raise LaddError(f"{path} lacks its 'config' or 'components' section; the export is damaged")
    config = document["config"] = upgraded(config)
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
        if not isinstance(recorded, dict) or not _records(recorded, kind, chosen):
            described = None if not isinstance(recorded, dict) else f"{recorded.get('kind')} {recorded.get('name')!r}"
            raise LaddError(
                f"{path}: the config's {slot} is {kind} {chosen!r} but its components record {described}; "
                f"the export was edited or damaged"
            )
    unknown = sorted(set(components) - set(SLOTS))
    if unknown:
        raise LaddError(
            f"{path}: components records unknown slots {', '.join(unknown)}; the export was edited or damaged"
        )


def _records(recorded: dict[str, Any], kind: str, chosen: Any) -> bool:
    """Whether a component record is of ``kind`` and the name the config chose, bare or qualified (``PLUGIN:NAME``)."""
    plugin, name = split_name(str(chosen))
    return (recorded.get("kind"), recorded.get("name")) == (kind, name) and plugin in (None, recorded.get("plugin"))


def read_adapter_document(path: Path) -> dict[str, Any]:
    """An exported adapter's ``adapter.json``, checked: JSON, this format, the base's SHA-256 and a config."""
    document = read_json(path, "an exported adapter's config", "the export is damaged")
    base = document.get("base") if isinstance(document, dict) else None
    if not isinstance(document, dict) or document.get("format") != ADAPTER_FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise LaddError(f"{path} has format {found!r}; this ladd reads adapters of format {ADAPTER_FORMAT!r}")
    if not isinstance(base, dict) or not isinstance(base.get("sha256"), str) or not isinstance(document.get("config"),
                                                                                               dict):
        raise LaddError(f"{path} lacks its base's SHA-256 or its config; the export is damaged")
    document["config"] = upgraded(document["config"])
    return document
