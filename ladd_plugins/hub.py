"""Where Hugging Face models, tokenizers and corpora come from, and the one error for a missing one."""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from registry.errors import MissingResourceError

_TRUE = ("1", "ON", "YES", "TRUE")
#: ``pkg:MODULE`` names a model folder shipped inside an installed Python package exposing ``get_model_path()``
PACKAGE_PREFIX = "pkg:"


def locate(name: str | Path) -> str:
    """A Hub id or folder as given, or for ``pkg:MODULE`` the folder that installed package ships."""
    name = str(name)
    if not name.startswith(PACKAGE_PREFIX):
        return name
    module_name = name.removeprefix(PACKAGE_PREFIX)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise MissingResourceError(f"{name!r} names the Python package {module_name!r}, which is not installed ({error})") from None
    if not callable(getattr(module, "get_model_path", None)):
        raise MissingResourceError(f"{name!r}: package {module_name!r} has no get_model_path() returning its model folder")
    return str(module.get_model_path())


def offline() -> bool:
    """True when Hugging Face offline mode is on (read now, not when the libraries were imported)."""
    from huggingface_hub import constants

    flags = (os.environ.get(v, "") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return bool(constants.HF_HUB_OFFLINE) or any(f.upper() in _TRUE for f in flags)


def hub_cache() -> str:
    """The Hugging Face hub cache folder in use."""
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def unavailable(what: str, name: str, error: Exception, setting: str, checked: str | None = None) -> MissingResourceError:
    """The error for ``what`` named ``name`` that did not load: where it was looked for and the two ways to fix it."""
    reason = f"[{type(error).__name__}: {error}]"
    if Path(name).is_dir():
        return MissingResourceError(f"cannot load {what} from the folder {name!r}: it does not hold a loadable one {reason}")
    why = "Hugging Face offline mode is on" if offline() else "the Hugging Face Hub could not be reached or has no such repository"
    return MissingResourceError(
        f"cannot load {what} {name!r}: it is not in the local cache (checked {checked or hub_cache()}) and {why} "
        f"{reason}. To fix: on a machine with network load it once (`hf download {name}` for a model or tokenizer) "
        "and copy that HF_HOME folder here (export HF_HOME=/path/to/copy HF_HUB_OFFLINE=1); or set "
        f"{setting} to local files"
    )


def from_pretrained(loader: Any, what: str, name: str, setting: str, **options: Any) -> Any:
    """``loader.from_pretrained`` for a Hub id, folder or ``pkg:MODULE``; missing ones raise the actionable error."""
    try:
        return loader.from_pretrained(locate(name), local_files_only=offline(), **options)
    except OSError as error:
        raise unavailable(what, name, error, setting) from None
