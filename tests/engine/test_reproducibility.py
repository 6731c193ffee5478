"""Sampling and the objective are functions of the caller's generator alone, whatever torch's global RNG holds."""
from __future__ import annotations

import copy

import pytest
import torch
from support import TINY

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment

# Every option that draws noise is on: guidance (the null latent's noise), DDIM eta = 1, posterior noise,
# encoder-input dropout p_r, network dropout, classifier-free dropout.
NOISY = ["encoder.input_dropout_max=0.9", "backbone.dropout=0.3", "encoder.dropout=0.3", "objective.p_cfg=0.3"]
CASES = {
    "coladd_joint": ("binsaw/coladd_joint_cpu", ["latent_process.eta=1.0", "latent.std=0.05"], {"guidance": 2.0}),
    "coladd_seq": ("binsaw/coladd_seq_cpu", ["latent.std=0.05"], {"guidance": 2.0, "latent_steps": 4}),
    "diladd_joint": ("binsaw/diladd_joint_cpu", [], {"guidance": 2.0}),
    "diladd_seq": ("binsaw/diladd_seq_cpu", [], {"guidance": 2.0, "latent_steps": 4}),
}


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def build(reg, case: str):
    preset, extra, sampler_options = CASES[case]
    cfg = compose([f"experiment={preset}", *TINY, *NOISY, *extra], reg).plain()
    torch.manual_seed(0)
    experiment = build_experiment(cfg, reg)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # random weights everywhere (zero-initialised heads would hide the guidance pass)
        for parameter in experiment.model.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    options = {k: v for k, v in cfg["sampler"].items() if k != "name"}
    sampler = reg.build("sampler", cfg["sampler"]["name"], {**options, **sampler_options})
    return experiment.model, sampler


def disturb_global_rng(seed: int) -> None:
    torch.manual_seed(seed)
    torch.rand(seed + 1)


@pytest.mark.parametrize("case", CASES)
def test_guided_samples_depend_on_the_generator_alone(reg, case):
    model, sampler = build(reg, case)
    model.eval()
    outputs = []
    for disturbance in (1, 2):
        disturb_global_rng(disturbance)
        outputs.append(sampler.sample(model, 32, 4, torch.Generator().manual_seed(5)))
    first, second = outputs
    assert torch.equal(first.tokens, second.tokens) and torch.equal(first.latent, second.latent)
    other = sampler.sample(model, 32, 4, torch.Generator().manual_seed(6))
    assert not torch.equal(first.tokens, other.tokens), "the generator must matter"


@pytest.mark.parametrize("case", CASES)
def test_the_objective_and_the_token_loss_depend_on_the_generator_alone(reg, case):
    model, _ = build(reg, case)
    model.train().lambda_latent = 1.0
    x0 = torch.randint(2, (16, 16), generator=torch.Generator().manual_seed(1))
    results = []
    for disturbance in (1, 2):
        copied = copy.deepcopy(model)  # a training VQ moves its codebook on every call: start both calls alike
        disturb_global_rng(disturbance)
        terms = copied.loss(x0, torch.Generator().manual_seed(3))
        disturb_global_rng(disturbance + 10)
        token = copied.token_loss(x0, clean_latent=case.endswith("seq"), generator=torch.Generator().manual_seed(4))
        results.append(({k: v.detach() for k, v in terms.items()}, token.detach()))
    (terms_1, token_1), (terms_2, token_2) = results
    assert terms_1.keys() == terms_2.keys() and {"token", "latent", "loss"} <= terms_1.keys()
    assert all(torch.equal(terms_1[k], terms_2[k]) for k in terms_1)
    assert torch.equal(token_1, token_2)


def test_the_component_stream_leaves_the_global_rng_as_it_was():
    from registry.distributed import own_noise

    disturb_global_rng(7)
    before = torch.get_rng_state()
    with own_noise(None, torch.device("cpu"), torch.Generator().manual_seed(0)):
        inside = torch.rand(3)
    assert torch.equal(torch.get_rng_state(), before)
    with own_noise(None, torch.device("cpu"), torch.Generator().manual_seed(0)):
        assert torch.equal(torch.rand(3), inside)
