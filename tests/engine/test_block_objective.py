"""The block diffusion objective against computations written here: with one block it is MDLM's objective on the same
weights and batch; with blocks of one position and every position masked it is the autoregressive likelihood of the
same network under a causal mask; with blocks of 4 it is the sum of the blocks' ELBO terms, each block at its own
time, given the clean blocks before it."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from block_models import MASK, experiment, randomised

from registry.toolkit.layers import DiTTrunk

L, B = 16, 8
HORIZON = 4000  # the sawtooth presets' training horizon T


@pytest.fixture(scope="module")
def weights():
    """Random (not zero-initialised) weights of the sawtooth DiT, which every network here takes."""
    return randomised(experiment(backbone={"block_size": 4}).model).state_dict()


def _with(weights, backbone, **slots):
    model = experiment(backbone={"dropout": 0.0, **backbone}, **slots).model
    model.load_state_dict(weights)
    return model.eval()


def _x0() -> torch.Tensor:
    return torch.randint(2, (B, L), generator=torch.Generator().manual_seed(5))


def _times(generator: torch.Generator, count: int) -> torch.Tensor:
    """``count`` stratified times on the grid {1/T, ..., 1}: one offset shared by ``count`` evenly spaced strata."""
    offset = torch.rand((), generator=generator, dtype=torch.float64)
    u = (offset + torch.arange(count, dtype=torch.float64) / count) % 1.0
    return ((torch.floor(u * HORIZON).clamp(max=HORIZON - 1) + 1) / HORIZON).float()


def _elbo_terms(logits: torch.Tensor, x0: torch.Tensor, x_t: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Per position: the masked process's discrete-time ELBO weight of the linear schedule (T (gbar(t - 1/T) -
    gbar(t)) / (1 - gbar(t)) = 1 / t) times the cross-entropy of the clean token, at the masked positions only."""
    ce = F.cross_entropy(logits.transpose(1, 2), x0, reduction="none")
    return torch.where(x_t == MASK, ce / tau, 0.0)


def test_one_block_is_mdlms_objective_on_the_same_weights_and_batch(weights):
    x0 = _x0()
    block = _with(weights, {"block_size": L})
    mdlm = _with(weights, {"attention": "bidirectional", "block_size": None}, sampler={"name": "ancestral"})
    ours = block.loss(x0, torch.Generator().manual_seed(7))["token"]
    assert ours.item() == pytest.approx(mdlm.loss(x0, torch.Generator().manual_seed(7))["token"].item(), abs=1e-6)
    g = torch.Generator().manual_seed(7)
    tau = _times(g, B)
    keep = torch.rand(x0.shape, generator=g, dtype=torch.float64) < (1.0 - tau.double())[:, None]
    x_t = torch.where(keep, x0, MASK)
    with torch.no_grad():
        logits = mdlm.backbone(x_t, tau, None, None).tokens
    assert ours.item() == pytest.approx(_elbo_terms(logits, x0, x_t, tau[:, None]).mean().item(), abs=1e-5)


def test_blocks_of_one_masked_at_time_one_give_the_autoregressive_likelihood(weights):
    x0 = _x0()
    model = _with(weights, {"block_size": 1}, objective={"time_min": 1.0, "time_max": 1.0})
    ours = model.loss(x0, torch.Generator().manual_seed(3))["token"].item()
    net = model.backbone
    causal = DiTTrunk(64, 2, 4, 128, 4.0, 0.0, causal=True)  # the sawtooth DiT's sizes, attention causal
    causal.load_state_dict(net.trunk.state_dict())
    total = 0.0
    with torch.no_grad():
        for i in range(L):  # token i given the clean tokens before it, read at a masked position i
            given = torch.cat([x0[:, :i], torch.full((B, 1), MASK)], dim=1)
            c = net.condition.expand(B, -1)
            logits = net.final(causal(net.embed(given), c), c)[:, -1]
            total += F.cross_entropy(logits, x0[:, i], reduction="sum").item()
    assert ours == pytest.approx(total / (B * L), abs=1e-5)


def test_the_sequence_loss_is_the_sum_of_the_blocks_elbo_terms_each_at_its_own_time(weights):
    x0 = _x0()
    model = _with(weights, {"block_size": 4})
    ours = model.loss(x0, torch.Generator().manual_seed(11))["token"].item()
    g = torch.Generator().manual_seed(11)
    tau = _times(g, B * 4).view(B, 4)  # one time per block, the batch's blocks stratified together
    assert len(set(tau[0].tolist())) == 4
    per_position = tau.repeat_interleave(4, dim=1)
    keep = torch.rand(x0.shape, generator=g, dtype=torch.float64) < (1.0 - per_position.double())
    x_t = torch.where(keep, x0, MASK)
    blocks = []
    with torch.no_grad():
        for k in range(4):  # block k noised, given the clean blocks before it, through the sampling form
            given = torch.cat([x0[:, : 4 * k], x_t[:, 4 * k : 4 * k + 4]], dim=1)
            logits = model.predict(given, tau[:, k], None, None).tokens[:, 4 * k :]
            terms = _elbo_terms(logits, x0[:, 4 * k : 4 * k + 4], x_t[:, 4 * k : 4 * k + 4], tau[:, k : k + 1])
            blocks.append(terms.sum(dim=1))  # the block's ELBO term: a sum over its positions
    assert ours == pytest.approx((torch.stack(blocks, 1).sum(1) / L).mean().item(), abs=1e-5)
    assert not math.isclose(ours, model.loss(x0, torch.Generator().manual_seed(12))["token"].item())
