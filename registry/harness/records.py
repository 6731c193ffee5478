"""What ``ladd harness`` writes: lm-eval's results dictionary and ladd's provenance record beside it.

The results file is lm-eval's results dictionary, as ``lm_eval --output_path`` writes it, without its clock
readings (the start date and the evaluation's duration), which the provenance record keeps: the same model,
tasks, settings and seed give the same file, byte for byte. ``provenance.json`` says what was scored (the model's
folder, weights digest and components with their origins), how (every setting, the estimator of each request
type, what was truncated), with which versions, by which command, when and for how long.
"""
from __future__ import annotations

import hashlib
import json
import platform
import sys
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from lm_eval.utils import handle_non_serializable

from registry.engine.assembly import Experiment
from registry.engine.runs import WEIGHTS_FILE
from registry.storage.files import write_text
from registry.storage.weights import file_sha256

from .adapter import HarnessSettings, RequestCounts

__all__ = ["FORMAT", "ESTIMATORS", "provenance", "write"]

FORMAT = "ladd-harness/1"
#: lm-eval's entries that read the clock: kept in the provenance record, out of results.json
_CLOCK = ("date", "start_time", "end_time", "total_evaluation_time_seconds")
#: what each request type reports, as the provenance record states it
ESTIMATORS = {
    "loglikelihood": (
        "minus an unbiased Monte Carlo estimate of an upper bound on -log p(continuation | context): the full "
        "variational bound of the model as its sampler uses it (token channel; for LADD also the latent channel, the "
        "endpoint terms and the encoder term), estimated by the mean of mc_num draws (LLaDA's estimator at the "
        "process's horizon), or minus the bound itself (likelihood=exact); a causal model's exact log-likelihood"
    ),
    "is_greedy": "the model's greedy decoding of the continuation (argmax at the most confident masked position)",
    "loglikelihood_rolling": "the same estimate of the bound for a whole document, chunk by chunk (ladd eval's)",
    "generate_until": "the sampler's draw with the context as fixed tokens, cut at every stop string and at EOS",
}


def provenance(
    source: Path,
    experiment: Experiment,
    settings: HarnessSettings,
    counts: RequestCounts,
    sampler: dict[str, Any],
    tasks: dict[str, Any],
    results: dict[str, Any],
    seconds: float,
) -> dict[str, Any]:
    """The record of one ``ladd harness`` run."""
    weights = source / WEIGHTS_FILE
    return {
        "format": FORMAT,
        "model": {
            "folder": str(source),
            "weights_sha256": file_sha256(weights) if weights.is_file() else None,
            "components": experiment.origins(),
        },
        "settings": asdict(settings),
        "sampler": sampler,
        "tasks": tasks,
        "estimators": ESTIMATORS,
        "requests": {**asdict(counts), "ignored_generation_kwargs": sorted(counts.ignored_generation_kwargs)},
        "versions": {
            "ladd": _version("ladd"),
            "lm_eval": _version("lm_eval"),
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "command": sys.argv,
        "machine": platform.platform(),
        "device": str(experiment.model.device),
        "clock": {key: results[key] for key in _CLOCK if key in results},
        "seconds": round(seconds, 3),
    }


def write(results_path: Path, record_path: Path, results: dict[str, Any], record: dict[str, Any]) -> None:
    """lm-eval's results without its clock readings, and the provenance record naming the results file's digest."""
    steady = {key: value for key, value in results.items() if key not in _CLOCK}
    text = json.dumps(steady, indent=2, default=handle_non_serializable, ensure_ascii=False) + "\n"
    write_text(results_path, text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    record = {**record, "results": {"file": results_path.name, "sha256": digest}}
    write_text(record_path, json.dumps(record, indent=2, default=str) + "\n")


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
