"""The exercise of a backbone: every channel combination it accepts (the full forward, the rows-only path, a backward
pass), the parts it declares (blocks, LoRA targets), its key-value cache against its full pass when it keeps one,
and its attention pattern, by perturbation, when it declares blocks."""
from __future__ import annotations

from typing import Any

import torch

from registry.engine.adapters import ADAPTABLE, matches
from registry.errors import IncompatibleComponentsError, MissingResourceError
from registry.host.component import Component
from registry.host.registry import Registry
from registry.interfaces import AttentionPattern, CachingBackbone, Channels
from registry.toolkit.attention import pattern_mask

from ..probes import ProbeEncoder
from .common import BATCH, SEQ, VOCAB, Companions, ExerciseFailure, built, during, expect, generator

#: the promise of a CachingBackbone: a pass through its cache gives what its full pass gives
CACHES = "CachingBackbone (its cached pass equal to its full pass)"
#: the promise of a backbone's declared blocks
LAYERS = "Backbone.layers (its own blocks, recomputed to the same gradients)"
TARGETS = "Backbone.adapter_targets (patterns naming its linear layers or embeddings)"
#: how close two passes that compute the same thing must be (float32 sums in another order)
TOLERANCE = 1e-4


def blocks_promise(pattern: AttentionPattern) -> str:
    """The promise of a backbone declaring a block pattern."""
    return f"block attention (attention = AttentionPattern(block={pattern.block}, span={pattern.span}))"


def exercise_backbone(component: Component, registry: Registry) -> None:
    """Every channel combination the backbone accepts: full forward, the rows-only path, and a backward pass; then what
    it declares: its blocks and LoRA targets, its cache, its attention pattern."""
    try:
        latents = [latent for _, latent in built(Companions(registry, component), "latent")]
    except MissingResourceError:
        latents = []  # the token channel is still exercised
    combinations = [Channels(VOCAB, SEQ, None)]
    for latent in latents:
        combinations += [Channels(VOCAB, SEQ, latent), Channels(0, 0, latent)]
    used = 0
    for channels in combinations:
        try:
            backbone = registry.instantiate(component, channels=channels)[0]
        except IncompatibleComponentsError:
            continue
        pattern = getattr(backbone, "attention", AttentionPattern())
        if pattern.block is not None and channels.latent is not None:
            continue  # block attention denoises the token channel alone: the model refuses a latent channel
        _backbone_round(backbone, channels)
        _check_declared_parts(backbone, channels)
        if channels.tokens and channels.latent is None and (pattern.block is not None or isinstance(
            backbone, CachingBackbone
        )):
            _redraw(backbone)  # a zero-initialised head would give every input the same logits
            if pattern.block is not None:
                _check_blocks(backbone, pattern)
            if isinstance(backbone, CachingBackbone):
                _check_cache(backbone, pattern)
        used += 1
    expect(used > 0, "builds for no channel combination (tokens, tokens + latent, latent alone)")


def _redraw(backbone: Any) -> None:
    """Every parameter drawn afresh (seeded, of a scale that keeps activations moderate), so that its outputs depend
    on its inputs wherever its computation lets them."""
    draws = generator()
    with torch.no_grad():
        for parameter in backbone.parameters():
            fan_in = parameter.shape[-1] if parameter.dim() > 1 else 1
            parameter.copy_(torch.randn(parameter.shape, generator=draws) / fan_in**0.5)


def _backbone_inputs(channels: Channels) -> tuple[Any, Any, Any, Any]:
    """A backbone's seeded inputs for ``channels``: ``x_t``, ``tau_x``, ``y_t``, ``tau_y`` (None where absent)."""
    draws = generator()
    tau = torch.full((BATCH,), 0.5)
    x = torch.randint(VOCAB + 1, (BATCH, SEQ), generator=draws) if channels.tokens else None
    y = None
    if channels.latent is not None:
        latent = channels.latent
        with torch.no_grad():
            y0 = latent.encode(
                ProbeEncoder(VOCAB, latent.length, latent.width)(torch.randint(VOCAB, (BATCH, SEQ), generator=draws))
            ).y0
        y = latent.backbone_input(y0)
    return x, (tau if x is not None else None), y, (tau if y is not None else None)


def _backbone_round(backbone: Any, channels: Channels) -> None:
    x, tau_x, y, tau_y = _backbone_inputs(channels)
    given = " + ".join(
        name for name, value in (("tokens", x), (type(channels.latent).__name__, y)) if value is not None
    )
    backbone.eval()
    with during(f"forward with {given}"), torch.no_grad():
        out = backbone(x, tau_x, y, tau_y)
    if x is not None:
        expected = (BATCH, SEQ, VOCAB)
        expect(
            out.tokens is not None and out.tokens.shape == expected,
            f"forward with {given}: token logits must be (batch, S, K) = {expected}",
        )
        rows = x == VOCAB
        with during(f"forward with {given} at rows"), torch.no_grad():
            on_rows = backbone(x, tau_x, y, tau_y, rows).tokens
        expect(
            on_rows is not None
            and on_rows.shape == out.tokens[rows].shape
            and torch.allclose(on_rows, out.tokens[rows], atol=TOLERANCE),
            f"forward with {given} at rows differs from forward at every position, taken at the same rows",
        )
    if y is not None:
        expect(out.latent is not None, f"forward with {given}: a backbone given a latent channel must predict it")
    backbone.train()
    with during(f"backward through forward with {given}"):
        _backward(backbone, (x, tau_x, y, tau_y))


def _check_declared_parts(backbone: Any, channels: Channels) -> None:
    """Its blocks (``layers``) are its own modules and recomputing them (activation checkpointing) leaves the
    gradients as they were; each of its ``adapter_targets`` names some of its linear layers or embeddings."""
    own = {id(module) for module in backbone.modules()}
    with during("layers()", LAYERS):
        blocks = list(backbone.layers())
    expect(all(id(block) in own for block in blocks), "layers() yields modules that are not the backbone's own", LAYERS)
    adaptable = [name for name, module in backbone.named_modules() if isinstance(module, ADAPTABLE)]
    with during("adapter_targets()", TARGETS):
        patterns = backbone.adapter_targets()
    for pattern in patterns:
        expect(
            any(matches(name, pattern) for name in adaptable),
            f"adapter_targets() names {pattern!r}, which matches none of its linear layers or embeddings",
            TARGETS,
        )
    if not blocks:
        return
    from registry.training.strategy import recompute_blocks  # here: the training wing imports Lightning

    backbone.eval()  # no dropout: the two passes must see the same function of the same inputs
    inputs = tuple(value if value is None else value.detach() for value in _backbone_inputs(channels))
    with during("forward and backward in eval mode"):
        plain = _gradients(backbone, inputs)
    recompute_blocks(backbone)
    with during("forward and backward with its layers() recomputed (train.activation_checkpointing)", LAYERS):
        recomputed = _gradients(backbone, inputs)
    expect(
        all(torch.allclose(a, b, atol=1e-5) for a, b in zip(plain, recomputed, strict=True)),
        "recomputing its layers() in the backward pass (train.activation_checkpointing) changes the gradients",
        LAYERS,
    )


def _check_cache(backbone: CachingBackbone, pattern: AttentionPattern) -> None:
    """A pass writing a new cache gives the full pass's logits, and a window over it (nothing changed) gives the full
    pass's logits there; with ``cache_exact`` and blocks, a cache grown block by block gives them too."""
    backbone.eval()
    x, tau, _, _ = _backbone_inputs(Channels(VOCAB, SEQ, None))
    with during("a full pass", CACHES), torch.no_grad():
        full = backbone(x, tau, None, None).tokens
        cache = backbone.new_cache(BATCH, x.device)
        written = backbone(x, tau, None, None, cache=cache).tokens
    _expect_close(written, full, "a pass writing a new cache (cache=new_cache(...), no window)")
    start, stop = SEQ // 4, SEQ // 2
    with during(f"a pass over the window {start}:{stop} of that cache", CACHES), torch.no_grad():
        windowed = backbone(x, tau, None, None, cache=cache, window=slice(start, stop)).tokens
    _expect_close(windowed, full[:, start:stop], f"a pass over the window {start}:{stop} of a cache of the same tokens")
    if pattern.block is None or not backbone.cache_exact:
        return
    grown = backbone.new_cache(BATCH, x.device)
    for begin in range(0, SEQ, pattern.block):
        end = min(begin + pattern.block, SEQ)
        with during(f"a pass growing the cache by the block {begin}:{end}", CACHES), torch.no_grad():
            block = backbone(x[:, :end], tau, None, None, cache=grown, window=slice(begin, end)).tokens
        _expect_close(block, full[:, begin:end], f"the cache grown by the block {begin}:{end} (cache_exact)")


def _expect_close(found: Any, wanted: torch.Tensor, what: str) -> None:
    """``found`` logits are ``wanted`` (the full pass's), to float rounding."""
    if found is None or found.shape != wanted.shape:
        shape = None if found is None else tuple(found.shape)
        full = tuple(wanted.shape)
        raise ExerciseFailure(f"{what} gives token logits of shape {shape}, its full pass {full}", CACHES)
    gap = float((found - wanted).abs().max())
    expect(gap <= TOLERANCE, f"{what} gives other token logits than its full pass (by up to {gap:.3g})", CACHES)


def _check_blocks(backbone: Any, pattern: AttentionPattern) -> None:
    """By perturbation: changing the tokens of a block leaves every output that the pattern does not let see them as
    it was, when sampling (``x_t`` alone, also at twice the trained length) and in training (``context=x0``: a
    block's output reads its own noisy block and the clean blocks before it, nothing else)."""
    backbone.eval()
    promise = blocks_promise(pattern)
    block = pattern.block
    assert block is not None
    x, _, _, _ = _backbone_inputs(Channels(VOCAB, SEQ, None))
    x0 = torch.randint(VOCAB, x.shape, generator=generator())
    for length in (SEQ, 2 * SEQ):
        tokens = x.repeat(1, length // SEQ)
        tau = torch.full((BATCH,), 0.5)
        positions = torch.arange(length)
        seen = pattern_mask(pattern, positions, positions)
        assert seen is not None  # a block pattern
        for first in range(block, length, block):
            changed = _changed(tokens, first, block)
            with during(f"forward over {length} positions", promise), torch.no_grad():
                before, after = (backbone(each, tau, None, None).tokens for each in (tokens, changed))
            blind = ~seen[:, first : first + block].any(dim=1)
            _expect_unchanged(before, after, blind, f"the tokens of positions {first}:{first + block}", promise)
    tau = torch.full((BATCH, SEQ), 0.5)
    positions = torch.arange(SEQ)
    seen = pattern_mask(pattern, positions, positions)
    assert seen is not None
    own = positions[:, None] // block == positions[None, :] // block
    for first in range(0, SEQ, block):
        with during("forward in training (context=x0)", promise), torch.no_grad():
            plain = backbone(x, tau, None, None, context=x0).tokens
            clean = backbone(x, tau, None, None, context=_changed(x0, first, block)).tokens
            noisy = backbone(_changed(x, first, block), tau, None, None, context=x0).tokens
        cells = slice(first, first + block)
        blind_to_clean = ~(seen & ~own)[:, cells].any(dim=1)
        _expect_unchanged(plain, clean, blind_to_clean, f"the clean tokens (context) of positions {first}:"
                          f"{first + block}", promise)
        _expect_unchanged(plain, noisy, ~own[:, cells].any(dim=1), f"the noisy tokens (x_t) of positions {first}:"
                          f"{first + block} in training", promise)


def _changed(tokens: torch.Tensor, first: int, width: int) -> torch.Tensor:
    """``tokens`` with every token of positions ``first .. first + width - 1`` replaced by another real token."""
    changed = tokens.clone()
    changed[:, first : first + width] = (tokens[:, first : first + width] + 1) % VOCAB
    return changed


def _expect_unchanged(before: Any, after: Any, blind: torch.Tensor, what: str, promise: str) -> None:
    """The outputs at the positions ``blind`` (bool ``[L]``), which the pattern keeps from ``what``, are unchanged,
    and some other output changed (else the perturbation shows nothing)."""
    moved = (before - after).abs().amax(dim=(0, 2)) > TOLERANCE
    expect(
        bool((moved & ~blind).any()) or bool(blind.all()),
        f"changing {what} changes none of its outputs, not even where the pattern lets them be seen",
        promise,
    )
    wrong = (moved & blind).nonzero().flatten().tolist()
    expect(
        not wrong,
        f"changing {what} changes its output at position {wrong[0] if wrong else ''}, which the pattern keeps from "
        f"seeing them",
        promise,
    )


def _gradients(backbone: Any, inputs: tuple[Any, ...]) -> list[torch.Tensor]:
    """The gradients of the sum of the backbone's outputs for ``inputs``."""
    backbone.zero_grad(set_to_none=True)
    _backward(backbone, inputs)
    return [p.grad.clone() for p in backbone.parameters() if p.grad is not None]


def _backward(backbone: Any, inputs: tuple[Any, ...]) -> None:
    """A backward pass from the sum of the backbone's outputs."""
    out = backbone(*inputs)
    sum(o.float().sum() for o in (out.tokens, out.latent) if o is not None).backward()
