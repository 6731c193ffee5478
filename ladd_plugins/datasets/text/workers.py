"""Worker processes that run one function over many items in parallel, and say which item a dying worker held.

Workers are spawned (fresh interpreters: nothing of this process, its threads or its CUDA state is copied)
when a call has more than one item; a call with one item, or a pool of one, runs here. Each worker gets the
job once, when it starts, and takes items from a queue in order.
"""
from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import traceback
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from registry.errors import LaddError

_POLL_SECONDS = 1.0  # how often a waiting parent checks its workers, and an idle worker its parent
_PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)


class WorkerDied(LaddError):
    """A worker process ended without finishing its item (killed, out of memory, crashed)."""


class Workers:
    """Up to ``processes`` worker processes holding ``job``; use as a context manager, which stops them at its end."""

    def __init__(self, job: Any, processes: int) -> None:
        self.job, self.processes = job, processes
        self._context = multiprocessing.get_context("spawn")
        self._started: list[Any] = []
        self._tasks: Any = None
        self._results: Any = None
        self._holding: Any = None

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(graceful=exc[0] is None)

    def run(
        self, function: Callable[[Any, Any], Any], items: Sequence[Any], describe: Callable[[Any], str]
    ) -> Iterator[tuple[int, Any]]:
        """``(i, function(job, items[i]))`` for every item, in the order they finish.

        An error raised by ``function`` is raised here (a ``LaddError`` with its message, an ``OSError`` with its
        number, reason and file); a worker that dies
        raises :class:`WorkerDied` naming ``describe(item)`` of the item it held. Items finished before either
        have been yielded.
        """
        if self.processes <= 1 or len(items) <= 1:
            for index, item in enumerate(items):
                yield index, function(self.job, item)
            return
        self._start()
        for index, item in enumerate(items):
            self._tasks.put(pickle.dumps((index, function, item)))  # here, not in the queue's thread: errors surface
        remaining = len(items)
        while remaining:
            try:
                kind, index, value = self._results.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                self._check_alive(items, describe)
                continue
            if kind == "done":
                remaining -= 1
                yield index, value
            elif kind == "refused":
                raise LaddError(value)
            elif kind == "os_error":
                raise OSError(*value)
            else:
                raise RuntimeError(f"a worker process failed on {describe(items[index])}:\n{value}")

    def _start(self) -> None:
        if self._started:
            return
        self._tasks, self._results = self._context.Queue(), self._context.Queue()
        # the item each worker holds, written before it starts on it: a queue's message may die with its sender
        self._holding = self._context.Array("q", [-1] * self.processes, lock=False)
        with _main_hidden():
            for slot in range(self.processes):
                channels = (self._tasks, self._results, self._holding, slot)
                process = self._context.Process(target=_serve, args=(self.job, *channels), daemon=True)
                process.start()
                self._started.append(process)

    def _check_alive(self, items: Sequence[Any], describe: Callable[[Any], str]) -> None:
        for slot, process in enumerate(self._started):
            if process.exitcode is None:
                continue
            index = self._holding[slot]
            what = "while starting" if index < 0 else f"while working on {describe(items[index])}"
            raise WorkerDied(f"a worker process (pid {process.pid}) {_ending(process.exitcode)} {what}")

    def stop(self, graceful: bool = True) -> None:
        """End the workers: after their current item when ``graceful``, else at once."""
        if graceful:
            for _ in self._started:
                self._tasks.put(None)
        for process in self._started:
            if graceful:
                process.join(timeout=10)
            if process.exitcode is None:
                process.terminate()
            process.join()
        for channel in (self._tasks, self._results):
            if channel is not None:
                channel.cancel_join_thread()
                channel.close()
        self._started = []


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """Spawned workers need nothing of ``__main__``: hidden, a script without a main guard does not run in them."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _ending(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        hint = " (out of memory? lower dataset.num_proc)" if -code == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with status {code}"


def _serve(job: Any, tasks: Any, results: Any, holding: Any, slot: int) -> None:
    """A worker's loop: take an item, note it, run it, report the result; stop at None, or when the parent is gone."""
    parent = os.getppid()
    _die_with_parent()
    # the workers share the cores: one thread each; Ctrl-C reaches the whole process group, the parent stops us
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            task = tasks.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            if os.getppid() != parent:
                return
            continue
        if task is None:
            return
        index, function, item = pickle.loads(task)
        holding[slot] = index
        try:
            results.put(("done", index, function(job, item)))
        except LaddError as error:
            results.put(("refused", index, str(error)))
        except OSError as error:  # a full disk, a folder gone: the parent raises it as it is
            results.put(("os_error", index, (error.errno, error.strerror or str(error), error.filename)))
        except Exception:  # noqa: BLE001 - reported to the parent, which raises it
            results.put(("failed", index, traceback.format_exc()))
        holding[slot] = -1


def _die_with_parent() -> None:
    """On Linux, ask the kernel to kill this process when its parent dies (a killed build leaves no worker behind)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
