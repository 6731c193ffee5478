"""The latent term of the objective: its scale against closed forms, classifier-free dropout (and what a dropped
row's token side sees: the null latent noised to tau_y, App. C.3, or zero), Stage 2's freezing."""
from __future__ import annotations

import csv
import math

import pytest
import torch
from safetensors.torch import load_file
from support import TINY, TWO_STAGES

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.runs import WEIGHTS_FILE
from registry.errors import InvalidConfigError
from registry.interfaces import Denoised
from registry.training.loop import train

WIDTH = 32  # d_l of the sawtooth presets


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def zero_prediction_model(reg, variant: str, *overrides: str):
    """A Co-LADD model whose latent prediction is 0 and whose clean latents are the encoder's unit vectors (std 0).

    Each row's squared error is then ``||y0||^2 = 1`` summed over the d_l features, 1 / d_l averaged over them.
    """
    cfg = compose([f"experiment=binsaw/{variant}_cpu", *TINY, "latent.std=0", *overrides], reg).plain()
    model = build_experiment(cfg, reg).model.train()
    model.lambda_latent = 1.0
    predictor = model.latent_backbone if model.latent_backbone is not None else model.backbone
    predictor.register_forward_hook(lambda module, args, out: Denoised(out.tokens, torch.zeros_like(out.latent)))
    return model


@pytest.mark.parametrize("variant", ["coladd_joint", "coladd_seq"])
@pytest.mark.parametrize("reduction, expected", [("mean", 1 / WIDTH), ("sum", 1.0)])
def test_latent_term_is_the_authors_mean_over_m_and_d_l_by_default(reg, variant, reduction, expected):
    model = zero_prediction_model(reg, variant, f"latent_process.feature_reduction={reduction}")
    terms = model.loss(torch.randint(2, (8, 16), generator=gen(0)), gen(1))
    assert terms["latent"].item() == pytest.approx(expected, rel=1e-5)
    assert terms["loss"].item() == pytest.approx(terms["token"].item() + terms["latent"].item(), rel=1e-6)


@pytest.mark.parametrize("variant", ["coladd_joint", "coladd_seq"])
def test_rows_dropped_for_classifier_free_training_stay_out_of_the_latent_term(reg, variant):
    model = zero_prediction_model(reg, variant, "objective.p_cfg=0.5")
    batch = 64
    x0 = torch.randint(2, (batch, 16), generator=gen(2))
    token_side = []
    model.backbone.register_forward_pre_hook(lambda module, args: token_side.append(args[2].detach().clone()))

    only_kept = model.loss(x0, gen(3))["latent"].item()
    model.objective.latent_loss_on_dropped = True
    with_dropped = model.loss(x0, gen(3))["latent"].item()  # the same generator drops the same rows

    assert only_kept == pytest.approx(1 / WIDTH, rel=1e-5), (
        "every kept row's target has norm 1; dropped rows do not count"
    )
    kept = with_dropped * WIDTH * batch  # dropped rows now count, with the null latent (0) as target: error 0
    assert kept == pytest.approx(round(kept), abs=1e-3) and 10 < round(kept) < batch - 10
    if variant == "coladd_seq":  # tokens condition on the clean latent: the dropped rows see exactly the null latent
        null_rows = int((token_side[0].flatten(1) == 0).all(dim=1).sum())
        assert null_rows == batch - round(kept)


def test_kept_row_weights_average_to_the_mean_over_kept_rows():
    from registry.engine.model import kept_row_weights

    dropped = torch.tensor([True, False, False, True, False, False, False, True])
    values = torch.arange(8.0)
    assert (values * kept_row_weights(dropped)).mean().item() == pytest.approx(values[~dropped].mean().item())
    assert torch.equal(kept_row_weights(torch.ones(4, dtype=torch.bool)), torch.zeros(4))


@pytest.mark.slow
def test_di_ladd_trains_both_stages_with_classifier_free_dropout(reg, tmp_path):
    train(compose(["experiment=binsaw/diladd_joint_cpu", *TINY, TWO_STAGES, "objective.p_cfg=0.5"], reg), tmp_path, reg)
    with (tmp_path / "metrics.csv").open() as handle:
        stage2 = [row for row in csv.DictReader(handle) if row["stage"] == "2"]
    latent = [float(row["latent"]) for row in stage2]
    assert latent and all(math.isfinite(value) and value >= 0 for value in latent) and max(latent) > 0


def test_a_null_latent_target_that_no_loss_can_take_is_refused_before_training(reg):
    cfg = compose(
        ["experiment=binsaw/diladd_joint_cpu", "objective.p_cfg=0.15", "objective.latent_loss_on_dropped=true"], reg
    ).plain()
    with pytest.raises(registry.IncompatibleComponentsError, match="latent_loss_on_dropped=true.*'discrete'"):
        build_experiment(cfg, reg)


@pytest.mark.slow
def test_stage_two_freezes_the_encoder_and_keeps_training_the_quantiser(reg, tmp_path):
    """As the authors do: the encoder is frozen, the VQ's learned mask vector and EMA codebook keep training."""
    experiment = train(compose(["experiment=binsaw/diladd_joint_cpu", *TINY, TWO_STAGES], reg), tmp_path, reg)
    stage1 = load_file(tmp_path / "checkpoints" / "stage1" / "final.safetensors")
    final = load_file(tmp_path / WEIGHTS_FILE)
    encoder = [name for name in final if name.startswith("encoder.")]
    assert encoder and all(torch.equal(final[name], stage1[name]) for name in encoder)
    assert not torch.equal(final["latent.mask_vector"], stage1["latent.mask_vector"])
    codebook = [name for name in final if name.startswith("latent.quantizer.") and "embed" in name]
    assert codebook and any(not torch.equal(final[name], stage1[name]) for name in codebook)
    assert experiment.model.latent.mask_vector.requires_grad
    assert not any(p.requires_grad for p in experiment.model.encoder.parameters())


# ---------------------------------------------------------------- what a p_cfg-dropped row's token side sees

BATCH = 256


def model_seeing(reg, dropped_input: str, *overrides: str):
    """Joint Co-LADD with clean latents equal to the encoder's unit vectors, recording each token-side latent input."""
    cfg = compose(
        [
            "experiment=binsaw/coladd_joint_cpu",
            *TINY,
            "latent.std=0",
            f"latent.dropped_input={dropped_input}",
            *overrides,
        ],
        reg,
    )
    experiment = build_experiment(cfg, reg)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    experiment.model.backbone.register_forward_pre_hook(
        lambda module, args: seen.append((args[2].detach().clone(), args[3].detach().clone()))
    )
    return experiment, seen


def token_side_inputs(reg, dropped_input: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The token side's latent input and tau_y of one training batch with p_cfg = 0.5.

    Every option gets the same weights and the same draws.
    """
    torch.manual_seed(0)
    experiment, seen = model_seeing(reg, dropped_input, "objective.p_cfg=0.5")
    x0 = torch.randint(2, (BATCH, 16), generator=gen(1))
    experiment.model.train().loss(x0, gen(2))
    return seen[0]


def test_a_dropped_row_sees_exactly_zero_with_zero_and_the_noised_null_latent_by_default(reg):
    noised, tau_y = token_side_inputs(reg, "noised_null")
    zero, same_tau = token_side_inputs(reg, "zero")
    dropped = (noised != zero).flatten(1).any(dim=1)
    assert torch.equal(tau_y, same_tau)
    assert 0.3 * BATCH < int(dropped.sum()) < 0.7 * BATCH, "p_cfg = 0.5 drops about half the rows"
    assert torch.equal(noised[~dropped], zero[~dropped]), "rows with their latent see the same input under both options"
    assert torch.equal(zero[dropped], torch.zeros_like(zero[dropped]))
    assert bool((zero[~dropped].flatten(1).norm(dim=1) > 0).all())

    # noised_null: y_t = abar * 0 + sbar * eps with VP-sqrt's sbar^2 = 1 - sqrt(1 - tau): y_t / sbar is standard normal
    rows = dropped & (tau_y > 0)
    sbar = torch.sqrt(1 - torch.sqrt(1 - tau_y[rows].double()))
    standard = noised[rows].double().flatten(1) / sbar[:, None]
    count = standard.numel()
    assert count > 0.3 * BATCH * WIDTH
    assert abs(float(standard.mean())) < 5 / math.sqrt(count)
    assert abs(float(standard.pow(2).mean()) - 1) < 5 * math.sqrt(2 / count), "the chi-square mean of the closed form"


def test_without_dropped_rows_the_option_changes_nothing(reg):
    x0 = torch.randint(2, (32, 16), generator=gen(3))
    losses = []
    for option in ("noised_null", "zero"):
        torch.manual_seed(4)
        experiment, _ = model_seeing(reg, option)
        losses.append(experiment.model.train().loss(x0, gen(5))["loss"])
    assert torch.equal(losses[0], losses[1])


@pytest.mark.parametrize("dropped_input", ["noised_null", "zero"])
def test_guidance_conditions_its_unconditional_pass_as_training_did(reg, dropped_input):
    torch.manual_seed(6)
    experiment, seen = model_seeing(reg, dropped_input, "sampler.guidance=2.0")
    experiment.sampler.sample(experiment.model.eval(), 4, 2, gen(7))
    unconditional = [latent for latent, _ in seen[1::2]]
    assert len(seen) == 4 and len(unconditional) == 2
    zeros = [torch.equal(latent, torch.zeros_like(latent)) for latent in unconditional]
    assert zeros == [dropped_input == "zero"] * 2


def test_the_default_is_the_papers_and_an_unknown_option_is_refused(reg):
    assert reg.build("latent", "continuous").noised_null is True
    with pytest.raises(InvalidConfigError) as refused:
        reg.build("latent", "continuous", {"dropped_input": "null"})
    assert str(refused.value) == (
        "invalid options for latent 'continuous': "
        "dropped_input='null' is not valid: it must be one of noised_null, zero"
    )
