"""Fingerprints of short seeded runs of the CPU presets: losses, weights and samples, recorded bitwise.

Run as a script to record ``data/preset_fingerprints.json``; ``test_fingerprints.py`` recomputes them,
so a change meant to restructure code (not results) is checked to change no number.
"""
from __future__ import annotations

import csv
import hashlib
import json
import sys
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import torch

import registry
from registry.config import compose
from registry.training import train

FIXTURE = Path(__file__).parent / "data" / "preset_fingerprints.json"
SHORT = [
    "train.batch_size=8",
    "train.warmup_steps=2",
    "train.progress=false",
    "train.log_every=1",
    "train.stages=[{steps:3},{steps:2,lambda_latent:1.0,freeze_encoder:true}]",
]
#: preset -> extra overrides (the text demos keep their data and encoder, with a shorter sequence)
PRESETS: dict[str, list[str]] = {
    **{f"binsaw/{name}_cpu": ["dataset.seq_len=16"] for name in ("ar", "mdlm", "coladd_joint", "coladd_seq", "diladd_joint", "diladd_seq")},
    "demo/mdlm": ["dataset.seq_len=16", "train.stages=[{steps:3}]"],
    "demo/coladd": ["dataset.seq_len=16", "train.stages=[{steps:3,lambda_latent:1.0,freeze_encoder:true}]", "encoder.cache_dir=null"],
}


def _digest(tensors: list[torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for tensor in tensors:
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def fingerprint(preset: str, run_dir: Path) -> dict[str, Any]:
    """Train ``preset`` for a few steps in ``run_dir``, then score and sample with fixed seeds."""
    reg = registry.load()
    cfg = compose([f"experiment={preset}", *SHORT, *PRESETS[preset]], reg)
    experiment = train(cfg, run_dir, reg)
    model = experiment.model.eval()
    with open(run_dir / "metrics.csv") as handle:
        logged = [row["loss"] for row in csv.DictReader(handle)]
    state = model.state_dict()
    batch = next(experiment.dataset.batches(8, 7, "test"))
    with torch.no_grad():
        losses = model.loss(batch, torch.Generator().manual_seed(3))
        samples = experiment.sampler.sample(model, 4, 4, torch.Generator().manual_seed(5))
        # last: in train mode a quantiser's forward pass updates its codebook
        training = model.train().loss(batch, torch.Generator().manual_seed(3))
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "state_keys": list(state),
        "weights": _digest(list(state.values())),
        "logged_losses": logged,
        "loss_terms": {name: float(value).hex() for name, value in sorted(losses.items())},
        "train_loss_terms": {name: float(value).hex() for name, value in sorted(training.items())},
        "samples": _digest([samples.tokens] + ([] if samples.latent is None else [samples.latent])),
        "network_calls": samples.network_calls,
    }


def record(presets: list[str]) -> dict[str, Any]:
    """Fingerprints of ``presets``, each trained in a fresh temporary folder."""
    found = {}
    for preset in presets:
        with TemporaryDirectory() as folder:
            found[preset] = fingerprint(preset, Path(folder))
    return found


if __name__ == "__main__":
    chosen = sys.argv[1:] or list(PRESETS)
    FIXTURE.write_text(json.dumps(record(chosen), indent=1) + "\n")
