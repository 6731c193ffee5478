"""DiT, MM-DiT and MLP denoisers and their shared layers, on tiny CPU models."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from ladd_plugins.backbones.causal import CausalTransformer
from ladd_plugins.backbones.dit import DiT, DiTConfig
from ladd_plugins.backbones.mlp import MLPDenoiser, MLPDenoiserConfig
from ladd_plugins.backbones.mmdit import MMDiT
from registry.errors import IncompatibleComponentsError
from registry.interfaces import Backbone, Channels
from registry.toolkit import attention, layers
from registry.toolkit.options import TransformerConfig

B, S, K, M, D_L = 3, 10, 5, 2, 6
SMALL = dict(hidden=16, layers=2, heads=2, cond_dim=8, dropout=0.1)


class FakeLatent:
    """Only what a backbone uses of a latent channel."""

    length, width = M, D_L

    def input_layer(self, width: int) -> nn.Module:
        return nn.Linear(D_L, width)

    def output_layer(self, width: int) -> nn.Module:
        return nn.Linear(width, D_L)


TOKENS = Channels(vocab_size=K, seq_len=S, latent=None)
LATENT = Channels(vocab_size=0, seq_len=0, latent=FakeLatent())
BOTH = Channels(vocab_size=K, seq_len=S, latent=FakeLatent())


def perturb(model: nn.Module) -> nn.Module:
    """Move every weight away from the adaLN-Zero initialisation so all paths carry signal."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x_t = torch.randint(0, K + 1, (B, S), generator=g)
    y_t = torch.randn(B, M, D_L, generator=g)
    return x_t, torch.rand(B, generator=g), y_t, torch.rand(B, generator=g)


def dit(channels: Channels, **overrides) -> DiT:
    torch.manual_seed(0)
    return DiT(DiTConfig(**{**SMALL, **overrides}), channels=channels)


def mmdit(**overrides) -> MMDiT:
    torch.manual_seed(0)
    return MMDiT(DiTConfig(**{**SMALL, **overrides}), channels=BOTH)


def mlp() -> MLPDenoiser:
    torch.manual_seed(0)
    return MLPDenoiser(MLPDenoiserConfig(hidden=16, layers=2, cond_dim=8), channels=LATENT)


def test_output_shapes():
    x_t, tau_x, y_t, tau_y = inputs()
    out = dit(TOKENS)(x_t, tau_x, None, None)
    assert out.tokens.shape == (B, S, K) and out.latent is None
    out = dit(LATENT)(None, None, y_t, tau_y)
    assert out.latent.shape == (B, M, D_L) and out.tokens is None
    out = mmdit()(x_t, tau_x, y_t, tau_y)
    assert out.tokens.shape == (B, S, K) and out.latent.shape == (B, M, D_L)
    out = mlp()(None, None, y_t, tau_y)
    assert out.latent.shape == (B, M, D_L) and out.tokens is None


def test_token_heads_start_uniform():
    x_t, tau_x, y_t, tau_y = inputs()
    assert torch.all(dit(TOKENS)(x_t, tau_x, None, None).tokens == 0)
    assert torch.all(mmdit()(x_t, tau_x, y_t, tau_y).tokens == 0)


@pytest.mark.parametrize("conditioned", [False, True])
def test_dit_token_time_conditioning(conditioned):
    model = perturb(dit(TOKENS, token_time_conditioning=conditioned))
    assert model.token_time_conditioned is conditioned
    x_t, _, _, _ = inputs()
    a = model(x_t, torch.full((B,), 0.1), None, None).tokens
    b = model(x_t, torch.full((B,), 0.9), None, None).tokens
    assert torch.allclose(a, b) is not conditioned


def test_latent_dit_is_time_conditioned():
    model = perturb(dit(LATENT))
    _, _, y_t, _ = inputs()
    a = model(None, None, y_t, torch.full((B,), 0.1)).latent
    b = model(None, None, y_t, torch.full((B,), 0.9)).latent
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("conditioned", [False, True])
def test_mmdit_token_time_conditioning(conditioned):
    model = perturb(mmdit(token_time_conditioning=conditioned))
    assert model.token_time_conditioned is conditioned
    x_t, _, y_t, tau_y = inputs()
    a = model(x_t, torch.full((B,), 0.1), y_t, tau_y)
    b = model(x_t, torch.full((B,), 0.9), y_t, tau_y)
    assert torch.allclose(a.tokens, b.tokens) is not conditioned
    assert torch.allclose(a.latent, b.latent) is not conditioned


def test_mmdit_channels_attend_to_each_other():
    model = perturb(mmdit())
    x_t, tau_x, y_t, tau_y = inputs()
    base = model(x_t, tau_x, y_t, tau_y)
    other_y = model(x_t, tau_x, y_t + 1.0, tau_y)
    assert not torch.allclose(base.tokens, other_y.tokens)
    x_other = x_t.clone()
    x_other[:, 0] = (x_other[:, 0] + 1) % (K + 1)
    assert not torch.allclose(base.latent, model(x_other, tau_x, y_t, tau_y).latent)


@pytest.mark.parametrize("build", [lambda: dit(TOKENS), lambda: mmdit()])
def test_attention_is_bidirectional(build):
    model = perturb(build())
    x_t, tau_x, y_t, tau_y = inputs()
    x_late = x_t.clone()
    x_late[:, -1] = (x_late[:, -1] + 1) % (K + 1)
    a = model(x_t, tau_x, y_t, tau_y).tokens[:, 0]
    b = model(x_late, tau_x, y_t, tau_y).tokens[:, 0]
    assert not torch.allclose(a, b)


def test_rope_scores_depend_only_on_relative_positions():
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, 7, 2, 8).unbind(0)  # [B, L, H, D]
    positions = torch.arange(7)

    def scores(pos):
        rope = layers.rotary(pos, 8)
        return torch.einsum("blhd,bmhd->bhlm", layers.apply_rotary(q, rope), layers.apply_rotary(k, rope))

    assert torch.allclose(scores(positions), scores(positions + 13), atol=1e-5)
    assert not torch.allclose(scores(positions), scores(positions.flip(0)), atol=1e-3)


def test_attention_matches_softmax_reference_on_cpu(monkeypatch):
    def no_flash(*args, **kwargs):
        raise AssertionError("flash-attn must not run on CPU tensors")

    monkeypatch.setattr(attention, "flash_attn_func", no_flash)
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 5, 3, 4).unbind(0)
    weights = torch.softmax(torch.einsum("blhd,bmhd->bhlm", q, k) / 2.0, dim=-1)
    expected = torch.einsum("bhlm,bmhd->blhd", weights, v).flatten(2)
    assert torch.allclose(layers.attention(q, k, v), expected, atol=1e-5)


@pytest.mark.parametrize(
    "build, channels",
    [
        (lambda c: DiT(DiTConfig(**SMALL), channels=c), BOTH),
        (lambda c: DiT(DiTConfig(**SMALL), channels=c), Channels(vocab_size=0, seq_len=0, latent=None)),
        (lambda c: MMDiT(DiTConfig(**SMALL), channels=c), TOKENS),
        (lambda c: MMDiT(DiTConfig(**SMALL), channels=c), LATENT),
        (lambda c: MLPDenoiser(MLPDenoiserConfig(), channels=c), TOKENS),
        (lambda c: MLPDenoiser(MLPDenoiserConfig(), channels=c), BOTH),
    ],
)
def test_wrong_channels_are_rejected(build, channels):
    with pytest.raises(IncompatibleComponentsError, match="denoises"):
        build(channels)


def test_dit_error_points_to_mmdit():
    with pytest.raises(IncompatibleComponentsError, match="mmdit"):
        DiT(DiTConfig(**SMALL), channels=BOTH)


@pytest.mark.parametrize("build", [lambda: dit(TOKENS), lambda: dit(LATENT), lambda: mmdit(), lambda: mlp()])
def test_backward_gives_finite_gradients_everywhere(build):
    model = build().train()
    assert isinstance(model, Backbone)
    x_t, tau_x, y_t, tau_y = inputs()
    x_t[0, 0] = K  # the mask embedding row gets a gradient too
    out = model(x_t, tau_x, y_t, tau_y)
    loss = sum(o.square().mean() + o.mean() for o in (out.tokens, out.latent) if o is not None)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def test_eval_is_deterministic_and_train_uses_dropout():
    model = perturb(mmdit())
    x_t, tau_x, y_t, tau_y = inputs()
    assert torch.equal(model(x_t, tau_x, y_t, tau_y).tokens, model(x_t, tau_x, y_t, tau_y).tokens)
    model.train()
    assert not torch.equal(model(x_t, tau_x, y_t, tau_y).tokens, model(x_t, tau_x, y_t, tau_y).tokens)


def test_models_run_in_float64():
    x_t, tau_x, y_t, tau_y = inputs()
    out = perturb(mmdit()).double()(x_t, tau_x.double(), y_t.double(), tau_y.double())
    assert out.tokens.dtype == torch.float64 and out.latent.dtype == torch.float64
    assert perturb(mlp()).double()(None, None, y_t.double(), tau_y.double()).latent.dtype == torch.float64


def causal() -> CausalTransformer:
    torch.manual_seed(0)
    return CausalTransformer(TransformerConfig(hidden=16, layers=2, heads=2, dropout=0.1), channels=TOKENS)


@pytest.mark.parametrize("build", [lambda: dit(TOKENS), lambda: mmdit(), causal])
def test_forward_at_rows_equals_the_full_forward_at_those_rows_bitwise(build):
    model = perturb(build())
    x_t, tau_x, y_t, tau_y = inputs()
    y_t, tau_y = (y_t, tau_y) if isinstance(model, MMDiT) else (None, None)
    rows = x_t == K
    rows[0] = True  # one full row and the masked positions of the others, as the samplers ask
    full, on_rows = model(x_t, tau_x, y_t, tau_y), model(x_t, tau_x, y_t, tau_y, rows)
    assert on_rows.tokens.shape == (int(rows.sum()), K)
    assert torch.equal(on_rows.tokens, full.tokens[rows])
    assert (on_rows.latent is None) == (full.latent is None)
    if full.latent is not None:
        assert torch.equal(on_rows.latent, full.latent)


def test_token_only_backbones_refuse_a_latent_only_call_by_name():
    _, _, y_t, tau_y = inputs()
    with pytest.raises(ValueError, match="'causal' predicts tokens: it needs x_t"):
        causal()(None, None, y_t, tau_y)
