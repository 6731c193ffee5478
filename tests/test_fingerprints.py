"""Short seeded runs of the CPU presets reproduce their recorded losses, weights and samples bit for bit."""
from __future__ import annotations

import json

import pytest
from fingerprints import FIXTURE, PRESETS, fingerprint


@pytest.mark.parametrize("preset", list(PRESETS))
def test_preset_reproduces_its_recorded_fingerprint(preset, tmp_path):
    recorded = json.loads(FIXTURE.read_text())[preset]
    assert fingerprint(preset, tmp_path) == recorded
