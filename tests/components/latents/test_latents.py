"""The latents (what y is): Co-LADD's Gaussian posterior, and codes from VQ, residual VQ, FSQ and LFQ, with the
processes they pair with."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import registry
from ladd_plugins.latents.config import FSQLatentConfig, LFQLatentConfig, ResidualVQLatentConfig
from ladd_plugins.latents.continuous import ContinuousLatent, ContinuousLatentConfig
from ladd_plugins.latents.quantizers import DiscreteLatentConfig, FSQLatent, LFQLatent, ResidualVQLatent, VQLatent
from ladd_plugins.processes.masked import MaskedProcess, MaskedProcessConfig
from ladd_plugins.processes.vp import VPGaussianProcess, VPProcessConfig
from ladd_plugins.schedules.closed_form import (
    LinearSchedule,
    ScheduleConfig,
    VPSqrtSchedule,
)
from registry import ComponentSpec
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.export import export
from registry.engine.loading import from_pretrained
from registry.errors import IncompatibleComponentsError
from registry.host.component import Component, Origin
from registry.host.registry import Registry
from registry.interfaces import IDS, VECTORS, Latent
from registry.training.loop import train

CPU = torch.device("cpu")


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def continuous(**options: object) -> ContinuousLatent:
    return ContinuousLatent(ContinuousLatentConfig(**options))


def discrete(**options: object) -> VQLatent:
    return VQLatent(DiscreteLatentConfig(**{"length": 3, "width": 8, "codebook_size": 16, **options}))


def codes_process(latent: Latent) -> MaskedProcess:
    return MaskedProcess(
        MaskedProcessConfig(weighting="constant"), schedule=LinearSchedule(ScheduleConfig()), vocab_size=latent.values
    )


def test_latents_implement_the_interface_and_declare_what_they_produce() -> None:
    assert continuous().produces == VECTORS and continuous().values is None
    for latent in (
        discrete(),
        ResidualVQLatent(ResidualVQLatentConfig(width=8)),
        FSQLatent(FSQLatentConfig(width=8)),
        LFQLatent(LFQLatentConfig(width=8)),
    ):
        assert isinstance(latent, Latent) and latent.produces == IDS
    assert VPGaussianProcess.diffuses == VECTORS and MaskedProcess.diffuses == IDS


# ---- continuous


def test_continuous_encode_adds_sigma_lat_noise() -> None:
    latent = continuous(length=4, width=32)
    features = F.normalize(torch.randn(500, 4, 32), dim=-1)
    code = latent.encode(features)
    assert code.aux_loss is None and code.y0.shape == features.shape
    assert (code.y0 - features).std().item() == pytest.approx(0.01, rel=0.05)


def test_continuous_null_and_layers() -> None:
    latent = continuous(length=2, width=5)
    assert torch.equal(latent.null(3, CPU), torch.zeros(3, 2, 5))
    hidden = latent.input_layer(16)(torch.randn(3, 2, 5))
    assert hidden.shape == (3, 2, 16)
    assert latent.output_layer(16)(hidden).shape == (3, 2, 5)


def test_continuous_latent_with_the_vp_process_round_trip() -> None:
    latent = continuous(length=2, width=5)
    process = VPGaussianProcess(VPProcessConfig(weighting="elbo", eta=1.0), VPSqrtSchedule(ScheduleConfig()))
    y0 = latent.encode(torch.randn(3, 2, 5)).y0
    tau = torch.tensor([0.2, 0.5, 1.0])
    y_t = process.corrupt(y0, tau, gen(1))
    assert y_t.shape == y0.shape
    assert (process.loss(y0, y0, y_t, tau) == 0).all()
    assert (process.loss(y0 + 1, y0, y_t, tau) > 0).all()
    assert torch.equal(process.step(y_t, y0, tau, torch.zeros(3), gen(2)), y0)
    assert process.horizon == 4000


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


def test_discrete_mask_state_and_the_masked_process_on_codes() -> None:
    latent = discrete()
    process = codes_process(latent)
    assert torch.equal(latent.null(4, CPU), torch.full((4, 3), 16))
    assert torch.equal(process.prior((4, 3), CPU), torch.full((4, 3), 16))
    y0 = torch.randint(0, 16, (4, 3))
    y_t = process.corrupt(y0, torch.tensor([0.0, 0.3, 0.7, 1.0]), gen(3))
    assert torch.equal(y_t[0], y0[0]) and (y_t[3] == 16).all()
    kept = y_t != 16
    assert torch.equal(y_t[kept], y0[kept])
    logits = latent.output_layer(12)(torch.randn(4, 3, 12))
    assert process.loss(logits, y0, y_t, torch.tensor([0.0, 0.3, 0.7, 1.0])).shape == (4,)
    y_s = process.step(y_t, logits, torch.full((4,), 0.5), torch.zeros(4), gen(4))
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


# ---- residual VQ, FSQ, LFQ


def test_residual_vq_packs_its_stage_codes_as_base_c_digits() -> None:
    latent = ResidualVQLatent(ResidualVQLatentConfig(length=3, width=8, codebook_size=4, quantizers=3)).eval()
    assert latent.values == 4**3
    features = torch.randn(5, 3, 8)
    codes = latent.encode(features).y0
    _, stages, _ = latent.quantizer(features)
    assert torch.equal(codes, stages[..., 0] + 4 * stages[..., 1] + 16 * stages[..., 2])
    assert codes.dtype == torch.long and 0 <= int(codes.min()) and int(codes.max()) < 64


@pytest.mark.parametrize(
    "latent",
    [
        ResidualVQLatent(ResidualVQLatentConfig(length=3, width=8, codebook_size=4, quantizers=2)),
        FSQLatent(FSQLatentConfig(length=3, width=8, levels=[5, 4, 3])),
        LFQLatent(LFQLatentConfig(length=3, width=8, codebook_size=16)),
    ],
    ids=["rvq", "fsq", "lfq"],
)
def test_code_vectors_of_the_ids_are_the_quantised_vectors(latent) -> None:
    """Sampling embeds ids by ``vectors``: it must give what the quantiser gave the encoder's features."""
    latent.eval()
    features = torch.randn(6, 3, 8)
    code = latent.encode(features)
    assert code.y0.dtype == torch.long and int(code.y0.max()) < latent.values
    assert torch.allclose(latent.vectors(code.y0), code.embedding, atol=1e-5)
    masked = code.y0.clone()
    masked[:, 1] = latent.values
    inputs = latent.backbone_input(masked)
    assert torch.equal(inputs[:, 1], latent.mask_vector.expand(6, 8))
    assert torch.allclose(inputs[:, 0], code.embedding[:, 0], atol=1e-5)
    assert latent.output_layer(12)(torch.randn(6, 3, 12)).shape == (6, 3, latent.values)


def test_fsq_ids_count_every_level_combination() -> None:
    latent = FSQLatent(FSQLatentConfig(length=1, width=8, levels=[3, 4])).eval()
    seen = set(latent.encode(torch.randn(4000, 1, 8) * 3).y0.flatten().tolist())
    assert latent.values == 12 and seen == set(range(12))


def test_lfq_aux_loss_only_in_training_and_it_reaches_the_features() -> None:
    latent = LFQLatent(LFQLatentConfig(length=2, width=8, codebook_size=16, commitment=0.25))
    features = torch.randn(6, 2, 8, requires_grad=True)
    code = latent.train().encode(features)
    code.aux_loss.backward()
    assert features.grad is not None and features.grad.abs().sum() > 0
    assert latent.eval().encode(features).aux_loss is None


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


# ---- pairing a latent with its process


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            ["experiment=binsaw/diladd_joint_cpu", "latent=fsq", "latent_process=vp"],
            "latent_process 'vp' diffuses vectors but latent 'fsq' holds ids",
        ),
        (
            ["experiment=binsaw/coladd_joint_cpu", "latent_process=masked"],
            "latent_process 'masked' diffuses ids but latent 'continuous' holds vectors",
        ),
        (["experiment=binsaw/mdlm_cpu", "process=vp"], "process 'vp' diffuses vectors but the token channel holds ids"),
    ],
)
def test_a_process_that_cannot_diffuse_the_state_is_refused_with_the_valid_pairings(overrides, named) -> None:
    reg = registry.load()
    with pytest.raises(IncompatibleComponentsError) as refused:
        build_experiment(compose(overrides, reg).plain(), reg)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(named)
    assert "latents producing vectors (continuous) with processes vp" in message
    assert message.endswith("latents producing ids (discrete, fsq, lfq, rvq) with processes masked")


def test_no_latent_means_no_latent_channel_and_a_latent_needs_its_process() -> None:
    reg = registry.load()
    model = build_experiment(compose(["experiment=binsaw/mdlm_cpu"], reg).plain(), reg).model
    assert model.latent is None and model.latent_process is None and not model.has_latent
    without_process = {
        **compose(["experiment=binsaw/diladd_joint_cpu", "latent=fsq"], reg).plain(),
        "latent_process": None,
    }
    with pytest.raises(
        IncompatibleComponentsError, match="latent 'fsq' holds ids and needs a process: set latent_process=NAME"
    ):
        build_experiment(without_process, reg)
    with pytest.raises(IncompatibleComponentsError, match="latent_process is set but there is no latent channel"):
        build_experiment(compose(["experiment=binsaw/mdlm_cpu", "latent_process=masked"], reg).plain(), reg)


def test_a_config_from_before_the_latent_process_slot_is_refused_not_misread() -> None:
    reg = registry.load()
    old = compose(["experiment=binsaw/coladd_joint_cpu"], reg).plain()
    del old["latent_process"]
    old["latent"].update(horizon=4000, weighting="constant", eta=0.0)
    with pytest.raises(IncompatibleComponentsError, match="^this config predates the latent_process slot"):
        build_experiment(old, reg)


def test_latent_null_on_the_command_line_removes_the_latent_channel() -> None:
    reg = registry.load()
    cfg = compose(
        ["experiment=binsaw/mdlm_cpu", "latent=continuous", "latent_process=vp", "latent=null", "latent_process=null"],
        reg,
    ).plain()
    assert cfg["latent"] is None and cfg["latent_process"] is None
    assert build_experiment(cfg, reg).model.latent is None


@pytest.mark.parametrize("name", ["fsq", "lfq", "rvq"])
def test_a_code_latent_trains_exports_and_loads_back_to_the_same_samples(name, tmp_path) -> None:
    reg = registry.load()
    overrides = [
        "experiment=binsaw/diladd_joint_cpu",
        f"latent={name}",
        "dataset.seq_len=16",
        "train.batch_size=8",
        "train.warmup_steps=1",
        "train.progress=false",
        "train.stages=[{steps:2},{steps:2,lambda_latent:1.0,freeze_encoder:true}]",
    ]
    trained = train(compose(overrides, reg), tmp_path / "run", reg)
    loaded = from_pretrained(export(tmp_path / "run", tmp_path / "export", reg), reg)
    samples = [e.sampler.sample(e.model.eval(), 4, 4, torch.Generator().manual_seed(1)) for e in (trained, loaded)]
    assert torch.equal(samples[0].tokens, samples[1].tokens) and torch.equal(samples[0].latent, samples[1].latent)
    assert int(samples[0].latent.max()) < trained.model.latent.values


class Undeclared(ContinuousLatent):
    produces = None


def test_a_latent_that_declares_no_state_is_refused_in_one_line() -> None:
    builtin = registry.load()
    spec = ComponentSpec("latent", "undeclared", Undeclared, ContinuousLatentConfig)
    reg = Registry([*builtin, Component(spec, Origin("tests"))], config_dirs=builtin.config_dirs)
    cfg = compose(["experiment=binsaw/coladd_joint_cpu"], reg).plain()
    cfg["latent"]["name"] = "undeclared"
    with pytest.raises(
        IncompatibleComponentsError, match="^latent 'undeclared' does not declare the state it produces"
    ):
        build_experiment(cfg, reg)
