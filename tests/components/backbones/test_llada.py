"""The llada backbone: LLaDA-8B's size, Dream's variant against a direct implementation of a Qwen2-layout network,
ladd's mask mapped to the network's own, a latent stream beside an unchanged token stream, refused options."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from support import FakeLatent

import registry
from ladd_plugins.backbones.llada import LLaDA, LLaDAConfig
from registry.config.composition import compose
from registry.errors import IncompatibleComponentsError, InvalidConfigError
from registry.interfaces import Channels

K, S = 20, 12
M, D_L = FakeLatent.length, FakeLatent.width


def test_the_llada_8b_preset_builds_llada_8b():
    settings = compose(["experiment=llada/llada_8b"], registry.load())
    options = {k: v for k, v in settings.selection("backbone").items() if k != "name"}
    with torch.device("meta"):
        network = LLaDA(LLaDAConfig(**options), Channels(126349, 1024, None))
    d, inner, rows, layers = 4096, 12288, 126464, 32
    published = 2 * rows * d + layers * (4 * d * d + 3 * d * inner + 2 * d) + d  # embedding, head, blocks, final norm
    assert sum(p.numel() for p in network.parameters()) == published == 8_015_581_184
    assert network.transformer_shape().mlp_ratio == 4.5, "a SwiGLU of 3 x 12288 costs a 2-matrix MLP of 18432"


def _dream_reference(network: LLaDA, ids: torch.Tensor, heads: int, kv_heads: int, theta: float, eps: float):
    """Qwen2's forward written out (Dream-7B's network): GQA, biased q/k/v, RMSNorm, SwiGLU, logits shifted by one."""
    w = {name: t.detach().double() for name, t in network.state_dict().items()}

    def norm(x, weight):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    def rope(x):  # [B, H, L, Dh]
        dim = x.shape[-1]
        angles = torch.outer(torch.arange(x.shape[2]).double(), theta ** (-torch.arange(0, dim, 2).double() / dim))
        cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
        return x * cos + torch.cat([-x[..., dim // 2:], x[..., : dim // 2]], -1) * sin

    x = w["embed.weight"][ids]
    batch, length, d = x.shape
    dh = d // heads
    for index in range(len(network.blocks)):
        b = f"blocks.{index}."
        h = norm(x, w[b + "attn_norm.weight"])
        q = (h @ w[b + "attn.q.weight"].T + w[b + "attn.q.bias"]).view(batch, length, heads, dh).transpose(1, 2)
        k = (h @ w[b + "attn.k.weight"].T + w[b + "attn.k.bias"]).view(batch, length, kv_heads, dh).transpose(1, 2)
        v = (h @ w[b + "attn.v.weight"].T + w[b + "attn.v.bias"]).view(batch, length, kv_heads, dh).transpose(1, 2)
        k, v = k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)
        scores = rope(q) @ rope(k).transpose(-1, -2) / math.sqrt(dh)
        x = x + (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, d) @ w[b + "attn.out.weight"].T
        h = norm(x, w[b + "ff_norm.weight"])
        x = x + (F.silu(h @ w[b + "ff.gate.weight"].T) * (h @ w[b + "ff.up.weight"].T)) @ w[b + "ff.down.weight"].T
    logits = norm(x, w["norm.weight"]) @ w["head.weight"].T
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


def test_dreams_variant_equals_a_direct_qwen2_forward_with_shifted_logits():
    config = LLaDAConfig(hidden=32, layers=2, heads=4, kv_heads=2, mlp_hidden=40, rope_theta=1e6, norm_eps=1e-6,
                         qkv_bias=True, shift_logits=True, vocab_rows=24, mask_id=21)
    torch.manual_seed(0)
    network = LLaDA(config, Channels(K, S, None)).eval()
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    ids = torch.randint(0, K + 1, (3, S))  # ladd's mask K among them
    with torch.no_grad():
        ours = network(ids, None, None, None).tokens
        at_rows = network(ids, None, None, None, ids == K).tokens
    reference = _dream_reference(network, torch.where(ids == K, 21, ids), 4, 2, 1e6, 1e-6)
    assert ours.shape == (3, S, K) and (ours.double() - reference[..., :K]).abs().max() < 1e-5
    # the head at the masked rows is a product of another shape than the full pass's, which a CPU's kernels may sum in
    # another order: bitwise equal with AVX-512's, 2.4e-7 apart (two ulps of these logits, |logit| < 1.4) with AVX2's
    # or the baseline's (ATEN_CPU_CAPABILITY), so the bound is float32 rounding with a margin, not bitwise equality
    torch.testing.assert_close(at_rows, ours[ids == K], rtol=0, atol=2e-6)


def test_ladds_mask_is_the_networks_own_and_gets_no_probability():
    network = LLaDA(LLaDAConfig(vocab_rows=30, mask_id=7), Channels(K, S, None)).eval()
    ids = torch.randint(0, K, (2, S))
    masked = ids.clone()
    masked[:, 3] = K
    own = ids.clone()
    own[:, 3] = 7
    with torch.no_grad():
        assert torch.equal(network(masked, None, None, None).tokens, network(own, None, None, None).tokens)
        assert torch.isneginf(network(masked, None, None, None).tokens[..., 7]).all()


def test_a_latent_stream_joins_attention_and_the_token_stream_keeps_its_names():
    plain = LLaDA(LLaDAConfig(), Channels(K, S, None))
    joint = LLaDA(LLaDAConfig(cond_dim=8), Channels(K, S, FakeLatent()))
    plain_names = {name for name, _ in plain.named_parameters()}
    assert plain_names == {n for n, _ in joint.named_parameters() if not n.startswith("latent.")}
    assert not joint.token_time_conditioned
    joint.load_state_dict(plain.state_dict(), strict=False)
    ids, tau = torch.randint(0, K + 1, (2, S)), torch.full((2,), 0.4)
    y = [torch.randn(2, M, D_L, generator=torch.Generator().manual_seed(seed)) for seed in (0, 1)]
    with torch.no_grad():
        one, other = (joint(ids, tau, latent, tau) for latent in y)
    assert one.latent is not None and one.latent.shape == (2, M, D_L)
    assert not torch.allclose(one.tokens, other.tokens), "the tokens attend to the latent slots"


@pytest.mark.parametrize("variant", ["llada", "dream", "latent"])
@pytest.mark.parametrize("window", [slice(4, 8), slice(4, None), slice(0, 3), slice(1, 5)])
def test_a_windowed_pass_over_unchanged_inputs_equals_the_full_pass(variant, window):
    dream = {"kv_heads": 2, "qkv_bias": True, "shift_logits": True, "vocab_rows": 24, "mask_id": 21}
    variant_options = dream if variant == "dream" else {}
    config = LLaDAConfig(hidden=32, layers=2, heads=4, mlp_hidden=40, cond_dim=8, **variant_options)
    torch.manual_seed(0)
    network = LLaDA(config, Channels(K, S, FakeLatent() if variant == "latent" else None)).eval()
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    ids = torch.randint(0, K + 1, (3, S), generator=torch.Generator().manual_seed(1))
    ids[:, 2:9:2] = K  # masked positions in every window
    y, tau = (torch.randn(3, M, D_L), torch.full((3,), 0.3)) if variant == "latent" else (None, None)
    rows = torch.zeros_like(ids, dtype=torch.bool)
    rows[:, window] = ids[:, window] == K
    with torch.no_grad():
        full = network(ids, None, y, tau)
        cache = network.new_cache(3, ids.device)
        network(ids, None, y, tau, cache=cache)
        windowed = network(ids, None, y, tau, cache=cache, window=window)
        at_rows = network(ids, None, y, tau, rows, cache=cache, window=window)
    assert windowed.tokens.shape == full.tokens[:, window].shape
    assert (windowed.tokens - full.tokens[:, window]).abs().max() < 1e-5
    assert (at_rows.tokens - full.tokens[rows]).abs().max() < 1e-5
    if variant == "latent":  # an open-ended window recomputes the latent slots; a closed one leaves them
        assert (windowed.latent is not None) == (window.stop is None)
        if window.stop is None:
            assert (windowed.latent - full.latent).abs().max() < 1e-5


def test_a_windowed_pass_after_the_tokens_changed_reads_the_stale_keys_of_the_rest():
    network = LLaDA(LLaDAConfig(hidden=32, layers=2, heads=4, mlp_hidden=40), Channels(K, S, None)).eval()
    ids = torch.randint(0, K, (1, S), generator=torch.Generator().manual_seed(2))
    changed = ids.clone()
    changed[:, 0] = (ids[:, 0] + 1) % K  # outside the window: its keys stay the cached ones
    with torch.no_grad():
        cache = network.new_cache(1, ids.device)
        network(ids, None, None, None, cache=cache)
        approximate = network(changed, None, None, None, cache=cache, window=slice(6, 12)).tokens
        stale = network(ids, None, None, None).tokens[:, 6:]
        fresh = network(changed, None, None, None).tokens[:, 6:]
    assert (approximate - stale).abs().max() < 1e-5 and (approximate - fresh).abs().max() > 1e-4


@pytest.mark.parametrize("options, message", [
    ({"vocab_rows": 30}, "give both"),
    ({"vocab_rows": 30, "mask_id": 30}, "backbone.mask_id=30 is out of range"),
    ({"heads": 4, "kv_heads": 3}, "backbone.kv_heads=3 must divide backbone.heads=4"),
    ({"hidden": 30, "heads": 4}, "must split into backbone.heads=4 heads of even width"),
])
def test_options_that_make_no_network_are_refused(options, message):
    with pytest.raises(InvalidConfigError, match=message):
        LLaDAConfig(**options)


def test_a_table_without_room_for_the_data_is_refused():
    with pytest.raises(IncompatibleComponentsError, match="holds fewer ids than the data's 20 tokens"):
        LLaDA(LLaDAConfig(vocab_rows=16, mask_id=3), Channels(K, S, None))
    with pytest.raises(IncompatibleComponentsError, match="denoises tokens"):
        LLaDA(LLaDAConfig(), Channels(0, 0, FakeLatent()))
