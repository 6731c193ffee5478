"""`ladd plugins check` holds a backbone to what it declares for fine-tuning: its blocks (``Backbone.layers``) are its
own and recomputing them leaves the gradients as they were, and its LoRA targets (``adapter_targets``) name layers."""
from __future__ import annotations

import pytest
from torch import nn

import registry
from ladd_plugins.backbones.dit import DiT, DiTConfig
from registry.conformance.exercises import EXERCISES, ExerciseFailure
from registry.host.component import Component, ComponentSpec, Origin


class Foreign(DiT):
    """Declares a block that is not part of it."""

    def layers(self):
        return [nn.Linear(2, 2)]


class Misnamed(DiT):
    """Declares an adapter target that names none of its layers."""

    def adapter_targets(self):
        return ("blocks.*.qkv", "attn.nonesuch")


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def _exercise(made: type, reg) -> None:
    EXERCISES["backbone"](Component(ComponentSpec("backbone", "probe", made, DiTConfig), Origin("tests")), reg)


@pytest.mark.parametrize("made, problem", [
    (Foreign, "layers() yields modules that are not the backbone's own"),
    (Misnamed, "adapter_targets() names 'attn.nonesuch', which matches none of its linear layers or embeddings"),
])
def test_a_backbone_declaring_what_it_does_not_have_fails_its_check(reg, made, problem):
    with pytest.raises(ExerciseFailure) as failed:
        _exercise(made, reg)
    assert str(failed.value) == problem


@pytest.mark.slow
def test_the_dit_declaring_its_blocks_and_targets_passes_with_its_blocks_recomputed(reg):
    _exercise(DiT, reg)
