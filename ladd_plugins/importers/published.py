"""What the importers of the published LLaMA-style diffusion LMs share (LLaDA-8B's, Dream-7B's): a folder's JSON config,
its sharded safetensors and its tokenizer read and checked, then ladd's ``llada`` backbone filled by a name table.

Only the JSON config, the safetensors tensors and the tokenizer's data are read: nothing in the source runs. Every
check (the config, every tensor's name and shape against it, the tokenizer) passes before anything is built. The model
folder carries the tokenizer (``tokenizer/``, named ``model:tokenizer`` in its config), covering the network's whole
table (:mod:`.tokenizers`), and records each shard's SHA-256; its weights are float32. The network keeps its own mask
in its output (``backbone.mask_logit``), as the family's code does.
"""
from __future__ import annotations

import shutil
import tempfile
import weakref
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from torch import nn

from registry.errors import LaddError
from registry.interfaces import Importer
from registry.toolkit.checkpoints import Rule, read_config

from .llada_table import LLaDAShape, backbone_options
from .shards import Shards, checkpoint_folder
from .tokenizers import cover_table, save

CONFIG = "config.json"
TOKENIZER = "tokenizer"


@dataclass
class Checkpoint:
    """A checkpoint, checked: what names it, its sizes, its weights, and its tokenizer saved aside."""

    origin: dict[str, str]
    config: dict[str, Any]  # the parsed config.json
    shape: LLaDAShape
    shards: Shards
    tokenizer: list[Path]
    scratch: Path = field(repr=False)  # holds the saved tokenizer; removed with the checkpoint


def check_layout(found: Mapping[str, tuple[int, ...]], expected: Mapping[str, tuple[int, ...]], where: str,
                 what: str) -> None:
    """Refuse, naming the first, a tensor missing, of another shape than the config gives, or extra."""
    for name, size in expected.items():
        held = found.get(name)
        if held is None:
            raise LaddError(f"{where} lacks the tensor {name} of a {what} checkpoint; it is not one, or it is damaged")
        if tuple(held) != size:
            raise LaddError(
                f"{where}: {name} has shape {list(held)} but config.json's sizes give {list(size)}; the config and "
                f"the weights disagree"
            )
    extra = sorted(set(found) - set(expected))
    if extra:
        raise LaddError(
            f"{where} holds {extra[0]}, which {what}'s network does not have; it is not a {what} checkpoint"
        )


class PublishedImporter(Importer):
    """A published checkpoint as ladd's ``llada``, with its tokenizer; a family fills in its layout."""

    what: str  # the family, in messages
    preset: str  # the experiment preset of the model folder
    patterns: list[str]  # what a hub download fetches: the config, the weights, the tokenizer's data
    rules: Mapping[str, Rule]  # what is read of config.json before its sizes are checked against each other
    #: the family's layout module: ``read_shape(config, where)`` (refusing a config not the family's),
    #: ``source_shapes(shape)`` (every tensor by full name with its shape), ``copies(shape)`` (ladd's name -> theirs)
    table: ModuleType

    @abstractmethod
    def load_tokenizer(self, folder: Path) -> Any:
        """The checkpoint's tokenizer, loaded without running its code."""

    def family_overrides(self, checkpoint: Checkpoint) -> list[str]:
        """Config overrides the checkpoint sets besides its network's (none by default)."""
        return []

    def read(self, source: str) -> Checkpoint:
        folder, origin = checkpoint_folder(source, self.what, self.patterns)
        if not (folder / CONFIG).is_file():
            raise LaddError(f"{folder} is not a {self.what} checkpoint: it has no {CONFIG}")
        config = read_config(folder / CONFIG, f"a {self.what} checkpoint's config", self.rules,
                             f"give the folder of a {self.what} checkpoint")
        shape = self.table.read_shape(config, str(folder / CONFIG))
        shards = Shards(folder)
        check_layout(shards.shapes(), self.table.source_shapes(shape), str(folder), self.what)
        scratch = Path(tempfile.mkdtemp(prefix="ladd-import-tokenizer-"))
        try:
            tokenizer = self.load_tokenizer(folder)
            cover_table(tokenizer, shape.rows)  # a tokenizer larger than the table is refused as ladd builds the model
            files = save(tokenizer, scratch / TOKENIZER)
        except BaseException:
            shutil.rmtree(scratch, True)
            raise
        checkpoint = Checkpoint(origin, config, shape, shards, files, scratch)
        weakref.finalize(checkpoint, shutil.rmtree, scratch, True)  # quietly, when the checkpoint is let go
        return checkpoint

    def overrides(self, checkpoint: Checkpoint) -> list[str]:
        values = {key: "null" if value is None else str(value).lower() if isinstance(value, bool) else value
                  for key, value in backbone_options(checkpoint.shape).items()}
        backbone = [f"backbone.{key}={value}" for key, value in values.items()]
        own = [f"experiment={self.preset}", f"dataset.tokenizer=model:{TOKENIZER}", *backbone]
        return [*own, *self.family_overrides(checkpoint)]

    def carried(self, checkpoint: Checkpoint) -> dict[str, Path]:
        return {f"{TOKENIZER}/{path.name}": path for path in checkpoint.tokenizer}

    def fill(self, model: nn.Module, checkpoint: Checkpoint) -> None:
        length = getattr(model, "seq_len", 0)
        if length > checkpoint.shape.length:
            raise LaddError(
                f"dataset.seq_len={length} is longer than the {checkpoint.shape.length} positions the network was "
                f"trained on; choose at most {checkpoint.shape.length}"
            )
        plan = self.table.copies(checkpoint.shape)
        params = dict(model.get_submodule("backbone").named_parameters())
        uncovered = sorted(set(params) ^ set(plan))
        if uncovered:
            where = "is not in the table" if uncovered[0] in params else "is not in this network"
            raise LaddError(f"backbone.{uncovered[0]} {where}: the import fills ladd's llada as {self.what}'s network")
        for name, param in params.items():
            param.copy_(checkpoint.shards.tensor(plan[name]))

    def record(self, checkpoint: Checkpoint) -> dict[str, str]:
        return checkpoint.origin

    def files(self, checkpoint: Checkpoint) -> list[Path]:
        return checkpoint.shards.paths()
