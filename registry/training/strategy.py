"""How a run executes: its processes, devices and precision, and how its checkpoints are written.

Lightning resolves them once, before any process is launched; every stage's Trainer gets the same
arguments. Ways to spread or save memory that change how a step runs, not what it computes (sharding,
activation checkpointing, the dtype of frozen weights), belong here as options of the strategy; they reach
the networks through ``Backbone.layers()``, never through module names.
"""
from __future__ import annotations

import functools
import io
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, SingleDeviceStrategy
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from registry.config.settings import TrainConfig, resolve_precision
from registry.engine.adapters import Base, cast_base
from registry.engine.memory import TrainingMemory, training_memory
from registry.errors import IncompatibleComponentsError, InvalidConfigError, first_line
from registry.interfaces import Backbone
from registry.storage.files import replacing

from .sharding import ShardedStrategy

#: bytes of an activation under each precision (the mixed and half ones: 2)
_VALUE_BYTES = {"32-true": 4, "64-true": 8}
SHARDED = "fsdp"
#: precisions under which operations cast their inputs (autocast), so frozen weights may be held in another dtype
_AUTOCAST = ("bf16-mixed", "16-mixed")


def precision(requested: str) -> str:
    """Lightning's name of the precision ``requested`` (``auto`` resolved for the device this process has)."""
    return resolve_precision(requested, "cuda" if torch.cuda.is_available() else "cpu")


class Hardware:
    """The processes and devices of a run, resolved by Lightning before any process is launched."""

    def __init__(self, train_cfg: TrainConfig) -> None:
        self.name = train_cfg.strategy
        self.checkpointing = train_cfg.activation_checkpointing
        self.frozen_dtype = getattr(torch, train_cfg.frozen_dtype)
        self.blocks: list[nn.Module] = []
        self.base: Base | None = None
        if self.name == SHARDED:
            _check_sharding(train_cfg)
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
        except (MisconfigurationException, ValueError, TypeError) as error:  # TypeError: devices=[3] on a CPU
            raise InvalidConfigError(
                f"train.accelerator={train_cfg.accelerator}, devices={train_cfg.devices}, strategy={self.name}: "
                f"{first_line(error)}"
            ) from None
        if not isinstance(probe.strategy, (DDPStrategy, SingleDeviceStrategy, FSDPStrategy)):
            raise InvalidConfigError(
                f"train.strategy={self.name}: ladd trains with data parallelism (auto, ddp) or sharded data "
                f"parallelism (fsdp), whose processes ladd keeps at one step and whose EMA it keeps; use one of those"
            )
        self.world, self.rank, self.device = probe.world_size, probe.global_rank, probe.strategy.root_device
        self.precision = self.arguments["precision"]
        if train_cfg.frozen_dtype != "float32" and self.precision not in _AUTOCAST:
            raise InvalidConfigError(
                f"train.frozen_dtype={train_cfg.frozen_dtype} needs a mixed precision, whose autocast casts each "
                f"operation's inputs (train.precision={train_cfg.precision} is {self.precision} here): set "
                f"train.precision=bf16-mixed"
            )

    @property
    def shards(self) -> int:
        """Into how many parts the weights, gradients, optimiser state and EMA are split: the processes under
        sharding, else 1."""
        return self.world if self.name == SHARDED else 1

    def estimate(self, model: nn.Module, base: Base | None, batch: int) -> TrainingMemory:
        """One training step's memory on a process of this run, ``batch`` sequences per process."""
        return training_memory(
            model, batch, self.value_bytes, self.checkpointing, self.shards,
            self.frozen_dtype if base is not None else None, layers(model),
        )

    def prepare(self, model: nn.Module, base: Base | None) -> None:
        """Apply the memory options to the model before it trains: frozen weights in ``train.frozen_dtype``, each
        block recomputed in the backward pass under ``train.activation_checkpointing``."""
        check_layers(model, self.checkpointing, self.name == SHARDED)
        self.blocks, self.base = layers(model), base
        if base is not None and self.frozen_dtype != torch.float32:
            cast_base(model, base, self.frozen_dtype)
        if self.checkpointing:
            recompute_blocks(model)

    @property
    def value_bytes(self) -> int:
        """Bytes of one activation under the run's precision."""
        return _VALUE_BYTES.get(self.arguments["precision"], 2)

    def trainer_arguments(self) -> dict[str, Any]:
        """Arguments of one stage's Trainer.

        Plain DDP runs without ``find_unused_parameters``: each stage trains only the parameters its loss
        reaches (``LaddModule.setup``), so there are none to search for.
        """
        if self.name == SHARDED:  # FSDP writes its own checkpoints, folders of shards (``sharding``)
            return {**self.arguments, "strategy": ShardedStrategy(self.blocks, self.base), "plugins": self.cluster}
        return {**self.arguments, "strategy": self.name, "plugins": [*self.cluster, AtomicCheckpointIO()]}

    def whole_state(self, trainer: L.Trainer) -> dict[str, Tensor] | None:
        """Under sharding, the weights as a stage ends gathered whole on the first process (None on the others);
        otherwise None: the model holds them whole already."""
        strategy = trainer.strategy
        return strategy.whole_state() if isinstance(strategy, ShardedStrategy) else None


def layers(model: nn.Module) -> list[nn.Module]:
    """The blocks every backbone of ``model`` declares (``Backbone.layers``), in order."""
    return [layer for module in model.modules() if isinstance(module, Backbone) for layer in module.layers()]


def check_layers(model: nn.Module, checkpointing: bool, sharding: bool) -> None:
    """Refuse activation checkpointing or sharding when a backbone declares no blocks to apply them to."""
    if not (checkpointing or sharding):
        return
    option = "train.activation_checkpointing=true" if checkpointing else f"train.strategy={SHARDED}"
    for path, module in model.named_modules():
        if isinstance(module, Backbone) and not list(module.layers()):
            raise IncompatibleComponentsError(
                f"{option} works block by block, but the {path} ({type(module).__name__}) declares no blocks "
                f"(Backbone.layers); choose a backbone that does, or leave the option out"
            )


def recompute_blocks(model: nn.Module) -> None:
    """Activation checkpointing: each block of the backbones (``Backbone.layers``) keeps its input alone and runs
    again in the backward pass; parameter names, and so checkpoints, are unchanged."""
    for layer in layers(model):
        layer.forward = functools.partial(_recomputed, layer.forward)


def _recomputed(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A block's forward pass whose activations are recomputed in the backward pass instead of kept (with the random
    state it drew from, so dropout draws the same)."""
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def _check_sharding(train_cfg: TrainConfig) -> None:
    """Refuse sharding where torch's FSDP cannot run it or ladd does not shard, before Lightning tries."""
    if train_cfg.accelerator == "cpu" or not torch.cuda.is_available():
        raise InvalidConfigError(
            f"train.strategy={SHARDED} shards the model over GPUs, but this process has none "
            f"(train.accelerator={train_cfg.accelerator}): torch's FullyShardedDataParallel needs an accelerator "
            f"device and its collectives; on a CPU train with train.strategy=auto"
        )
    stages = len(train_cfg.stages_to_run())
    if stages > 1:
        raise InvalidConfigError(
            f"train.strategy={SHARDED} trains one stage per run ({stages} are set): the sharded model is not taken "
            f"apart between stages; train each stage as its own run (the next one's train.init_from the last)"
        )
    if train_cfg.frozen_dtype != "float32":
        raise InvalidConfigError(
            f"train.frozen_dtype={train_cfg.frozen_dtype} with train.strategy={SHARDED}: a shard holds one dtype; "
            f"leave the weights in float32 (sharding divides them) and compute in bfloat16 with "
            f"train.precision=bf16-mixed"
        )


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
