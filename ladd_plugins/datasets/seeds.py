"""Seeds of the built-in datasets' streams, stable across processes and Python versions."""
from __future__ import annotations

import hashlib


def stream_seed(label: str, seed: int, split: str) -> int:
    """A 63-bit generator seed for dataset ``label``'s stream of ``split`` under run seed ``seed`` (unlike ``hash``,
    stable)."""
    digest = hashlib.sha256(f"{label}:{seed}:{split}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1
