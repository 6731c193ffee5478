"""The plugin contract's version: what a plugin declares, moved module paths, components written before a change, and
the changelog that lists them all."""
from __future__ import annotations

import importlib
import re
import types

import pytest
from support import ROOT
from torch import nn

import registry
from registry.contract import CONTRACT_VERSION, MOVED_MODULES
from registry.errors import ComponentError
from registry.host.component import Component, ComponentSpec, Origin
from registry.host.plugins import PluginHost
from registry.interfaces import Latent, LatentCode, Needs, Process, Sampler, declares_needs, needs_of

CHANGELOG = ROOT / "docs" / "contract.md"


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_importing_a_moved_module_path_says_where_it_went_in_one_line(old):
    with pytest.raises(ModuleNotFoundError) as refused:
        importlib.import_module(old)
    new, version = MOVED_MODULES[old]
    assert str(refused.value) == (
        f"{old} is no longer a module of ladd: it moved to {new} in plugin contract {version} (this ladd implements "
        f"contract {CONTRACT_VERSION}; docs/contract.md lists every change); import it from there"
    )
    importlib.import_module(new)  # where it went exists


def _plugin(**attributes: object) -> types.ModuleType:
    module = types.ModuleType("declaring")
    module.__dict__.update(attributes)
    return module


@pytest.mark.parametrize(
    ("declared", "problem"),
    [
        (CONTRACT_VERSION + 1, f"newer than this ladd's {CONTRACT_VERSION}: upgrade ladd"),
        ("3", "LADD_CONTRACT = '3' must be the whole number of the plugin contract it was written for"),
        (True, "LADD_CONTRACT = True must be"),
        (0, "LADD_CONTRACT = 0 must be"),
    ],
)
def test_a_plugin_declaring_a_contract_this_ladd_cannot_honour_is_left_out_saying_why(declared, problem):
    host = PluginHost()
    host.register(_plugin(LADD_CONTRACT=declared), "declaring")
    assert [f.plugin for f in host.failures] == ["declaring"] and problem in host.failures[0].error


def test_the_contract_a_plugin_declares_is_its_origins_and_ladds_own_declares_the_current_one():
    host = PluginHost()
    host.register(_plugin(LADD_CONTRACT=2), "older")
    host.register(_plugin(), "silent")
    assert host.failures == [] and (host._origins["older"].contract, host._origins["silent"].contract) == (2, None)
    assert {c.origin.contract for c in registry.load() if c.origin.own} == {CONTRACT_VERSION}


class ProcessLatent(Latent):
    """A latent as contract 1 wrote one: its own process, no ``produces``."""

    def __init__(self, config: object = None, schedule: object = None) -> None:
        super().__init__()
        if schedule is None:
            raise ValueError("set a latent_schedule")

    def encode(self, features):
        return LatentCode(features)

    def null(self, batch, device):
        raise NotImplementedError

    def input_layer(self, width):
        return nn.Identity()

    def output_layer(self, width):
        return nn.Identity()

    def step(self, x_t, prediction, tau_t, tau_s, generator=None):
        return x_t


def test_a_latent_written_for_contract_1_is_refused_naming_the_plugin_and_the_change_before_it_is_built():
    component = Component(ComponentSpec("latent", "old", ProcessLatent), Origin("legacy", "legacy-dist", "1.0"))
    with pytest.raises(ComponentError) as refused:
        component.build()
    message = str(refused.value)
    assert message.startswith(
        "latent 'old' of plugin 'legacy' (legacy-dist 1.0) declares no contract version (LADD_CONTRACT) and predates "
        "contract 2: until then a latent was its own process"
    )
    assert "docs/contract.md, contract 2, says how to port it" in message and "\n" not in message


class Quiet(Sampler):
    def sample(self, model, num_samples, steps, generator, fixed=None):
        raise AssertionError("never called")


class Either(Quiet):
    needs = Needs()  # with or without a latent channel


def test_a_sampler_declaring_no_needs_is_token_only_and_capabilities_are_declared_not_read_from_signatures():
    assert needs_of(Quiet).latent is False and not declares_needs(Quiet) and not declares_needs(Quiet())
    assert needs_of(Either).latent is None and declares_needs(Either)
    assert (Sampler.takes_latent, Process.takes_fixed) == (False, True)


def test_the_changelog_has_every_version_and_every_moved_module():
    text = CHANGELOG.read_text()
    versions = [int(v) for v in re.findall(r"^## Contract (\d+)", text, flags=re.MULTILINE)]
    assert sorted(versions, reverse=True) == versions and set(versions) == set(range(1, CONTRACT_VERSION + 1))
    assert [old for old in MOVED_MODULES if f"`{old}`" not in text] == []


def test_the_changelog_reserves_every_name_of_ladds_own_components_and_importers():
    text = CHANGELOG.read_text()
    reserved = text[text.index("## Names ladd reserves") : text.index("## Contract 4")]
    own = registry.load()
    names = {c.name for c in own if c.origin.own} | {entry.name for entry in own.importers.values() if entry.origin.own}
    assert sorted(name for name in names if f"`{name}`" not in reserved) == [], (
        "a new built-in name is listed there and marked possibly breaking in its contract's entry"
    )
