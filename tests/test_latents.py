"""The latent channels: Co-LADD's Gaussian latent, Di-LADD's quantised latent, and MDLM's empty one."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ladd_plugins.coladd.latent import ContinuousLatent, ContinuousLatentConfig
from ladd_plugins.diladd.latent import DiscreteLatent, DiscreteLatentConfig
from ladd_plugins.mdlm.no_latent import NoLatent
from ladd_plugins.schedules.closed_form import (
    LinearSchedule,
    ScheduleConfig,
    VPSqrtSchedule,
)
from registry.errors import IncompatibleComponentsError
from registry.interfaces import Latent

CPU = torch.device("cpu")


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def continuous(**options: object) -> ContinuousLatent:
    return ContinuousLatent(ContinuousLatentConfig(**options), schedule=VPSqrtSchedule(ScheduleConfig()))


def discrete(**options: object) -> DiscreteLatent:
    config = DiscreteLatentConfig(**{"length": 3, "width": 8, "codebook_size": 16, **options})
    return DiscreteLatent(config, schedule=LinearSchedule(ScheduleConfig()))


def test_latents_implement_the_interface() -> None:
    for latent in (continuous(), discrete(), NoLatent(schedule=None)):
        assert isinstance(latent, Latent)


# ---- continuous


def test_continuous_encode_adds_sigma_lat_noise() -> None:
    latent = continuous(length=4, width=32)
    features = F.normalize(torch.randn(500, 4, 32), dim=-1)
    code = latent.encode(features)
    assert code.aux_loss is None and code.y0.shape == features.shape
    assert (code.y0 - features).std().item() == pytest.approx(0.01, rel=0.05)


def test_continuous_null_prior_and_layers() -> None:
    latent = continuous(length=2, width=5)
    assert torch.equal(latent.null(3, CPU), torch.zeros(3, 2, 5))
    assert latent.prior((3, 2, 5), CPU, gen()).shape == (3, 2, 5)
    hidden = latent.input_layer(16)(torch.randn(3, 2, 5))
    assert hidden.shape == (3, 2, 16)
    assert latent.output_layer(16)(hidden).shape == (3, 2, 5)


def test_continuous_process_round_trip() -> None:
    latent = continuous(length=2, width=5, weighting="elbo", eta=1.0)
    y0 = torch.randn(3, 2, 5)
    tau = torch.tensor([0.2, 0.5, 1.0])
    y_t = latent.corrupt(y0, tau, gen(1))
    assert y_t.shape == y0.shape
    assert (latent.loss(y0, y0, y_t, tau) == 0).all()
    assert (latent.loss(y0 + 1, y0, y_t, tau) > 0).all()
    assert torch.equal(latent.step(y_t, y0, tau, torch.zeros(3), gen(2)), y0)
    assert latent.horizon == 4000


# ---- discrete


def test_discrete_codes_are_nearest_by_cosine() -> None:
    latent = discrete().eval()
    features = torch.randn(6, 3, 8)
    code = latent.encode(features)
    assert code.y0.dtype == torch.long and code.y0.shape == (6, 3)
    assert code.y0.min() >= 0 and code.y0.max() < 16
    assert code.aux_loss is None
    codebook = F.normalize(latent.quantizer.codebook, dim=-1)
    nearest = (F.normalize(features, dim=-1) @ codebook.T).argmax(dim=-1)
    assert torch.equal(code.y0, nearest)


def test_discrete_commitment_loss_reaches_the_encoder() -> None:
    latent = discrete().train()
    features = torch.randn(6, 3, 8, requires_grad=True)
    code = latent.encode(features)
    assert code.aux_loss is not None and code.aux_loss.dim() == 0
    assert torch.isfinite(code.aux_loss) and code.aux_loss.item() > 0
    code.aux_loss.backward()
    assert features.grad is not None and features.grad.abs().sum() > 0


def test_discrete_codebook_moves_only_in_train_mode() -> None:
    latent = discrete(dead_code_threshold=0)
    before = latent.quantizer.codebook.clone()
    latent.eval()
    latent.encode(torch.randn(32, 3, 8))
    assert torch.equal(latent.quantizer.codebook, before)
    latent.train()
    latent.encode(torch.randn(32, 3, 8))
    assert not torch.equal(latent.quantizer.codebook, before)


def test_discrete_mask_state_and_process() -> None:
    latent = discrete()
    assert torch.equal(latent.null(4, CPU), torch.full((4, 3), 16))
    assert torch.equal(latent.prior((4, 3), CPU), torch.full((4, 3), 16))
    y0 = torch.randint(0, 16, (4, 3))
    y_t = latent.corrupt(y0, torch.tensor([0.0, 0.3, 0.7, 1.0]), gen(3))
    assert torch.equal(y_t[0], y0[0]) and (y_t[3] == 16).all()
    kept = y_t != 16
    assert torch.equal(y_t[kept], y0[kept])
    logits = torch.randn(4, 3, 16)
    assert latent.loss(logits, y0, y_t, torch.tensor([0.0, 0.3, 0.7, 1.0])).shape == (4,)
    y_s = latent.step(y_t, logits, torch.full((4,), 0.5), torch.zeros(4), gen(4))
    assert y_s.min() >= 0 and y_s.max() < 16


def test_discrete_backbone_input_uses_code_vectors_mask_vector_and_straight_through() -> None:
    latent = discrete()
    codes = torch.tensor([[0, 15, 16]])
    vectors = latent.backbone_input(codes)
    assert torch.equal(vectors[0, 0], latent.quantizer.codebook[0])
    assert torch.equal(vectors[0, 1], latent.quantizer.codebook[15])
    assert torch.equal(vectors[0, 2], latent.mask_vector)
    hidden = latent.input_layer(12)(vectors)
    assert hidden.shape == (1, 3, 12)
    assert latent.output_layer(12)(hidden).shape == (1, 3, 16)

    # Training: the token loss must reach the encoder features through the quantised vectors.
    latent.train()
    features = torch.nn.functional.normalize(torch.randn(4, latent.length, latent.width), dim=-1).requires_grad_()
    code = latent.encode(features)
    inputs = latent.backbone_input(code.y0, code)
    inputs.sum().backward()
    assert features.grad is not None and features.grad.abs().sum() > 0


# ---- none


def test_no_latent_is_empty_and_refuses_processes() -> None:
    latent = NoLatent(schedule=None)
    assert latent.length == 0 and latent.width == 0
    assert latent.null(3, CPU).shape == (3, 0)
    assert latent.encode(torch.zeros(3, 0, 0)).y0.shape == (3, 0)
    assert latent.prior((3, 0), CPU).shape == (3, 0)
    with pytest.raises(IncompatibleComponentsError, match="no latent channel"):
        latent.input_layer(8)
    with pytest.raises(IncompatibleComponentsError, match="no latent channel"):
        latent.loss(torch.zeros(3, 0), torch.zeros(3, 0), torch.zeros(3, 0), torch.zeros(3))


def test_discrete_latent_buffers_stay_out_of_autograd_after_training_steps() -> None:
    import copy

    latent = discrete()
    latent.train()
    for _ in range(3):
        features = torch.nn.functional.normalize(torch.randn(8, latent.length, latent.width), dim=-1).requires_grad_()
        code = latent.encode(features)
        (latent.backbone_input(code.y0, code).sum() + code.aux_loss).backward()
    attached = [name for name, buffer in latent.named_buffers() if buffer.requires_grad or buffer.grad_fn is not None]
    assert attached == []
    copy.deepcopy(latent)


def test_discrete_latent_syncs_its_codebook_when_launched_on_several_ranks(monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert discrete().quantizer._codebook.use_ddp
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not discrete().quantizer._codebook.use_ddp
