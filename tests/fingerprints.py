"""Fingerprints of short seeded runs of the presets: losses, weights, samples and evaluation, recorded bitwise.

Run as a script to record ``fixtures/data/preset_fingerprints.json`` (``python tests/fingerprints.py [NAME ...]``
re-records the named cases and keeps the others); ``test_fingerprints.py`` recomputes them, so a change
meant to restructure code (not results) is checked to change no number. Committed results name the
cases they were produced with and store their :func:`digest` (``tests/provenance.py``).
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import torch

import registry
from registry.config.composition import compose
from registry.config.settings import EvalConfig
from registry.engine.evaluation import evaluate
from registry.training.loop import train

FIXTURE = Path(__file__).parent / "fixtures" / "data" / "preset_fingerprints.json"
SHORT = [
    "train.batch_size=8",
    "train.warmup_steps=2",
    "train.progress=false",
    "train.log_every=1",
    "train.stages=[{steps:3},{steps:2,lambda_latent:1.0,freeze_encoder:true}]",
]
#: A whole evaluation (held-out L^x, samples at two budgets, two repeats, the data floor) at a few samples.
TINY_EVAL = {"num_samples": 4, "batch_size": 4, "loss_batches": 1, "budgets": [1, 2], "repeats": 2, "floor_draws": 2}
_BINSAW = ("mdlm", "coladd_joint", "coladd_seq", "diladd_joint", "diladd_seq")
#: case -> (experiment, extra overrides); a case is named after its experiment, plus its overrides if any.
CASES: dict[str, tuple[str, list[str]]] = {
    **{f"binsaw/{name}_cpu": (f"binsaw/{name}_cpu", ["dataset.seq_len=16"]) for name in ("ar", *_BINSAW)},
    # block diffusion: blocks of 4 over the 16 positions
    "binsaw/bd3lm_cpu": ("binsaw/bd3lm_cpu", ["dataset.seq_len=16"]),
    # the text demos keep their data and encoder, with a shorter sequence
    "demo/mdlm": ("demo/mdlm", ["dataset.seq_len=16", "train.stages=[{steps:3}]"]),
    "demo/coladd": (
        "demo/coladd",
        [
            "dataset.seq_len=16",
            "train.stages=[{steps:3,lambda_latent:1.0,freeze_encoder:true}]",
            "encoder.cache_dir=null",
        ],
    ),
    # the paper-size presets (App. E.1 networks, batches drawn on the device, full-precision evaluation) on 16 positions
    **{f"binsaw/{name}": (f"binsaw/{name}", ["dataset.seq_len=16"]) for name in _BINSAW},
    # the quantiser ablation's other latents
    **{
        f"binsaw/diladd_joint_cpu latent={latent}": (
            "binsaw/diladd_joint_cpu",
            [f"latent={latent}", "dataset.seq_len=16"],
        )
        for latent in ("fsq", "lfq")
    },
}
#: the cases the fast test tier recomputes (the others are in the slow tier)
FAST = [*(f"binsaw/{name}_cpu" for name in ("ar", *_BINSAW)), "demo/mdlm", "demo/coladd"]


def _tensor_digest(tensors: list[torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for tensor in tensors:
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _hex(scores: dict[str, float]) -> dict[str, str]:
    return {name: float(value).hex() for name, value in sorted(scores.items())}


def _evaluation(experiment: Any, settings: EvalConfig) -> dict[str, Any]:
    """Every number of a tiny evaluation, bitwise."""
    result = evaluate(experiment, "fingerprint", dataclasses.replace(settings, **TINY_EVAL), progress=False)
    return {
        "token_loss": float(result.token_loss).hex(),
        "data_floor": _hex(result.data_floor or {}),
        "scores": {
            str(score.steps): {"mean": _hex(score.scores), "spread": _hex(score.spread)} for score in result.scores
        },
    }


def fingerprint(case: str, run_dir: Path) -> dict[str, Any]:
    """Train ``case`` for a few steps in ``run_dir``, then score, sample and evaluate with fixed seeds."""
    experiment_name, overrides = CASES[case]
    reg = registry.load()
    cfg = compose([f"experiment={experiment_name}", *SHORT, *overrides], reg)
    experiment = train(cfg, run_dir, reg)
    model = experiment.model.eval()
    with open(run_dir / "metrics.csv") as handle:
        logged = [row["loss"] for row in csv.DictReader(handle)]
    state = model.state_dict()
    batch = next(experiment.dataset.batches(8, 7, "test"))
    with torch.no_grad():
        losses = model.loss(batch, torch.Generator().manual_seed(3))
        samples = experiment.sampler.sample(model, 4, 4, torch.Generator().manual_seed(5))
        evaluation = _evaluation(experiment, cfg.eval)
        # last: in train mode a quantiser's forward pass updates its codebook
        training = model.train().loss(batch, torch.Generator().manual_seed(3))
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "state_keys": list(state),
        "weights": _tensor_digest(list(state.values())),
        "logged_losses": logged,
        "loss_terms": _hex({name: float(value) for name, value in losses.items()}),
        "train_loss_terms": _hex({name: float(value) for name, value in training.items()}),
        "samples": _tensor_digest([samples.tokens] + ([] if samples.latent is None else [samples.latent])),
        "network_calls": samples.network_calls,
        "evaluation": evaluation,
    }


def digest(recorded: dict[str, Any]) -> str:
    """One hash of a case's whole fingerprint: what a results record stores."""
    return hashlib.sha256(json.dumps(recorded, sort_keys=True).encode()).hexdigest()


def record(cases: list[str]) -> dict[str, Any]:
    """Fingerprints of ``cases``, each trained in a fresh temporary folder."""
    found = {}
    for case in cases:
        with TemporaryDirectory() as folder:
            found[case] = fingerprint(case, Path(folder))
    return found


def recorded() -> dict[str, Any]:
    """The committed fingerprints, by case."""
    return json.loads(FIXTURE.read_text())


if __name__ == "__main__":
    chosen = sys.argv[1:] or list(CASES)
    unknown = sorted(set(chosen) - set(CASES))
    if unknown:
        sys.exit(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    kept = {case: entry for case, entry in recorded().items() if case in CASES} if FIXTURE.is_file() else {}
    FIXTURE.write_text(json.dumps({**kept, **record(chosen)}, indent=1) + "\n")
