"""Writing output files safely: created beside the target and renamed over it, never written through a link.

A folder ladd writes into may have been shared by someone else (a run folder, an exported model). A
planted symbolic link there must not redirect a write to another file of the user's, and a kill or a
full disk must not leave a truncated file: every file is written to a fresh, unpredictable name
created exclusively (``O_EXCL | O_NOFOLLOW``) and renamed over the target. A target that exists must
be a regular file: a link, a device (``/dev/null``), a FIFO or a folder is refused, never replaced.

The temporary names carry ladd's mark and the writer's process id (``.NAME.ladd-PID-RANDOM.partial``),
so only files ladd created, and only those of writers no longer running, are ever taken for temporaries.
"""
from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from registry.errors import LaddError

PARTIAL_SUFFIX = ".partial"
#: names that become parts of file names (a run's method, a metric): no separators, no leading dot
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}")
_PARTIAL_NAME = re.compile(rf"\..+\.ladd-(?P<pid>[0-9]+)-[0-9a-f]{{12}}{re.escape(PARTIAL_SUFFIX)}")
_KINDS = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO (named pipe)",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


def check_target(path: Path) -> None:
    """Raise LaddError unless ``path`` is new or a regular file: ladd never replaces links, devices or folders."""
    if path.is_symlink():
        raise LaddError(
            f"refusing to write {path}: it is a symbolic link (to {os.readlink(path)}), which ladd never writes "
            f"through; remove it or write elsewhere"
        )
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise LaddError(
            f"refusing to write {path}: it is {kind}, not a regular file, and ladd never replaces or writes into one; "
            f"name a new file or a regular one"
        )


def check_outside(target: Path, reads: Iterable[str | Path | None], option: str) -> None:
    """Raise LaddError when ``target`` is one of ``reads`` (the run or model folders and the files a command reads;
    None for one not given) or lies inside one: no command writes into what it reads, whatever ``option`` names."""
    here = Path(target).expanduser().resolve()
    for read in (Path(r) for r in reads if r is not None):
        there = read.expanduser().resolve()
        if here == there or there in here.parents:
            where = "is" if here == there else "lies inside"
            raise LaddError(
                f"refusing to write {target}: it {where} {read}, which this command reads (ladd never writes into "
                f"what it reads); give {option} a path outside it"
            )


def check_name(key: str, value: object, use: str) -> None:
    """Refuse a ``value`` of ``key`` that could not be part of a file name as ``use`` (a path, ``..``, a separator)."""
    if not isinstance(value, str) or _SAFE_NAME.fullmatch(value) is None:
        raise LaddError(
            f"{key}={value!r} cannot be part of a file name ({use}): use up to 100 letters, digits and _ . + - "
            f"starting with a letter or digit"
        )


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A fresh temporary path beside ``path`` to write to; renamed over ``path`` on success, removed on failure."""
    with replacing_all([Path(path)]) as (partial,):
        yield partial


@contextmanager
def replacing_all(paths: list[Path]) -> Iterator[list[Path]]:
    """Fresh temporary paths beside each of ``paths``: renamed into place once every one is written, all removed
    otherwise, so a full disk or an error part way leaves every target as it was."""
    for path in paths:
        check_target(path)
    partials: list[Path] = []
    try:
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(partial_name(path.name))
            os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666))
            partials.append(partial)
        yield partials
        for partial in partials:
            os.chmod(partial, 0o666 & ~_umask())  # some writers (safetensors) recreate the file as 0600
        for partial, path in zip(partials, paths, strict=True):
            os.replace(partial, path)
    except OSError as error:
        _remove(partials)
        if error.filename is not None:
            raise
        written = str(paths[0]) if len(paths) == 1 else str(paths[0].parent)
        raise OSError(error.errno, error.strerror or str(error), written) from error  # name what was being written
    except BaseException:
        _remove(partials)
        raise


def _remove(partials: list[Path]) -> None:
    for partial in partials:
        partial.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def partial_name(name: str) -> str:
    """A fresh temporary name for ``name``, marked as ladd's and as this process's."""
    return f".{name}.ladd-{os.getpid()}-{secrets.token_hex(6)}{PARTIAL_SUFFIX}"


@contextmanager
def scratch_folder(beside: Path) -> Iterator[Path]:
    """A fresh folder beside ``beside``, named as ladd's temporaries are, removed with what it holds: where a writer
    that leaves temporary files of its own (safetensors' ``.tmpXXXX``) writes, so a kill leaves only ladd's mark."""
    folder = beside.with_name(partial_name(beside.name))
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def is_partial(path: Path) -> bool:
    """Whether ``path`` is a temporary file of :func:`replacing` or a :func:`scratch_folder` (by its name: ladd's mark,
    a pid and a random part)."""
    named = _PARTIAL_NAME.fullmatch(path.name) is not None
    return named and (path.is_file() or path.is_dir()) and not path.is_symlink()


def is_abandoned(path: Path) -> bool:
    """Whether ``path`` is a temporary file of :func:`replacing` whose writer is no longer running."""
    match = _PARTIAL_NAME.fullmatch(path.name)
    return match is not None and is_partial(path) and not _running(int(match["pid"]))


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        pass  # another user's process holds the number
    return True


def remove_partials(folder: str | Path) -> None:
    """Delete the temporary files that writers killed while writing left in ``folder`` (never a file of the user's)."""
    for partial in list(Path(folder).rglob(f".*{PARTIAL_SUFFIX}")):
        if not is_abandoned(partial):
            continue
        if partial.is_dir():
            shutil.rmtree(partial)
        else:
            partial.unlink()


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through :func:`replacing`."""
    return write_with(path, lambda partial: partial.write_text(text, encoding="utf-8"))


def write_figure(path: str | Path, figure: Any, dpi: int = 120) -> Path:
    """A matplotlib figure saved through :func:`replacing`, in the format its file name's suffix says."""
    kind = Path(path).suffix.lstrip(".") or "png"
    return write_with(path, lambda partial: figure.savefig(partial, dpi=dpi, format=kind))


def write_with(path: str | Path, writer: Callable[[Path], object]) -> Path:
    """Let ``writer`` fill a temporary file, then rename it over ``path``."""
    with replacing(path) as partial:
        writer(partial)
    return Path(path)


@contextmanager
def exclusive(path: Path, refusal: LaddError) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (opened without following links; the system releases it when the process
    ends, however it ends), or raise ``refusal`` at once when another process holds it."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise refusal from None
        yield
    finally:
        os.close(descriptor)
