"""LoRA and parameters frozen by name (``engine.adapters``) on tiny networks, against counts and logits made here."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch import nn

import registry
from registry.config.composition import compose
from registry.config.settings import LoraConfig, TrainConfig
from registry.engine.adapters import adapt, matches, merge_adapters, save_adapted, trained_state
from registry.engine.assembly import build_experiment
from registry.errors import InvalidConfigError, LaddError
from registry.interfaces import Backbone

HIDDEN, LAYERS, RANK = 16, 2, 3
TINY_DIT = [
    "experiment=binsaw/mdlm_cpu", "dataset.seq_len=8", f"backbone.hidden={HIDDEN}", f"backbone.layers={LAYERS}",
    "backbone.heads=2",
]


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.fixture(scope="module")
def tiny(reg):
    """A tiny DiT's settings, composed once."""
    return compose(TINY_DIT, reg)


def _model(reg, settings):
    torch.manual_seed(0)
    return build_experiment(settings, reg).model


def _train(**options) -> TrainConfig:
    lora = options.pop("lora", {})
    return TrainConfig(lora=LoraConfig(**lora), **options)


def _randomise(model: nn.Module) -> None:
    """Every weight away from its (often zero) initialisation, so that every layer and adapter acts."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)


def test_patterns_match_runs_of_name_parts():
    assert matches("backbone.trunk.blocks.3.qkv", "qkv")
    assert matches("backbone.trunk.blocks.3.qkv", "blocks.*.qkv")
    assert matches("backbone.trunk.blocks.3.qkv.weight", "backbone")  # everything under a module
    assert not matches("backbone.trunk.blocks.3.adaln.proj", "blocks.*.proj")  # * is one part, not several
    assert not matches("backbone.trunk.blocks.3.qkv", "qk")  # whole parts, not prefixes of them
    assert matches("backbone.blocks.0.attn.q", "attn.[qkv]")


def test_lora_trains_the_adapters_alone_and_their_count_is_rank_times_widths(reg, tiny):
    model = _model(reg, tiny)
    before = sum(p.numel() for p in model.parameters())
    base = adapt(model, _train(lora={"rank": RANK}))  # the DiT's own targets: attention's qkv and proj
    trained = {name: p for name, p in model.named_parameters() if p.requires_grad}
    # qkv maps d to 3d and proj d to d: an adapter of rank r has r * (fan_in + fan_out) values
    expected = LAYERS * RANK * ((HIDDEN + 3 * HIDDEN) + (HIDDEN + HIDDEN))
    assert sum(p.numel() for p in trained.values()) == expected
    assert all(".lora_A." in name or ".lora_B." in name for name in trained)
    assert {name.split(".lora_")[0] for name in trained} == {
        f"backbone.trunk.blocks.{layer}.{part}" for layer in range(LAYERS) for part in ("qkv", "proj")
    }
    assert base is not None and base.adapted == 2 * LAYERS and base.parameters == before
    assert sum(p.numel() for p in model.parameters() if not p.requires_grad) == before


def test_full_and_freeze_patterns_choose_whole_parameters(reg, tiny):
    model = _model(reg, tiny)
    embedding = model.backbone.embed.weight.numel()
    adapt(model, _train(lora={"rank": RANK, "full": ["backbone.embed"]}, freeze=["final"]))
    assert model.backbone.embed.weight.requires_grad
    assert not any(p.requires_grad for p in model.backbone.final.parameters())
    lora = sum(p.numel() for name, p in model.named_parameters() if "lora_" in name)
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == lora + embedding

    frozen_only = _model(reg, tiny)
    base = adapt(frozen_only, _train(freeze=["blocks.0"]))
    assert base is not None and base.adapted == 0
    assert {n for n, p in frozen_only.named_parameters() if not p.requires_grad} == {
        n for n, _ in frozen_only.named_parameters() if n.startswith("backbone.trunk.blocks.0.")
    }
    assert set(trained_state(frozen_only, base)) == set(frozen_only.state_dict()) - set(base.frozen)


def test_merged_and_unmerged_networks_give_the_same_logits(reg, tiny):
    model = _model(reg, tiny)
    adapt(model, _train(lora={"rank": RANK, "alpha": 2.0 * RANK, "targets": ["qkv", "blocks.*.proj", "mlp.mlp.0"]}))
    _randomise(model)
    model.eval()
    x_t = torch.randint(0, 3, (4, 8))
    tau = torch.rand(4)
    plain = copy.deepcopy(model)  # the same network with its adapters' output at zero, to see that they act
    with torch.no_grad():
        for name, parameter in plain.named_parameters():
            if ".lora_B." in name:
                parameter.zero_()
        adapted = model.predict(x_t, tau, None, None).tokens
        without = plain.predict(x_t, tau, None, None).tokens
        assert merge_adapters(model) == 3 * LAYERS
        merged = model.predict(x_t, tau, None, None).tokens
    assert not any("lora_" in name or "base_layer" in name for name in model.state_dict())
    assert (adapted - without).abs().max() > 1e-2, "the adapters change the logits"
    assert (adapted - merged).abs().max() < 1e-5


def test_an_adapter_over_another_base_is_refused_before_anything_changes(reg, tiny, tmp_path):
    model = _model(reg, tiny)
    settings = _train(lora={"rank": RANK})
    base = adapt(model, settings)
    assert base is not None
    other = _model(reg, tiny)
    with torch.no_grad():
        other.backbone.embed.weight[0, 0] += 1.0  # one value of the base differs
    names = list(other.state_dict())
    with pytest.raises(LaddError, match=r"^the adapter was trained over a base whose frozen weights have SHA-256 "
                                        r"[0-9a-f]{16}\.\.\., but the base here has [0-9a-f]{16}\.\.\..*; load it"):
        adapt(other, settings, expected=(base.digest, "the adapter", "load it onto its own base"))
    assert list(other.state_dict()) == names, "no adapter was added"
    path = save_adapted(model, base, tmp_path / "adapter.safetensors")
    same = _model(reg, tiny)
    twin = adapt(same, settings, expected=(base.digest, "the adapter", "load it onto its own base"))
    assert twin is not None and twin.digest == base.digest and path.is_file()


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"lora": {"rank": RANK, "targets": ["attn.q"]}}, InvalidConfigError,
         r"^train\.lora\.targets\[0\]='attn\.q' matches no linear layer or embedding of the model; they are named "
         r"like backbone\.embed, backbone\.trunk\.blocks\.N\.qkv, "),
        ({"freeze": ["encoder"]}, InvalidConfigError,
         r"^train\.freeze\[0\]='encoder' matches no parameter of the model; they are named like backbone\."),
        ({"lora": {"rank": RANK, "full": ["embed"]}, "freeze": ["embed"]}, InvalidConfigError,
         r"^train\.freeze and train\.lora\.full both name backbone\.embed\.weight"),
    ],
)
def test_patterns_that_name_nothing_or_clash_are_refused_in_one_line(reg, tiny, options, error, message):
    with pytest.raises(error, match=message) as refused:
        adapt(_model(reg, tiny), _train(**options))
    assert "\n" not in str(refused.value)


def test_a_backbone_without_adapter_targets_needs_them_named():
    class Bare(Backbone):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 4)

        def forward(self, x_t, tau_x, y_t, tau_y, rows=None):
            raise NotImplementedError

    holder = nn.Module()
    holder.backbone = Bare()
    with pytest.raises(InvalidConfigError, match=r"no backbone declares adapter targets \(Backbone\.adapter_targets\)"
                                                 r": name the modules to adapt, .* among backbone\.layer$"):
        adapt(holder, _train(lora={"rank": 2}))
    assert adapt(holder, _train(lora={"rank": 2, "targets": ["layer"]})).adapted == 1


def test_adapter_options_without_adapters_are_refused():
    with pytest.raises(InvalidConfigError, match=r"^train\.lora\.targets is set but train\.lora\.rank=0"):
        _train(lora={"targets": ["qkv"]})
    with pytest.raises(InvalidConfigError, match=r"^train\.frozen_dtype=bfloat16 but nothing is frozen"):
        _train(frozen_dtype="bfloat16")
    with pytest.raises(InvalidConfigError, match=r"^train\.lora\.targets\[0\]='blocks\.\.q' is not a name pattern"):
        _train(lora={"rank": 2, "targets": ["blocks..q"]})


@pytest.mark.slow
def test_every_built_in_backbone_declares_layers_and_targets_that_exist(reg):
    for preset in ("binsaw/mdlm_cpu", "binsaw/coladd_joint_cpu", "binsaw/coladd_seq_cpu", "binsaw/ar_cpu"):
        model = _model(reg, compose([f"experiment={preset}", *TINY_DIT[1:]], reg))
        backbones = [m for m in model.modules() if isinstance(m, Backbone)]
        assert all(list(b.layers()) for b in backbones), preset
        base = adapt(model, _train(lora={"rank": 1}))
        assert base is not None and base.adapted > 0, preset


def test_a_frozen_base_saves_nothing_of_itself(reg, tiny, tmp_path):
    model = _model(reg, tiny)
    base = adapt(model, dataclasses.replace(_train(lora={"rank": RANK, "full": ["backbone.condition"]})))
    assert base is not None
    saved = trained_state(model, base)
    assert set(saved) == {name for name in model.state_dict() if "lora_" in name} | {"backbone.condition"}
    assert not set(saved) & base.frozen
