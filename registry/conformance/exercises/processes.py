"""The exercise of a process: on tokens, its loss, its reverse chain, the known tokens it keeps and its fast path; on
another state, the latent round with a latent producing that state."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from registry.host.component import Component
from registry.host.registry import Registry
from registry.interfaces import TOKEN_STATES, Channels, Latent, Process, RevealingProcess
from registry.toolkit.sampling import reverse_step, takes_fixed

from ..probes import ProbeBackbone
from .common import (
    BATCH,
    CPU,
    SEQ,
    VOCAB,
    Companions,
    built,
    during,
    expect,
    fixed_tokens,
    generator,
    schedule,
    token_processes,
    with_a_partner,
)
from .latents import latent_round

#: the promise of a step given the known tokens of a prompt or an infill
KEEPS_FIXED = "Process.step(..., fixed=...) (the known tokens kept)"
#: the promise of a RevealingProcess: its step is fill at reveal's positions (the samplers' exact fast path)
REVEALS = "RevealingProcess (step equal to fill at reveal's positions)"


def exercise_process(component: Component, registry: Registry) -> None:
    """On tokens: a loss whose gradient reaches the network, the rows-only loss, a reverse chain ending in real tokens.

    A process on another state is exercised as a latent process, with a registered latent producing that state.
    """
    companions = Companions(registry, component)
    chosen = schedule(companions)
    process = registry.instantiate(component, schedule=chosen, vocab_size=VOCAB)[0]
    if process.diffuses in TOKEN_STATES:
        token_round(process)
        return
    latents = built(companions, "latent", lambda latent: latent.produces == process.diffuses)
    tokens = token_processes(companions, chosen)
    pairs = [(f"{name} and {t}", (latent, token)) for name, latent in latents for t, token in tokens]

    def use(pair: tuple[Latent, Any]) -> None:
        latent, token = pair
        own = registry.instantiate(component, schedule=chosen, vocab_size=latent.values)[0]
        latent_round(latent, own, token, companions)

    with_a_partner(pairs, use)


def token_round(process: Any) -> None:
    """A token process's loss, its gradient, its per-position and rows-only losses, its reverse chain, the known
    tokens it keeps and (a ``RevealingProcess``) its fast path."""
    draws = generator()
    network = ProbeBackbone(Channels(VOCAB, SEQ, None))
    x0 = torch.randint(VOCAB, (BATCH, SEQ), generator=draws)
    tau = torch.tensor([0.3, 0.7, 1.0])
    with during("corrupt"):
        x_t = process.corrupt(x0, tau, draws)
    expect(x_t.shape == x0.shape and x_t.dtype == torch.long, f"corrupt gives {x_t.dtype} of shape {tuple(x_t.shape)}")
    logits = network(x_t, tau, None, None).tokens
    with during("loss"):
        loss = process.loss(logits, x0, x_t, tau)
        expect(loss.shape == (BATCH,), f"loss must be per sample, shape ({BATCH},), got {tuple(loss.shape)}")
        expect(bool(torch.isfinite(loss).all()), f"loss is not finite: {loss.tolist()}")
        loss.mean().backward()
    gradient = network.token_head.weight.grad
    expect(
        gradient is not None and bool(gradient.abs().sum() > 0),
        "the loss does not depend on the prediction (no gradient reaches it)",
    )
    if type(process).position_loss is not Process.position_loss:
        with during("position_loss"), torch.no_grad():
            positions = process.position_loss(logits, x0, x_t, tau)
        expect(
            positions.shape == x0.shape,
            f"position_loss must be per position, shape {tuple(x0.shape)}, got {tuple(positions.shape)}",
        )
        expect(
            torch.allclose(positions.mean(dim=1), loss, atol=1e-5),
            f"position_loss averaged over positions differs from loss: {positions.mean(dim=1).tolist()} vs "
            f"{loss.tolist()}",
        )
    rows = process.loss_rows(x_t)
    if rows is not None:
        with during("loss at loss_rows only"):
            on_rows = process.loss(logits[rows], x0, x_t, tau)
        expect(
            torch.allclose(on_rows, loss, atol=1e-5),
            f"loss at loss_rows differs from the full loss: {on_rows.tolist()} vs {loss.tolist()}",
        )
    with during("the reverse chain from the prior"), torch.no_grad():
        *_, (_, x) = _reverse_chain(process, network, process.prior((BATCH, SEQ), CPU, draws), draws)
    expect(
        x.dtype == torch.long and bool(((x >= 0) & (x < VOCAB)).all()),
        f"the reverse chain ends in {x.tolist()}, not in token ids 0..{VOCAB - 1}",
    )
    if takes_fixed(process):
        _check_fixed_kept(process, network)
    if isinstance(process, RevealingProcess):
        _check_reveal_matches_step(process, network)


def _check_fixed_kept(process: Process, network: ProbeBackbone) -> None:
    """A step that takes the known tokens (``fixed``) returns them unchanged, from the prior to the end of the chain;
    one found to be written without the keyword (deprecated) is from then on called without them, and not held to
    keeping them."""
    draws = generator()
    fixed = fixed_tokens()
    known = fixed != VOCAB
    with during("the reverse chain with known tokens (fixed)", KEEPS_FIXED), torch.no_grad():
        start = torch.where(known, fixed, process.prior((BATCH, SEQ), CPU, draws))
        for tau, x in _reverse_chain(process, network, start, draws, fixed):
            if not takes_fixed(process):
                return
            expect(
                torch.equal(x[known], fixed[known]), f"step(..., fixed=...) changed known tokens at tau={tau:g}",
                KEEPS_FIXED,
            )


def _reverse_chain(
    process: Process, network: ProbeBackbone, x: torch.Tensor, draws: torch.Generator,
    fixed: torch.Tensor | None = None,
) -> Iterator[tuple[float, torch.Tensor]]:
    """SEQ reverse steps from ``x`` to time 0 (given the known tokens ``fixed``), yielding (time, state)."""
    for k in range(SEQ, 0, -1):
        t, s = torch.full((BATCH,), k / SEQ), torch.full((BATCH,), (k - 1) / SEQ)
        x = reverse_step(process, x, network(x, t, None, None).tokens, t, s, draws, fixed)
        yield (k - 1) / SEQ, x


def _check_reveal_matches_step(process: RevealingProcess, network: ProbeBackbone) -> None:
    """``step`` must equal ``fill`` at ``reveal``'s positions under the same random stream (the samplers' fast path)."""
    with during("reveal and fill against step", REVEALS), torch.no_grad():
        x = process.prior((BATCH, SEQ), CPU, generator())
        t, s = torch.full((BATCH,), 1.0), torch.full((BATCH,), 1.0 - 1.0 / SEQ)
        logits = network(x, t, None, None).tokens
        stepped = process.step(x, logits, t, s, generator())
        draws = generator()
        reveal = process.reveal(x, t, s, draws)
        filled = process.fill(x, reveal, logits[reveal], draws)
    expect(
        torch.equal(stepped, filled),
        "step differs from fill at the positions reveal picks, under the same random stream",
        REVEALS,
    )
