"""Importing an MDLM checkpoint: seconds and peak memory against its weights file, and sampling the imported model.

    python bench/import_mdlm.py --out DIR                 # the published OWT size (169.6M parameters), random weights
    python bench/import_mdlm.py --size tiny --out DIR     # anywhere: a tiny checkpoint, to check the script
    python bench/import_mdlm.py --sample --out DIR        # also ms/sample at 128 steps, batch 64, plain and fast (GPU)

A checkpoint in MDLM's published layout (kuleshov-group/mdlm-owt: config.json and a float32 model.safetensors)
is written with random weights, then imported by ``ladd import mdlm`` in a process of its own, whose wall time
and peak resident memory (VmHWM) are set against the size of the weights file. The baseline,
measured in the same run: a process that only reads every tensor of the same file once (safetensors' ``load_file``,
then a sum of each), and the import of a tiny checkpoint (what importing costs besides the weights). With
``--sample``, the imported model folder is read back as any model folder and draws 64 sequences in 128 steps,
plain against the exact fast path (bf16 on CUDA, as ``ladd sample`` runs). Rows are printed and written to
``OUT/import_mdlm.json``.
"""
from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

import registry
from ladd_plugins.importers.mdlm import write_checkpoint
from ladd_plugins.importers.mdlm_table import MDLMShape
from registry.engine.sampling import inference_precision
from speed import timed

SHAPES = {  # the published OWT checkpoint, and a tiny one
    "owt": MDLMShape(hidden=768, cond=128, blocks=12, heads=12, vocab=50258, length=1024, time_conditioning=False),
    "tiny": MDLMShape(hidden=32, cond=16, blocks=2, heads=4, vocab=50258, length=64, time_conditioning=False),
}
#: sampling: 64 sequences in 128 steps; the tiny check draws 4 in 8 (a vocabulary of GPT-2's size is no toy on a CPU)
SAMPLING = {"owt": (64, 128), "tiny": (4, 8)}


#: run in a fresh interpreter: the task, then the process's peak resident memory (VmHWM, of this process alone:
#: a child's ru_maxrss would also count what its parent held when it forked)
_CHILD = """
import sys
task, args = sys.argv[1], sys.argv[2:]
if task == "import":
    from registry.cli import main
    code = main(["import", "mdlm", *args])
else:
    from safetensors.torch import load_file
    sum(float(tensor.sum()) for tensor in load_file(args[0]).values())
    code = 0
status = open("/proc/self/status").read()
print("VmHWM", next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
sys.exit(code)
"""


def measured(task: str, *args: str) -> dict:
    """Wall seconds and peak resident memory (GiB) of ``task`` ("import" or "read") in a process of its own."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CHILD, task, *args], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{task} {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    peak_kib = int(done.stdout.split("VmHWM")[-1])
    return {"seconds": seconds, "peak_gib": peak_kib * 1024 / 2**30}


def tiny_import(scratch: Path) -> dict:
    """What importing costs besides the weights: the import of the tiny checkpoint."""
    write_checkpoint(scratch / "tiny_checkpoint", SHAPES["tiny"])
    shutil.rmtree(scratch / "tiny_imported", ignore_errors=True)
    return measured("import", str(scratch / "tiny_checkpoint"), str(scratch / "tiny_imported"))


def sample_rows(folder: Path, samples: int, steps: int) -> list[dict]:
    """ms/sample of the imported model drawing ``samples`` sequences in ``steps`` steps, plain and fast."""
    reg = registry.load()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = registry.from_pretrained(folder, reg).model.to(device).eval()
    rows = []
    for fast in (False, True):
        sampler = reg.build("sampler", "ancestral", {"fast": fast})
        generator = torch.Generator(device=device).manual_seed(0)
        with inference_precision(device, "auto"), torch.no_grad():
            sampler.sample(model, samples, 4, generator)  # warm-up: kernels chosen, memory reserved
            draw = functools.partial(sampler.sample, model, samples, steps, generator)
            seconds = timed(draw, device, 1, warm_up=False)
        rows.append({"steps": steps, "batch": samples, "fast": fast, "ms_per_sample": 1000 * seconds / samples,
                     "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"})
        print(f"sample imported mdlm steps={steps} batch={samples} {'fast ' if fast else 'plain'} "
              f"{rows[-1]['ms_per_sample']:8.2f} ms/sample", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=tuple(SHAPES), default="owt")
    parser.add_argument("--out", default="bench/out/import_mdlm")
    parser.add_argument("--scratch", default=None, help="the checkpoint and the model folder (default: OUT)")
    parser.add_argument("--sample", action="store_true", help="also time sampling the imported model")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    scratch = out if args.scratch is None else Path(args.scratch).resolve()
    out.mkdir(parents=True, exist_ok=True)
    source, imported = scratch / "mdlm_checkpoint", scratch / "mdlm_imported"
    shutil.rmtree(imported, ignore_errors=True)  # this script's own folder of an earlier run
    parameters = write_checkpoint(source, SHAPES[args.size])
    weights = source / "model.safetensors"
    file_gib = weights.stat().st_size / 2**30
    baseline = measured("read", str(weights))
    run = measured("import", str(source), str(imported))
    fixed = run if args.size == "tiny" else tiny_import(scratch)
    # what importing these weights adds to what any ladd process holds (the interpreter and libraries, whose size
    # depends on the environment): the peak less the tiny import's
    own = (run["peak_gib"] - fixed["peak_gib"]) / file_gib
    row = {"size": args.size, "parameters_m": parameters / 1e6, "file_gib": file_gib, "import": run,
           "read_file_baseline": baseline, "tiny_import_baseline": fixed, "import_own_x_file": own,
           "threads": torch.get_num_threads(), "torch": torch.__version__}
    print(f"import mdlm {parameters / 1e6:.1f}M parameters, file {file_gib:.3f} GiB: {run['seconds']:.1f} s, "
          f"peak {run['peak_gib']:.2f} GiB ({run['peak_gib'] / file_gib:.2f}x the file; {own:.2f}x beyond the tiny "
          f"import's); reading the file alone: "
          f"{baseline['seconds']:.1f} s, peak {baseline['peak_gib']:.2f} GiB; importing a tiny checkpoint: "
          f"{fixed['seconds']:.1f} s, peak {fixed['peak_gib']:.2f} GiB", flush=True)
    if args.sample:
        row["sampling"] = sample_rows(imported, *SAMPLING[args.size])
    (out / "import_mdlm.json").write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
