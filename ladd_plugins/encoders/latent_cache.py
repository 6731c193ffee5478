"""Encoder features stored per sequence: an in-memory LRU in front of a directory of ``.npy`` files.

A key is a BLAKE2b digest of the sequence's token ids (as little-endian int64 bytes), keyed by a
namespace digest of everything else that determines the features (the encoder's identity, options
and precision), so different encoders can share one directory without collisions.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from registry.errors import LaddError

__all__ = ["LatentCache", "cache_namespace", "sequence_keys"]


def cache_namespace(identity: Mapping[str, Any]) -> str:
    """A 32-hex-digit digest of ``identity`` (JSON with sorted keys)."""
    return hashlib.blake2b(json.dumps(identity, sort_keys=True).encode(), digest_size=16).hexdigest()


def sequence_keys(namespace: str, ids: Tensor) -> list[str]:
    """One key per row of ``ids [B, S]`` within ``namespace``."""
    rows = ids.detach().cpu().numpy().astype("<i8")
    secret = bytes.fromhex(namespace)
    return [hashlib.blake2b(row.tobytes(), key=secret, digest_size=20).hexdigest() for row in rows]


class LatentCache:
    """Features by key: the ``entries`` most recently used in memory, every one ever stored under ``directory``.

    Each entry is its own file, written under a temporary name and renamed into place, so concurrent
    readers and writers (several ranks or runs) see either no file or a complete one.
    """

    def __init__(self, directory: str | Path, entries: int) -> None:
        self.directory = Path(directory)
        self.entries = entries
        self.memory: OrderedDict[str, Tensor] = OrderedDict()

    def __deepcopy__(self, memo: dict[int, Any]) -> LatentCache:
        # copies of the encoder (the EMA model) compute the same features, so they share one store
        return self

    def path(self, key: str) -> Path:
        """Where the entry ``key`` lives on disk."""
        return self.directory / key[:2] / f"{key}.npy"

    def get(self, key: str) -> Tensor | None:
        """The stored features of ``key``, or None."""
        if key in self.memory:
            self.memory.move_to_end(key)
            return self.memory[key]
        path = self.path(key)
        try:
            value = torch.from_numpy(np.load(path, allow_pickle=False))
        except FileNotFoundError:
            return None
        except ValueError as error:
            raise LaddError(
                f"unreadable latent cache entry {path} ({error}); delete it and it will be recomputed"
            ) from None
        self._remember(key, value)
        return value

    def put(self, key: str, value: Tensor) -> None:
        """Store ``value`` (a CPU tensor) under ``key``, in memory and on disk."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".partial", delete=False) as handle:
            np.save(handle, value.numpy())
        os.replace(handle.name, path)
        self._remember(key, value)

    def rows(self, keys: list[str], compute: Callable[[list[int]], Tensor]) -> Tensor:
        """Stacked features of ``keys``; ``compute(indices)`` is called once, for the rows not stored yet."""
        found = {i: value for i, key in enumerate(keys) if (value := self.get(key)) is not None}
        missing = [i for i in range(len(keys)) if i not in found]
        if missing:
            for i, value in zip(missing, compute(missing).detach().float().cpu(), strict=True):
                found[i] = value.clone()  # a row of its own, so memory does not pin the whole batch
                self.put(keys[i], found[i])
        return torch.stack([found[i] for i in range(len(keys))])

    def _remember(self, key: str, value: Tensor) -> None:
        self.memory[key] = value
        self.memory.move_to_end(key)
        while len(self.memory) > self.entries:
            self.memory.popitem(last=False)
