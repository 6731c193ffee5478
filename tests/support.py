"""What the tests share: tiny training overrides, running the ``ladd`` command, fake plugin distributions, paths."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: this module is imported where torch is not needed
    from torch import nn

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"

#: Overrides that make any binary-sawtooth preset train in seconds on a CPU.
TINY = [
    "dataset.seq_len=16",
    "train.batch_size=16",
    "train.warmup_steps=2",
    "train.progress=false",
    "train.log_every=1",
    "eval.num_samples=64",
    "eval.batch_size=64",
    "eval.loss_batches=1",
    "eval.budgets=[1,4]",
]
TWO_STAGES = "train.stages=[{steps:3},{steps:3,lambda_latent:1.0,freeze_encoder:true}]"


def run_ladd(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the ladd CLI in a fresh interpreter, capturing output."""
    return subprocess.run(
        [sys.executable, "-m", "registry.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=600,
    )


def ladd_in_process(capsys, *args: object) -> tuple[int, str, str]:
    """``ladd ARGS`` run in this process: its exit status, standard output and standard error."""
    from registry.cli import main

    try:
        status = main([str(a) for a in args])
    except SystemExit as exit:
        status = exit.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def fake_distribution(root: Path, name: str, module_source: str, version: str = "0.0.1") -> str:
    """A minimal installed distribution (dist-info with an entry point in group ``ladd``) on a fresh path."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{name}.py").write_text(textwrap.dedent(module_source))
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[ladd]\n{name} = {name}\n")
    return str(root)


def install_plugin(project: Path, target: Path, *more: Path) -> str:
    """Install plugin projects (no dependencies) into the folder ``target`` with one pip call, for PYTHONPATH; returns
    it."""
    options = ["--quiet", "--no-deps", "--no-build-isolation", "--target", str(target)]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", *options, str(project), *map(str, more)],
        check=True,
        timeout=300,
    )
    return str(target)


def import_with(name: str, source: str, out_dir: Path, overrides: list[str], registry, overwrite: bool = False) -> Path:
    """What ``ladd import NAME SOURCE OUT_DIR [OVERRIDES]`` does, from Python."""
    from registry.engine.importing import import_checkpoint

    return import_checkpoint(registry.importer(name), source, out_dir, overrides, registry, overwrite)


def import_mdlm(source: str, out_dir: Path, overrides: list[str], registry, overwrite: bool = False) -> Path:
    """What ``ladd import mdlm SOURCE OUT_DIR [OVERRIDES]`` does, from Python."""
    return import_with("mdlm", source, out_dir, overrides, registry, overwrite)


def import_llada(source: str, out_dir: Path, overrides: list[str], registry, overwrite: bool = False) -> Path:
    """What ``ladd import llada SOURCE OUT_DIR [OVERRIDES]`` does, from Python."""
    return import_with("llada", source, out_dir, overrides, registry, overwrite)


def assert_trainable_set_is_exact(model, x0) -> None:
    """The probe's unreached parameters are exactly those a real backward pass of the loss leaves without gradient."""
    import torch

    from registry.training.trainable import unreached_parameters

    names = {id(p): name for name, p in model.named_parameters()}
    unreached = sorted(names[id(p)] for p in unreached_parameters(model))
    model.train()
    model.zero_grad(set_to_none=True)
    with torch.random.fork_rng():
        model.loss(x0)["loss"].backward()
    without = sorted(name for name, p in model.named_parameters() if p.requires_grad and p.grad is None)
    model.zero_grad(set_to_none=True)
    assert unreached == without


def redraw_weights(model, scale: float, seed: int = 0):
    """``model`` (eval mode) with every weight redrawn from N(0, scale^2), so that an untrained network's predictions
    depend on its input (a fresh DiT's zero-initialised adaLN makes its output constant)."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, scale)
    return model.eval()


class FakeLatent:
    """Only what a backbone uses of a latent channel: ``length`` 2 slots of ``width`` 6."""

    length, width = 2, 6

    def input_layer(self, width: int) -> nn.Module:
        from torch import nn

        return nn.Linear(self.width, width)

    def output_layer(self, width: int) -> nn.Module:
        from torch import nn

        return nn.Linear(width, self.width)
