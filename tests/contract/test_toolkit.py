"""The public toolkit: its documented names exist, its options import no torch, and its helpers do what they say."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
import torch

import registry.toolkit
from registry.toolkit.tokens import at_rows, draw_tokens, per_sample


@pytest.mark.parametrize("module", registry.toolkit.__all__)
def test_every_public_name_exists_and_says_what_it_is(module):
    imported = importlib.import_module(f"registry.toolkit.{module}")
    assert imported.__all__, f"registry.toolkit.{module} declares its public names"
    for name in imported.__all__:
        value = getattr(imported, name)
        assert not callable(value) or value.__doc__, f"registry.toolkit.{module}.{name} has no docstring"


def test_options_and_listing_import_no_torch():
    code = "import sys, registry, registry.toolkit.options; registry.load(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", "config modules import registry.toolkit.options: it must stay torch-free"


def test_per_sample_and_at_rows_shape_batched_values():
    values, like = torch.tensor([1.0, 2.0]), torch.zeros(2, 3, 4)
    assert per_sample(values, like).shape == (2, 1, 1)
    assert torch.equal(per_sample(values, like) + like, torch.stack([torch.full((3, 4), 1.0), torch.full((3, 4), 2.0)]))
    logits = torch.arange(24.0).view(2, 3, 4)
    rows = torch.tensor([[True, False, True], [False, True, False]])
    assert torch.equal(at_rows(logits, rows), torch.stack([logits[0, 0], logits[0, 2], logits[1, 1]]))
    assert at_rows(logits, None) is logits


def test_draw_tokens_fills_only_the_revealed_positions_from_the_logits():
    x_t = torch.full((2, 3), 5)
    reveal = torch.tensor([[True, False, False], [False, False, True]])
    certain = torch.tensor([[0.0, -1e9, -1e9], [-1e9, -1e9, 0.0]])  # position (0, 0) draws 0, position (1, 2) draws 2
    assert torch.equal(draw_tokens(x_t, reveal, certain), torch.tensor([[0, 5, 5], [5, 5, 2]]))
    assert torch.equal(draw_tokens(x_t, torch.zeros_like(reveal), certain[:0]), x_t)
