"""The presets hold the values docs/fidelity.md lists, every option it names switches, p_r trains as the paper says."""

from __future__ import annotations

import pytest
import torch
from support import TINY

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment

TEXT_COLADD = ["lm1b/coladd_32", "lm1b/coladd_128", "lm1b/ccdd", "owt/coladd_16", "owt/coladd_64"]
TEXT_DILADD = ["lm1b/diladd_32", "lm1b/diladd_128", "owt/diladd_16", "owt/diladd_64"]
SAWTOOTH = [
    f"binsaw/{name}{size}"
    for name in ("coladd_joint", "coladd_seq", "diladd_joint", "diladd_seq")
    for size in ("", "_cpu")
]


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def preset(reg, name: str, *overrides: str) -> dict:
    return compose([f"experiment={name}", *overrides], reg).plain()


@pytest.mark.parametrize("name", TEXT_COLADD + TEXT_DILADD + SAWTOOTH + ["demo/coladd"])
def test_p_r_and_p_cfg_are_on_exactly_for_text_co_ladd(reg, name):
    cfg = preset(reg, name)
    on = name in TEXT_COLADD
    assert cfg["encoder"]["input_dropout_max"] == (0.9 if on else 0.0)
    assert cfg["objective"]["p_cfg"] == (0.15 if on or name == "demo/coladd" else 0.0)
    assert cfg["objective"]["latent_loss_on_dropped"] is False
    if cfg["latent"]["name"] == "builtin:continuous":  # as the presets name it
        assert cfg["latent"]["dropped_input"] == "noised_null"
        assert cfg["latent_process"]["feature_reduction"] == "mean"


@pytest.mark.parametrize(
    "name, width, codes",
    [
        ("lm1b/diladd_32", 32, 2048),
        ("lm1b/diladd_128", 32, 512),
        ("owt/diladd_16", 32, 2048),
        ("owt/diladd_64", 32, 2048),
        ("binsaw/diladd_joint", 32, 2048),
    ],
)
def test_di_ladd_latents_follow_the_papers_text(reg, name, width, codes):
    cfg = preset(reg, name)
    assert (cfg["latent"]["width"], cfg["encoder"]["width"], cfg["latent"]["codebook_size"]) == (width, width, codes)
    assert cfg["latent_schedule"]["name"] == "builtin:linear"


def test_the_swd_is_on_the_papers_scale_and_text_sampling_runs_in_bf16_on_a_gpu(reg):
    assert preset(reg, "binsaw/mdlm")["metric"]["directions"] == "gaussian"
    assert preset(reg, "binsaw/mdlm")["eval"]["precision"] == "32-true"
    assert preset(reg, "lm1b/coladd_32")["eval"]["precision"] == "auto"


def test_every_switch_the_table_names_composes(reg):
    preset(
        reg,
        "lm1b/coladd_32",
        "encoder.input_dropout_max=0",
        "encoder.cache_dir=/tmp/cache",
        "latent.dropped_input=zero",
    )
    preset(reg, "owt/diladd_64", "latent.width=128", "encoder.width=128", "latent.codebook_size=8192")
    preset(reg, "lm1b/diladd_32", "eval.precision=32-true", "encoder.input_dropout_max=0.9", "objective.p_cfg=0.15")
    switched = preset(
        reg,
        "binsaw/coladd_joint_cpu",
        *TINY,
        "encoder.input_dropout_max=0.9",
        "objective.p_cfg=0.15",
        "latent.dropped_input=zero",
        "objective.latent_loss_on_dropped=true",
        "latent_process.feature_reduction=sum",
        "metric.directions=unit",
    )
    experiment = build_experiment(switched, reg)
    assert experiment.model.latent.noised_null is False and experiment.metric.config.directions == "unit"
    build_experiment(
        preset(reg, "binsaw/diladd_joint_cpu", *TINY, "latent.codebook_size=512", "latent_schedule=polynomial"), reg
    )


def test_p_r_blanks_masked_inputs_of_a_frozen_encoder_while_the_model_trains_and_never_in_evaluation(reg):
    torch.manual_seed(0)
    model = build_experiment(preset(reg, "binsaw/coladd_joint_cpu", *TINY, "encoder.input_dropout_max=0.9"), reg).model
    seen = []
    model.encoder.trunk.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
    x0 = torch.randint(2, (64, 16), generator=torch.Generator().manual_seed(1))

    model.train().freeze_encoder()  # Stage 2: the encoder's own modules are in eval mode
    assert not model.encoder.training
    model.loss(x0, torch.Generator().manual_seed(2))
    model.eval().loss(x0, torch.Generator().manual_seed(2))

    blanked_in_training, blanked_in_evaluation = ((h == 0).all(-1).sum().item() for h in seen)
    assert blanked_in_training > 64, "about 0.45 x the masked half of 64 x 16 positions"
    assert blanked_in_evaluation == 0


def test_the_published_mdlm_preset_trains_as_mdlms_own_config(reg):
    """kuleshov-group/mdlm's configs/config.yaml: AdamW at 3e-4 with betas (0.9, 0.999) and no weight decay, 2,500
    warm-up steps then constant, EMA 0.9999, clipping at 1, a global batch of 512, dropout 0.1; 1M steps (the
    published checkpoint's)."""
    cfg = preset(reg, "owt/mdlm_published")
    train = cfg["train"]
    assert (train["lr"], train["betas"], train["weight_decay"]) == (3e-4, [0.9, 0.999], 0.0)
    assert (train["warmup_steps"], train["lr_schedule"], train["ema_decay"]) == (2500, "constant", 0.9999)
    assert (train["grad_clip"], train["batch_size"], cfg["backbone"]["dropout"]) == (1.0, 512, 0.1)
    assert [stage["steps"] for stage in train["stages"].values()] == [1_000_000]
