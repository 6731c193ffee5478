"""How a run executes: its processes, devices and precision, and how its checkpoints are written.

Lightning resolves them once, before any process is launched; every stage's Trainer gets the same
arguments. Ways to spread or save memory that change how a step runs, not what it computes (sharding,
activation checkpointing), belong here as options of the strategy.
"""
from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

from registry.config.settings import TrainConfig, resolve_precision
from registry.errors import InvalidConfigError, first_line
from registry.storage.files import replacing

#: bytes of an activation under each precision (the mixed and half ones: 2)
_VALUE_BYTES = {"32-true": 4, "64-true": 8}


def precision(requested: str) -> str:
    """Lightning's name of the precision ``requested`` (``auto`` resolved for the device this process has)."""
    return resolve_precision(requested, "cuda" if torch.cuda.is_available() else "cpu")


class Hardware:
    """The processes and devices of a run, resolved by Lightning before any process is launched."""

    def __init__(self, train_cfg: TrainConfig) -> None:
        self.name = train_cfg.strategy
        self.arguments = {
            "accelerator": train_cfg.accelerator,
            "devices": train_cfg.devices,
            "num_nodes": train_cfg.num_nodes,
            "precision": precision(train_cfg.precision),
        }
        # Under SLURM ladd stops on the requeue signal itself (`stopping`), writing its own checkpoint where a
        # rerun looks for it: Lightning neither requeues nor writes or resumes its hpc_ckpt files.
        self.cluster: list[Any] = [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []
        try:
            with quiet_lightning():
                probe = L.Trainer(
                    **self.arguments,
                    strategy=self.name,
                    plugins=self.cluster,
                    logger=False,
                    enable_checkpointing=False,
                    enable_progress_bar=False,
                )
        except (MisconfigurationException, ValueError) as error:
            raise InvalidConfigError(
                f"train.accelerator={train_cfg.accelerator}, devices={train_cfg.devices}, strategy={self.name}: "
                f"{first_line(error)}"
            ) from None
        if not isinstance(probe.strategy, (DDPStrategy, SingleDeviceStrategy)):
            raise InvalidConfigError(
                f"train.strategy={self.name}: ladd trains with data parallelism (DDP) only, because the EMA of the "
                f"weights (Lightning's WeightAveraging) needs whole parameters on every rank; use train.strategy=ddp"
            )
        self.world, self.rank, self.device = probe.world_size, probe.global_rank, probe.strategy.root_device

    @property
    def value_bytes(self) -> int:
        """Bytes of one activation under the run's precision."""
        return _VALUE_BYTES.get(self.arguments["precision"], 2)

    def trainer_arguments(self) -> dict[str, Any]:
        """Arguments of one stage's Trainer.

        Plain DDP runs without ``find_unused_parameters``: each stage trains only the parameters its loss
        reaches (``LaddModule.setup``), so there are none to search for.
        """
        return {**self.arguments, "strategy": self.name, "plugins": [*self.cluster, AtomicCheckpointIO()]}


@contextmanager
def quiet_lightning() -> Iterator[None]:
    """Silence Lightning's device report (printed again by each stage's Trainer)."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes a checkpoint under a temporary name beside it and renames it, so a kill never leaves a truncated one.

    The bytes go straight there: Lightning's own writer stages them in ``$TMPDIR`` first, where nothing removes
    what a kill leaves, while a resume clears the run folder's temporary files (``runs.RunFolder.claim``).
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        # serialised first, as Lightning does: the same bytes, and a full disk is an OSError of the file's write
        serialised = io.BytesIO()
        torch.save(checkpoint, serialised)
        with replacing(path) as partial:
            partial.write_bytes(serialised.getbuffer())
