"""What the token denoiser sees for a row dropped by p_cfg: the null latent noised to tau_y (App. C.3), or zero."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import TINY

import registry
from registry.assembly import build_experiment
from registry.config import compose, to_plain
from registry.errors import InvalidConfigError

BATCH = 256
WIDTH = 32  # d_l of the sawtooth presets


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


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
    experiment = build_experiment(to_plain(cfg), reg)
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
