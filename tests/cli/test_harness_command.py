"""``ladd harness`` from outside: the shipped tasks offline, identical results for one seed, one-line refusals."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import run_ladd

import registry
from registry.config.composition import compose
from registry.storage.weights import file_sha256
from registry.training.loop import train

pytestmark = pytest.mark.slow  # the ladd command in subprocesses and a tiny training run

OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
TASKS = "ladd_demo_choice,ladd_demo_exact"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The offline text demo model, trained for a few steps."""
    folder = tmp_path_factory.mktemp("harness") / "mdlm"
    overrides = [
        "experiment=demo/mdlm", "dataset.seq_len=32", "backbone.hidden=32", "backbone.layers=1", "backbone.heads=2",
        "train.batch_size=8", "train.warmup_steps=1", "train.progress=false", "train.stages=[{steps:3}]",
    ]
    reg = registry.load()
    train(compose(overrides, reg), folder, reg)
    return folder


def harness(run, out, *extra: str):
    return run_ladd("harness", str(run), "--tasks", TASKS, "--mc-num", "4", "--limit", "6", "--out", str(out),
                    *extra, env=OFFLINE)


def test_the_shipped_tasks_run_offline_and_one_seed_gives_identical_results_files(run, tmp_path):
    first = harness(run, tmp_path / "first", "--batch-size", "3")  # the batch size changes no bound
    assert first.returncode == 0, first.stderr
    second = harness(run, tmp_path / "second", "--batch-size", "16")
    assert second.returncode == 0, second.stderr
    text = (tmp_path / "first" / "results.json").read_bytes()
    assert text == (tmp_path / "second" / "results.json").read_bytes()
    results = json.loads(text)["results"]
    assert 0.0 <= results["ladd_demo_choice"]["acc,none"] <= 1.0
    assert 0.0 <= results["ladd_demo_exact"]["exact_match,none"] <= 1.0
    assert results["ladd_demo_choice"]["sample_len"] == 6
    record = json.loads((tmp_path / "first" / "provenance.json").read_text())
    assert record["format"] == "ladd-harness/1"
    assert record["model"]["weights_sha256"] == file_sha256(run / "model.safetensors")
    assert record["model"]["components"]["process"]["name"] == "masked"
    assert record["settings"]["mc_num"] == 4 and record["requests"]["loglikelihood"] == 24
    assert record["results"]["sha256"] and "loglikelihood" in record["estimators"]
    assert "ladd_demo_choice: acc,none" in first.stdout
    again = harness(run, tmp_path / "first")
    assert again.returncode == 2 and again.stderr.strip().endswith("choose another --out")


def test_log_samples_writes_lm_evals_record_of_every_request_and_results_say_how_rows_were_made(run, tmp_path):
    done = harness(run, tmp_path / "out", "--log-samples")
    assert done.returncode == 0, done.stderr
    for task, requests in (("ladd_demo_choice", 6), ("ladd_demo_exact", 6)):
        records = [json.loads(line) for line in (tmp_path / "out" / f"samples_{task}.jsonl").read_text().splitlines()]
        assert len(records) == requests and all({"doc", "arguments", "resps"} <= set(r) for r in records)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "samples" not in results
    scoring = results["config"]["scoring"]
    assert scoring["length"] == "fixed" and scoring["rows"] == "filled to the model's 32 positions with masks"
    assert json.loads((tmp_path / "out" / "provenance.json").read_text())["scoring"] == scoring
    again = harness(run, tmp_path / "again")
    assert again.returncode == 0 and not list((tmp_path / "again").glob("samples_*")), "only when asked"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--mc-num", "0"], "argument --mc-num: '0' is not a whole number >= 1"),
        (["--likelihood", "closed"], "argument --likelihood: invalid choice: 'closed'"),
        (["--sampler", "ancestral", "--sampler-option", "steps_per_token=2"], "steps_per_token"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_anything_runs(run, tmp_path, extra, message):
    out = harness(run, tmp_path / "out", *extra)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert not (tmp_path / "out").exists()


def test_without_lm_eval_the_command_says_how_to_install_it(run, tmp_path):
    code = (
        "import sys; sys.modules['lm_eval'] = None\n"  # blocks the import, as an environment without it would
        "from registry.cli import main\n"
        f"sys.exit(main(['harness', {str(run)!r}, '--tasks', 'ladd_demo_choice', '--out', {str(tmp_path)!r}]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "ladd: error: ladd harness needs lm-eval (EleutherAI's lm-evaluation-harness): pip install -e \".[harness]\""
    )
