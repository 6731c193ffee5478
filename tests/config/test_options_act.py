"""No option does nothing: every option of the settings changes the trained weights or the evaluation, or is marked
``OPERATIONAL`` where it is declared (it says how a run executes or reports), or labels the run.

Each variation below is trained (or evaluated) next to a base run that the option acts in.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
import torch
from support import TINY

import registry
from registry.config.composition import compose
from registry.config.settings import OPERATIONAL, EvalConfig, Settings, StageConfig, checked, upgraded
from registry.engine.evaluation import evaluate
from registry.engine.runs import LABEL_KEYS
from registry.errors import InvalidConfigError
from registry.training.loop import train

COMMON = [*TINY, "dataset.seq_len=8", "train.batch_size=4", "train.warmup_steps=0", "backbone.hidden=16"]
#: the cheapest run each option acts in: the token channel alone (a decaying rate, 3 steps: linear and cosine
#: differ only past the halfway point), or a latent channel with its own denoiser and classifier-free dropout
BASES = {
    "tokens": [
        "experiment=binsaw/mdlm_cpu", *COMMON, "train.stages=[{steps:3}]", "train.lr_schedule=linear",
        "train.min_lr_ratio=0.5",
    ],
    "latent": [
        "experiment=binsaw/coladd_seq_cpu", *COMMON, "train.stages=[{steps:2,lambda_latent:0.5}]",
        "objective.p_cfg=0.3", "objective.latent_repeats=2", "latent_backbone.hidden=16",
    ],
    # LoRA on the adaLN modulations beside the output head trained in full (both start at zero in a new DiT, so
    # that nothing else would get a gradient); bf16 autocast, so that the frozen weights may be held in bfloat16
    "lora": [
        "experiment=binsaw/mdlm_cpu", *COMMON, "train.stages=[{steps:3}]", "train.lora.rank=2",
        "train.lora.targets=[adaln.proj]", "train.lora.full=[final.head]", "train.precision=bf16-mixed",
    ],
}
STAGE = "train.stages.stage1"
#: a training option -> its base and another value, which must train other weights than the base run's
TRAINING: dict[str, tuple[str, Any]] = {
    "seed": ("tokens", 1),
    "objective.p_cfg": ("latent", 0.6),
    "objective.latent_loss_on_dropped": ("latent", True),
    "objective.latent_time": ("latent", "tied"),
    "objective.latent_repeats": ("latent", 3),
    "objective.time_min": ("tokens", 0.5),
    "objective.time_max": ("tokens", 0.5),
    "train.batch_size": ("tokens", 8),
    "train.optimizer": ("tokens", "adam"),
    "train.lr": ("tokens", 0.002),
    "train.weight_decay": ("tokens", 0.1),
    "train.betas": ("tokens", [0.8, 0.99]),
    "train.warmup_steps": ("tokens", 1),
    "train.lr_schedule": ("tokens", "cosine"),
    "train.min_lr_ratio": ("tokens", 0.0),
    "train.ema_decay": ("tokens", 0.5),
    "train.grad_clip": ("tokens", 0.001),
    "train.precision": ("latent", "64-true"),
    "train.init_from": ("tokens", "BASE_RUN"),  # the base run's own weights
    "trainer.max_steps": ("tokens", 2),
    f"{STAGE}.steps": ("tokens", 2),
    f"{STAGE}.lambda_latent": ("latent", 1.0),
    f"{STAGE}.freeze_encoder": ("latent", True),
    f"{STAGE}.max_minutes": ("tokens", 1e-9),  # the stage ends at its first time check
    "train.lora.rank": ("tokens", 2),
    "train.lora.alpha": ("lora", 8.0),
    "train.lora.dropout": ("lora", 0.5),
    "train.lora.targets": ("lora", ["adaln.proj", "qkv"]),
    "train.lora.full": ("lora", ["final.head", "backbone.embed"]),
    "train.freeze": ("tokens", ["backbone.embed"]),
    "train.frozen_dtype": ("lora", "bfloat16"),
}
#: an evaluation option -> another value, which must change what ``ladd eval`` reports
EVALUATION: dict[str, Any] = {
    "eval.num_samples": 6,
    "eval.batch_size": 2,
    "eval.budgets": [1, 3],
    "eval.loss_batches": 2,
    "eval.seed": 7,
    "eval.precision": "bf16-mixed",
    "eval.repeats": 2,
    "eval.floor_draws": 2,
}
TINY_EVAL = {"num_samples": 4, "batch_size": 4, "loss_batches": 1, "budgets": [1, 2], "repeats": 1, "floor_draws": 1}


def _options(kind: type, prefix: str) -> dict[str, dataclasses.Field]:
    """Every leaf option under ``prefix``, with its field."""
    found = {}
    for option in dataclasses.fields(kind):
        name = f"{prefix}{option.name}"
        section = option.default_factory if callable(option.default_factory) else None
        if name == "train.stages":
            found.update(_options(StageConfig, f"{STAGE}."))
        elif isinstance(section, type) and dataclasses.is_dataclass(section):
            found.update(_options(section, f"{name}."))
        else:
            found[name] = option
    return found


def test_every_option_is_varied_here_marked_operational_or_a_label():
    unaccounted = [
        name for name, option in _options(Settings, "").items()
        if name not in TRAINING and name not in EVALUATION and option.metadata != OPERATIONAL
        and name.split(".")[0] not in LABEL_KEYS
    ]
    assert unaccounted == [], "options that neither act in a test here nor are marked OPERATIONAL"
    assert not [name for name in TRAINING if _options(Settings, "")[name].metadata == OPERATIONAL]


def _changed(plain: dict[str, Any], option: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(plain)
    *sections, name = option.split(".")
    node = changed
    for section in sections:
        node = node[section]
    node[name] = value
    return changed


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """Each base trained once: its registry, settings, run folder and experiment."""
    reg, found = registry.load(), {}

    def base(name: str):
        if name not in found:
            run = tmp_path_factory.mktemp("options") / name
            settings = compose([*BASES[name], f"run_dir={run}"], reg)
            found[name] = (reg, settings, run, train(settings, run, reg))
        return found[name]

    return base


def _weights(experiment) -> dict[str, torch.Tensor]:
    return {name: tensor.double() for name, tensor in experiment.model.state_dict().items()}


@pytest.mark.slow
@pytest.mark.parametrize("option", TRAINING)
def test_each_training_option_changes_the_trained_weights(bases, option, tmp_path):
    name, value = TRAINING[option]
    reg, settings, run, experiment = bases(name)
    value = str(run) if value == "BASE_RUN" else value
    varied = train(checked(_changed(settings.plain(), option, value)), tmp_path / "run", reg)
    ours, theirs = _weights(experiment), _weights(varied)
    assert ours.keys() == theirs.keys()
    assert any(not torch.equal(ours[key], theirs[key]) for key in ours), f"{option}={value} changed no weight"


@pytest.mark.parametrize("option", EVALUATION)
def test_each_evaluation_option_changes_what_is_reported(bases, option):
    experiment = bases("tokens")[3]
    reference = EvalConfig(**TINY_EVAL)
    varied = dataclasses.replace(reference, **{option.split(".")[1]: EVALUATION[option]})
    results = [dataclasses.asdict(evaluate(experiment, "base", s, progress=False)) for s in (reference, varied)]
    assert results[0] != results[1], f"{option}={EVALUATION[option]} changed nothing that is reported"


def test_the_removed_objective_lambda_latent_is_refused_in_one_line_and_dropped_from_saved_configs():
    reg = registry.load()
    message = (
        "objective.lambda_latent was removed (each stage sets its own weight of the latent loss: "
        "train.stages.NAME.lambda_latent); delete it from the config"
    )
    with pytest.raises(InvalidConfigError) as refused:
        compose([*BASES["latent"], "objective.lambda_latent=0.5"], reg)
    assert str(refused.value) == message
    plain = compose(BASES["latent"], reg).plain()
    with pytest.raises(InvalidConfigError) as refused:
        checked(_changed(plain, "objective.lambda_latent", 0.5))
    assert str(refused.value) == message
    saved = _changed(plain, "objective.lambda_latent", 1.0)  # as runs and exports of earlier versions saved it
    assert checked(upgraded(saved)) == checked(plain)


def test_the_removed_reward_slot_is_refused_and_dropped_from_saved_configs_only_where_it_was_left_empty():
    reg = registry.load()
    message = (
        "reward was removed (the RL objective names its reward: loss.reward=NAME, its options "
        "loss.reward_options); delete it from the config"
    )
    with pytest.raises(InvalidConfigError) as refused:
        compose([*BASES["latent"], "+reward=exact_match"], reg)
    assert str(refused.value) == message
    plain = compose(BASES["latent"], reg).plain()
    assert checked(upgraded({**plain, "reward": None})) == checked(plain)  # as every run of an earlier ladd saved it
    chosen = {**plain, "reward": {"name": "exact_match"}}  # it chose the reward an RL run trained on: not silently lost
    with pytest.raises(InvalidConfigError) as refused:
        checked(upgraded(chosen))
    assert str(refused.value) == message
