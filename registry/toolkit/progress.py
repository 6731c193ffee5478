"""Progress on stderr: a bar on a terminal; in a log or a pipe, plain lines (a bar's carriage returns would make
the file one long line)."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import TypeVar

from tqdm.auto import tqdm

__all__ = ["Progress", "progress"]

Item = TypeVar("Item")


class Progress:
    """Counts toward ``total`` ``unit``; in a log, a line at most every ``every`` seconds and one at the end.

    A line reads ``description: done/total unit, note (seconds)``; :meth:`note` sets the note (running counts).
    """

    def __init__(
        self,
        total: int,
        description: str,
        unit: str = "",
        enabled: bool = True,
        initial: int = 0,
        every: float = 30.0,
    ) -> None:
        self.total, self.description, self.unit, self.every = total, description, unit, every
        self.done, self.shown, self.text = initial, initial, ""
        self.start = self.last = time.perf_counter()
        self.bar: tqdm | None = None
        self.enabled = enabled
        if enabled and sys.stderr.isatty():
            self.bar = tqdm(total=total, initial=initial, desc=description, unit=unit or "it")

    def note(self, text: str) -> None:
        """What the next line (or the bar) shows after the count."""
        self.text = text
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)

    def update(self, count: int = 1) -> None:
        """``count`` more done."""
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
        elif self.enabled and time.perf_counter() - self.last >= self.every:
            self._line()

    def close(self) -> None:
        """End the bar, or write the last line if the count moved since the last one."""
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.done != self.shown:
            self._line()

    def _line(self) -> None:
        self.last, self.shown = time.perf_counter(), self.done
        unit = f" {self.unit}" if self.unit else ""
        note = f", {self.text}" if self.text else ""
        line = f"{self.description}: {self.done}/{self.total}{unit}{note} ({self.last - self.start:.1f} s)"
        print(line, file=sys.stderr, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def progress(
    items: Sequence[Item], description: str, enabled: bool = True, name: Callable[[Item], str] = str
) -> Iterator[Item]:
    """Yield ``items`` with their progress shown; in a log, a line as each one is done, naming it by ``name``."""
    with Progress(len(items), description, enabled=enabled, every=0) as shown:
        for item in items:
            yield item
            shown.note(f"{name(item)} done")
            shown.update()
