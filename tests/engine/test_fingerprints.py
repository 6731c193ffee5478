"""Short seeded runs of the presets reproduce their recorded losses, weights, samples, decoders and evaluation, within
the tolerance measured across torch builds and CPU kernels."""
from __future__ import annotations

import copy

import pytest
from fingerprints import CASES, FAST, TOLERANCE, computed, differences, recorded


@pytest.mark.parametrize("case", [c if c in FAST else pytest.param(c, marks=pytest.mark.slow) for c in CASES])
def test_case_reproduces_its_recorded_fingerprint(case):
    assert differences(computed(case), recorded()[case]) == []


def test_the_tolerance_lets_rounding_pass_and_nothing_else():
    found = recorded()["binsaw/mdlm_cpu"]
    rounded = copy.deepcopy(found)
    rounded["logged_losses"] = [value * (1 + TOLERANCE["rtol"] / 10) for value in found["logged_losses"]]
    assert differences(rounded, found) == []
    moved = copy.deepcopy(found)
    moved["logged_losses"][-1] *= 1 + 10 * TOLERANCE["rtol"]
    assert differences(moved, found) == [f"/logged_losses[4]: {moved['logged_losses'][-1]!r} instead of "
                                         f"{found['logged_losses'][-1]!r}"]
    flipped = copy.deepcopy(found)
    flipped["samples"]["tokens"][0][0] = 1 - found["samples"]["tokens"][0][0]
    flipped["samples"]["network_calls"] += 1
    assert len(differences(flipped, found)) == 2, "tokens and counts are compared exactly"
