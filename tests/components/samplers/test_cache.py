"""The approximate key-value cache of confidence decoding: a windowed pass over unchanged inputs equals the full pass,
refreshing at every step equals uncached decoding token for token, and what a cached step costs is what it computes
(token forwards counted against a closed form, FLOPs against FlopCounterMode)."""
from __future__ import annotations

import pytest
import torch
from support import TINY
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import registry
from ladd_plugins.processes.masked import MaskedProcess, MaskedProcessConfig
from ladd_plugins.schedules.closed_form import LinearSchedule, ScheduleConfig
from registry.config.composition import compose
from registry.config.settings import Objective
from registry.engine.assembly import build_experiment
from registry.engine.compute import counting
from registry.engine.model import DiffusionModel
from registry.interfaces import CachingBackbone, Denoised, TransformerShape
from registry.toolkit.attention import KVCache


def _model(variant: str, seq_len: int, *overrides: str):
    """A sawtooth preset's model with random (not zero-initialised) weights, so that every head matters."""
    reg = registry.load()
    torch.manual_seed(0)
    cfg = compose([f"experiment=binsaw/{variant}_cpu", *TINY, f"dataset.seq_len={seq_len}", *overrides], reg)
    model = build_experiment(cfg, reg).model.eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model


@pytest.mark.parametrize("variant", ["mdlm", "coladd_seq"])
@pytest.mark.parametrize("window", [slice(8, 16), slice(8, None), slice(0, 4)])
def test_a_windowed_pass_over_unchanged_inputs_equals_the_full_pass(variant, window):
    model = _model(variant, 24)
    x = torch.randint(3, (2, 24), generator=torch.Generator().manual_seed(0)).clamp(max=1)
    x[:, 10:20] = model.vocab_size  # some masked positions
    tau = torch.full((2,), 0.5)
    y = None if model.latent is None else torch.nn.functional.normalize(torch.randn(2, 1, 32), dim=-1)
    tau_y = None if y is None else torch.zeros(2)
    rows = torch.zeros_like(x, dtype=torch.bool)
    rows[:, window] = x[:, window] == model.vocab_size
    with torch.no_grad():
        full = model.predict(x, tau, y, tau_y)
        cache = model.new_cache(2)
        model.predict(x, tau, y, tau_y, cache=cache)
        windowed = model.predict(x, tau, y, tau_y, cache=cache, window=window)
        at_rows = model.predict(x, tau, y, tau_y, rows, cache=cache, window=window)
    assert torch.allclose(windowed.tokens, full.tokens[:, window], atol=1e-5)
    assert torch.allclose(at_rows.tokens, full.tokens[rows], atol=1e-5)
    if model.latent is not None:  # an open-ended window recomputes the latent slots; a closed one leaves them
        assert (windowed.latent is not None) == (window.stop is None)
        if window.stop is None:
            assert torch.allclose(windowed.latent, full.latent, atol=1e-5)


def test_a_windowed_pass_needs_a_cache_a_full_pass_filled():
    with pytest.raises(registry.LaddError, match="no full pass has filled"):
        KVCache().attend(0, *torch.zeros(3, 1, 2, 1, 4), window=slice(0, 1))


@pytest.mark.parametrize(
    ("variant", "sampler", "cache"), [("mdlm", None, "prefix"), ("coladd_seq", "sequential", "dual")]
)
def test_refreshing_at_every_step_gives_the_uncached_tokens(variant, sampler, cache):
    model = _model(variant, 32)
    fixed = torch.full((4, 32), model.vocab_size)
    fixed[:, :8] = torch.randint(2, (4, 8), generator=torch.Generator().manual_seed(3))

    def decode(**options):
        decoder = {"block_length": 8, "remasking": "margin", **options}
        if sampler is None:
            built = registry.build("sampler", "confidence", decoder)
        else:
            built = registry.build(
                "sampler", sampler,
                {"latent_steps": 2, "token_decoder": "confidence", "token_decoder_options": decoder},
            )
        return built.sample(model, 4, 12, torch.Generator().manual_seed(5), fixed=fixed)

    plain, refreshed, approximate = decode(), decode(cache=cache, refresh=1), decode(cache=cache)
    assert torch.equal(refreshed.tokens, plain.tokens)
    assert refreshed.network_calls == plain.network_calls == approximate.network_calls
    assert bool((approximate.tokens[:, :8] == fixed[:, :8]).all())


PROMPT, GENERATED, BLOCK, STEPS = 512, 128, 32, 128


class Blank(CachingBackbone):
    """A caching token backbone that computes nothing: equal logits everywhere, the windows as asked."""

    def __init__(self, length: int) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(()))
        self.length = length

    def forward(self, x_t, tau_x, y_t, tau_y, rows=None, cache=None, window=None) -> Denoised:
        inputs = x_t if window is None else x_t[:, window]
        logits = self.anchor + torch.zeros(*inputs.shape, 2)
        return Denoised(tokens=logits if rows is None else logits[rows if window is None else rows[:, window]])

    def transformer_shape(self) -> TransformerShape:
        return TransformerShape(1, self.length, 8, 4.0, self.length, 2)


def _token_forwards(cache: str) -> int:
    length = PROMPT + GENERATED
    process = MaskedProcess(MaskedProcessConfig(), LinearSchedule(ScheduleConfig()), 2)
    model = DiffusionModel(process, None, Blank(length), 2, length, Objective()).eval()
    fixed = torch.full((1, length), 2)
    fixed[:, :PROMPT] = 1
    sampler = registry.build("sampler", "confidence", {"block_length": BLOCK, "cache": cache})
    with counting(model) as meter:
        out = sampler.sample(model, 1, STEPS, torch.Generator().manual_seed(0), fixed=fixed)
    assert out.network_calls == STEPS
    return meter.spent().positions


def test_the_cache_cuts_the_token_forwards_of_lladas_setting_six_and_twelve_fold():
    length, blocks, per_block = PROMPT + GENERATED, GENERATED // BLOCK, STEPS // (GENERATED // BLOCK)
    # each block: a full pass at its first step, then per step the positions from its start on (prefix) or the block
    prefix = sum(length + (per_block - 1) * (length - PROMPT - b * BLOCK) for b in range(blocks))
    dual = blocks * (length + (per_block - 1) * BLOCK)
    counted = {cache: _token_forwards(cache) for cache in ("none", "prefix", "dual")}
    assert counted == {"none": STEPS * length, "prefix": prefix, "dual": dual} == {
        "none": 81_920, "prefix": 12_480, "dual": 6_528
    }
    assert counted["none"] / counted["prefix"] >= 6 and counted["none"] / counted["dual"] >= 12


@pytest.mark.parametrize(
    ("variant", "window"),
    [("mdlm", None), ("mdlm", slice(8, 16)), ("mdlm", slice(8, None)), ("coladd_seq", slice(8, None))],
)
def test_a_calls_counted_flops_are_what_flop_counter_mode_measures(variant, window):
    """Whole, on the meta device, where FlopCounterMode counts attention too (the CPU count, whose fused attention
    kernel it does not count, must agree); the head at rows on the CPU, as the difference it makes to both counts.
    (A window that leaves MM-DiT's latent slots to the cache skips its latent head, which is charged anyway.)"""
    model = _model(variant, 24)
    counted, measured = {}, {}
    for device in ("cpu", "meta"):
        model.to(device)
        x = torch.full((3, 24), model.vocab_size, device=device)
        rows = torch.zeros_like(x, dtype=torch.bool)
        rows[:, 9:12] = True
        y = None if model.latent is None else torch.ones(3, 1, 32, device=device)
        tau = torch.ones(3, device=device)
        tau_y = None if y is None else tau
        cache = model.new_cache(3)
        model.predict(x, tau, y, tau_y, cache=cache)
        for given in (None, rows) if device == "cpu" else (None,):
            with counting(model) as meter:
                model.predict(x, tau, y, tau_y, given, cache=cache, window=window)
            with torch.enable_grad(), FlopCounterMode(display=False) as counter:
                model.predict(x, tau, y, tau_y, given, cache=cache, window=window)
            key = device, given is None
            counted[key], measured[key] = meter.spent().flops, counter.get_total_flops()
    assert counted["meta", True] == measured["meta", True] and counted["cpu", True] == counted["meta", True]
    assert counted["cpu", True] - counted["cpu", False] == measured["cpu", True] - measured["cpu", False] > 0
