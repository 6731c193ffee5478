"""Wall time of one sweep run serially (the default launcher) and with ``launcher=local`` over 2 workers, one run.

    python bench/sweep_parallel.py --out bench/results/cpu/sweep_parallel.json [--jobs 4] [--steps 300] [--workers 2]

The sweep is ``binsaw/mdlm_cpu`` over ``--jobs`` training seeds, each trained ``--steps`` steps and evaluated at
reduced size (200 samples, budgets 1 and 8, one repeat, one floor draw). Serially every job runs in the ``ladd``
process on one thread (``OMP_NUM_THREADS=1``); the local launcher gives each of its workers cores / workers threads.
Both sweeps run in this one invocation, one after the other (the serial one first), each into a fresh folder; the
speed-up is serial seconds over local seconds. The final weights of the two sweeps' runs are compared (the same work:
they must be bitwise equal). Recorded beside each wall time: the CPU seconds of the processes the sweep ran, each
job's own seconds from its record (start to end, to the second), and the load average before and after (the machine
may be shared).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWEEP = [
    "experiment=binsaw/mdlm_cpu", "train.progress=false", "eval.num_samples=200", "eval.batch_size=200",
    "eval.budgets=[1,8]", "eval.repeats=1", "eval.floor_draws=1", "eval.loss_batches=1",
]


def timed(arguments: list[str], env: dict[str, str], sweep: Path) -> dict[str, object]:
    """Run ``ladd ARGUMENTS`` (a sweep into ``sweep``): wall and CPU seconds, each job's seconds, the load around it."""
    before, used = os.getloadavg(), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "registry.cli", *arguments], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"ladd {' '.join(arguments)} failed:\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime
    jobs = []
    for record in sorted((sweep / "jobs").glob("*.json"), key=lambda path: int(path.stem)):
        times = json.loads(record.read_text())
        started, ended = (datetime.datetime.fromisoformat(times[key]) for key in ("started", "ended"))
        jobs.append((ended - started).total_seconds())
    return {
        "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 1), "job_seconds": jobs, "load_before": before,
        "load_after": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    seeds = ",".join(str(seed) for seed in range(args.jobs))
    common = ["train", "-m", *SWEEP, f"train.stages=[{{steps:{args.steps}}}]", f"seed={seeds}"]
    with tempfile.TemporaryDirectory() as scratch:
        serial_dir, local_dir = Path(scratch) / "serial", Path(scratch) / "local"
        one_thread = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        serial = timed([*common, f"hydra.sweep.dir={serial_dir}"], one_thread, serial_dir)
        local_env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        local = timed(
            [*common, "launcher=local", f"launcher.workers={args.workers}", f"hydra.sweep.dir={local_dir}"], local_env,
            local_dir,
        )
        same = all(
            (serial_dir / str(job) / "model.safetensors").read_bytes()
            == (local_dir / str(job) / "model.safetensors").read_bytes()
            for job in range(args.jobs)
        )
    record = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or 'cpu'}",
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "sweep": common[2:],
        "jobs": args.jobs,
        "workers": args.workers,
        "threads_per_local_job": max(1, len(os.sched_getaffinity(0)) // args.workers),
        "serial": serial,
        "local": local,
        "speedup": round(float(serial["seconds"]) / float(local["seconds"]), 2),
        "same_weights": same,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
