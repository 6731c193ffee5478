"""Jumping the CPU generator past float64 draws leaves it exactly where drawing them would."""
from __future__ import annotations

import pytest
import torch

from ladd_plugins.datasets.binsaw import mersenne
from ladd_plugins.datasets.binsaw.mersenne import skip_doubles


def _drawn_and_skipped(seed: int, before: int, count: int) -> tuple[torch.Generator, torch.Generator]:
    drawn, skipped = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    for generator in (drawn, skipped):
        torch.rand(before, generator=generator, dtype=torch.float64)
    torch.rand(count, generator=drawn, dtype=torch.float64)
    skip_doubles(skipped, count)
    return drawn, skipped


# 624 words per block refill, two per double: counts within a block, up to and across its end, many blocks
@pytest.mark.parametrize("before", [0, 1, 311, 312])
@pytest.mark.parametrize("count", [0, 1, 311, 312, 313, 3 * 312, 100_003])
def test_skipping_equals_drawing(before: int, count: int) -> None:
    drawn, skipped = _drawn_and_skipped(before + 17, before, count)
    assert torch.equal(skipped.get_state(), drawn.get_state())
    assert torch.equal(
        torch.rand(700, generator=skipped, dtype=torch.float64), torch.rand(700, generator=drawn, dtype=torch.float64)
    )


def test_the_jump_is_used_and_drawing_is_the_fallback(monkeypatch) -> None:
    assert mersenne._jump_is_exact(), "this torch's generator is the MT19937 the jump assumes"
    monkeypatch.setattr(mersenne, "_jump_is_exact", lambda: False)
    monkeypatch.setattr(mersenne, "_CHUNK", 1000)  # several chunks
    drawn, skipped = _drawn_and_skipped(3, 5, 4321)
    assert torch.equal(skipped.get_state(), drawn.get_state())


def test_the_characteristic_polynomial_has_the_degree_of_the_state() -> None:
    phi = mersenne._characteristic_polynomial()
    assert phi.bit_length() == 19938 and phi & 1, "degree 19937 with a constant term (it is irreducible)"
    with pytest.raises(ValueError, match="negative"):
        skip_doubles(torch.Generator(), -1)
