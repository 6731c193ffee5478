"""What verifying a token cache's checksum costs at the start of training: the CRC-32 of ``tokens.bin``.

    python bench/cache_checksum.py [--megabytes 400]

Writes a file of random ids of that size, then times, in the same run, reading it in the cache's chunks
without hashing (the baseline: what any reader of the file pays), ``cache.checksum`` over it, and SHA-256 (the
hash the weights files carry) for comparison. All read
from the page cache, where the file is after writing: a cold disk adds its own read time to both.
"""
from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

import numpy as np

from ladd_plugins.datasets.text import cache


def _read(path: Path) -> None:
    with path.open("rb") as handle:
        while handle.read(1 << 20):
            pass


def _checksum(path: Path) -> None:
    with path.open("rb") as handle:
        cache.checksum(handle)


def _sha256(path: Path) -> None:
    with path.open("rb") as handle:
        hashlib.file_digest(handle, "sha256")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=400)
    megabytes = parser.parse_args().megabytes
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / cache.TOKENS
        ids = np.random.default_rng(0).integers(0, 50257, size=megabytes * (1 << 20) // 2, dtype=np.uint16)
        ids.tofile(path)
        for name, work in (("read only", _read), ("crc32", _checksum), ("sha256", _sha256)):
            times = []
            for _ in range(3):
                start = time.perf_counter()
                work(path)
                times.append(time.perf_counter() - start)
            best = min(times)
            print(f"{name:10s} {megabytes} MiB: {best:.2f} s ({megabytes / best:.0f} MiB/s), best of 3", flush=True)


if __name__ == "__main__":
    main()
