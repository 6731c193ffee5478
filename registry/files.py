"""Writing output files safely: created beside the target and renamed over it, never written through a link.

A folder ladd writes into may have been shared by someone else (a run folder, an exported model). A
planted symbolic link there must not redirect a write to another file of the user's, and a kill or a
full disk must not leave a truncated file: every file is written to a fresh, unpredictable name
created exclusively (``O_EXCL | O_NOFOLLOW``) and renamed over the target, which replaces a link
instead of following it.
"""
from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import LaddError

PARTIAL_SUFFIX = ".partial"


def refuse_link(path: Path) -> None:
    """Raise LaddError when ``path`` is a symbolic link, naming where it points."""
    if path.is_symlink():
        raise LaddError(
            f"refusing to write {path}: it is a symbolic link (to {os.readlink(path)}), which ladd never writes "
            f"through; remove it or write elsewhere"
        )


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A fresh temporary path beside ``path`` to write to; renamed over ``path`` on success, removed on failure."""
    path = Path(path)
    refuse_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(6)}{PARTIAL_SUFFIX}")
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666))
    try:
        yield partial
        os.chmod(partial, 0o666 & ~_umask())  # some writers (safetensors) recreate the file as 0600
        os.replace(partial, path)
    except OSError as error:
        partial.unlink(missing_ok=True)
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror or str(error), str(path)) from error  # name the file being written
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def is_partial(path: Path) -> bool:
    """Whether ``path`` is a temporary file of :func:`replacing` (a regular file, not a link)."""
    return path.name.startswith(".") and path.name.endswith(PARTIAL_SUFFIX) and path.is_file() and not path.is_symlink()


def remove_partials(folder: str | Path) -> None:
    """Delete the temporary files a killed writer left in ``folder`` (call only while no one else writes there)."""
    for partial in Path(folder).rglob(f".*{PARTIAL_SUFFIX}"):
        if is_partial(partial):
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
