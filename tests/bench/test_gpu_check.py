"""The GPU check script, dry-run on the CPU with tiny networks, so that it cannot rot between GPU runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT

pytestmark = pytest.mark.slow  # runs the GPU check script on CPU in a subprocess



@pytest.mark.slow
def test_gpu_check_tiny_runs_every_section_on_cpu(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "bench/gpu_check.sh", "--size", "tiny"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FAILED" not in done.stdout, done.stdout
    rows = [
        json.loads(line)
        for group in ("binsaw", "lm1b", "owt")
        for line in (tmp_path / f"presets_{group}.jsonl").read_text().splitlines()
    ]
    assert [r["preset"] for r in rows] == [
        "binsaw/coladd_seq",
        "binsaw/diladd_joint",
        "lm1b/coladd_32",
        "lm1b/diladd_32_seq",
        "owt/mdlm",
    ]
    assert all(r["ok"] and r["steps_per_s"] > 0 and r["sample_ms"] > 0 for r in rows), rows
    assert [r["stages"] for r in rows[:2]] == [2, 2], "the two-stage sawtooth presets reach Stage 2"
    graphs = [json.loads(line) for line in (tmp_path / "presets_binsaw_graphs.jsonl").read_text().splitlines()]
    assert [(r["preset"], r["ok"], r["compile"]) for r in graphs] == [("binsaw/mdlm", True, "reduce-overhead")], graphs
    # without CUDA the host reads are counted instead: none in the sawtooth's step, nor in ladd train's loop around it
    syncs = {r["preset"]: r for r in json.loads((tmp_path / "syncs.json").read_text())}
    assert len(syncs) == 5
    for preset in ("binsaw/mdlm", "binsaw/coladd_joint"):
        assert syncs[preset]["train_step_syncs"] == 0 and syncs[preset]["train_loop_syncs_per_step"] == 0, syncs[preset]
    speed = json.loads((tmp_path / "speed" / "training.json").read_text())["rows"]
    assert {r["model"] for r in speed} == {"mdlm", "coladd"}
    head = json.loads((tmp_path / "speed" / "head.json").read_text())["rows"]
    assert head[-1]["max_abs_difference"] == 0.0, "on a CPU the head is never padded"
    imported = json.loads((tmp_path / "import" / "import_mdlm.json").read_text())
    assert imported["import"]["seconds"] > 0 and imported["import"]["peak_gib"] > 0
    assert [(r["fast"], r["steps"]) for r in imported["sampling"]] == [(False, 8), (True, 8)]
    assert all(r["ms_per_sample"] > 0 for r in imported["sampling"])
    decoders = json.loads((tmp_path / "decoders" / "decoders.json").read_text())["rows"]
    assert decoders[0]["decoder"] == "ancestral" and len(decoders) == 10
    assert all(r["ms_per_sample"] > 0 and r["gflops"] > 0 for r in decoders)
    cached = [r for r in decoders if "cache" in r["options"]]
    assert len(cached) == 3 and all(r["agreement_refresh_1"] == 1.0 for r in cached), cached
    assert all(r["token_forwards"] < decoders[2]["token_forwards"] for r in cached), "cached passes run fewer positions"
    blocks = json.loads((tmp_path / "block_diffusion" / "block_diffusion.json").read_text())
    assert blocks["identical_tokens"] and blocks["forwards"]["per_step_ratio"] == blocks["forwards"]["analytic"]
    assert blocks["forwards"]["with_cache"] == blocks["forwards"]["closed_form_with_cache"]
    lora = [json.loads(line) for line in (tmp_path / "finetune_lora.jsonl").read_text().splitlines()]
    assert [(r["ok"], r["size"], r["batch"]) for r in lora] == [(True, "tiny", 1)] and lora[0]["tokens_per_s"] > 0
    # without a GPU, sharding is refused in ladd's one line, the row's expected finding here
    sharded = [json.loads(line) for line in (tmp_path / "finetune_sharded.jsonl").read_text().splitlines()]
    assert [r["row"] for r in sharded] == ["fsdp", "fsdp_lora"]
    assert all(r["ok"] and "train.strategy=fsdp shards the model over GPUs" in r["refused"] for r in sharded)
