"""Hostile or oversized input beyond the table of ``safety_cases``: what must hold where the outcome depends on the
machine (device nodes, memory limits, the home folder), and the estimates and checks behind the refusals."""
from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from safety_cases import ONE_STAGE, exported, ladd, snapshot, text_overrides, trained
from support import TINY, run_ladd

import registry
from registry.engine.runs import RunFolder
from registry.engine.sampling_limits import check_sampling_time, sampling_bytes
from registry.errors import LaddError
from registry.interfaces import Backbone, TransformerShape
from registry.storage.files import is_partial, partial_name, remove_partials
from registry.storage.records import install_hint
from registry.storage.weights import DATA_DIGEST_KEY, FILE_DIGEST_KEY, load_weights, save_weights, verify_weights

SAMPLE = ["--steps", "2", "--num", "2"]


# ---------------------------------------------------------------- temporaries and targets


def _finished_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_only_temporaries_of_writers_no_longer_running_are_removed(tmp_path):
    users = tmp_path / ".notes.partial"
    running = tmp_path / partial_name("config.yaml")  # this process's: a writer still running
    abandoned = tmp_path / running.name.replace(f"ladd-{os.getpid()}-", f"ladd-{_finished_pid()}-")
    for path in (users, running, abandoned):
        path.write_text("x")
    remove_partials(tmp_path)
    assert users.exists() and running.exists() and not abandoned.exists()
    assert not is_partial(users) and is_partial(running)


def test_a_folder_holding_only_ladds_temporaries_counts_as_new_and_one_with_the_users_does_not(tmp_path):
    cfg = {"train": {}}
    (tmp_path / partial_name("run.json")).write_text("{")
    assert RunFolder(tmp_path).check(cfg) == []
    (tmp_path / "notes.partial").write_text("mine")
    with pytest.raises(LaddError, match="is not empty and is not a ladd run folder"):
        RunFolder(tmp_path).check(cfg)


@pytest.mark.slow
def test_sample_out_on_a_device_node_refuses_and_leaves_the_node(tmp_path):
    if os.geteuid() == 0:  # root could replace the system's /dev/null: use a node of its own
        node = tmp_path / "null"
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    else:
        node = Path("/dev/null")
    before = node.stat()
    outcome = ladd("sample", str(trained(tmp_path, "run")), *SAMPLE, "--out", str(node))
    assert outcome.code == 2 and "it is a character device, not a regular file" in outcome.message
    after = node.stat()
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


@pytest.mark.slow
def test_no_command_writes_into_the_folder_or_over_the_file_it_reads(tmp_path):
    """Every command that writes: a target in the run or model folder it reads, or a file it reads, is refused in one
    line naming the option, and every file stays as it was (one check serves them all)."""
    run, model = trained(tmp_path, "run"), exported(tmp_path, "model")
    refs, measured = tmp_path / "refs.txt", tmp_path / "measured.csv"
    refs.write_text("0 1 1 0\n")
    measured.write_text("method,steps,gflops_per_step,gen_ppl,entropy\nmdlm,8,1.0,50.0,5.0\n")
    (run / "eval_mdlm.json").write_text("{}")
    commands = [
        (("sample", run, "--out", run / "samples.txt"), "--out"),
        (("sample", model, "--like", refs, "--out", refs), "--out"),
        (("sample", ".", "--steps", "2", "--num", "2"), "--out"),  # the default file, in the run folder it reads
        (("encode", model, "--input", refs, "--out", model / "model.safetensors"), "--out"),
        (("eval", run, "--out", run / "metrics.json"), "--out"),  # and metrics.csv beside it
        (("zero-shot", model, "ptb", "--out", model / "zero_shot.csv"), "--out"),
        (("export", run, run / "model"), "out_dir"),
        (("import", "mdlm", model, model, "--overwrite"), "out_dir"),
        (("report", run / "eval_mdlm.json", "--out", run), "--out"),
        (("frontier", measured, "--budgets", "1", "--plot", measured), "--plot"),
        (("compare", "--runs-dir", tmp_path, "--out", tmp_path / "binsaw_mdlm_cpu"), "--out"),  # a run it trains
        (("train", *TINY, ONE_STAGE, f"train.init_from={model}", f"run_dir={model / 'again'}"), "run_dir"),
    ]
    for command, option in commands:
        before = snapshot(tmp_path)
        outcome = ladd(*map(str, command), cwd=run)
        assert outcome.code == 2 and "which this command reads" in outcome.message, (command, outcome.message)
        assert f"give {option} a path outside it" in outcome.message and len(outcome.message.splitlines()) == 1
        assert snapshot(tmp_path) == before, command


# ---------------------------------------------------------------- memory and time


class _Shaped(Backbone):
    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.shape = shape
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, *args):
        raise NotImplementedError

    def transformer_shape(self) -> TransformerShape:
        return self.shape


def test_the_sampling_memory_estimate_counts_the_samples_and_one_chunk():
    shape = TransformerShape(layers=3, length=20, width=8, mlp_ratio=4.0, head_positions=16, head_outputs=50)
    model = torch.nn.Module()
    model.backbone, model.seq_len = _Shaped(shape), 16
    experiment = SimpleNamespace(model=model)
    samples = 2 * 1000 * 16 * 8  # int64 ids, held twice (the chunks, then their concatenation)
    chunk = 100 * 20 * 8 * 4 * 4 + 100 * 16 * 50 * 4  # 4 float32 widths per position, float32 logits
    assert sampling_bytes(experiment, 1000, 100) == samples + chunk
    assert sampling_bytes(experiment, 10, 100) == 2 * 10 * 16 * 8 + 10 * 20 * 8 * 4 * 4 + 10 * 16 * 50 * 4


class _SlowSampler:
    """Takes ``fixed`` seconds per call plus ``per_step`` per step, and ``first`` more on its first call (warming
    up)."""

    def __init__(self, fixed: float, per_step: float, first: float = 0.0) -> None:
        self.fixed, self.per_step, self.first = fixed, per_step, first

    def sample(self, model, rows, steps, generator, fixed=None):
        time.sleep(self.fixed + steps * self.per_step + self.first)
        self.first = 0.0


@pytest.mark.parametrize("first", [0.0, 1.0], ids=["steady", "slow first call"])
def test_the_sampling_time_estimate_extrapolates_the_measured_steps(first):
    model = torch.nn.Linear(1, 1)
    model.device = torch.device("cpu")
    experiment = SimpleNamespace(model=model, sampler=_SlowSampler(fixed=0.2, per_step=0.1, first=first))
    expected = 10 * (0.2 + 3000 * 0.1)  # 10 chunks of 100 rows: 3002 s
    check_sampling_time(experiment, 1000, 3000, 100, max_hours=1.3 * expected / 3600)
    # 0.83 hours; a loaded machine oversleeps by a few percent (the measured rate is checked to 15% below)
    estimate = r"1000 samples at 3000 steps would take about 0\.[89] hours here \(10 chunk"
    with pytest.raises(LaddError, match=estimate) as refused:
        check_sampling_time(experiment, 1000, 3000, 100, max_hours=0.7 * expected / 3600)
    measured = float(re.search(r"([\d.]+) ms per step measured", str(refused.value))[1])
    assert measured == pytest.approx(100, rel=0.15) and "--max-hours" in str(refused.value)
    check_sampling_time(experiment, 1000, 2, 100, max_hours=1e-9)  # small jobs are not timed


@pytest.mark.slow
def test_running_out_of_memory_under_a_memory_limit_is_one_line_and_writes_nothing(tmp_path):
    run_dir = trained(tmp_path, "run")
    probe = (
        "import torch, lightning, registry.cli, registry.training.loop, registry.engine.export;"
        " print(open('/proc/self/status').read())"
    )
    status = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    baseline = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmPeak:"))
    limit = baseline + 2 * 2**30  # the job's estimate (about 1 GiB) passes; sampling 60,000 rows at once needs more

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    out = tmp_path / "samples.txt"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "registry.cli",
            "sample",
            str(run_dir),
            "--steps",
            "2",
            "--num",
            "60000",
            "--batch-size",
            "60000",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=limited,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("ladd: ") or "Traceback" in line]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("ladd: error: out of memory") and "run the command again" in lines[0]
    assert not out.exists() and not list(tmp_path.glob(".samples.txt.*"))


# ---------------------------------------------------------------- weights


def test_files_of_older_versions_keep_their_data_checksum_checked(tmp_path):
    model = torch.nn.Linear(3, 2)
    path = tmp_path / "old.safetensors"
    tensors = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    save_file(tensors, path)
    data = path.read_bytes()
    start = 8 + int.from_bytes(data[:8], "little")
    save_file(tensors, path, metadata={DATA_DIGEST_KEY: hashlib.sha256(data[start:]).hexdigest()})
    load_weights(model, path)
    flipped = bytearray(path.read_bytes())
    flipped[-1] ^= 0xFF
    path.write_bytes(bytes(flipped))
    with pytest.raises(LaddError, match="does not match the checksum"):
        verify_weights(path)


def test_new_files_checksum_their_whole_content(tmp_path):
    model = torch.nn.Linear(3, 2)
    path = save_weights(model, tmp_path / "model.safetensors")
    with safe_open(str(path), "pt") as opened:
        recorded = opened.metadata()[FILE_DIGEST_KEY]
    data = path.read_bytes()
    blanked = data.replace(recorded.encode(), b"0" * 64, 1)
    assert hashlib.sha256(blanked).hexdigest() == recorded  # the header (digest as zeros) and the data
    verify_weights(path)


# ---------------------------------------------------------------- missing plugins


@pytest.mark.parametrize(
    ("distribution", "version", "hint"),
    [
        ("fancy-ladd", "2.0", "pip install 'fancy-ladd==2.0'"),
        ("fancy_ladd.models", None, "pip install 'fancy_ladd.models'"),
        ("fancy-ladd", "2.0'; rm -rf ~; '", "pip install 'fancy-ladd'"),
        ("x'; touch pwned; echo '", "1.0", "install the plugin that provides it"),
        ("-rf", "1.0", "install the plugin that provides it"),
        (None, None, "install the plugin that provides it"),
    ],
)
def test_an_install_command_is_printed_only_for_a_valid_distribution_name(distribution, version, hint):
    assert install_hint(distribution, version) == hint


# ---------------------------------------------------------------- folders on the command line


@pytest.mark.slow
def test_run_dir_with_a_tilde_and_with_letters_outside_ascii(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    trained_in_home = run_ladd("train", *TINY, ONE_STAGE, "run_dir=~/runs/x", env={"HOME": str(home)})
    assert trained_in_home.returncode == 0, trained_in_home.stderr
    assert (home / "runs" / "x" / "model.safetensors").is_file() and not (Path.cwd() / "~").exists()
    folder = tmp_path / "été" / "run ü"
    accented = run_ladd("train", *TINY, ONE_STAGE, f"run_dir={folder}")
    assert accented.returncode == 0, accented.stderr
    assert (folder / "model.safetensors").is_file()
    assert ladd("sample", str(folder), *SAMPLE, cwd=tmp_path).code == 0


@pytest.mark.slow
def test_a_sweep_puts_its_jobs_in_the_given_run_dir_and_names_what_each_sweeps(tmp_path):
    done = run_ladd("train", "-m", *TINY, ONE_STAGE, "schedule=linear,cosine", f"run_dir={tmp_path / 'sweep'}")
    assert done.returncode == 0, done.stderr
    jobs = [line for line in done.stdout.splitlines() if line.startswith("job ")]
    assert jobs == [
        f"job 0 of 2: schedule=linear -> {tmp_path / 'sweep' / '0'}",
        f"job 1 of 2: schedule=cosine -> {tmp_path / 'sweep' / '1'}",
    ]
    for number, schedule in enumerate(("linear", "cosine")):
        config = (tmp_path / "sweep" / str(number) / "config.yaml").read_text()
        assert f"name: {schedule}" in config and (tmp_path / "sweep" / str(number) / "model.safetensors").is_file()


# ---------------------------------------------------------------- text models away from their corpus


@pytest.mark.slow
def test_an_exported_text_model_samples_without_its_corpus_or_any_cache(tmp_path):
    run_dir = trained(tmp_path, "run", *text_overrides(tmp_path))
    assert ladd("export", str(run_dir), str(tmp_path / "model")).code == 0
    config = json.loads((tmp_path / "model" / "config.json").read_text())["config"]
    assert "cache_dir" not in config["dataset"], "a local cache folder was exported"
    (tmp_path / "corpus.txt").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    model = registry.from_pretrained(tmp_path / "model")
    assert model.dataset.tokenizer is not None
    sampled = run_ladd("sample", "--model", str(tmp_path / "model"), *SAMPLE, "--prompt", "the ", cwd=elsewhere)
    assert sampled.returncode == 0, sampled.stderr
    rows = [json.loads(line) for line in (elsewhere / "samples_2steps.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(row["text"].startswith("the ") for row in rows)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["samples_2steps.jsonl"]
