"""The table of kinds and slots: everything the core knows about a kind comes from one entry."""
from __future__ import annotations

import inspect

import pytest
from support import TINY

import registry
from registry import ComponentSpec, interfaces
from registry.config.composition import compose
from registry.conformance.exercises import EXERCISES
from registry.engine.assembly import build_experiment
from registry.host.component import Component
from registry.host.kinds import KIND_SPECS, KINDS, SLOTS, Slot
from registry.toolkit.options import references


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def test_every_kind_names_its_interface_and_has_an_exercise_and_every_slot_a_kind():
    for spec in KIND_SPECS.values():
        assert inspect.isclass(spec.interface_class()) and spec.interface_class().__module__ == interfaces.__name__
        assert callable(EXERCISES[spec.name])
        ComponentSpec(spec.name, "probe", "module:attr")  # a kind of the table is a kind a plugin may declare
    assert tuple(KIND_SPECS) == KINDS == registry.KINDS
    # a kind is a slot's, one that a component's options name (a reward, named by an RL objective), or one a command
    # chooses (a launcher), which has no slot
    named = {ref.kind for c in registry.load() for ref in references(c.spec.config).values()}
    assert {slot.kind for slot in SLOTS.values()} | named == {kind for kind in KINDS if KIND_SPECS[kind].experiment}
    assert "reward" in named - {slot.kind for slot in SLOTS.values()}
    assert not KIND_SPECS["launcher"].experiment, "a kind a command chooses has no slot"


def test_each_slot_builds_with_exactly_its_kinds_context(reg, monkeypatch):
    seen: dict[str, set[str]] = {}
    original = Component.build

    def recording(self, options=None, nested=None, **context):
        seen.setdefault(self.kind, set()).update(context)
        return original(self, options, nested, **context)

    monkeypatch.setattr(Component, "build", recording)
    build_experiment(compose(["experiment=binsaw/coladd_seq_cpu", *TINY], reg).plain(), reg)
    build_experiment(compose(["experiment=demo/arith_grpo"], reg).plain(), reg)  # a reward and an objective
    experiment_kinds = {kind for kind in KINDS if KIND_SPECS[kind].experiment}
    assert set(seen) == experiment_kinds
    assert all(seen[kind] == set(KIND_SPECS[kind].context) for kind in experiment_kinds), seen


def test_a_new_slot_is_one_entry_of_the_table(reg, monkeypatch):
    def second_process(built):
        return {"schedule": built["schedule"], "vocab_size": built["dataset"].vocab_size}

    monkeypatch.setitem(
        SLOTS, "second_process", Slot("second_process", "process", optional=True, context=second_process)
    )
    assert compose(TINY, reg).plain()["second_process"] is None, "an optional slot starts empty"
    process = reg.names("process")[0]
    cfg = compose([*TINY, f"second_process={process}"], reg).plain()
    assert cfg["second_process"]["name"] == process
    experiment = build_experiment(cfg, reg)
    assert experiment.components["second_process"].name == process
