"""Where Hugging Face models, tokenizers and corpora come from, and the one error for a missing one."""
from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

from registry import load
from registry.errors import LaddError, MissingResourceError, first_line

_TRUE = ("1", "ON", "YES", "TRUE")


def locate(name: str | Path) -> str:
    """A Hub id or folder as given, or for ``pkg:NAME`` the folder an installed plugin provides under NAME."""
    return load().locate(str(name))


def offline() -> bool:
    """True when Hugging Face offline mode is on (read now, not when the libraries were imported)."""
    from huggingface_hub import constants

    flags = (os.environ.get(v, "") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return bool(constants.HF_HUB_OFFLINE) or any(f.upper() in _TRUE for f in flags)


def hub_cache() -> str:
    """The Hugging Face hub cache folder in use."""
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def unavailable(
    what: str, name: str, error: Exception, setting: str, checked: str | None = None
) -> MissingResourceError:
    """The error for ``what`` named ``name`` that did not load: where it was looked for and the two ways to fix it."""
    reason = f"[{type(error).__name__}: {first_line(error)}]"
    if Path(name).is_dir():
        links = _broken_links(Path(name))
        why = f"its {links[0]}" if links else f"it does not hold a loadable one {reason}"
        return MissingResourceError(f"cannot load {what} from the folder {name!r}: {why}")
    why = (
        "Hugging Face offline mode is on"
        if offline()
        else "the Hugging Face Hub could not be reached or has no such repository"
    )
    return MissingResourceError(
        f"cannot load {what} {name!r}: it is not in the local cache (checked {checked or hub_cache()}) and {why} "
        f"{reason}. To fix: on a machine with network load it once (`hf download {name}` for a model or tokenizer) "
        "and copy that HF_HOME folder here (export HF_HOME=/path/to/copy HF_HUB_OFFLINE=1); or set "
        f"{setting} to local files"
    )


def from_pretrained(loader: Any, what: str, name: str, setting: str, **options: Any) -> Any:
    """``loader.from_pretrained`` for a Hub id, folder or ``pkg:NAME``, never running code the model ships.

    Missing ones raise the actionable error; a model or tokenizer that needs its own Python code is refused; any
    other failure to build it from its files is one line naming the cause (an unknown architecture, weights that
    disagree with the config, pickled objects, a damaged file or link, sizes that cannot be allocated).
    """
    import torch

    location = locate(name)
    # weights read from files are values: built for shapes alone (ladd train --dry-run's meta device), load them here
    real = torch.device("cpu") if torch.get_default_device().type == "meta" else contextlib.nullcontext()
    try:
        with real:
            return loader.from_pretrained(location, local_files_only=offline(), trust_remote_code=False, **options)
    except OSError as error:
        raise unavailable(what, name, error, setting) from None
    except Exception as error:  # noqa: BLE001 - the library's many-line reports become one line naming the cause
        if "trust_remote_code" in str(error):
            raise LaddError(
                f"refusing {what} {name!r}: loading it would run Python code shipped with it, which ladd never does; "
                f"choose another value for {setting}"
            ) from None
        raise LaddError(f"cannot load {what} {name!r}: {_cause(error, loader, location, options)}") from None


def _cause(error: Exception, loader: Any, location: str, options: dict[str, Any]) -> str:
    """What made ``loader`` fail on the files at ``location``, and what to do, in words."""
    import pickle

    import transformers

    text = str(error)
    model_type = re.search(r"model type `([^`]*)`", text)
    if model_type:
        return (
            f"its config names model type {model_type[1]!r}, which transformers {transformers.__version__} does not "
            "know: choose a model of an architecture it knows, or update transformers"
        )
    if "ignore_mismatched_sizes" in text or "size mismatch" in text:
        return f"its weights do not fit its config ({_mismatch(loader, location, options)}): the files disagree"
    if isinstance(error, pickle.UnpicklingError):
        files = ", ".join(_weights_files(location)) or "its .bin files"
        return (
            f"its weights are pickle files ({files}) holding more than tensors, which ladd never unpickles (that could "
            "run code): use a copy saved as safetensors"
        )
    if type(error).__name__ == "SafetensorError":
        files = ", ".join(_weights_files(location)) or "its .safetensors files"
        return f"its weights ({files}) are not a readable safetensors file ({first_line(error)}): the file is damaged"
    if isinstance(error, (MemoryError, OverflowError)) or "overflow" in text or "allocate" in text:
        return (
            f"its config asks for tensors too large to allocate ({first_line(error)}): the config is damaged, or the "
            "model does not fit this machine"
        )
    return f"{type(error).__name__}: {first_line(error)}"


def _mismatch(loader: Any, location: str, options: dict[str, Any]) -> str:
    """The first tensor whose shape in the weights differs from the config's, found by loading again and keeping it."""
    kept = {**options, "ignore_mismatched_sizes": True, "output_loading_info": True}
    try:
        _, info = loader.from_pretrained(location, local_files_only=True, trust_remote_code=False, **kept)
    except Exception:  # noqa: BLE001 - the first failure is the one reported
        info = {}
    if not info.get("mismatched_keys"):
        return "the library reports tensors of other shapes than the config gives"
    key, stored, built = sorted(info["mismatched_keys"])[0]
    return f"{key} is {list(stored)} in the weights, {list(built)} by config.json"


def _weights_files(location: str) -> list[str]:
    """The weights files of a folder (links shown with their targets); none for a Hub id."""
    folder = Path(location)
    if not folder.is_dir():
        return []
    found = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))
    return [f"{p.name} -> {os.readlink(p)}" if p.is_symlink() else p.name for p in found]


def _broken_links(folder: Path) -> list[str]:
    """The links of ``folder`` that lead to no file (missing, a folder, a loop), described."""
    found = []
    for path in sorted(folder.iterdir()):
        if path.is_symlink() and not path.is_file():
            target = os.readlink(path)
            state = "a folder" if path.is_dir() else "missing (or a loop of links)"
            found.append(f"{path.name} is a symbolic link to {target}, which is {state}")
    return found
