"""Short seeded runs of the presets reproduce their recorded losses, weights, samples and evaluation bit for bit."""
from __future__ import annotations

import pytest
from fingerprints import CASES, FAST, fingerprint, recorded


@pytest.mark.parametrize("case", [c if c in FAST else pytest.param(c, marks=pytest.mark.slow) for c in CASES])
def test_case_reproduces_its_recorded_fingerprint(case, tmp_path):
    assert fingerprint(case, tmp_path) == recorded()[case]
