"""Options shared by components' config dataclasses (torch-free, so listing components imports no model code)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from registry.errors import InvalidConfigError
from registry.ranges import check_choice, check_range

__all__ = ["LOCAL_PATH", "WEIGHTINGS", "TransformerConfig", "check_weighting", "local_path_options"]

#: Field metadata of an option naming a place on this machine that the component writes to (a cache folder),
#: as in ``cache_dir: str | None = field(default=None, metadata=LOCAL_PATH)``. A config read back from a run
#: folder or an export never sets such an option (it takes its default), so a shared file cannot choose where
#: ladd writes on the machine that reads it.
LOCAL_PATH = {"ladd.local_path": True}

#: Loss weightings of a process: "elbo", T times the discrete-time ELBO weight of the step; "constant", 1.
WEIGHTINGS = ("elbo", "constant")


def local_path_options(config: type | None) -> set[str]:
    """The options of a config dataclass marked with :data:`LOCAL_PATH`."""
    if config is None:
        return set()
    return {f.name for f in dataclasses.fields(config) if any(f.metadata.get(key) for key in LOCAL_PATH)}


def check_weighting(weighting: str) -> None:
    """Refuse an unknown weighting, naming the valid ones (an ``InvalidConfigError``, a ``ValueError``)."""
    check_choice("weighting", weighting, WEIGHTINGS)


@dataclass
class TransformerConfig:
    """Width, depth, heads, MLP expansion and residual dropout of a stack of DiT blocks."""

    hidden: int = 64  # width d of every block
    layers: int = 4  # number of blocks
    heads: int = 4  # attention heads (hidden must divide by it)
    mlp_ratio: float = 4.0  # MLP hidden width = mlp_ratio * hidden
    dropout: float = 0.1  # residual dropout in training

    def __post_init__(self) -> None:
        for key in ("hidden", "layers", "heads"):
            check_range(key, getattr(self, key), 1)
        check_range("mlp_ratio", self.mlp_ratio, 0, low_open=True)
        check_range("dropout", self.dropout, 0, 1, high_open=True)
        if self.hidden % self.heads or (self.hidden // self.heads) % 2:
            raise InvalidConfigError(
                f"hidden={self.hidden} must split into heads={self.heads} heads of even width (for RoPE), e.g. "
                "hidden=64 heads=4"
            )
