"""What resuming a training stream at step k costs: replaying k batches against starting at batch k directly.

Sawtooth at App. E.1 size (S = 128, batch 2048, k = 40,000): replaying and drawing-only are timed over
``--sample`` batches and scaled to k; the direct start (the generator's jump) is timed at k itself and
checked against the replayed stream at k = ``--sample``. Text: the index stream of ``--rows`` rows
(about LM1B packed into 128-token rows) at batch 512 and k = 1,000,000 steps; the old path's index
draws alone are timed over ``--sample`` batches and scaled (it also gathered every batch's rows).
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from itertools import islice
from pathlib import Path

import torch

from ladd_plugins.datasets.binsaw.dataset import BinarySawtooth, BinarySawtoothConfig
from ladd_plugins.datasets.text.dataset import shuffled_indices
from registry.interfaces import Dataset


def _seconds(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def sawtooth(steps: int, batch: int, seq_len: int, sample: int) -> dict:
    data = BinarySawtooth(BinarySawtoothConfig(seq_len=seq_len))
    replay = _seconds(lambda: next(Dataset.batches_from(data, sample, batch, 0))) / (sample + 1)
    generator = torch.Generator().manual_seed(0)
    draws = (
        _seconds(
            lambda: [torch.rand(batch * (seq_len + 1), generator=generator, dtype=torch.float64) for _ in range(sample)]
        )
        / sample
    )
    direct = _seconds(lambda: next(data.batches_from(steps, batch, 0)))
    exact = torch.equal(next(data.batches_from(sample, batch, 0)), next(Dataset.batches_from(data, sample, batch, 0)))
    return {
        "steps": steps,
        "batch": batch,
        "seq_len": seq_len,
        "replay_s": replay * steps,
        "draws_only_s": draws * steps,
        "direct_s": direct,
        "direct_equals_replay_at_sample": exact,
    }


def text(steps: int, batch: int, rows: int, sample: int) -> dict:
    generator = torch.Generator().manual_seed(0)
    replay = _seconds(lambda: list(islice(shuffled_indices(rows, batch, generator), sample))) / sample
    direct = _seconds(lambda: next(shuffled_indices(rows, batch, torch.Generator().manual_seed(0), steps)))
    return {
        "steps": steps,
        "batch": batch,
        "rows": rows,
        "epochs_skipped": steps * batch // rows,
        "replay_indices_only_s": replay * steps,
        "direct_s": direct,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sample", type=int, default=200, help="batches timed to scale the replay to k")
    parser.add_argument("--rows", type=int, default=6_500_000, help="rows of the text split")
    parser.add_argument("--out", type=Path, help="folder for resume_skip.json")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the data stream is made in the training process, on one thread
    result = {
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "sawtooth": sawtooth(40_000, 2048, 128, args.sample),
        "text": text(1_000_000, 512, args.rows, args.sample),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "resume_skip.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
