"""The mistakes and attacks ladd must refuse, each reproduced from the outside (the ``ladd`` command or the public API).

Every case returns an :class:`Outcome` after asserting what must hold besides the message (nothing written, a
payload not run, a file left untouched). ``tests/cli/test_safety.py`` runs them all, checks that each refusal is one
line with a non-zero exit code, and writes the table of ``docs/safety.md``.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shutil
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file, save_file
from support import TINY

import registry
from registry.cli import main
from registry.config.composition import compose
from registry.engine.evaluation import token_loss
from registry.engine.loading import load_run
from registry.training.loop import train

ONE_STAGE = "train.stages=[{steps:2}]"
#: ``ladd eval`` at the smallest sizes
SMALL_EVAL = ["--budgets", "1", "--num-samples", "2", "--batch-size", "2", "--loss-batches", "1"]


@dataclass
class Outcome:
    """What the user sees: the exit code (0 for an API call that returned) and the message (or what happened
    instead)."""

    code: int
    message: str
    refused: bool = True


@dataclass
class Case:
    number: str
    title: str
    run: Callable[[Path], Outcome]


CASES: list[Case] = []


def case(number: str, title: str) -> Callable[[Callable[[Path], Outcome]], Callable[[Path], Outcome]]:
    """Register a case under its number and a one-line description of the mistake or attack."""

    def register(function: Callable[[Path], Outcome]) -> Callable[[Path], Outcome]:
        CASES.append(Case(number, title, function))
        return function

    return register


# ---------------------------------------------------------------- helpers


def ladd(*args: str, cwd: Path | None = None) -> Outcome:
    """Run the ``ladd`` command in this process; the outcome holds its exit code and its standard error."""
    out, err = io.StringIO(), io.StringIO()
    argv, here = list(sys.argv), Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as stop:
                code = int(stop.code or 0)
    finally:
        sys.argv[:] = argv
        os.chdir(here)
    return Outcome(code, err.getvalue().strip())


#: the address space of a ``ladd`` process that must refuse a size before allocating it: were the refusal to fail,
#: the allocation fails inside this bound instead of exhausting the machine
BOUNDED_MEMORY = 8 * 2**30


def ladd_process(
    *args: str, env: dict[str, str] | None = None, limit_file_size: int | None = None, limit_memory: int | None = None
) -> Outcome:
    """Run ``ladd`` in a fresh interpreter (for plugin discovery, concurrency and resource limits)."""

    def limits() -> None:
        if limit_file_size is not None:  # a disk that fills up: writes past the limit fail with EFBIG
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_size, limit_file_size))
        if limit_memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_memory, limit_memory))

    done = subprocess.run(
        [sys.executable, "-m", "registry.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        preexec_fn=limits,
    )
    return Outcome(done.returncode, _ladd_lines(done.stderr))


def _ladd_lines(stderr: str) -> str:
    """ladd's own message lines of a subprocess's standard error (Lightning's progress notes left out)."""
    return "\n".join(line for line in stderr.splitlines() if line.startswith("ladd: ") or "Traceback" in line)


def api(call: Callable[[], object]) -> Outcome:
    """Call the public Python API: a refusal is a LaddError with one line."""
    try:
        call()
    except registry.LaddError as error:
        return Outcome(1, f"LaddError: {error}")
    return Outcome(0, "(no error)", refused=False)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file's bytes (and every link's target) under ``folder``: equal snapshots mean nothing was written."""
    found = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        found[key] = (
            os.readlink(path).encode() if path.is_symlink() else path.read_bytes() if path.is_file() else b"<dir>"
        )
    return found


def unchanged(folder: Path, command: Callable[[], Outcome]) -> Outcome:
    """The outcome of ``command``, after checking that ``folder`` is byte-identical to what it was before."""
    before = snapshot(folder)
    outcome = command()
    assert snapshot(folder) == before, f"{folder} was changed"
    return outcome


def edit_config(run_dir: Path, changes: dict[str, object]) -> None:
    """Set options (``section.name`` or a top-level key) in a finished run's saved ``config.yaml``, as someone
    editing a shared run would."""
    path = run_dir / "config.yaml"
    config = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        *sections, name = key.split(".")
        node = config
        for section in sections:
            node = node[section]
        node[name] = value
    path.write_text(yaml.safe_dump(config))


_TRAINED: dict[tuple[str, ...], Path] = {}


def trained(root: Path, name: str, *overrides: str) -> Path:
    """A finished tiny run (the default binary sawtooth MDLM unless overridden) copied to ``root/name``; each setup
    trains once."""
    if overrides not in _TRAINED:
        reg = registry.load()
        original = root / f".trained{len(_TRAINED)}"
        train(compose([*TINY, ONE_STAGE, *overrides], reg), original, reg)
        _TRAINED[overrides] = original
    run_dir = root / name
    shutil.copytree(_TRAINED[overrides], run_dir)
    return run_dir


def in_progress(root: Path, name: str) -> Path:
    """A run interrupted in its stage: a checkpoint but no final weights."""
    run_dir = trained(root, name, "train.checkpoint_every=1")
    (run_dir / "checkpoints" / "stage1" / "final.safetensors").unlink()
    (run_dir / "model.safetensors").unlink()
    return run_dir


def exported(root: Path, name: str) -> Path:
    run_dir = trained(root, f"{name}_run")
    assert ladd("export", str(run_dir), str(root / name)).code == 0
    return root / name


def text_overrides(root: Path) -> list[str]:
    """A character-level text setup over a local file (offline)."""
    corpus = root / "corpus.txt"
    if not corpus.exists():
        corpus.write_text("the cat sat on the mat\n\nthe dog ate the bone\n\n" * 20)
    return [
        "~experiment",
        "dataset=text",
        "dataset.tokenizer=text8",
        "dataset.seq_len=16",
        "dataset.progress=false",
        f"dataset.cache_dir={root / 'cache'}",
        f"dataset.source={corpus}",
        "metric=entropy",
        "+dataset.split_map={train: 'train', validation: 'train', test: 'train'}",
    ]


@contextlib.contextmanager
def user_cache(folder: Path) -> Iterator[None]:
    """``LADD_CACHE_DIR`` set to ``folder`` (the user's cache, where runs read back keep their token caches)."""
    before = os.environ.get("LADD_CACHE_DIR")
    os.environ["LADD_CACHE_DIR"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            del os.environ["LADD_CACHE_DIR"]
        else:
            os.environ["LADD_CACHE_DIR"] = before


def text_dataset(root: Path, **options: str) -> dict:
    """The text dataset's config node (as saved in run folders and exports), with ``options`` changed."""
    node = compose(text_overrides(root), registry.load()).plain()["dataset"]
    return {**node, **options}


def payload(root: Path) -> tuple[str, Path]:
    """A module on sys.path that would create a marker file when imported."""
    marker = root / "payload_ran"
    (root / "ladd_test_payload.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    sys.path.insert(0, str(root))
    return "ladd_test_payload", marker


def fake_distribution(root: Path, folder_name: str, metadata_name: str, entry_point: str) -> str:
    """An installed distribution whose entry point ``entry_point`` (group ``ladd``) would replace a built-in
    component."""
    root.mkdir(parents=True, exist_ok=True)
    module = f"{folder_name}_module"
    (root / f"{module}.py").write_text(
        textwrap.dedent("""
        from registry import ComponentSpec, hookimpl

        @hookimpl
        def ladd_components():
            return [ComponentSpec("schedule", "hijacked", "math:sqrt")]
    """)
    )
    info = root / f"{folder_name}-9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {metadata_name}\nVersion: 9.9\n")
    (info / "entry_points.txt").write_text(f"[ladd]\n{entry_point} = {module}\n")
    return str(root)


# ---------------------------------------------------------------- code execution and file writes from shared material


@case(
    "1a", "an exported model's config.json names `pkg:MODULE` as its tokenizer; loaded with `registry.from_pretrained`"
)
def shared_model_names_a_module(root: Path) -> Outcome:
    module, marker = payload(root)
    model = exported(root, "model")
    name_a_module(model, f"pkg:{module}", root)
    outcome = api(lambda: registry.from_pretrained(model))
    assert not marker.exists(), "the module named by the config was imported"
    return outcome


def name_a_module(model: Path, tokenizer: str, root: Path) -> None:
    """Edit an exported model into a text model whose tokenizer is ``tokenizer``, consistently in config and
    components."""
    document = json.loads((model / "config.json").read_text())
    document["config"]["dataset"] = text_dataset(root, tokenizer=tokenizer)
    document["components"]["dataset"]["name"] = "text"
    (model / "config.json").write_text(json.dumps(document))


@case("1b", "the same shared model sampled with `ladd sample --model`")
def shared_model_sampled(root: Path) -> Outcome:
    module, marker = payload(root)
    model = exported(root, "model")
    name_a_module(model, f"pkg:{module}", root)
    outcome = ladd("sample", "--model", str(model), "--steps", "2", "--num", "2", cwd=root)
    assert not marker.exists(), "the module named by the config was imported"
    return outcome


@case("1c", "a shared run folder whose config.yaml says `tokenizer: pkg:this` (the Zen of Python); `ladd sample RUN`")
def shared_run_names_a_module(root: Path) -> Outcome:
    run_dir = trained(root, "run")
    edit_config(run_dir, {"dataset": text_dataset(root, tokenizer="pkg:this")})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        outcome = ladd("sample", str(run_dir), "--steps", "2", "--num", "2", cwd=root)
    assert "Zen of Python" not in out.getvalue() and "Beautiful is better" not in outcome.message
    return outcome


@case("1d", "`ladd train dataset.tokenizer=pkg:MODULE` (a config naming a module to import)")
def train_names_a_module(root: Path) -> Outcome:
    module, marker = payload(root)
    outcome = ladd(
        "train", *TINY, ONE_STAGE, *text_overrides(root), f"dataset.tokenizer=pkg:{module}", f"run_dir={root / 'run'}"
    )
    assert not marker.exists() and not (root / "run").exists()
    return outcome


@case(
    "2a",
    "a shared model folder holds a link `samples_2steps.txt` to a file of the user's; `ladd sample --model` (default "
    "output)",
)
def planted_link_default_output(root: Path) -> Outcome:
    model = exported(root, "model")
    victim = root / "victim.txt"
    victim.write_text("precious")
    (model / "samples_2steps.txt").symlink_to(victim)
    work = root / "work"
    work.mkdir()
    outcome = ladd("sample", "--model", str(model), "--steps", "2", "--num", "2", cwd=work)
    assert outcome.code == 0 and victim.read_text() == "precious" and (work / "samples_2steps.txt").is_file()
    return Outcome(
        0,
        "samples go to the current folder (or --out); the model folder and the linked file are untouched",
        refused=False,
    )


@case("2b", "`ladd sample --out LINK` where LINK is a symbolic link to a file of the user's")
def planted_link_as_output(root: Path) -> Outcome:
    model = exported(root, "model")
    victim = root / "victim.txt"
    victim.write_text("precious")
    (root / "out.txt").symlink_to(victim)
    outcome = ladd("sample", "--model", str(model), "--steps", "2", "--num", "2", "--out", str(root / "out.txt"))
    assert victim.read_text() == "precious"
    return outcome


@case("2c", "a shared run folder holds a link `eval_mdlm.json` to a file of the user's; `ladd eval RUN`")
def planted_link_in_run(root: Path) -> Outcome:
    run_dir = trained(root, "run")
    victim = root / "victim.txt"
    victim.write_text("precious")
    (run_dir / "eval_mdlm.json").symlink_to(victim)
    outcome = ladd(
        "eval", str(run_dir), "--budgets", "1", "--num-samples", "4", "--batch-size", "4", "--loss-batches", "1"
    )
    assert victim.read_text() == "precious"
    return outcome


@case("2d", "a run folder holds a planted link (`logs/stage1/metrics.csv`) and training resumes into it")
def planted_link_resumed(root: Path) -> Outcome:
    run_dir = in_progress(root, "run")
    victim = root / "victim.txt"
    victim.write_text("precious")
    target = run_dir / "logs" / "stage1" / "metrics.csv"
    target.unlink()
    target.symlink_to(victim)
    before = snapshot(run_dir)
    outcome = ladd(
        "train", "experiment=binsaw/mdlm_cpu", *TINY, ONE_STAGE, "train.checkpoint_every=1", f"run_dir={run_dir}"
    )
    assert snapshot(run_dir) == before and victim.read_text() == "precious"
    return outcome


@case("3", "a preset sets Hydra's job logging to a `FileHandler` with `mode: w` on a file of the user's")
def preset_logging_handler(root: Path) -> Outcome:
    victim = root / "victim.txt"
    victim.write_text("precious")
    presets = root / "presets" / "experiment"
    presets.mkdir(parents=True)
    (presets / "evil.yaml").write_text(
        textwrap.dedent(f"""
        # @package _global_
        defaults:
          - binsaw/mdlm_cpu
        hydra:
          job_logging:
            version: 1
            handlers:
              file: {{class: logging.FileHandler, filename: {victim}, mode: w}}
            root: {{handlers: [file], level: INFO}}
          callbacks:
            evil: {{_target_: os.system, command: "touch {root / "callback_ran"}"}}
    """)
    )
    outcome = ladd(
        "train",
        f"hydra.searchpath=[file://{root / 'presets'}]",
        "experiment=evil",
        *TINY,
        ONE_STAGE,
        f"run_dir={root / 'run'}",
    )
    assert outcome.code == 0, outcome.message
    assert (
        victim.read_text() == "precious"
        and not (root / "callback_ran").exists()
        and not (root / "run" / ".hydra").exists()
    )
    return Outcome(
        0, "trains; ladd runs none of Hydra's runtime, so the handler and callback are never created", refused=False
    )


@case(
    "4a",
    "a preset reads a secret with `${oc.env:SECRET}` (it would be saved into config.yaml, config.json and the card)",
)
def preset_reads_secret(root: Path) -> Outcome:
    presets = root / "presets" / "experiment"
    presets.mkdir(parents=True)
    (presets / "leaky.yaml").write_text(
        "# @package _global_\ndefaults:\n  - binsaw/mdlm_cpu\nmethod: ${oc.env:LADD_TEST_SECRET}\n"
    )
    os.environ["LADD_TEST_SECRET"] = "hunter2"
    try:
        outcome = ladd(
            "train",
            f"hydra.searchpath=[file://{root / 'presets'}]",
            "experiment=leaky",
            *TINY,
            f"run_dir={root / 'run'}",
        )
    finally:
        del os.environ["LADD_TEST_SECRET"]
    assert not (root / "run").exists() and "hunter2" not in outcome.message
    return outcome


@case("4b", "`ladd export` of a run trained at an absolute `run_dir` (and with absolute data paths)")
def export_absolute_paths(root: Path) -> Outcome:
    run_dir = trained(root, "run")
    outcome = ladd("export", str(run_dir), str(root / "model"))
    assert outcome.code == 0, outcome.message
    shared = (root / "model" / "config.json").read_text() + (root / "model" / "README.md").read_text()
    run_dir_field = json.loads((root / "model" / "config.json").read_text())["config"]["run_dir"]
    assert str(root) not in shared and not run_dir_field.startswith("/")
    return Outcome(
        0,
        "exports; absolute local paths are cut to their last part (run_dir keeps only the run folder's name)",
        refused=False,
    )


@case(
    "5a",
    "a third-party distribution calling itself `ladd` (METADATA `Name: ladd`) with `LADD_DISABLE_PLUGIN_AUTOLOAD=1`",
)
def fake_ladd_distribution(root: Path) -> Outcome:
    path = fake_distribution(root / "site", "evil_dist", "ladd", "evil")
    env = {**os.environ, "PYTHONPATH": path, "LADD_DISABLE_PLUGIN_AUTOLOAD": "1"}
    shown = subprocess.run([sys.executable, "-m", "registry.cli", "plugins"], capture_output=True, text=True, env=env)
    line = next(row for row in shown.stdout.splitlines() if row.startswith("evil "))
    assert shown.returncode == 0 and "BLOCKED: autoloading disabled" in line and "builtin" in shown.stdout
    return Outcome(0, f"not loaded: `ladd plugins` shows `{' '.join(line.split()[3:])}`", refused=False)


@case("5b", "a third-party entry point named `builtin` (with `LADD_PLUGINS_ALLOW=other`, then with no control set)")
def entry_point_named_builtin(root: Path) -> Outcome:
    path = fake_distribution(root / "site", "evil_dist", "evil", "builtin")
    env = {**os.environ, "PYTHONPATH": path}
    allowed = subprocess.run(
        [sys.executable, "-m", "registry.cli", "list-components", "--kind", "schedule"],
        capture_output=True,
        text=True,
        env={**env, "LADD_PLUGINS_ALLOW": "other"},
    )
    assert "hijacked" not in allowed.stdout and "linear" in allowed.stdout
    unset = subprocess.run(
        [sys.executable, "-m", "registry.cli", "list-components", "--kind", "schedule"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert "hijacked" not in unset.stdout and "linear" in unset.stdout, "the built-ins were replaced"
    return Outcome(0, f"built-ins stay; reported: `{unset.stderr.strip().splitlines()[-1]}`", refused=False)


@case("5c", "`LADD_DISABLE_PLUGIN_AUTOLOAD=maybe` (a value ladd does not understand)")
def unknown_switch_value(root: Path) -> Outcome:
    return ladd_process("list-components", env={"LADD_DISABLE_PLUGIN_AUTOLOAD": "maybe"})


@case("6", "a tokenizer folder with its own Python code (`auto_map`), which transformers would offer to run")
def tokenizer_with_code(root: Path) -> Outcome:
    folder, marker = code_folder(root)
    outcome = ladd(
        "train", *TINY, ONE_STAGE, *text_overrides(root), f"dataset.tokenizer={folder}", f"run_dir={root / 'run'}"
    )
    assert not marker.exists() and not (root / "run").exists()
    return outcome


def code_folder(root: Path) -> tuple[Path, Path]:
    """A model and tokenizer folder that ships code creating a marker file when run."""
    folder, marker = root / "remote_code", root / "remote_code_ran"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"auto_map": {"AutoTokenizer": ["payload.Tokenizer", None]}})
    )
    (folder / "config.json").write_text(
        json.dumps(
            {"model_type": "payload", "auto_map": {"AutoModel": "payload.Model", "AutoConfig": "payload.Config"}}
        )
    )
    (folder / "payload.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    return folder, marker


# ---------------------------------------------------------------- run folders overwritten or mixed


@case("7a", "training a finished run again with another lr and seed")
def retrain_finished(root: Path) -> Outcome:
    run_dir = trained(root, "run")
    before = snapshot(run_dir)
    outcome = ladd(
        "train", "experiment=binsaw/mdlm_cpu", *TINY, ONE_STAGE, "train.lr=3e-3", "seed=7", f"run_dir={run_dir}"
    )
    assert snapshot(run_dir) == before
    return outcome


@case("7b", "training a finished run again with another architecture")
def retrain_other_architecture(root: Path) -> Outcome:
    run_dir = trained(root, "run")
    before = snapshot(run_dir)
    outcome = ladd("train", "experiment=binsaw/mdlm_cpu", *TINY, ONE_STAGE, "backbone.hidden=32", f"run_dir={run_dir}")
    assert (
        snapshot(run_dir) == before and ladd("sample", str(run_dir), "--steps", "2", "--num", "2", cwd=root).code == 0
    )
    return outcome


@case("7c", "resuming a run in progress with another lr and batch size")
def resume_with_changes(root: Path) -> Outcome:
    run_dir = in_progress(root, "run")
    before = snapshot(run_dir)
    changed = [
        "experiment=binsaw/mdlm_cpu",
        *TINY,
        ONE_STAGE,
        "train.checkpoint_every=1",
        "train.lr=3e-3",
        "train.batch_size=8",
    ]
    outcome = ladd("train", *changed, f"run_dir={run_dir}")
    assert snapshot(run_dir) == before
    accepted = ladd("train", "--allow-changes", *changed, f"run_dir={run_dir}")
    assert accepted.code == 0, accepted.message
    recorded = json.loads((run_dir / "run.json").read_text())["changes"][-1]["changes"]
    assert recorded == ["train.batch_size: 16 -> 8", "train.lr: 0.001 -> 0.003"], recorded
    return outcome


@case("7d", "a `run_dir` that is not a run: a folder of the user's with config.yaml, metrics.csv, model.safetensors")
def foreign_folder(root: Path) -> Outcome:
    names = ("config.yaml", "metrics.csv", "model.safetensors")
    return train_into_users_folder(root, {name: f"my own {name}\n" for name in names})


def train_into_users_folder(root: Path, files: dict[str, str]) -> Outcome:
    """``ladd train`` into a folder of the user's holding ``files`` (name -> text), which must stay as they were."""
    folder = root / "mine"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return unchanged(folder, lambda: ladd("train", *TINY, ONE_STAGE, f"run_dir={folder}"))


@case("7e", "two `ladd train` processes on one run folder at the same time")
def concurrent_trainings(root: Path) -> Outcome:
    run_dir = root / "run"
    args = ["train", "experiment=binsaw/mdlm_cpu", *TINY, "train.stages=[{steps:60}]", f"run_dir={run_dir}"]
    first = subprocess.Popen(
        [sys.executable, "-m", "registry.cli", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while not (run_dir / "run.json").exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    second = ladd(*args)
    _, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr
    steps = [line.split(",")[:2] for line in (run_dir / "metrics.csv").read_text().splitlines()[1:]]
    assert len(steps) == len(set(map(tuple, steps))) == 60, "a step was logged twice"
    return second


@case("7f", "`ladd export RUN FOLDER` into a folder that already holds files")
def export_over_files(root: Path) -> Outcome:
    run_dir = trained(root, "run")
    folder = root / "mine"
    folder.mkdir()
    (folder / "config.json").write_text("my own config\n")
    before = snapshot(folder)
    outcome = ladd("export", str(run_dir), str(folder))
    assert snapshot(folder) == before
    overwritten = ladd("export", "--overwrite", str(run_dir), str(folder))
    assert overwritten.code == 2, "--overwrite replaced a file of the user's"
    assert snapshot(folder) == before
    model = exported(root, "model")
    assert ladd("export", "--overwrite", str(run_dir), str(model)).code == 0, "--overwrite refused an earlier export"
    return outcome


@case("7g", "a config refused at assembly (`sampler=joint` without a latent) in a new run folder")
def refused_config_writes_nothing(root: Path) -> Outcome:
    outcome = ladd("train", *TINY, ONE_STAGE, "sampler=joint", f"run_dir={root / 'run'}")
    assert not (root / "run").exists()
    return outcome


# ---------------------------------------------------------------- corruption


@case("8a", "64 bytes overwritten inside `last.ckpt`'s tensor data, then training resumes")
def bit_rot_checkpoint(root: Path) -> Outcome:
    run_dir = in_progress(root, "run")
    last = run_dir / "checkpoints" / "stage1" / "last.ckpt"
    overwrite_tensor_data(last)
    before = snapshot(run_dir)
    outcome = ladd(
        "train", "experiment=binsaw/mdlm_cpu", *TINY, ONE_STAGE, "train.checkpoint_every=1", f"run_dir={run_dir}"
    )
    assert snapshot(run_dir) == before
    return outcome


def overwrite_tensor_data(checkpoint: Path) -> None:
    """Flip every bit of 64 bytes in the middle of the largest tensor record of a torch checkpoint (a zip archive)."""
    with zipfile.ZipFile(checkpoint) as archive:
        record = max(archive.infolist(), key=lambda info: info.file_size)
    data = bytearray(checkpoint.read_bytes())
    name_length, extra_length = struct.unpack("<HH", data[record.header_offset + 26 : record.header_offset + 30])
    middle = record.header_offset + 30 + name_length + extra_length + record.file_size // 2
    data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    checkpoint.write_bytes(bytes(data))


@case("8b", "64 bytes overwritten inside a run's `model.safetensors`, then `ladd sample RUN`")
def bit_rot_weights(root: Path) -> Outcome:
    run_dir = trained(root, "run")
    weights = run_dir / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-200:-136] = bytes(b ^ 0xFF for b in data[-200:-136])
    weights.write_bytes(bytes(data))
    return ladd("sample", str(run_dir), "--steps", "2", "--num", "2", cwd=root)


@case("8c", "an exported model whose weights were converted to float16")
def weights_of_another_dtype(root: Path) -> Outcome:
    model = exported(root, "model")
    tensors = {
        name: tensor.half() if tensor.is_floating_point() else tensor
        for name, tensor in load_file(model / "model.safetensors").items()
    }
    save_file(tensors, model / "model.safetensors")
    return api(lambda: registry.from_pretrained(model))


@case("8d", "an exported model whose weights were converted to int64")
def weights_of_another_integer_dtype(root: Path) -> Outcome:
    model = exported(root, "model")
    tensors = {name: tensor.to(torch.int64) for name, tensor in load_file(model / "model.safetensors").items()}
    save_file(tensors, model / "model.safetensors")
    return api(lambda: registry.from_pretrained(model))


# ---------------------------------------------------------------- values: one clear line each


def _refused_value(*overrides: str) -> Callable[[Path], Outcome]:
    def run(root: Path) -> Outcome:
        outcome = ladd("train", *TINY, ONE_STAGE, *overrides, f"run_dir={root / 'run'}")
        assert not (root / "run").exists(), "a refused config wrote into its run folder"
        return outcome

    return run


for _number, _title, _overrides in [
    ("9a", "a stage of zero steps", ["train.stages=[{steps:0}]"]),
    ("9b", "a stage of negative steps", ["train.stages=[{steps:-5}]"]),
    ("9c", "`trainer.max_steps=-1` (Lightning: train forever)", ["trainer.max_steps=-1"]),
    ("9d", "`train.stages=[]` (no training at all)", ["train.stages=[]"]),
    ("9e", "`+foo=1` (an unknown key added with +)", ["+foo=1"]),
    ("9f", "`train.batch_size=0`", ["train.batch_size=0"]),
    ("9g", "`backbone.layers=0`", ["backbone.layers=0"]),
    ("9h", "`backbone.hidden=0`", ["backbone.hidden=0"]),
    ("9i", "`train.lr=-1`", ["train.lr=-1"]),
    ("9j", "`train.lr=nan`", ["train.lr=nan"]),
    ("9k", "`train.ema_decay=2`", ["train.ema_decay=2"]),
    ("9l", "`train.betas=[0.9,1.5]`", ["train.betas=[0.9,1.5]"]),
    ("9m", "`backbone.dropout=1.5`", ["backbone.dropout=1.5"]),
    ("9n", "`backbone.heads=5` with hidden 64 (heads must divide hidden)", ["backbone.heads=5"]),
    ("9o", "`train.precision=fp8` (an unknown precision)", ["train.precision=fp8"]),
    ("9p", "`train.devices=0`", ["train.devices=0"]),
    ("9q", "`train.checkpoint_every=0`", ["train.checkpoint_every=0"]),
    ("9r", "`dataset.seq_len=1000000` (cannot fit in memory)", ["dataset.seq_len=1000000"]),
]:
    case(_number, _title)(_refused_value(*_overrides))


@case("9s", "`ladd sample RUN --steps 0`")
def sample_zero_steps(root: Path) -> Outcome:
    return ladd("sample", str(root), "--steps", "0")


@case("9t", "`ladd sample RUN --batch-size 0`")
def sample_zero_batch(root: Path) -> Outcome:
    return ladd("sample", str(root), "--batch-size", "0")


@case("9u", "`ladd sample RUN --num -1`")
def sample_negative_count(root: Path) -> Outcome:
    return ladd("sample", str(root), "--num", "-1")


# ---------------------------------------------------------------- the machine: disk, permissions


@case("10a", "the disk fills up while training (writes past 200 kB fail)")
def disk_full(root: Path) -> Outcome:
    run_dir = root / "run"
    outcome = ladd_process("train", *TINY, ONE_STAGE, f"run_dir={run_dir}", limit_file_size=200_000)
    assert not [p for p in run_dir.rglob("*") if p.name.endswith(".partial")], "a partial file was left behind"
    return outcome


@case("10b", "a run folder that cannot be created (its parent is a file)")
def unwritable_run_folder(root: Path) -> Outcome:
    (root / "file").write_text("not a folder\n")
    return ladd("train", *TINY, ONE_STAGE, f"run_dir={root / 'file' / 'run'}")


# ---------------------------------------------------------------- data


def _text_refusal(write: Callable[[Path], Path]) -> Callable[[Path], Outcome]:
    def run(root: Path) -> Outcome:
        source = write(root)
        overrides = [o for o in text_overrides(root) if not o.startswith("dataset.source=")]
        outcome = ladd("train", *TINY, ONE_STAGE, *overrides, f"dataset.source={source}", f"run_dir={root / 'run'}")
        assert not (root / "run").exists()
        return outcome

    return run


def _latin1(root: Path) -> Path:
    (root / "latin1.txt").write_bytes("the cat sat\n\ncaf\u00e9 au lait\n".encode("latin-1"))
    return root / "latin1.txt"


def _bad_jsonl(root: Path) -> Path:
    (root / "data.jsonl").write_text('{"text": "the cat"}\n{"text": "the dog"\n')
    return root / "data.jsonl"


def _bad_parquet(root: Path) -> Path:
    (root / "data.parquet").write_bytes(b"PAR1 this is not parquet")
    return root / "data.parquet"


def _device(root: Path) -> Path:
    (root / "zero.txt").symlink_to("/dev/zero")
    return root / "zero.txt"


case("11a", "a `.txt` corpus that is not UTF-8 (Latin-1)")(_text_refusal(_latin1))
case("11b", "a `.jsonl` corpus with a malformed line")(_text_refusal(_bad_jsonl))
case("11c", "a `.parquet` file that is not parquet")(_text_refusal(_bad_parquet))
case("11d", "a `.txt` corpus that is a link to a device (`/dev/zero`)")(_text_refusal(_device))


@case("11e", "a token cache entry whose tokens.bin was truncated; `ladd eval RUN`")
def damaged_token_cache(root: Path) -> Outcome:
    run_dir = trained(root, "run", *text_overrides(root))
    evaluation = ["eval", str(run_dir), *SMALL_EVAL]
    with user_cache(root / "user_cache"):
        assert ladd(*evaluation).code == 0  # tokenises into the user's cache
        for tokens in (root / "user_cache").rglob("tokens.bin"):
            tokens.write_bytes(tokens.read_bytes()[:10])
        return ladd(*evaluation)


@case("11f", "held-out data with token ids outside the vocabulary (`evaluation.token_loss`)")
def held_out_out_of_vocabulary(root: Path) -> Outcome:
    experiment, _ = load_run(trained(root, "run"), registry.load())
    batches = experiment.dataset.batches

    def poisoned(batch_size: int, seed: int, split: str = "train"):
        for batch in batches(batch_size, seed, split):
            yield batch.fill_(7) if split == "validation" else batch

    experiment.dataset.batches = poisoned
    return api(lambda: token_loss(experiment, 1, 4, 0))


@case("11g", "a prompt containing the mask token's text (`--prompt 'the <|mask|>'`, GPT-2 BPE)")
def prompt_with_mask_text(root: Path) -> Outcome:
    run_dir = trained(root, "run", *text_overrides(root), "dataset.tokenizer=gpt2-bpe")
    experiment, _ = load_run(run_dir, registry.load())
    from registry.engine.prompts import fixed_tokens

    fixed = fixed_tokens(experiment.dataset, 1, "the <|mask|>")[0]
    prompt = fixed[fixed != experiment.dataset.vocab_size].tolist()
    assert fixed[: len(prompt)].tolist() == prompt, "the mask token's text became a mask"
    assert experiment.dataset.tokenizer.decode(prompt) == "the <|mask|>"
    return Outcome(
        0,
        "the text is read as plain text, as in training data (its tokens decode to the text typed); "
        "no position becomes a mask",
        refused=False,
    )


# ---------------------------------------------------------------- damaged or edited shared files


def _chat_refusal(write: Callable[[Path], Path]) -> Callable[[Path], Outcome]:
    def run(root: Path) -> Outcome:
        source = write(root)
        outcome = ladd("train", "experiment=llada/sft_cpu", *TINY, ONE_STAGE, f"dataset.source={source}",
                       f"dataset.cache_dir={root / 'cache'}", f"run_dir={root / 'run'}")
        assert not (root / "run").exists() and not list((root / "cache").rglob("*.npy"))
        return outcome

    return run


def _chat_latin1(root: Path) -> Path:
    rows = ['{"prompt": "what is one?", "response": "one."}'] * 19 + ['{"prompt": "caf\u00e9?", "response": "yes."}']
    (root / "chats.jsonl").write_bytes("\n".join(rows).encode("latin-1") + b"\n")
    return root / "chats.jsonl"


def _chat_device(root: Path) -> Path:
    (root / "chats.jsonl").symlink_to("/dev/zero")
    return root / "chats.jsonl"


def _chat_held_out_without_response(root: Path) -> Path:
    rows = ['{"prompt": "what is one?", "response": "one."}'] * 19 + ['{"prompt": "what is two?"}']
    (root / "chats.jsonl").write_text("\n".join(rows) + "\n")
    return root / "chats.jsonl"


case("11h", "a chat `.jsonl` (`dataset=chat`) holding a Latin-1 byte")(_chat_refusal(_chat_latin1))
case("11i", "a chat `.jsonl` that is a link to a device (`/dev/zero`)")(_chat_refusal(_chat_device))
case("11j", "a chat `.jsonl` whose last row, in the held-out slice, has no response")(
    _chat_refusal(_chat_held_out_without_response)
)


@case("12a", "an exported model whose `model.safetensors` header is damaged")
def damaged_header(root: Path) -> Outcome:
    model = exported(root, "model")
    data = bytearray((model / "model.safetensors").read_bytes())
    data[8:40] = b"#" * 32
    (model / "model.safetensors").write_bytes(bytes(data))
    return ladd("sample", "--model", str(model), "--steps", "2", "--num", "2", cwd=root)


@case("12b", "an exported model whose `config.json` is not JSON")
def config_not_json(root: Path) -> Outcome:
    model = exported(root, "model")
    (model / "config.json").write_text("{not json")
    return ladd("sample", "--model", str(model), "--steps", "2", "--num", "2", cwd=root)


@case("12c", "an exported model whose `config.json` lacks `components`")
def config_without_components(root: Path) -> Outcome:
    model = exported(root, "model")
    document = json.loads((model / "config.json").read_text())
    del document["components"]
    (model / "config.json").write_text(json.dumps(document))
    return ladd("sample", "--model", str(model), "--steps", "2", "--num", "2", cwd=root)


@case("12d", "an exported model whose `components` contradict its `config` (another backbone)")
def components_contradict_config(root: Path) -> Outcome:
    model = exported(root, "model")
    document = json.loads((model / "config.json").read_text())
    document["components"]["backbone"]["name"] = "mmdit"
    (model / "config.json").write_text(json.dumps(document))
    return ladd("sample", "--model", str(model), "--steps", "2", "--num", "2", cwd=root)


@case("12e", "a run in progress whose `metrics.csv` was replaced by a file of other columns")
def foreign_metrics(root: Path) -> Outcome:
    run_dir = in_progress(root, "run")
    (run_dir / "metrics.csv").write_text("epoch,accuracy\n1,0.5\n")
    return ladd(
        "train", "experiment=binsaw/mdlm_cpu", *TINY, ONE_STAGE, "train.checkpoint_every=1", f"run_dir={run_dir}"
    )


@case(
    "12f",
    "a finished run whose `config.yaml` sets an option this ladd lacks (saved by another version); `ladd sample RUN`, "
    "and exported or warm-started from",
)
def saved_option_unknown_here(root: Path) -> Outcome:
    run_dir = trained(root, "run")
    edit_config(run_dir, {"train.curriculum": "easy-first"})
    named = f"{run_dir / 'config.yaml'}: train.curriculum: no such option"
    warm = ladd("train", *TINY, ONE_STAGE, f"train.init_from={run_dir}", f"run_dir={root / 'warm'}", cwd=root)
    assert warm.code == 2 and f"train.init_from={run_dir}: train.curriculum: no such" in warm.message, warm.message
    exported = ladd("export", str(run_dir), str(root / "model"), cwd=root)
    assert exported.code == 2 and named in exported.message, exported.message
    outcome = ladd("sample", str(run_dir), "--steps", "2", "--num", "2", cwd=root)
    assert named in outcome.message, outcome.message
    return outcome


# ---------------------------------------------------------------- hostile input: shared runs, exports, outputs


@case("13a", "a `run_dir` holding only a file of the user's named `.notes.partial`")
def users_partial_file(root: Path) -> Outcome:
    return train_into_users_folder(root, {".notes.partial": "my notes\n"})


@case("13b", "`ladd sample --out FIFO` (a named pipe)")
def sample_into_fifo(root: Path) -> Outcome:
    run_dir = trained(root, "run")
    os.mkfifo(root / "pipe")
    outcome = ladd("sample", str(run_dir), "--steps", "2", "--num", "2", "--out", str(root / "pipe"))
    assert stat.S_ISFIFO((root / "pipe").stat().st_mode)
    return outcome


@case("13c", "`ladd export RUN_A RUN_B --overwrite` where RUN_B is another finished run")
def export_over_a_run(root: Path) -> Outcome:
    run_a, run_b = trained(root, "run_a"), trained(root, "run_b")
    outcome = unchanged(run_b, lambda: ladd("export", str(run_a), str(run_b), "--overwrite"))
    assert ladd("sample", str(run_b), "--steps", "2", "--num", "2", cwd=root).code == 0
    return outcome


@case("13d", "`ladd export --overwrite` into a folder holding an export and a file of the user's")
def export_over_foreign_files(root: Path) -> Outcome:
    model = exported(root, "model")
    (model / "notes.txt").write_text("my notes\n")
    return unchanged(model, lambda: ladd("export", str(trained(root, "run")), str(model), "--overwrite"))


@case("13e", "the disk fills up while `ladd export --overwrite` replaces an earlier export (writes past 200 kB fail)")
def disk_full_during_export(root: Path) -> Outcome:
    model, other = exported(root, "model"), trained(root, "other", "seed=1")
    export = ["export", str(other), str(model), "--overwrite"]
    return unchanged(model, lambda: ladd_process(*export, limit_file_size=200_000))


@case("13f", "a shared run's config.yaml says `method: x/../../victim/settings`; `ladd eval RUN`")
def method_as_path(root: Path) -> Outcome:
    run_dir = trained(root, "run")
    edit_config(run_dir, {"method": "x/../../victim/settings"})
    outcome = ladd("eval", str(run_dir), *SMALL_EVAL)
    assert not (root / "victim").exists()
    return outcome


@case("13g", "a shared eval result whose `metric` is `../victim/settings`; `ladd report`")
def metric_as_path(root: Path) -> Outcome:
    result = {
        "method": "m",
        "metric": "../victim/settings",
        "token_loss": 1.0,
        "scores": [{"steps": 1, "network_calls": 1, "scores": {"../victim/settings": 0.5}}],
    }
    (root / "eval_m.json").write_text(json.dumps(result))
    outcome = ladd("report", str(root / "eval_m.json"), "--out", str(root / "out"))
    assert not (root / "victim").exists() and not (root / "out").exists()
    return outcome


@case("13h", "a shared run's config names a local file as its corpus and a token cache inside the run; `ladd eval RUN`")
def corpus_and_cache_from_a_shared_config(root: Path) -> Outcome:
    run_dir = trained(root, "run", *text_overrides(root))
    (root / "secret.txt").write_text("the secret is in the cat\n\n" * 20)
    edit_config(run_dir, {"dataset.source": str(root / "secret.txt"), "dataset.cache_dir": str(run_dir / "stolen")})
    with user_cache(root / "user_cache"):
        outcome = ladd("eval", str(run_dir), *SMALL_EVAL)
    assert outcome.code == 0, outcome.message
    assert not (run_dir / "stolen").exists(), "a cache was written where the shared config chose"
    assert list((root / "user_cache").rglob("tokens.bin")), "the corpus was not tokenised into the user's cache"
    return Outcome(
        0,
        "evaluates; the corpus is tokenised into the user's own cache folder (`LADD_CACHE_DIR`, "
        "default ~/.cache/ladd), never at the `cache_dir` a saved config names",
        refused=False,
    )


def _sampled_after(edit: Callable[[Path], None]) -> Callable[[Path], Outcome]:
    """A case: a run whose folder ``edit`` damaged, sampled with ``ladd sample RUN``."""

    def run(root: Path) -> Outcome:
        run_dir = trained(root, "run")
        edit(run_dir)
        return ladd("sample", str(run_dir), "--steps", "2", "--num", "2", cwd=root)

    return run


def _components(entries: object) -> Callable[[Path], None]:
    return lambda run_dir: (run_dir / "components.json").write_text(json.dumps(entries))


def _without_distribution(run_dir: Path) -> None:
    components = json.loads((run_dir / "components.json").read_text())
    del components["backbone"]["distribution"]
    _components(components)(run_dir)


def _hostile_distribution(run_dir: Path) -> None:
    components = json.loads((run_dir / "components.json").read_text())
    components["backbone"].update(name="fancy", distribution="x'; touch pwned; echo '", version="1.0")
    _components(components)(run_dir)


def _alias_bomb(run_dir: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    (run_dir / "config.yaml").write_text("\n".join(lines) + "\n")


def _huge_sequences(run_dir: Path) -> None:
    edit_config(run_dir, {"dataset.seq_len": 10**9})


for _number, _title, _edit in [
    (
        "13i",
        "a shared run's `components.json` names a missing plugin whose distribution is shell text",
        _hostile_distribution,
    ),
    ("13j", "a run's `components.json` is not JSON", lambda run: (run / "components.json").write_text("{not json")),
    ("13k", "a run's `components.json` is a list", _components([1, 2])),
    ("13l", "a run's `components.json` entry without `distribution`", _without_distribution),
    ("13m", "a run's `config.yaml` is a YAML alias bomb (10 lines that expand to 10^10 values)", _alias_bomb),
]:
    case(_number, _title)(_sampled_after(_edit))


@case("13n", "a shared run's `config.yaml` says `dataset.seq_len: 1000000000`; `ladd sample RUN`")
def huge_sequences(root: Path) -> Outcome:
    run_dir = trained(root, "run")
    _huge_sequences(run_dir)
    return ladd_process(
        "sample",
        str(run_dir),
        "--steps",
        "2",
        "--num",
        "2",
        "--out",
        str(root / "out.txt"),
        limit_memory=BOUNDED_MEMORY,
    )


@case("13o", "a run in progress whose `run.json` `changes` is not a list; `ladd train --allow-changes`")
def changes_not_a_list(root: Path) -> Outcome:
    run_dir = in_progress(root, "run")
    record = json.loads((run_dir / "run.json").read_text())
    record["changes"] = {"train.lr": "0.003"}
    (run_dir / "run.json").write_text(json.dumps(record))
    changed = ["experiment=binsaw/mdlm_cpu", *TINY, ONE_STAGE, "train.checkpoint_every=1", "train.lr=3e-3"]
    return unchanged(run_dir, lambda: ladd("train", "--allow-changes", *changed, f"run_dir={run_dir}"))


@case("13p", "a run in progress whose `last.ckpt` holds no `state_dict`")
def checkpoint_without_state(root: Path) -> Outcome:
    run_dir = in_progress(root, "run")
    torch.save({"epoch": 0, "global_step": 1}, run_dir / "checkpoints" / "stage1" / "last.ckpt")
    resume = ["experiment=binsaw/mdlm_cpu", *TINY, ONE_STAGE, "train.checkpoint_every=1", f"run_dir={run_dir}"]
    return unchanged(run_dir, lambda: ladd("train", *resume))


def _sampled_export_after(edit: Callable[[Path], None]) -> Callable[[Path], Outcome]:
    """A case: an export that ``edit`` damaged, sampled with ``ladd sample --model``."""

    def run(root: Path) -> Outcome:
        model = exported(root, "model")
        edit(model)
        return ladd("sample", "--model", str(model), "--steps", "2", "--num", "2", cwd=root)

    return run


def _weights_edited(change: Callable[[dict[str, torch.Tensor]], None]) -> Callable[[Path], None]:
    def edit(model: Path) -> None:
        tensors = load_file(model / "model.safetensors")
        change(tensors)
        save_file(tensors, model / "model.safetensors")

    return edit


def _nan(tensors: dict[str, torch.Tensor]) -> None:
    tensors["backbone.embed.weight"][1, 2] = float("nan")


def _inf(tensors: dict[str, torch.Tensor]) -> None:
    tensors["backbone.final.adaln.proj.bias"][0] = float("inf")


def swap_offsets(weights: Path) -> tuple[str, str]:
    """Swap the data offsets of two tensors of one dtype and shape in a safetensors header (the data stays)."""
    data = bytearray(weights.read_bytes())
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    by_layout: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    for name, entry in header.items():
        if name != "__metadata__":
            by_layout.setdefault((entry["dtype"], tuple(entry["shape"])), []).append(name)
    first, second = next(names for names in by_layout.values() if len(names) > 1)[:2]
    offsets = header[first]["data_offsets"], header[second]["data_offsets"]
    header[second]["data_offsets"], header[first]["data_offsets"] = offsets
    data[8 : 8 + length] = json.dumps(header, separators=(",", ":")).encode().ljust(length)
    weights.write_bytes(bytes(data))
    return first, second


for _number, _title, _edit in [
    ("13q", "an exported model whose weights hold a NaN", _weights_edited(_nan)),
    ("13r", "an exported model whose weights hold an infinity", _weights_edited(_inf)),
    (
        "13s",
        "an exported model whose header swaps the offsets of two tensors of one shape",
        lambda model: swap_offsets(model / "model.safetensors"),
    ),
    (
        "13t",
        "an exported model whose weights lack a tensor",
        _weights_edited(lambda tensors: tensors.pop("backbone.embed.weight")),
    ),
    (
        "13u",
        "an exported model whose `config.json` is JSON nested 100,000 deep",
        lambda model: (model / "config.json").write_text("[" * 10**5 + "]" * 10**5),
    ),
]:
    case(_number, _title)(_sampled_export_after(_edit))


@case("13v", "an exported model whose weights hold a NaN, loaded with `registry.from_pretrained`")
def nan_weights_from_python(root: Path) -> Outcome:
    model = exported(root, "model")
    _weights_edited(_nan)(model)
    return api(lambda: registry.from_pretrained(model))


for _number, _title, _arguments in [
    ("13w", "`ladd sample RUN --steps 1000000000` (runs for months)", ["--steps", "1000000000"]),
    (
        "13x",
        "`ladd sample RUN --num 1000000000` (the samples alone need more memory than there is)",
        ["--num", "1000000000"],
    ),
    ("13y", "`ladd sample RUN --seed -1`", ["--seed", "-1"]),
    ("13z", "`ladd sample RUN --seed 2**64`", ["--seed", str(2**64)]),
]:
    case(_number, _title)(
        lambda root, given=_arguments: ladd_process(
            "sample", str(trained(root, "run")), *given, "--out", str(root / "out.txt"), limit_memory=BOUNDED_MEMORY
        )
    )

case("14a", "`train.batch_size=1000000000000` (the first batch alone cannot be allocated)")(
    _refused_value("train.batch_size=1000000000000")
)
case("14e", "`eval.seed=-1` (a seed no random generator takes)")(_refused_value("eval.seed=-1"))


@case("14b", "a sweep (`-m`) whose second job has a bad value (`train.lr=1e-3,-1`)")
def sweep_with_a_bad_job(root: Path) -> Outcome:
    outcome = ladd("train", "-m", *TINY, ONE_STAGE, "train.lr=1e-3,-1", f"run_dir={root / 'sweep'}")
    assert not (root / "sweep").exists(), "a job trained before the bad one was found"
    return outcome


@case("14c", "a sweep (`-m`) whose second job has a component option its component refuses (`backbone.heads=4,5`)")
def sweep_with_a_bad_option(root: Path) -> Outcome:
    outcome = ladd("train", "-m", *TINY, ONE_STAGE, "backbone.heads=4,5", f"run_dir={root / 'sweep'}")
    assert not (root / "sweep").exists(), "a job trained before the bad one was found"
    return outcome


@case("14d", "a prompt with characters the tokenizer does not know (`--prompt 'the café'` with text8's alphabet)")
def prompt_outside_the_tokenizer(root: Path) -> Outcome:
    run_dir = trained(root, "run", *text_overrides(root))
    return ladd("sample", str(run_dir), "--steps", "2", "--num", "2", "--prompt", "the café", cwd=root)


# ---------------------------------------------------------------- weights from elsewhere: imports and warm starts


def mdlm_source(root: Path, **changes: object) -> Path:
    """A tiny checkpoint in MDLM's published layout (random weights), its config changed by ``changes``."""
    from mdlm_reference import write_checkpoint

    folder = root / "mdlm"
    write_checkpoint(folder, hidden=16, blocks=1, heads=2, cond=8, time_conditioning=False, length=16)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    return folder


@case(
    "15a",
    "`ladd import mdlm` of a folder whose config asks to run its own code (`auto_map`, as the published one does)",
)
def mdlm_source_with_code(root: Path) -> Outcome:
    marker = root / "ran"
    source = mdlm_source(root, auto_map={"AutoConfig": "payload.Config", "AutoModel": "payload.Model"})
    (source / "payload.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    outcome = ladd("import", "mdlm", str(source), str(root / "out"))
    assert outcome.code == 0, outcome.message
    assert not marker.exists() and (root / "out" / "model.safetensors").is_file()
    return Outcome(
        0, "imports the config's sizes and the tensors; the folder's Python code is never imported", refused=False
    )


@case("15b", "`ladd import mdlm` of a checkpoint whose `model.safetensors` is cut short")
def mdlm_source_truncated(root: Path) -> Outcome:
    source = mdlm_source(root)
    weights = source / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    outcome = ladd("import", "mdlm", str(source), str(root / "out"))
    assert not (root / "out").exists()
    return outcome


@case("15c", "`ladd import mdlm` of a checkpoint whose config gives other sizes than its tensors")
def mdlm_source_other_sizes(root: Path) -> Outcome:
    outcome = ladd("import", "mdlm", str(mdlm_source(root, hidden_dim=32)), str(root / "out"))
    assert not (root / "out").exists()
    return outcome


@case("15d", "`train.init_from` naming a model of another vocabulary (an imported MDLM, GPT-2's tokens)")
def warm_start_other_vocabulary(root: Path) -> Outcome:
    imported = ladd("import", "mdlm", str(mdlm_source(root)), str(root / "model"))
    assert imported.code == 0, imported.message
    outcome = ladd(
        "train", *TINY, ONE_STAGE, *text_overrides(root), f"train.init_from={root / 'model'}", f"run_dir={root / 'run'}"
    )
    assert not (root / "run").exists()
    return outcome


@case("15e", "`backbone=hf_masked_lm` naming a model folder with its own Python code (`auto_map`)")
def masked_lm_with_code(root: Path) -> Outcome:
    folder, marker = code_folder(root)
    outcome = ladd(
        "train",
        *TINY,
        ONE_STAGE,
        *text_overrides(root),
        "latent=null",
        "backbone=hf_masked_lm",
        f"backbone.model={folder}",
        f"run_dir={root / 'run'}",
    )
    assert not marker.exists() and not (root / "run").exists()
    return outcome


@case("15f", "`ladd import llada` of a shared folder whose `chat_template.jinja` is a link to a file of the user's")
def llada_source_linking_a_private_file(root: Path) -> Outcome:
    from llada_reference import write_checkpoint

    source, private = root / "llada", root / "private.txt"
    write_checkpoint(source, shards=1)
    private.write_text("a private note {{ messages }}\n")
    (source / "chat_template.jinja").unlink(missing_ok=True)
    (source / "chat_template.jinja").symlink_to(private)
    outcome = ladd("import", "llada", str(source), str(root / "out"), "dataset.seq_len=16")
    assert not (root / "out").exists() and private.read_text() == "a private note {{ messages }}\n"
    return outcome


# ---------------------------------------------------------------- what a command reads; one line for each slip


@case("16a", "`ladd encode MODEL --out MODEL/model.safetensors` (the latents over the folder's only weights)")
def encode_into_the_model(root: Path) -> Outcome:
    model = exported(root, "model")
    (root / "refs.txt").write_text("0 1 1 0\n")
    return unchanged(
        model, lambda: ladd("encode", str(model), "--input", "refs.txt", "--out", str(model / "model.safetensors"),
                            cwd=root)
    )


@case("16b", "`ladd sample MODEL --like refs.txt --out MODEL/model.safetensors`")
def sample_into_the_model(root: Path) -> Outcome:
    model = exported(root, "model")
    (root / "refs.txt").write_text("0 1 1 0\n")
    return unchanged(
        model, lambda: ladd("sample", str(model), "--like", "refs.txt", "--out", str(model / "model.safetensors"),
                            cwd=root)
    )


@case("16c", "`ladd train run_dir=null`")
def run_dir_null(root: Path) -> Outcome:
    outcome = ladd("train", *TINY, ONE_STAGE, "run_dir=null", cwd=root)
    assert list(root.iterdir()) == [], "a folder was made"
    return outcome


@case("16d", "`ladd sample RUN --sampler ancestral --sampler-option 'fast=[1,'` (not a value)")
def malformed_sampler_option(root: Path) -> Outcome:
    return ladd("sample", str(trained(root, "run")), "--sampler", "ancestral", "--sampler-option", "fast=[1,")


@case("16e", "`ladd train schedule=cosine,linear` (a sweep's values without `-m`)")
def sweep_without_multirun(root: Path) -> Outcome:
    outcome = ladd("train", *TINY, ONE_STAGE, "schedule=cosine,linear", f"run_dir={root / 'run'}")
    assert not (root / "run").exists()
    return outcome


@case("16f", "a run whose `run.json` settings were emptied (`{}`); `ladd train` of it")
def emptied_run_record(root: Path) -> Outcome:
    run_dir = trained(root, "run")
    (run_dir / "run.json").write_text(json.dumps({"format": "ladd-run/1", "settings": {}}))
    return unchanged(run_dir, lambda: ladd("train", *TINY, ONE_STAGE, f"run_dir={run_dir}"))


@case("16g", "the disk fills up while `ladd prepare` builds a token cache (writes past 100 kB fail)")
def disk_full_while_preparing(root: Path) -> Outcome:
    overrides = text_overrides(root)
    (root / "corpus.txt").write_text("the cat sat on the mat\n\nthe dog ate the bone\n\n" * 8000)  # 368 kB
    outcome = ladd_process("prepare", *overrides, limit_file_size=100_000)
    assert not list((root / "cache").rglob("*.partial")), "a partial file was left behind"
    return outcome
