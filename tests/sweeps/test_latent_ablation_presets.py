"""The latent ablation's presets (docs/sweeps.md) are the joint CPU presets with only the latent changed: continuous
is Co-LADD's, VQ Di-LADD's, FSQ and LFQ Di-LADD's with that latent selected on the command line (qualified, as
ladd's presets name components)."""
from __future__ import annotations

import pytest

import registry
from registry.config.composition import compose
from registry.engine.runs import differences

#: preset of the ablation -> what it must equal, composed from the command line
SAME_AS = {
    "continuous": ["experiment=binsaw/coladd_joint_cpu"],
    "discrete": ["experiment=binsaw/diladd_joint_cpu"],
    "fsq": ["experiment=binsaw/diladd_joint_cpu", "latent=builtin:fsq"],
    "lfq": ["experiment=binsaw/diladd_joint_cpu", "latent=builtin:lfq"],
}


@pytest.mark.parametrize("latent", SAME_AS)
def test_each_preset_changes_only_the_latent(latent):
    reg = registry.load()
    preset = compose([f"experiment=binsaw/latents_cpu/{latent}", "run_dir=r"], reg).plain()
    reference = compose([*SAME_AS[latent], "run_dir=r"], reg).plain()
    assert preset["latent"]["name"] == f"builtin:{latent}"
    assert [d for d in differences(reference, preset) if not d.startswith("method:")] == []
