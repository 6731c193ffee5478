"""Learning-rate schedules and optimiser choices: closed forms, and what a trained stage's checkpoint holds."""
from __future__ import annotations

import math

import pytest
import torch
from support import TINY

import registry
from registry.config.composition import compose
from registry.config.lr_schedules import lr_factor
from registry.errors import InvalidConfigError
from registry.training.loop import train
from registry.training.module import LaddModule

BASE = 1e-3


@pytest.mark.parametrize(
    ("schedule", "step", "expected"),
    [
        ("constant", 0, 0.25),  # warm-up: (k + 1) / W with W = 4
        ("constant", 3, 1.0),
        ("constant", 50, 1.0),
        ("linear", 2, 0.75),  # still warming up: no decay yet
        ("linear", 4, 1.0),  # p = 0
        ("linear", 14, 1.0 - 0.8 * 0.5),  # p = 10 / 20, m = 0.2
        ("linear", 24, 0.2),  # p = 1
        ("linear", 99, 0.2),  # past the stage's end: held at m
        ("cosine", 4, 1.0),
        ("cosine", 9, 0.2 + 0.8 * 0.5 * (1.0 + math.cos(math.pi / 4))),  # p = 5 / 20
        ("cosine", 14, 0.6),  # p = 1/2: halfway between 1 and m
        ("cosine", 24, 0.2),
    ],
)
def test_factor_matches_the_closed_form(schedule: str, step: int, expected: float) -> None:
    assert lr_factor(step, warmup=4, total=24, schedule=schedule, min_ratio=0.2) == pytest.approx(expected, abs=1e-12)


def test_a_stage_no_longer_than_its_warm_up_never_decays() -> None:
    assert [lr_factor(k, 10, 5, "cosine", 0.0) for k in range(5)] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


@pytest.mark.slow
def test_a_trained_stage_ends_at_the_scheduled_rate(tmp_path) -> None:
    """A linear decay over a 6-step stage with 2 warm-up steps ends, after 6 scheduler steps, at m * lr."""
    reg = registry.load()
    cfg = compose(
        [
            *TINY,
            "train.stages=[{steps:6}]",
            "train.warmup_steps=2",
            f"train.lr={BASE}",
            "train.lr_schedule=linear",
            "train.min_lr_ratio=0.5",
            "train.checkpoint_every=1",
            f"run_dir={tmp_path}",
        ],
        reg,
    )
    train(cfg, tmp_path, reg)
    state = torch.load(tmp_path / "checkpoints" / "stage1" / "last.ckpt", weights_only=True)
    assert state["lr_schedulers"][0]["_last_lr"] == [pytest.approx(0.5 * BASE)]


def test_adam_is_chosen_by_name_and_unknown_names_are_refused() -> None:
    reg = registry.load()
    settings = compose([*TINY, "train.optimizer=adam"], reg)
    model = torch.nn.Linear(2, 2)
    optimizer = LaddModule(model, settings.train, 0).configure_optimizers()["optimizer"]
    assert type(optimizer) is torch.optim.Adam
    with pytest.raises(InvalidConfigError, match="train.optimizer"):
        compose(["train.optimizer=lion"], reg)
    with pytest.raises(InvalidConfigError, match="train.lr_schedule"):
        compose(["train.lr_schedule=step"], reg)
