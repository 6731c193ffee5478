"""Perplexities of large losses: a bound of hundreds of nats (an untrained model's) is an infinite perplexity, not a
crash of the command that prints it."""
from __future__ import annotations

import math

from registry.storage.results import EvalResult, perplexity


def test_a_loss_beyond_floats_gives_an_infinite_perplexity_and_others_their_exponential():
    assert perplexity(2.0) == math.exp(2.0)
    assert perplexity(709.0) == math.exp(709.0)
    assert perplexity(710.0) == math.inf and perplexity(1e6) == math.inf
    assert EvalResult(method="m", metric="swd", token_loss=1000.0).token_perplexity == math.inf
    assert f"{perplexity(1e6):.2f}" == "inf"
