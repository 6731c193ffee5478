"""Progress through a loop's items: a bar on a terminal, one line per finished item in a log or a pipe."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from tqdm.auto import tqdm

Item = TypeVar("Item")


def progress(
    items: Sequence[Item],
    description: str,
    enabled: bool = True,
    name: Callable[[Item], str] = str,
) -> Iterator[Item]:
    """Yield ``items``, showing progress on stderr when ``enabled``.

    On a terminal, a bar; otherwise a line ``description: name(item) done (i/n, seconds)`` after each item, since a
    bar's carriage-return updates make a log file one long line.
    """
    if not enabled:
        yield from items
    elif sys.stderr.isatty():
        yield from tqdm(items, desc=description)
    else:
        start = time.perf_counter()
        for index, item in enumerate(items, 1):
            yield item
            seconds = time.perf_counter() - start
            line = f"{description}: {name(item)} done ({index}/{len(items)}, {seconds:.1f} s)"
            print(line, file=sys.stderr, flush=True)
