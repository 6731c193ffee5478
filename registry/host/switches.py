"""Yes/no environment variables, read one way everywhere: a value ladd does not understand is an error, not a no."""
from __future__ import annotations

import os

from registry.errors import LaddError

TRUE = ("1", "true", "yes", "on")
FALSE = ("", "0", "false", "no", "off")


def switch(name: str) -> bool:
    """Whether the variable ``name`` is set to a true value (unset or empty is false)."""
    value = os.environ.get(name, "").strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise LaddError(
        f"{name}={os.environ[name]!r} is not understood: use {'/'.join(TRUE)} for yes, "
        f"{'/'.join(v for v in FALSE if v)} (or unset) for no"
    )


def debugging(name: str) -> bool:
    """Whether a debugging variable is on: any value other than a false one (debug output is harmless)."""
    return os.environ.get(name, "").strip().lower() not in FALSE
