"""`ladd plugins check` holds a component to every capability it declares: for each one, a component written as a
plugin author would (the fixture plugins' sources, imported here without installing them) passes, and a broken example
fails in one line naming the component, the promise and how it broke."""
from __future__ import annotations

import dataclasses
import shutil
import sys
from pathlib import Path

import pytest
import torch
from support import FIXTURES

import registry
from ladd_plugins.backbones.config import DiTConfig
from ladd_plugins.backbones.dit import DiT
from registry.conformance.exercises import EXERCISES, ExerciseFailure
from registry.conformance.validation import check_plugin
from registry.host.component import Component, ComponentSpec, Origin
from registry.host.registry import Registry
from registry.interfaces import CachingBackbone, Needs, SampleOutput, Sampler
from registry.toolkit.sampling import Conditioning, ProcessRule, run_rules, start_chain, time_grid, times

PLUGINS = FIXTURES / "plugins"


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The fixture plugins' packages importable, for the module: copies of the packages alone, so that no entry point
    an earlier install left beside them (its egg-info) registers them with ladd."""
    folder = tmp_path_factory.mktemp("sources")
    for package in ("blocks/ladd_blocks_plugin", "decoders/ladd_decoders_plugin"):
        shutil.copytree(PLUGINS / package, folder / Path(package).name)
    sys.path.insert(0, str(folder))
    yield
    sys.path.remove(str(folder))


def _checked(plugin: str, *specs: ComponentSpec) -> list[str]:
    """``check_plugin`` of a plugin holding ``specs``, installed beside ladd's own."""
    theirs = [Component(spec, Origin(plugin, f"ladd-{plugin}-plugin", "0.1.0", contract=4)) for spec in specs]
    return check_plugin(plugin, Registry([*registry.load(), *theirs]))


def _fixture_specs(module: str) -> list[ComponentSpec]:
    return list(__import__(module).ladd_components())


def test_a_block_pattern_is_held_by_perturbation_and_a_cache_against_the_full_pass(sources):
    assert _checked("blocks", *_fixture_specs("ladd_blocks_plugin")) == [
        "backbone 'blocks:leaky': breaks block attention (attention = AttentionPattern(block=4, span=None)): changing "
        "the clean tokens (context) of positions 0:4 changes its output at position 0, which the pattern keeps from "
        "seeing them",
        "backbone 'blocks:stale': breaks CachingBackbone (its cached pass equal to its full pass): a pass over the "
        "window 2:4 of a cache of the same tokens gives other token logits than its full pass (by up to 0.196)",
    ], "blockattn, written from the docs, passes"


@dataclasses.dataclass
class BlockDiTConfig(DiTConfig):
    attention: str = "block_causal"
    block_size: int | None = 2
    hidden: int = 16
    layers: int = 1
    heads: int = 2


def test_ladds_block_causal_dit_keeps_its_pattern_and_its_exact_cache_at_twice_the_length():
    EXERCISES["backbone"](Component(ComponentSpec("backbone", "bdit", DiT, BlockDiTConfig), Origin("t")),
                          registry.load())


class SeesTheFuture(DiT):
    """Block-causal by declaration, bidirectional in fact when sampling."""

    def forward(self, x_t, tau_x, y_t, tau_y, rows=None, cache=None, window=None, context=None):
        pattern, self.attention = self.attention, type(self.attention)()
        try:
            return super().forward(x_t, tau_x, y_t, tau_y, rows, cache, window, context)
        finally:
            self.attention = pattern


def test_a_backbone_declaring_blocks_whose_sampling_pass_sees_later_blocks_fails_naming_the_pattern():
    with pytest.raises(ExerciseFailure) as failed:
        EXERCISES["backbone"](Component(ComponentSpec("backbone", "future", SeesTheFuture, BlockDiTConfig),
                                        Origin("t")), registry.load())
    assert failed.value.promise == "block attention (attention = AttentionPattern(block=2, span=8))"
    assert str(failed.value) == (
        "changing the tokens of positions 2:4 changes its output at position 0, which the pattern keeps from seeing "
        "them"
    )


def test_a_token_decoder_runs_inside_every_sampler_that_runs_one_and_a_length_is_held_to_twice_the_model(sources):
    assert _checked("decoders", *_fixture_specs("ladd_decoders_plugin")) == [
        "sampler 'decoders:peeking': breaks TokenDecoder (its steps run by sampler 'builtin:joint' as its "
        "token_decoder): with process 'masked' and latent 'continuous' and process 'vp', sampling with sampler "
        "'joint' with it as token_decoder: IncompatibleComponentsError: a model with a latent channel was asked for "
        "token predictions without its latent (y_t None): the tokens are predicted given the latent the sampler holds",
        "sampler 'decoders:stretchy': breaks variable_length (sample(..., length=N) at twice the trained length): "
        "with process 'autoregressive', sampler 'stretchy' asked for 16 positions gives samples of torch.int64, "
        "shape (3, 8)",
    ], "leftmost, written from the docs, passes alone and inside joint, sequential and blockwise"


class WindowPastTheCache(Sampler):
    """Needs a caching backbone and reads its cache past where any pass wrote it."""

    needs = Needs(latent=False, backbone=CachingBackbone, blocks=False)

    def sample(self, model, num_samples, steps, generator, fixed=None):
        chain = start_chain(model, num_samples, model.device, generator, fixed)
        cache = model.new_cache(num_samples)
        rules = []
        for tau_t, tau_s in time_grid(steps):
            rule = ProcessRule(times(num_samples, tau_t, model.device), times(num_samples, tau_s, model.device))
            rule.cache, rule.window = cache, slice(model.seq_len // 2, None)  # no full pass ever wrote the cache
            rules.append(rule)
        run_rules(model, chain, rules, generator, Conditioning())
        return SampleOutput(chain.x, None, chain.calls)


def test_a_sampler_is_exercised_on_the_backbone_its_needs_declare_not_left_out():
    problems = _checked("caching", ComponentSpec("sampler", "past", WindowPastTheCache))
    assert len(problems) == 1 and problems[0].startswith(
        "sampler 'caching:past': fails in a tiny model: with process 'autoregressive', sampling with sampler 'past': "
        "LaddError: a pass over positions 4 to 7 reads a key-value cache that no pass has filled there"
    )


def test_a_check_keeps_the_global_random_state_and_gives_one_verdict(sources):
    state = torch.random.get_rng_state()
    verdicts = [_checked("blocks", *_fixture_specs("ladd_blocks_plugin")) for _ in range(2)]
    assert verdicts[0] == verdicts[1] and torch.equal(torch.random.get_rng_state(), state)


def test_a_latent_channel_with_block_attention_is_refused_in_one_line_before_anything_trains():
    from ladd_plugins.latents.continuous import ContinuousLatent, ContinuousLatentConfig
    from ladd_plugins.processes.masked import MaskedProcess, MaskedProcessConfig
    from ladd_plugins.processes.vp import VPGaussianProcess, VPProcessConfig
    from ladd_plugins.schedules.closed_form import LinearSchedule, ScheduleConfig
    from registry.config.settings import Objective
    from registry.conformance.probes import ProbeAttentionBackbone
    from registry.engine.model import DiffusionModel
    from registry.errors import IncompatibleComponentsError
    from registry.interfaces import Channels

    schedule = LinearSchedule(ScheduleConfig())
    latent = ContinuousLatent(ContinuousLatentConfig(length=1, width=4))
    with pytest.raises(IncompatibleComponentsError) as refused:
        DiffusionModel(
            MaskedProcess(MaskedProcessConfig(), schedule=schedule, vocab_size=5), latent,
            ProbeAttentionBackbone(Channels(5, 8, None), block=2), 5, 8, Objective(),
            latent_process=VPGaussianProcess(VPProcessConfig(), schedule=schedule, vocab_size=None),
        )
    assert str(refused.value) == (
        "a backbone of block attention trains every block at its own time, which a latent channel's time cannot "
        "follow; set latent=null"
    )
