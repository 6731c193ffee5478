"""Where Hugging Face models, tokenizers and corpora come from, and the one error for a missing one."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from registry import load
from registry.errors import LaddError, MissingResourceError

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
    reason = f"[{type(error).__name__}: {error}]"
    if Path(name).is_dir():
        return MissingResourceError(
            f"cannot load {what} from the folder {name!r}: it does not hold a loadable one {reason}"
        )
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

    Missing ones raise the actionable error; a model or tokenizer that needs its own Python code is refused.
    """
    try:
        return loader.from_pretrained(locate(name), local_files_only=offline(), trust_remote_code=False, **options)
    except OSError as error:
        raise unavailable(what, name, error, setting) from None
    except ValueError as error:
        if "trust_remote_code" not in str(error):
            raise
        raise LaddError(
            f"refusing {what} {name!r}: loading it would run Python code shipped with it, which ladd never does; "
            f"choose another value for {setting}"
        ) from None
