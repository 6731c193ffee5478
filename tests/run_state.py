"""Comparing two run folders bitwise: every logged loss, every stage's raw and EMA weights, every weights file."""
from __future__ import annotations

import csv
from pathlib import Path

import torch
from safetensors.torch import load_file

#: metrics.csv columns that a resumed run reproduces (not the wall-clock seconds)
NUMBERS = ("stage", "step", "loss", "token", "latent", "aux")


def logged(run_dir: Path) -> list[tuple[str, ...]]:
    """The rows of a run's metrics.csv without their timings."""
    with (run_dir / "metrics.csv").open(newline="") as handle:
        return [tuple(row[key] for key in NUMBERS) for row in csv.DictReader(handle)]


def _files(run_dir: Path) -> list[str]:
    """The run's files, without Lightning's own ``logs/`` (its logger buffers rows, which a SIGKILL loses)."""
    found = (path.relative_to(run_dir) for path in run_dir.rglob("*") if path.is_file())
    return sorted(path.as_posix() for path in found if path.parts[0] != "logs")


def _differing(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> list[str]:
    assert expected.keys() == got.keys()
    return [name for name in expected if not torch.equal(expected[name], got[name])]


def _optimizer_tensors(checkpoint: dict) -> dict[str, torch.Tensor]:
    states = checkpoint["optimizer_states"][0]["state"]
    return {f"{index}.{key}": value for index, state in states.items() for key, value in state.items()}


def assert_same_run(reference: Path, resumed: Path) -> None:
    """``resumed`` ended as ``reference``: its files, losses, stage checkpoints (raw, EMA, optimiser) and weights."""
    assert _files(resumed) == _files(reference)
    assert logged(resumed) == logged(reference)
    for stage in sorted(path.name for path in (reference / "checkpoints").iterdir()):
        ends = [torch.load(run / f"checkpoints/{stage}/last.ckpt", weights_only=True) for run in (reference, resumed)]
        assert ends[1]["global_step"] == ends[0]["global_step"], stage
        for part in ("state_dict", "current_model_state"):  # the EMA weights, the raw weights
            assert _differing(ends[0][part], ends[1][part]) == [], f"{stage} {part}"
        assert _differing(_optimizer_tensors(ends[0]), _optimizer_tensors(ends[1])) == [], f"{stage} optimiser state"
        final = Path("checkpoints") / stage / "final.safetensors"
        assert _differing(load_file(reference / final), load_file(resumed / final)) == [], str(final)
    assert _differing(load_file(reference / "model.safetensors"), load_file(resumed / "model.safetensors")) == []
