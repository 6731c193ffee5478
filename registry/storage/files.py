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


def check_regular_tree(root: Path, what: str, start: Path | None = None) -> None:
    """Raise LaddError unless ``start`` (default ``root``) and everything under it are regular files and folders: a
    symbolic link could carry a file from outside ``root`` (a private one) into what ladd reads and writes, and a
    device or FIFO would never end. ``root`` itself, the folder the user named, may be a link; ``what`` says what it
    is. The one link taken is Hugging Face's cache layout: a snapshot's file linking to its repository's blobs."""
    start = root if start is None else start
    if not (start.exists() or start.is_symlink()):
        return
    mode = start.stat().st_mode if start == root else start.lstat().st_mode
    _check_entry(start, mode, root, what)
    if stat.S_ISDIR(mode):
        for folder, dirs, files in os.walk(start):  # links to folders are listed, never followed
            for name in sorted(dirs + files):
                path = Path(folder) / name
                _check_entry(path, path.lstat().st_mode, root, what)


def _check_entry(path: Path, mode: int, root: Path, what: str) -> None:
    """Refuse ``path`` (of ``mode``) unless it is a regular file, a folder or a link of Hugging Face's cache."""
    if stat.S_ISLNK(mode):
        if not is_hub_blob(path):
            raise LaddError(
                f"{path} is a symbolic link (to {os.readlink(path)}): {what} is read only from the regular files "
                f"inside {root}, so that nothing outside it is read or carried along; replace the link with a copy of "
                f"the file"
            )
    elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise LaddError(f"{path} is {kind}, not a regular file: {what} is read only from regular files inside {root}")


def is_hub_blob(link: Path) -> bool:
    """Whether ``link`` is one of Hugging Face's cache: in a snapshot of a repository
    (``models--OWNER--NAME/snapshots/REVISION/...``), to a regular file among that same repository's blobs."""
    target = Path(os.path.realpath(link))
    blobs = target.parent
    repository = blobs.parent
    held = Path(os.path.realpath(link.parent))
    return (
        link.is_symlink() and blobs.name == "blobs" and repository.name.startswith("models--")
        and (repository / "snapshots") in held.parents and target.is_file()
    )


def copy_regular(source: Path, target: Path, what: str) -> None:
    """Copy ``source`` to ``target``, refusing a source that is a link (but Hugging Face's cache's) or no regular
    file: ``what`` names what carries it."""
    if source.is_symlink() and not is_hub_blob(source):
        raise LaddError(f"{what} gives {source}, a symbolic link (to {os.readlink(source)}); ladd carries only regular "
                        f"files, never what a link points to")
    descriptor = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    with os.fdopen(descriptor, "rb") as reader:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise LaddError(f"{what} gives {source}, which is not a regular file (a device, FIFO or folder)")
        with target.open("wb") as writer:
            shutil.copyfileobj(reader, writer)


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


def is_leftover(path: Path) -> bool:
    """Whether ``path`` is what a writer killed while writing left: its temporary file, or a folder made for files
    being written that holds only such leftovers (a carried ``tokenizer/`` of a killed import)."""
    if is_abandoned(path):
        return True
    if path.is_symlink() or not path.is_dir():
        return False
    inside = list(path.iterdir())
    return bool(inside) and all(is_leftover(child) for child in inside)


def remove_partials(folder: str | Path) -> None:
    """Delete the temporary files that writers killed while writing left in ``folder`` (never a file of the user's),
    and the folders below ``folder`` that they alone held."""
    folder = Path(folder)
    for partial in list(folder.rglob(f".*{PARTIAL_SUFFIX}")):
        if not is_abandoned(partial):
            continue
        if partial.is_dir():
            shutil.rmtree(partial)
        else:
            partial.unlink()
        parent = partial.parent
        while parent != folder and folder in parent.parents and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent


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
