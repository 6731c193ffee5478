"""What of sharded training runs on a CPU: a sharded checkpoint's folder is a resume point, checked as a file is.

Sharded training itself needs GPUs (``bench/finetune_check.py sharded`` checks it there); its refusal on a CPU is
tested with the other refusals in ``test_adapter_runs.py``.
"""
from __future__ import annotations

import pytest
import torch

from registry.engine.adapters import Base
from registry.engine.runs import RunFolder
from registry.errors import LaddError
from registry.training.resume import has_saved_state, is_checkpoint, read_checkpoint, resume_point
from registry.training.sharding import METADATA, ShardedStrategy


def _sharded_checkpoint(folder: RunFolder, step: int, base: str | None) -> None:
    """A sharded checkpoint as its strategy leaves it: a folder with Lightning's ``meta.pt`` (the tensors' files
    beside it are torch.distributed.checkpoint's)."""
    last = folder.last_checkpoint(1)
    last.mkdir(parents=True)
    torch.save({"global_step": step, "ladd": {"stage": 1, **({"base": base} if base else {})}}, last / METADATA)


def test_a_sharded_checkpoint_folder_is_where_the_run_resumes(tmp_path):
    folder = RunFolder(tmp_path)
    assert not has_saved_state(folder, 1)
    _sharded_checkpoint(folder, 5, None)
    assert is_checkpoint(folder.last_checkpoint(1)) and has_saved_state(folder, 1)
    assert read_checkpoint(folder.last_checkpoint(1))["global_step"] == 5
    assert resume_point(folder, 1) == "at step 5 of stage 1"


def test_a_sharded_checkpoint_over_another_base_is_refused(tmp_path):
    folder = RunFolder(tmp_path)
    _sharded_checkpoint(folder, 2, "0" * 64)
    base = Base("1" * 64, 10, frozenset(), frozenset(), 1)
    recorded = read_checkpoint(folder.last_checkpoint(1))["ladd"]["base"]
    with pytest.raises(LaddError, match=r"was trained over a base whose frozen weights have SHA-256 0{16}\.\.\."):
        base.check(recorded, str(folder.last_checkpoint(1)), "fix")


def test_the_sharded_strategy_leaves_the_frozen_base_out_of_every_state_it_writes():
    base = Base("0" * 64, 10, frozenset({"backbone.w"}), frozenset({"backbone.lora_A", "backbone.c"}), 1)
    strategy = ShardedStrategy([], base)
    state = {f"model.{name}": torch.zeros(1) for name in ("backbone.w", "backbone.lora_A", "backbone.c")}
    assert set(strategy._trained(state)) == {"model.backbone.lora_A", "model.backbone.c"}
    assert set(ShardedStrategy([], None)._trained(state)) == set(state)
