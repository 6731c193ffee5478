"""Chunked cross-entropy: the same values and gradients, without storing float32 log-probabilities of every row."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from registry.toolkit import tokens as module
from registry.toolkit.tokens import cross_entropy

N, K = 64, 50


def inputs(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(N, K, generator=generator).to(dtype).requires_grad_()
    target = torch.randint(K, (N,), generator=generator)
    target[::3] = -100  # unmasked positions: ignored, loss 0
    return logits, target


def saved_float32_elements(fn) -> int:
    """float32 elements autograd keeps for the backward pass of ``fn()``."""
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        if tensor.dtype == torch.float32:
            total += tensor.numel()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn().sum().backward()
    return total


def test_chunks_give_the_plain_values_and_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    logits, target = inputs()
    expected = F.cross_entropy(logits, target, ignore_index=-100, reduction="none")
    (grad_expected,) = torch.autograd.grad(expected.sum(), logits)
    monkeypatch.setattr(module, "CHUNK_ELEMENTS", 7 * K)  # 10 chunks, the last one short
    chunked = cross_entropy(logits, target)
    (grad_chunked,) = torch.autograd.grad(chunked.sum(), logits)
    torch.testing.assert_close(chunked, expected, rtol=0, atol=0)
    torch.testing.assert_close(grad_chunked, grad_expected, rtol=1e-6, atol=1e-7)
    assert bool((chunked[::3] == 0).all())


def test_no_float32_log_probabilities_are_kept_for_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    logits, target = inputs(torch.bfloat16)
    plain = saved_float32_elements(lambda: F.cross_entropy(logits.float(), target, ignore_index=-100, reduction="none"))
    assert plain >= N * K, "the plain path keeps the float32 log-softmax of every row"
    for chunk in (8 * K, N * K):
        monkeypatch.setattr(module, "CHUNK_ELEMENTS", chunk)
        assert saved_float32_elements(lambda: cross_entropy(logits, target)) == 0


@pytest.mark.parametrize("chunk_rows", [1, 7, N])
def test_weighted_gradient_matches_float64(monkeypatch: pytest.MonkeyPatch, chunk_rows: int) -> None:
    """Per-row weights on the loss (as the ELBO applies them) reach the logits' gradient; bf16 logits get bf16
    gradients."""
    logits, target = inputs(torch.bfloat16)
    weights = torch.linspace(0.5, 2.0, N)
    reference = logits.detach().double().requires_grad_()
    expected = F.cross_entropy(reference, target, ignore_index=-100, reduction="none")
    (grad_expected,) = torch.autograd.grad((expected * weights.double()).sum(), reference)
    monkeypatch.setattr(module, "CHUNK_ELEMENTS", chunk_rows * K)
    loss = cross_entropy(logits, target)
    (grad,) = torch.autograd.grad((loss * weights).sum(), logits)
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss.double(), expected.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad.double(), grad_expected, rtol=1e-2, atol=1e-3)
    assert bool((grad[::3] == 0).all()), "ignored rows get no gradient"
