"""The device a command is told to run on, checked against this machine before anything is loaded onto it."""
from __future__ import annotations

import torch

from registry.errors import LaddError

#: how a device is written, for messages
FORMS = "cpu, cuda, cuda:N (N from 0) or mps"


def checked_device(given: str | None, option: str) -> torch.device:
    """The device ``given`` names (None: cuda when this machine has one, else cpu), refused in one line when it is no
    device or this machine lacks it; ``option`` names where it was given."""
    if given is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(given)
    except (RuntimeError, ValueError):
        raise LaddError(f"{option} {given!r} is not a device: choose {FORMS}") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise LaddError(f"{option} {given}: this machine has no CUDA device that torch can use; choose cpu")
        if device.index is not None and device.index >= count:
            held = "cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
            raise LaddError(f"{option} {given}: this machine has {count} CUDA device(s) ({held}); choose one of those")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise LaddError(f"{option} {given}: this machine has no Apple GPU (MPS) that torch can use; choose cpu")
    elif device.type != "cpu":
        raise LaddError(f"{option} {given}: ladd runs models on {FORMS}")
    return device
