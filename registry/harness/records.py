"""What ``ladd harness`` writes: lm-eval's results dictionary and ladd's provenance record beside it, and with
``--log-samples`` lm-eval's record of every request.

The results file is lm-eval's results dictionary, as ``lm_eval --output_path`` writes it, without its clock
readings (the start date and the evaluation's duration), which the provenance record keeps: the same model,
tasks, settings and seed give the same file, byte for byte. Logged requests go, as lm-eval writes them, to one
``samples_TASK.jsonl`` per task (a line per document: its arguments, the model's responses, the metrics).
``provenance.json`` says what was scored (the model's folder, weights digest and components with their origins), how
(every setting, how requests became rows, the estimator of each request type, what was truncated), with which
versions, by which command, when and for how long.
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
from registry.errors import LaddError
from registry.storage.files import write_text
from registry.storage.weights import file_sha256

from .adapter import HarnessSettings, RequestCounts

__all__ = ["FORMAT", "ESTIMATORS", "provenance", "samples_file", "write", "write_samples"]

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
    scoring: dict[str, Any],
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
        "scoring": scoring,
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


def samples_file(folder: Path, task: str) -> Path:
    """Where the logged requests of ``task`` go."""
    return folder / f"samples_{task}.jsonl"


def write_samples(folder: Path, samples: dict[str, list[dict[str, Any]]]) -> list[Path]:
    """Each task's logged requests as JSON lines (lm-eval's records); the files written. An existing file is refused
    before any is written."""
    for task in samples:
        if samples_file(folder, task).exists():
            raise LaddError(f"{samples_file(folder, task)} exists: ladd harness replaces no earlier results; choose "
                            f"another --out")
    written = []
    for task, records in samples.items():
        lines = "".join(json.dumps(r, default=handle_non_serializable, ensure_ascii=False) + "\n" for r in records)
        path = samples_file(folder, task)
        write_text(path, lines)
        written.append(path)
    return written


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
