"""The learned DiT encoder: shape, unit norm, rightmost read-out and encoder-input dropout."""
from __future__ import annotations

import pytest
import torch

from ladd_plugins.encoders.dit_encoder import DiTEncoder, DiTEncoderConfig
from registry.interfaces import Encoder

B, S, K = 4, 12, 7


def encoder(**overrides) -> DiTEncoder:
    torch.manual_seed(0)
    config = DiTEncoderConfig(**{**dict(hidden=16, layers=2, heads=2, length=3, width=5), **overrides})
    return DiTEncoder(config, vocab_size=K, seq_len=S)


def tokens(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, K, (B, S), generator=torch.Generator().manual_seed(seed))


def embedded_inputs(model: DiTEncoder, x0: torch.Tensor, masked: torch.Tensor | None) -> torch.Tensor:
    """The embeddings the encoder's transformer receives (after input dropout)."""
    seen = []
    handle = model.trunk.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    model(x0, masked)
    handle.remove()
    return seen[0]


def test_outputs_are_unit_norm_vectors_of_shape_m_by_dl():
    model = encoder().eval()
    assert isinstance(model, Encoder)
    assert (model.length, model.width, model.trainable) == (3, 5, True)
    features = model(tokens())
    assert features.shape == (B, 3, 5)
    assert torch.allclose(features.norm(dim=-1), torch.ones(B, 3), atol=1e-5)


def test_reads_the_rightmost_positions():
    # at initialisation the adaLN-Zero blocks are the identity, so only the read-out positions matter
    model = encoder().eval()
    x0 = tokens()
    base = model(x0)
    early, late = x0.clone(), x0.clone()
    early[:, : S - 3] = (early[:, : S - 3] + 1) % K
    late[:, -1] = (late[:, -1] + 1) % K
    assert torch.equal(model(early), base)
    changed = model(late)
    assert torch.equal(changed[:, :2], base[:, :2]) and not torch.allclose(changed[:, 2], base[:, 2])


def test_attention_reaches_the_read_out_from_every_position():
    model = encoder().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x0 = tokens()
    early = x0.clone()
    early[:, 0] = (early[:, 0] + 1) % K
    assert not torch.allclose(model(early), model(x0))


def test_input_dropout_blanks_only_masked_positions_it_is_given():
    model = encoder(input_dropout_max=0.9, dropout=0.0)
    x0 = torch.randint(0, K, (64, S), generator=torch.Generator().manual_seed(1))
    masked = torch.rand(64, S, generator=torch.Generator().manual_seed(2)) < 0.5
    clean = model.embed(x0)

    model.train()
    torch.manual_seed(3)
    h = embedded_inputs(model, x0, masked)
    blanked = (h == 0).all(-1)
    assert not (blanked & ~masked).any()
    assert torch.equal(h[~blanked], clean[~blanked])
    rate = blanked.sum() / masked.sum()
    assert 0.3 < rate < 0.6  # p_r ~ U[0, 0.9] has mean 0.45
    per_sequence = blanked.sum(1) / masked.sum(1)
    assert per_sequence.std() > 0.1  # p_r is drawn per sequence, not once per batch

    assert torch.equal(embedded_inputs(model, x0, None), clean)
    assert torch.equal(embedded_inputs(encoder(dropout=0.0).train(), x0, masked), clean)


def test_backward_gives_finite_gradients():
    model = encoder(input_dropout_max=0.9).train()
    x0 = tokens()
    model(x0, torch.ones_like(x0, dtype=torch.bool)).sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert model.trunk.blocks[0].qkv.weight.grad is not None


def test_length_must_fit_the_sequence():
    with pytest.raises(ValueError, match="seq_len"):
        DiTEncoder(DiTEncoderConfig(length=S + 1), vocab_size=K, seq_len=S)
