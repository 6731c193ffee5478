"""Sharded data parallelism (``train.strategy=fsdp``): Lightning's FSDP, one unit per block the backbones declare
(``Backbone.layers``), for a model whose weights, gradients and optimiser state do not fit on one GPU.

What it does about the EMA: torch's FSDP keeps each parameter as this process's shard (``use_orig_params``: the
parameter is a view of it between steps), so ``ema.EMAWeights`` averages exactly those views and the EMA costs
1/N of a whole copy per process, as the optimiser's moments do; nothing is gathered to update it. A checkpoint
is a folder written by every process at once through ``torch.distributed.checkpoint``: the averaged weights (the
averages put in the parameters' place while FSDP reads its sharded state, then put back) as ``model``, the raw
weights as ``current``, the optimiser's sharded state, and Lightning's ``meta.pt`` (loops, callbacks, ladd's entry)
from the first process. Over a frozen base (``train.lora``, ``train.freeze``) only what trains is written or read.
Resuming reads the averages' shards first and keeps them, then the raw weights. When the stage ends, the whole
weights are gathered on the first process (on the CPU) to be saved as ``final.safetensors``.

A run is refused before it starts where FSDP cannot act: on a CPU, with more than one stage (the sharded model is
not taken apart between stages), and with frozen weights in another dtype than the rest (a shard holds one dtype;
FSDP's mixed precision, ``train.precision=bf16-mixed``, computes in bfloat16 from float32 shards instead).
"""
from __future__ import annotations

import functools
import shutil
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.strategies import FSDPStrategy
from torch import nn

from registry.engine.adapters import Base
from registry.storage.files import partial_name

from .ema import EMAWeights

#: the module state's prefix: LaddModule holds the model as its attribute ``model``
_INSIDE = "model."
#: a sharded checkpoint's file of everything but the tensors (Lightning's name for it)
METADATA = "meta.pt"


def is_sharded(checkpoint: Path) -> bool:
    """Whether ``checkpoint`` is a sharded checkpoint's folder (not a single file)."""
    return checkpoint.is_dir() and (checkpoint / METADATA).is_file()


def read_metadata(checkpoint: Path) -> dict[str, Any]:
    """A sharded checkpoint's ``meta.pt``: everything but the tensors of the weights and the optimiser."""
    return torch.load(checkpoint / METADATA, map_location="cpu", weights_only=True)


def _state_of(module: nn.Module, whole: bool) -> AbstractContextManager[Any]:
    """FSDP's state as shards (or ``whole``, on the first process alone), on the CPU."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import StateDictType
    from torch.distributed.fsdp.api import (
        FullOptimStateDictConfig,
        FullStateDictConfig,
        ShardedOptimStateDictConfig,
        ShardedStateDictConfig,
    )

    if whole:
        return FSDP.state_dict_type(
            module, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=True, rank0_only=True),
            FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True),
        )
    return FSDP.state_dict_type(
        module, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig(offload_to_cpu=True),
        ShardedOptimStateDictConfig(offload_to_cpu=True),
    )


class ShardedStrategy(FSDPStrategy):
    """Lightning's FSDP wrapping each of ``blocks`` as a unit, with checkpoints that hold the EMA's shards and,
    over a frozen ``base``, nothing of it."""

    #: the EMA callback leaves the averages to this strategy's checkpoints
    saves_averages = True

    def __init__(self, blocks: Iterable[nn.Module], base: Base | None, **kwargs: Any) -> None:
        from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

        units = {id(block) for block in blocks}
        policy = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda module: id(module) in units)
        super().__init__(auto_wrap_policy=policy, state_dict_type="sharded", use_orig_params=True, **kwargs)
        self.base = base

    def lightning_module_state_dict(self) -> dict[str, Any]:
        """The module's sharded state as FSDP names it, without the frozen base."""
        return self._trained(super().lightning_module_state_dict())

    def _trained(self, state: dict[str, Any]) -> dict[str, Any]:
        if self.base is None:
            return state
        return {name: value for name, value in state.items() if name.removeprefix(_INSIDE) in self.base.trained}

    def _averages(self) -> EMAWeights:
        assert self.lightning_module is not None
        found = [c for c in self.lightning_module.trainer.callbacks if isinstance(c, EMAWeights)]  # type: ignore
        return found[0]

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        """Every process writes its shards into a fresh folder; the first then puts it in the checkpoint's place."""
        import torch.distributed.checkpoint as dcp

        path = Path(self.broadcast(str(filepath)))
        with self._averages().swapped():  # the averages in the parameters' place: FSDP reads its sharded state there
            averaged = self.lightning_module_state_dict()
        fresh = path.with_name(self.broadcast(partial_name(path.name)))
        fresh.mkdir(parents=True, exist_ok=True)
        tensors = {
            "model": averaged, "current": checkpoint.pop("state_dict"),
            **{f"optimizer_{i}": state for i, state in enumerate(checkpoint.pop("optimizer_states", []))},
        }
        dcp.save(tensors, checkpoint_id=fresh)
        self.barrier()
        if self.global_rank == 0:
            torch.save(checkpoint, fresh / METADATA)
            old = path.with_name(partial_name(path.name))
            if path.exists():
                path.rename(old)  # a kill from here to the next rename leaves the stage to start again
            fresh.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        self.barrier()

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """The averages' shards (kept by the EMA), then the raw weights and the optimiser state, then ``meta.pt``."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.optimizer import load_sharded_optimizer_state_dict
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        path = Path(self.broadcast(str(checkpoint_path)))
        assert self.model is not None and self.lightning_module is not None
        averages = self._averages()
        with _state_of(self.model, whole=False):
            for entry in ("model", "current"):  # the averages first: they pass through the parameters
                template = self.model.state_dict()
                wanted = self._trained(template)
                dcp.load({entry: wanted}, checkpoint_id=path)
                self.model.load_state_dict({**template, **wanted})
                if entry == "model":
                    averages.saved = {
                        name: p.detach().clone() for name, p in self.lightning_module.named_parameters()
                        if p.requires_grad
                    }
            if self.optimizers:
                reader = dcp.FileSystemReader(path)
                for index, optimizer in enumerate(self.optimizers):
                    key = f"optimizer_{index}"
                    state = load_sharded_optimizer_state_dict(
                        model_state_dict=self._trained(self.model.state_dict()), optimizer_key=key,
                        storage_reader=reader,
                    )
                    optimizer.load_state_dict(FSDP.optim_state_dict_to_load(self.model, optimizer, state[key]))
        return read_metadata(path)

    def whole_state(self) -> dict[str, torch.Tensor] | None:
        """The whole weights as the stage ends (the EMA's, in place), gathered on the first process's CPU, without
        the frozen base; None on the other processes. Every process must call it."""
        assert self.model is not None
        with _state_of(self.model, whole=True):
            state = self.model.state_dict()
        if self.global_rank != 0:
            return None
        return {name.removeprefix(_INSIDE): tensor for name, tensor in self._trained(state).items()}
