"""`ladd plugins check` judges the component it checks: its companions are ladd's own and the checked plugin's, a
need a sampler does not declare is not assumed, every weight is seeded, and half the positions are known tokens."""
from __future__ import annotations

import torch

import registry
from registry.conformance.exercises import EXERCISES
from registry.conformance.validation import check_plugin
from registry.host.component import Component, ComponentSpec, Origin
from registry.host.registry import Registry
from registry.interfaces import Needs, SampleOutput, Sampler
from registry.toolkit.sampling import denoise_tokens


class LatentBlind(Sampler):
    """Claims to sample a latent channel too, and ignores it: the sampled latent is missing."""

    needs = Needs()

    def sample(self, model, num_samples, steps, generator, fixed=None):
        tokens, calls = denoise_tokens(model, num_samples, steps, generator, model.device, fixed=fixed)
        return SampleOutput(tokens, None, calls)


class Undeclared(LatentBlind):
    """The same, declaring nothing (a token-only sampler, as it should be)."""

    needs = Sampler.needs


class Forgetful(Sampler):
    """A token-only sampler that never writes the known tokens in."""

    needs = Needs(latent=False)

    def sample(self, model, num_samples, steps, generator, fixed=None):
        tokens, calls = denoise_tokens(model, num_samples, steps, generator, model.device)
        return SampleOutput(tokens, None, calls)


def _with(*components: tuple[str, str, type]) -> Registry:
    """ladd's own components and the given samplers of a plugin "other" (named to sort before ladd's samplers)."""
    theirs = [Component(ComponentSpec("sampler", name, made), Origin(plugin)) for plugin, name, made in components]
    return Registry([*registry.load(), *theirs])


def test_a_latent_is_judged_with_ladds_samplers_not_with_another_plugins():
    reg = _with(("other", "aaa_blind", LatentBlind), ("other", "aab_undeclared", Undeclared))
    for kind, name in (("latent", "continuous"), ("latent", "fsq"), ("process", "vp")):
        EXERCISES[kind](reg.get(kind, name), reg)  # raises on a failure
    problems = check_plugin("other", reg)
    assert problems == [
        "sampler 'other:aaa_blind': fails in a tiny model: with process 'autoregressive' and latent 'continuous' and "
        "process 'vp', sampling with sampler 'aaa_blind': IncompatibleComponentsError: a model with a latent channel "
        "was asked for token predictions without its latent (y_t None): the tokens are predicted given the latent the "
        "sampler holds"
    ], "the sampler claiming a latent channel is judged on one"


def test_a_sampler_that_ignores_the_known_tokens_is_caught_every_time():
    reg = _with(("forgetful", "forgetful", Forgetful))
    verdicts = [check_plugin("forgetful", reg) for _ in range(3)]
    assert verdicts == [verdicts[0]] * 3
    assert verdicts[0] == [
        "sampler 'forgetful:forgetful': fails in a tiny model: with process 'autoregressive', samples do not keep the "
        "tokens given in `fixed`"
    ]


def test_a_check_draws_nothing_from_and_leaves_no_trace_on_the_global_random_state():
    reg = _with(("forgetful", "forgetful", Forgetful))
    torch.manual_seed(123)
    check_plugin("forgetful", reg)
    after = torch.rand(3)
    torch.manual_seed(123)
    assert torch.equal(after, torch.rand(3))
