"""Block-causal attention of the DiT: the masks against BD3-LM's rule written out pair by pair, the exact cache
against the full block-causal pass (also beyond the trained length), the training view against the sampling form,
and the refusals of options that cannot hold together."""
from __future__ import annotations

import pytest
import torch
from block_models import MASK, config, experiment, randomised
from support import TINY

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.errors import IncompatibleComponentsError, InvalidConfigError
from registry.interfaces import AttentionPattern
from registry.paper.flops import flops_report
from registry.toolkit.attention import context_mask, pattern_mask


def _sees(q: int, k: int, length: int, block: int) -> bool:
    """BD3-LM's training mask over [x_t ; x0] (2L positions), one pair at a time: a noisy block sees itself; a noisy
    block sees the clean blocks strictly before it; a clean block sees the clean blocks up to its own."""
    q_clean, k_clean = q >= length, k >= length
    q_block, k_block = (q - length * q_clean) // block, (k - length * k_clean) // block
    diagonal = q_block == k_block and q_clean == k_clean
    offset = q_block > k_block and k_clean and not q_clean
    causal = q_block >= k_block and k_clean and q_clean
    return diagonal or offset or causal


@pytest.mark.parametrize(("length", "block"), [(12, 4), (12, 1), (12, 12), (10, 3)])
def test_the_training_view_mask_is_bd3lms(length, block):
    expected = torch.tensor([[_sees(q, k, length, block) for k in range(2 * length)] for q in range(2 * length)])
    assert torch.equal(context_mask(AttentionPattern(block), length), expected)


def test_a_span_keeps_a_block_to_the_blocks_of_its_length():
    pattern = AttentionPattern(4, span=8)
    positions = torch.arange(16)
    seen = pattern_mask(pattern, positions, positions)
    for q in range(16):
        own = q // 4
        expected = [own - 1 <= k // 4 <= own for k in range(16)]
        assert seen[q].tolist() == expected
    assert pattern.pairs(16) == int(seen.sum())
    assert AttentionPattern(4).pairs(16) == int(pattern_mask(AttentionPattern(4), positions, positions).sum())
    assert AttentionPattern().pairs(16) == 256


@pytest.fixture(scope="module")
def model():
    return randomised(experiment(backbone={"block_size": 4}).model)


@pytest.mark.parametrize("times", [1, 4])
def test_cached_incremental_logits_equal_the_full_block_causal_pass(model, times):
    length = times * model.seq_len
    g = torch.Generator().manual_seed(2)
    x = torch.randint(2, (3, length), generator=g)
    x[torch.rand(x.shape, generator=g) < 0.3] = MASK  # masked positions everywhere, as a decoder's steps leave them
    tau = torch.full((3,), 0.5)
    with torch.no_grad():
        full = model.predict(x, tau, None, None).tokens
        cache = model.new_cache(3)
        worst = 0.0
        for start in range(0, length, 4):
            window = slice(start, start + 4)
            incremental = model.predict(x[:, : start + 4], tau, None, None, cache=cache, window=window).tokens
            worst = max(worst, (incremental - full[:, window]).abs().max().item())
    assert worst < 1e-5, worst


def test_the_training_view_gives_each_block_given_the_clean_blocks_before_it(model):
    g = torch.Generator().manual_seed(3)
    x0 = torch.randint(2, (2, 16), generator=g)
    x_t = torch.where(torch.rand(x0.shape, generator=g) < 0.5, MASK, x0)
    tau = torch.full((2,), 0.5)
    with torch.no_grad():
        view = model.backbone(x_t, tau, None, None, context=x0).tokens
        for start in range(0, 16, 4):
            given = torch.cat([x0[:, :start], x_t[:, start : start + 4]], dim=1)  # clean blocks, then the noisy one
            alone = model.predict(given, tau, None, None).tokens[:, start:]
            assert (view[:, start : start + 4] - alone).abs().max() < 1e-5


def test_block_options_that_cannot_hold_together_are_refused_in_one_line():
    with pytest.raises(IncompatibleComponentsError, match=r"block_size=5 must divide the model's length 16.*1, 2, 4"):
        experiment(backbone={"block_size": 5})
    with pytest.raises(InvalidConfigError, match="token_time_conditioning=true with attention=block_causal"):
        experiment(backbone={"token_time_conditioning": True})
    with pytest.raises(InvalidConfigError, match="give both"):
        experiment(backbone={"attention": "bidirectional"})
    reg = registry.load()
    with pytest.raises(IncompatibleComponentsError, match="mmdit"):
        build_experiment(compose(["experiment=binsaw/coladd_joint_cpu", *TINY, "backbone.attention=block_causal",
                                  "backbone.block_size=4"], reg), reg)


@pytest.mark.slow  # seconds: the FLOPs of a composed experiment are measured
def test_ladd_flops_counts_the_block_pattern_pairs():
    net = flops_report(config(), registry.load()).backbone
    shape, layers, d, r = net.shape, 2, 64, 4.0
    assert (shape.layers, shape.length, shape.width) == (layers, 16, d)
    pairs = sum(4 * 4 * k for k in range(1, 5))  # block k (of 4) attends to its own and the k - 1 before: 4k keys
    assert net.block_pass_gflops * 1e9 == pytest.approx(layers * ((4 + 2 * r) * 16 * d**2 + 2 * pairs * d))
    assert net.block_step_gflops * 1e9 == pytest.approx(layers * ((4 + 2 * r) * 4 * d**2 + 2 * pairs / 4 * d))
    assert net.block_training_gflops * 1e9 == pytest.approx(layers * ((4 + 2 * r) * 32 * d**2 + 4 * pairs * d))
