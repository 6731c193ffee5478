"""Experiment tracking (``train.logger``): the settings and every loss term reach the logger, read back with the
tracker's own reader, and a resumed training continues the same logged run; ``metrics.csv`` is kept as ever.

W&B runs offline and MLflow logs to a local file store; a logger whose package is missing is skipped.
"""
from __future__ import annotations

import csv
import json
import struct

import pytest
from support import TINY

import registry
from registry.config.composition import compose
from registry.errors import LaddError
from registry.training import tracking
from registry.training.loop import train

LR = 0.002


def _train_and_resume(tmp_path, logger: str) -> list[tuple[int, float]]:
    """Two stages of 2 steps; then stage 2 lengthened to 4 steps and resumed from its checkpoint.

    Returns metrics.csv's (step counted from the training's start, loss) rows, which every logger must match.
    """
    reg = registry.load()
    run = tmp_path / "run"
    args = [
        "experiment=binsaw/mdlm_cpu", *TINY, "train.batch_size=4", "train.checkpoint_every=1", f"train.lr={LR}",
        f"train.logger={logger}", f"run_dir={run}",
    ]
    train(compose([*args, "train.stages=[{steps:2},{steps:2}]"], reg), run, reg)
    (run / "checkpoints" / "stage2" / "final.safetensors").unlink()
    (run / "model.safetensors").unlink()
    train(compose([*args, "train.stages=[{steps:2},{steps:4}]"], reg), run, reg, allow_changes=True)
    with (run / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["stage"], r["step"]) for r in rows] == [("1", "1"), ("1", "2"), *(("2", str(s)) for s in range(1, 5))]
    return [(int(r["step"]) + (2 if r["stage"] == "2" else 0), float(r["loss"])) for r in rows]


def test_tensorboard_gets_the_settings_and_every_loss_in_one_folder_across_a_resume(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    logged = _train_and_resume(tmp_path, "tensorboard")
    folder = tmp_path / "run" / "logs" / "tensorboard"
    assert len(list(folder.glob("events.out.tfevents.*"))) == 2  # the first training's file and the resumed one's
    events = EventAccumulator(str(folder))
    events.Reload()
    assert {"train/loss", "train/token"} <= set(events.Tags()["scalars"])
    # float32 in the event file, as the loss is computed
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [
        (step, pytest.approx(loss, rel=1e-7)) for step, loss in logged
    ]
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["train.lr"].number_value == LR
    assert hparams["dataset.name"].string_value == "builtin:binsaw"  # as the preset names it


def _wandb_records(path):
    """The records of an offline W&B run file (``run-ID.wandb``): W&B's log of 32 KiB blocks, each record one or
    more chunks behind a 7-byte header (CRC, length, type: 1 whole, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, pending = 7, b""
    while position + 7 <= len(data):
        room = 32768 - position % 32768
        if room < 7:  # a block's tail too short for a header is padding
            position += room
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def test_wandb_offline_resumes_the_same_run(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    logged = _train_and_resume(tmp_path, "wandb")
    run_id = json.loads((tmp_path / "run" / "tracking.json").read_text())["wandb"]["id"]
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert [path.name.rsplit("-", 1)[1] for path in runs] == [run_id, run_id]  # the resumed part: the same run
    history, config = [], {}
    for run in runs:
        for record in _wandb_records(run / f"run-{run_id}.wandb"):
            kind = record.WhichOneof("record_type")
            if kind == "history":
                items = record.history.item
                row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}
                history.append((row["trainer/global_step"], row["train/loss"]))
            elif kind == "config":
                config.update({item.key: json.loads(item.value_json) for item in record.config.update})
    assert history == [(step, pytest.approx(loss, rel=1e-7)) for step, loss in logged]
    assert config["train"]["lr"] == LR


def test_mlflow_resumes_the_same_run_in_a_local_store(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    store = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for this opt-in to a file store
    logged = _train_and_resume(tmp_path, "mlflow")
    run_id = json.loads((tmp_path / "run" / "tracking.json").read_text())["mlflow"]["run_id"]
    client = MlflowClient(store)
    history = client.get_metric_history(run_id, "train/loss")
    assert [(m.step, m.value) for m in history] == [(step, pytest.approx(loss, rel=1e-7)) for step, loss in logged]
    assert client.get_run(run_id).data.params["train/lr"] == str(LR)
    assert len(client.search_runs([client.get_run(run_id).info.experiment_id])) == 1


def test_a_logger_whose_package_is_missing_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(tracking.PACKAGES, "wandb", "ladd_no_such_package")
    with pytest.raises(LaddError, match=r"^train.logger=wandb needs the ladd_no_such_package .*ladd\[tracking\]"):
        tracking.check_installed("wandb")


def test_wandb_that_cannot_start_leaves_ladds_one_line_alone(tmp_path, monkeypatch, capfd):
    wandb = pytest.importorskip("wandb")
    from registry.engine.runs import RunFolder

    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_SILENT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))  # no login stored
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # and no server
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    reg = registry.load()
    settings = compose(["experiment=binsaw/mdlm_cpu", *TINY, "train.logger=wandb"], reg)
    wandb.teardown()  # a W&B of this process set up by another test keeps that test's mode
    try:
        capfd.readouterr()
        with pytest.raises(LaddError) as refused:
            tracking.Tracking("wandb", RunFolder(tmp_path / "run"), settings, True).stage_logger(1, 0)
        assert str(refused.value).startswith("train.logger=wandb could not start its logged run (")
        assert capfd.readouterr() == ("", "")
    finally:
        wandb.teardown()


def test_stages_shorter_than_log_every_log_their_last_step_numbered_as_metrics_csv_numbers_it(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    reg = registry.load()
    run = tmp_path / "run"
    train(compose(["experiment=binsaw/mdlm_cpu", *TINY, "train.log_every=50", "train.stages=[{steps:3},{steps:2}]",
                   "train.logger=tensorboard", f"run_dir={run}"], reg), run, reg)
    with (run / "metrics.csv").open(newline="") as handle:
        rows = [(r["stage"], r["step"], float(r["loss"])) for r in csv.DictReader(handle)]
    assert [(stage, step) for stage, step, _ in rows] == [("1", "3"), ("2", "2")]
    events = EventAccumulator(str(run / "logs" / "tensorboard"))
    events.Reload()
    logged = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert logged == [(3, pytest.approx(rows[0][2], rel=1e-7)), (5, pytest.approx(rows[1][2], rel=1e-7))]
