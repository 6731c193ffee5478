"""A checkpoint folder's tensors in safetensors files: one ``model.safetensors``, or shards listed by an index.

The published large checkpoints (LLaDA-8B: bf16 in six shards) come as ``model-0000N-of-0000M.safetensors`` with
``model.safetensors.index.json`` mapping every tensor name to its shard. Only safetensors are read: a folder
holding pickled weights alone (``pytorch_model.bin``) is refused, since unpickling can run code. Tensors are read
one at a time, each checked to be floating-point and finite.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from registry.errors import LaddError, first_line
from registry.toolkit.checkpoints import MAX_CONFIG_BYTES, read_tensor, tensor_headers

from .. import hub

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
#: files of pickled weights, which ladd never loads
PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
#: a hub id as the hub spells them: owner/name
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def checkpoint_folder(source: str, what: str, patterns: list[str]) -> tuple[Path, dict[str, str]]:
    """The folder holding a checkpoint and what names it: the folder as given, or a hub id and its revision."""
    path = Path(source)
    if path.is_dir():
        return path, {"folder": path.name or str(path)}
    if path.exists() or not _HUB_ID.fullmatch(source):
        raise LaddError(f"{source!r} is neither a folder holding a {what} checkpoint nor a Hugging Face hub id")
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(source, allow_patterns=patterns, local_files_only=hub.offline()))
    except Exception as error:  # the hub client's errors (offline, not found, HTTP) have no common base but Exception
        raise hub.unavailable(f"{what} checkpoint", source, error, "SRC (a local folder of the checkpoint)") from None
    return folder, {"hub": source, "revision": folder.name}


class Shards:
    """The tensors of a folder's safetensors files, by name: their shapes without reading them, then one at a time."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        if (folder / INDEX).is_file():
            self.files = self._indexed(folder / INDEX)
        elif (folder / SINGLE).is_file():
            self.files = {name: SINGLE for name in self._names(SINGLE)}
        else:
            pickled = sorted(p.name for pattern in PICKLES for p in folder.glob(pattern))
            if pickled:
                raise LaddError(
                    f"{folder} holds its weights only as pickles ({pickled[0]}), which can run code when loaded and "
                    f"which ladd never reads; convert them to safetensors where you trust their author"
                )
            raise LaddError(f"{folder} holds no weights: expected {SINGLE}, or shards listed by {INDEX}")

    def _indexed(self, index: Path) -> dict[str, str]:
        """Name -> shard file of an index, every shard present and holding exactly the names the index gives it."""
        try:
            if index.stat().st_size > MAX_CONFIG_BYTES:
                raise ValueError(f"it holds more than {MAX_CONFIG_BYTES} bytes")
            document = json.loads(index.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as error:
            raise LaddError(f"cannot read {index} ({first_line(error)}); restore the checkpoint's files") from None
        mapping = document.get("weight_map") if isinstance(document, dict) else None
        if not isinstance(mapping, dict) or not all(isinstance(f, str) for f in mapping.values()):
            raise LaddError(f"{index} has no weight_map of tensor names to shard files; the index is damaged")
        for shard in sorted(set(mapping.values())):
            if Path(shard).name != shard or not (self.folder / shard).is_file():
                raise LaddError(f"{index} lists the shard {shard!r}, which is not a file beside it; the download is "
                                f"incomplete")
            held, listed = set(self._names(shard)), {name for name, f in mapping.items() if f == shard}
            if held != listed:
                name = sorted(held ^ listed)[0]
                place = "holds" if name in held else "lacks"
                raise LaddError(f"{self.folder / shard} {place} {name}, which {INDEX} says otherwise; the shards and "
                                f"their index disagree")
        return dict(mapping)

    def _names(self, shard: str) -> list[str]:
        return list(tensor_headers(self.folder / shard))

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's shape, read from the files' headers."""
        found: dict[str, tuple[int, ...]] = {}
        for shard in self.paths():
            found.update({name: header.shape for name, header in tensor_headers(shard).items()})
        return found

    def tensor(self, name: str) -> torch.Tensor:
        """One tensor, checked to hold finite floating-point values."""
        return read_tensor(self.folder / self.files[name], name)

    def paths(self) -> list[Path]:
        """The weights' files."""
        return [self.folder / shard for shard in sorted(set(self.files.values()))]
