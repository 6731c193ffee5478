"""One real, tiny use of each kind's interface inside a model, for ``ladd plugins check``.

A component is built with its default options and put into a small model with ladd's probe networks
(``probes.py``) and, where it needs them, other registered components (a schedule, a token process,
samplers). Every failure is raised as ``ExerciseFailure`` naming what was being done.
"""
from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import torch

from registry.config.settings import Objective
from registry.engine.adapters import ADAPTABLE, matches
from registry.engine.model import DiffusionModel
from registry.engine.sampling import takes_latent
from registry.errors import IncompatibleComponentsError, MissingResourceError
from registry.host.component import Component
from registry.host.model_folders import PluginImporter
from registry.host.plugin_code import FAULTS, PluginCode, describe
from registry.host.registry import Registry
from registry.interfaces import (
    TOKEN_STATES,
    Channels,
    Latent,
    ObjectiveStep,
    Process,
    RevealingProcess,
    Sampler,
    batches_from,
    context_of,
    device_batches,
    mask_id,
    needs_of,
)
from registry.toolkit.sampling import reverse_step, takes_fixed

from .probes import ProbeBackbone, ProbeEncoder

VOCAB, SEQ, BATCH = 5, 8, 3
CPU = torch.device("cpu")


class ExerciseFailure(Exception):
    """A component misbehaved while used at a tiny size; the message says in which use."""


@contextlib.contextmanager
def _during(what: str) -> Iterator[None]:
    try:
        yield
    except (ExerciseFailure, MissingResourceError):
        raise
    except Exception as error:
        raise ExerciseFailure(f"{what}: {type(error).__name__}: {error}") from error


def _expect(condition: bool, problem: str) -> None:
    if not condition:
        raise ExerciseFailure(problem)


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


class Companions:
    """The registered components a check puts around the one it checks, nearest first.

    ladd's own components, then those of the checked component's plugin; other plugins' components only where
    none of those suits the use. So a check judges the component it checks, never another plugin's.
    """

    def __init__(self, registry: Registry, checked: Component) -> None:
        self.registry, self.plugin = registry, checked.origin.plugin

    def tiers(self, kind: str) -> list[list[Component]]:
        """The components of ``kind`` in two tiers: ladd's own then the checked plugin's, and the others."""
        found = [c for c in self.registry if c.kind == kind]
        own = [c for c in found if c.origin.own]
        near = own + [c for c in found if c not in own and c.origin.plugin == self.plugin]
        return [near, [c for c in found if c not in near]]


def _built(
    companions: Companions, kind: str, accept: Callable[[Any], bool] = lambda _: True, **context: Any
) -> list[tuple[str, Any]]:
    """(``kind 'name'``, default instance) of every registered component of ``kind`` that builds and passes
    ``accept``: of the nearest tier that has one (see :class:`Companions`)."""
    for tier in companions.tiers(kind):
        found = []
        for partner in tier:
            try:
                instance = partner.build(**context)
            except Exception:  # a partner that does not build here is simply not used
                continue
            if accept(instance):
                found.append((f"{kind} {partner.name!r}", instance))
        if found:
            return found
    raise MissingResourceError(f"no registered {kind} fits with its default options here, so this use cannot be made")


def _with_a_partner(partners: list[tuple[str, Any]], use: Callable[[Any], None]) -> None:
    """Run ``use`` with the first partner it works with; with none, report the first partner's failure."""
    failures = []
    for label, partner in partners:
        try:
            use(partner)
            return
        except ExerciseFailure as failure:
            failures.append(f"with {label}, {failure}")
    raise ExerciseFailure(failures[0])


def _schedule(companions: Companions) -> Any:
    return _built(companions, "schedule")[0][1]


def _token_processes(companions: Companions, schedule: Any) -> list[tuple[str, Any]]:
    """Every registered process that diffuses token ids, built for the probe vocabulary."""
    return _built(
        companions, "process", lambda process: process.diffuses in TOKEN_STATES, schedule=schedule, vocab_size=VOCAB
    )


def _latent_processes(companions: Companions, latent: Latent, schedule: Any) -> list[tuple[str, Any]]:
    """Every registered process that diffuses what ``latent`` produces."""
    return _built(
        companions,
        "process",
        lambda process: process.diffuses == latent.produces,
        schedule=schedule,
        vocab_size=latent.values,
    )


def _fixed_tokens() -> torch.Tensor:
    """Known tokens for the probe's rows (``[BATCH, SEQ]``, the mask id at free positions): half the positions of
    every row, their values varying along the row and between rows, so that a chain ignoring them keeps them all
    only by a chance far below one in a million."""
    fixed = torch.full((BATCH, SEQ), VOCAB)
    known = torch.arange(0, SEQ, 2)
    rows = torch.arange(BATCH)[:, None]
    fixed[:, known] = (rows * 2 + known[None, :] * 3 + 1) % VOCAB
    return fixed


def exercise_schedule(component: Component, registry: Registry) -> None:
    """Signal levels in [0, 1], falling with time; then a loss and a reverse chain of a token process using it."""
    schedule = component.build()
    tau = torch.linspace(0.0, 1.0, 9)
    with _during("signal(tau)"):
        signal = schedule.signal(tau)
    _expect(
        signal.shape == tau.shape, f"signal(tau) has shape {tuple(signal.shape)} for tau of shape {tuple(tau.shape)}"
    )
    _expect(bool(((signal >= 0) & (signal <= 1)).all()), f"signal(tau) leaves [0, 1]: {signal.tolist()}")
    _expect(bool((signal.diff() <= 1e-6).all()), f"signal(tau) must not rise with tau: {signal.tolist()}")
    _with_a_partner(_token_processes(Companions(registry, component), schedule), _token_round)


def exercise_process(component: Component, registry: Registry) -> None:
    """On tokens: a loss whose gradient reaches the network, the rows-only loss, a reverse chain ending in real tokens.

    A process on another state is exercised as a latent process, with a registered latent producing that state.
    """
    companions = Companions(registry, component)
    schedule = _schedule(companions)
    process = component.build(schedule=schedule, vocab_size=VOCAB)
    if process.diffuses in TOKEN_STATES:
        _token_round(process)
        return
    latents = _built(companions, "latent", lambda latent: latent.produces == process.diffuses)
    tokens = _token_processes(companions, schedule)
    pairs = [(f"{name} and {t}", (latent, token)) for name, latent in latents for t, token in tokens]

    def use(pair: tuple[Latent, Any]) -> None:
        latent, token = pair
        _latent_round(latent, component.build(schedule=schedule, vocab_size=latent.values), token, companions)

    _with_a_partner(pairs, use)


def _token_round(process: Any) -> None:
    generator = _generator()
    network = ProbeBackbone(Channels(VOCAB, SEQ, None))
    x0 = torch.randint(VOCAB, (BATCH, SEQ), generator=generator)
    tau = torch.tensor([0.3, 0.7, 1.0])
    with _during("corrupt"):
        x_t = process.corrupt(x0, tau, generator)
    _expect(x_t.shape == x0.shape and x_t.dtype == torch.long, f"corrupt gives {x_t.dtype} of shape {tuple(x_t.shape)}")
    logits = network(x_t, tau, None, None).tokens
    with _during("loss"):
        loss = process.loss(logits, x0, x_t, tau)
        _expect(loss.shape == (BATCH,), f"loss must be per sample, shape ({BATCH},), got {tuple(loss.shape)}")
        _expect(bool(torch.isfinite(loss).all()), f"loss is not finite: {loss.tolist()}")
        loss.mean().backward()
    gradient = network.token_head.weight.grad
    _expect(
        gradient is not None and bool(gradient.abs().sum() > 0),
        "the loss does not depend on the prediction (no gradient reaches it)",
    )
    if type(process).position_loss is not Process.position_loss:
        with _during("position_loss"), torch.no_grad():
            positions = process.position_loss(logits, x0, x_t, tau)
        _expect(
            positions.shape == x0.shape,
            f"position_loss must be per position, shape {tuple(x0.shape)}, got {tuple(positions.shape)}",
        )
        _expect(
            torch.allclose(positions.mean(dim=1), loss, atol=1e-5),
            f"position_loss averaged over positions differs from loss: {positions.mean(dim=1).tolist()} vs "
            f"{loss.tolist()}",
        )
    rows = process.loss_rows(x_t)
    if rows is not None:
        with _during("loss at loss_rows only"):
            on_rows = process.loss(logits[rows], x0, x_t, tau)
        _expect(
            torch.allclose(on_rows, loss, atol=1e-5),
            f"loss at loss_rows differs from the full loss: {on_rows.tolist()} vs {loss.tolist()}",
        )
    with _during("the reverse chain from the prior"), torch.no_grad():
        *_, (_, x) = _reverse_chain(process, network, process.prior((BATCH, SEQ), CPU, generator), generator)
    _expect(
        x.dtype == torch.long and bool(((x >= 0) & (x < VOCAB)).all()),
        f"the reverse chain ends in {x.tolist()}, not in token ids 0..{VOCAB - 1}",
    )
    if takes_fixed(process):
        _check_fixed_kept(process, network)
    if isinstance(process, RevealingProcess):
        _check_reveal_matches_step(process, network)


def _check_fixed_kept(process: Process, network: ProbeBackbone) -> None:
    """A step that takes the known tokens (``fixed``) returns them unchanged, from the prior to the end of the chain."""
    generator = _generator()
    fixed = _fixed_tokens()
    known = fixed != VOCAB
    with _during("the reverse chain with known tokens (fixed)"), torch.no_grad():
        start = torch.where(known, fixed, process.prior((BATCH, SEQ), CPU, generator))
        for tau, x in _reverse_chain(process, network, start, generator, fixed):
            _expect(torch.equal(x[known], fixed[known]), f"step(..., fixed=...) changed known tokens at tau={tau:g}")


def _reverse_chain(
    process: Process, network: ProbeBackbone, x: torch.Tensor, generator: torch.Generator,
    fixed: torch.Tensor | None = None,
) -> Iterator[tuple[float, torch.Tensor]]:
    """SEQ reverse steps from ``x`` to time 0 (given the known tokens ``fixed``), yielding (time, state)."""
    for k in range(SEQ, 0, -1):
        t, s = torch.full((BATCH,), k / SEQ), torch.full((BATCH,), (k - 1) / SEQ)
        x = reverse_step(process, x, network(x, t, None, None).tokens, t, s, generator, fixed)
        yield (k - 1) / SEQ, x


def _check_reveal_matches_step(process: RevealingProcess, network: ProbeBackbone) -> None:
    """``step`` must equal ``fill`` at ``reveal``'s positions under the same random stream (the samplers' fast path)."""
    with _during("reveal and fill against step"), torch.no_grad():
        x = process.prior((BATCH, SEQ), CPU, _generator())
        t, s = torch.full((BATCH,), 1.0), torch.full((BATCH,), 1.0 - 1.0 / SEQ)
        logits = network(x, t, None, None).tokens
        stepped = process.step(x, logits, t, s, _generator())
        generator = _generator()
        reveal = process.reveal(x, t, s, generator)
        filled = process.fill(x, reveal, logits[reveal], generator)
    _expect(
        torch.equal(stepped, filled),
        "step differs from fill at the positions reveal picks, under the same random stream",
    )


def exercise_latent(component: Component, registry: Registry) -> None:
    """Codes and the null latent checked with a process diffusing them, a training step in a joint and in a
    sequential model, then sampling."""
    companions = Companions(registry, component)
    schedule = _schedule(companions)
    latent: Latent = component.build()
    y0 = _check_codes(latent)
    pairs = [
        (f"{name} and {t}", (latent_process, token))
        for name, latent_process in _latent_processes(companions, latent, schedule)
        for t, token in _token_processes(companions, schedule)
    ]

    def use(pair: tuple[Process, Any]) -> None:
        latent_process, token = pair
        with _during("the latent process's prior"):
            prior = latent_process.prior(tuple(y0.shape), CPU, _generator())
        _expect(
            prior.shape == y0.shape and prior.dtype == y0.dtype,
            f"the prior gives {prior.dtype} of shape {tuple(prior.shape)}, encode {y0.dtype} of {tuple(y0.shape)}",
        )
        _latent_round(latent, latent_process, token, companions)

    _with_a_partner(pairs, use)


def _latent_round(latent: Latent, latent_process: Process, process: Any, companions: Companions) -> None:
    joint = DiffusionModel(
        process,
        latent,
        ProbeBackbone(Channels(VOCAB, SEQ, latent)),
        VOCAB,
        SEQ,
        Objective(),
        ProbeEncoder(VOCAB, latent.length, latent.width),
        latent_process=latent_process,
        schedule=_schedule(companions),
    )
    _train_step(joint, "a training step of a joint model")
    sequential = DiffusionModel(
        process,
        latent,
        ProbeBackbone(Channels(VOCAB, SEQ, latent)),
        VOCAB,
        SEQ,
        Objective(latent_time="clean"),
        ProbeEncoder(VOCAB, latent.length, latent.width),
        ProbeBackbone(Channels(0, 0, latent)),
        latent_process,
        _schedule(companions),
    )
    _train_step(sequential, "a training step of a sequential model (separate latent denoiser)")
    _check_stage2(joint)  # last: the frozen encoder is shared with the sequential model
    _sample_with(joint, companions, lambda s: not s.conditions_on_clean_latent)
    _sample_with(sequential, companions, lambda s: s.conditions_on_clean_latent)


def _check_codes(latent: Latent) -> torch.Tensor:
    """Discrete codes are int64 and the null latent has the clean latent's shape and dtype; returns the clean latent."""
    features = ProbeEncoder(VOCAB, latent.length, latent.width)(torch.randint(VOCAB, (BATCH, SEQ)))
    with _during("encode"):
        y0 = latent.encode(features).y0
    _expect(
        y0.is_floating_point() or y0.dtype == torch.long,
        f"encode gives codes of dtype {y0.dtype}; discrete codes must be torch.long (int64)",
    )
    with _during("null"):
        null = latent.null(BATCH, CPU)
    _expect(
        null.shape == y0.shape and null.dtype == y0.dtype,
        f"null gives {null.dtype} of shape {tuple(null.shape)} but encode gives {y0.dtype} of shape {tuple(y0.shape)}; "
        "they must match",
    )
    return y0


def _train_step(model: DiffusionModel, what: str) -> None:
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model.train()
    with _during(what):
        terms = model.loss(torch.randint(VOCAB, (2 * BATCH, SEQ), generator=_generator()), _generator())
        _expect(all(bool(torch.isfinite(v)) for v in terms.values()), f"{what}: loss terms are not finite: {terms}")
        terms["loss"].backward()
        optimizer.step()


def _check_stage2(model: DiffusionModel) -> None:
    """A Stage 2 training step (``freeze_encoder``: the encoder frozen, the latent still learning) runs with finite
    loss terms."""
    model.freeze_encoder()
    _train_step(model, "a Stage 2 training step (encoder frozen)")


def _sample_with(model: DiffusionModel, companions: Companions, accept: Callable[[Sampler], bool]) -> None:
    """Sample ``model`` with a registered sampler that ``accept``s and whose declared needs the model meets (the
    first it works with)."""
    samplers = _built(companions, "sampler", lambda sampler: accept(sampler) and _fits(sampler, model))
    _with_a_partner(samplers, lambda sampler: _sample(model, "the sampler", sampler))


def _fits(sampler: Sampler, model: DiffusionModel) -> bool:
    """Whether ``model`` has what ``sampler`` declares it needs (a latent channel or none, a kind of token process)."""
    return needs_of(sampler).unmet("latent" if model.latent is not None else None, "", model.process) is None


def _sample(model: DiffusionModel, label: str, sampler: Sampler) -> None:
    fixed = _fixed_tokens()
    known = fixed != VOCAB
    with _during(f"sampling with {label}"):
        out = sampler.sample(model.eval(), BATCH, SEQ, _generator(), fixed=fixed)
    tokens = out.tokens
    _expect(
        tokens.shape == (BATCH, SEQ) and tokens.dtype == torch.long,
        f"{label} gives samples of {tokens.dtype}, shape {tuple(tokens.shape)}",
    )
    _expect(
        bool(((tokens >= 0) & (tokens < VOCAB)).all()), f"samples hold ids outside 0..{VOCAB - 1}: {tokens.tolist()}"
    )
    _expect(torch.equal(tokens[known], fixed[known]), "samples do not keep the tokens given in `fixed`")
    if model.latent is not None:
        null = model.latent.null(BATCH, CPU)
        _expect(
            out.latent is not None and out.latent.shape == null.shape,
            f"the sampled latent must have the null latent's shape {tuple(null.shape)}",
        )
    if model.latent is not None and takes_latent(sampler):
        with _during(f"encoding with latent {type(model.latent).__name__!r}"):
            given = model.encode(tokens)
        with _during(f"sampling with {label} given a clean latent"):
            held = sampler.sample(model, BATCH, SEQ, _generator(), fixed=fixed, latent=given)
        returned = held.latent is not None and torch.equal(held.latent, given)
        _expect(returned, f"{label} given a clean latent must return it as its latent")
        kept = torch.equal(held.tokens[known], fixed[known])
        _expect(kept, "samples given a clean latent do not keep the tokens of `fixed`")


def exercise_sampler(component: Component, registry: Registry) -> None:
    """A sample call on a small model: without a latent channel for a token-only sampler (the default), with one for
    a sampler declaring ``Needs(latent=True)``, both for one declaring ``Needs()``."""
    companions = Companions(registry, component)
    sampler: Sampler = component.build()
    schedule = _schedule(companions)
    needs = needs_of(sampler)
    has_latent = "latent" if needs.latent else None  # so that only the token process can be what is missing
    beyond = needs.unmet(has_latent, "", None, "probe", ProbeBackbone(Channels(VOCAB, SEQ, None)))
    if beyond is not None:  # a backbone interface or attention pattern the probe networks do not have
        raise MissingResourceError(f"it needs {beyond[0]}, which a tiny check's probe networks cannot be")
    processes = [(n, p) for n, p in _token_processes(companions, schedule) if not needs.unmet(has_latent, n, p)]
    if not processes:
        raise MissingResourceError(f"no registered token process is the kind it needs ({needs.token_process})")
    label = f"sampler {component.name!r}"
    if needs.latent is not True:

        def alone(process: Any) -> None:
            network = ProbeBackbone(Channels(VOCAB, SEQ, None))
            model = DiffusionModel(process, None, network, VOCAB, SEQ, Objective(), schedule=schedule)
            _sample(model, label, sampler)

        _with_a_partner(processes, alone)
    if needs.latent is False:
        return
    channels = [
        (f"{name} and {lp}", (latent, latent_process))
        for name, latent in _built(companions, "latent")
        for lp, latent_process in _latent_processes(companions, latent, schedule)
    ]

    def use(pair: tuple[Any, tuple[Latent, Process]]) -> None:
        process, (latent, latent_process) = pair
        model = DiffusionModel(
            process,
            latent,
            ProbeBackbone(Channels(VOCAB, SEQ, latent)),
            VOCAB,
            SEQ,
            Objective(),
            ProbeEncoder(VOCAB, latent.length, latent.width),
            latent_process=latent_process,
            schedule=schedule,
        )
        _sample(model, label, sampler)

    pairs = [(f"{p} and {c}", (process, channel)) for p, process in processes for c, channel in channels]
    _with_a_partner(pairs, use)


def exercise_encoder(component: Component, registry: Registry) -> None:
    """Features ``[B, length, width]`` of clean tokens; a trainable encoder receives gradients."""
    encoder = _without_text(component, vocab_size=VOCAB, seq_len=SEQ)
    tokens = torch.randint(VOCAB, (BATCH, SEQ))
    with _during("forward"):
        features = encoder(tokens, tokens == VOCAB)
    expected = (BATCH, encoder.length, encoder.width)
    _expect(
        tuple(features.shape) == expected,
        f"features of shape {tuple(features.shape)}, expected (batch, length, width) = {expected}",
    )
    if encoder.trainable and any(p.requires_grad for p in encoder.parameters()):
        features.sum().backward()
        _expect(
            any(p.grad is not None for p in encoder.parameters()),
            "a trainable encoder's features do not reach its parameters",
        )


def exercise_backbone(component: Component, registry: Registry) -> None:
    """Every channel combination the backbone accepts: full forward, the rows-only path, and a backward pass."""
    try:
        latents = [latent for _, latent in _built(Companions(registry, component), "latent")]
    except MissingResourceError:
        latents = []  # the token channel is still exercised
    combinations = [Channels(VOCAB, SEQ, None)]
    for latent in latents:
        combinations += [Channels(VOCAB, SEQ, latent), Channels(0, 0, latent)]
    used = 0
    for channels in combinations:
        try:
            backbone = component.build(channels=channels)
        except IncompatibleComponentsError:
            continue
        _backbone_round(backbone, channels)
        _check_declared_parts(backbone, channels)
        used += 1
    _expect(used > 0, "builds for no channel combination (tokens, tokens + latent, latent alone)")


def _backbone_inputs(channels: Channels) -> tuple[Any, Any, Any, Any]:
    """A backbone's seeded inputs for ``channels``: ``x_t``, ``tau_x``, ``y_t``, ``tau_y`` (None where absent)."""
    generator = _generator()
    tau = torch.full((BATCH,), 0.5)
    x = torch.randint(VOCAB + 1, (BATCH, SEQ), generator=generator) if channels.tokens else None
    y = None
    if channels.latent is not None:
        latent = channels.latent
        with torch.no_grad():
            y0 = latent.encode(
                ProbeEncoder(VOCAB, latent.length, latent.width)(
                    torch.randint(VOCAB, (BATCH, SEQ), generator=generator)
                )
            ).y0
        y = latent.backbone_input(y0)
    return x, (tau if x is not None else None), y, (tau if y is not None else None)


def _backbone_round(backbone: Any, channels: Channels) -> None:
    x, tau_x, y, tau_y = _backbone_inputs(channels)
    given = " + ".join(
        name for name, value in (("tokens", x), (type(channels.latent).__name__, y)) if value is not None
    )
    backbone.eval()
    with _during(f"forward with {given}"), torch.no_grad():
        out = backbone(x, tau_x, y, tau_y)
    if x is not None:
        expected = (BATCH, SEQ, VOCAB)
        _expect(
            out.tokens is not None and out.tokens.shape == expected,
            f"forward with {given}: token logits must be (batch, S, K) = {expected}",
        )
        rows = x == VOCAB
        with _during(f"forward with {given} at rows"), torch.no_grad():
            on_rows = backbone(x, tau_x, y, tau_y, rows).tokens
        _expect(
            on_rows is not None
            and on_rows.shape == out.tokens[rows].shape
            and torch.allclose(on_rows, out.tokens[rows], atol=1e-4),
            f"forward with {given} at rows differs from forward at every position, taken at the same rows",
        )
    if y is not None:
        _expect(out.latent is not None, f"forward with {given}: a backbone given a latent channel must predict it")
    backbone.train()
    with _during(f"backward through forward with {given}"):
        _backward(backbone, (x, tau_x, y, tau_y))


def _check_declared_parts(backbone: Any, channels: Channels) -> None:
    """Its blocks (``layers``) are its own modules and recomputing them (activation checkpointing) leaves the
    gradients as they were; each of its ``adapter_targets`` names some of its linear layers or embeddings."""
    own = {id(module) for module in backbone.modules()}
    with _during("layers()"):
        blocks = list(backbone.layers())
    _expect(all(id(block) in own for block in blocks), "layers() yields modules that are not the backbone's own")
    adaptable = [name for name, module in backbone.named_modules() if isinstance(module, ADAPTABLE)]
    with _during("adapter_targets()"):
        patterns = backbone.adapter_targets()
    for pattern in patterns:
        _expect(
            any(matches(name, pattern) for name in adaptable),
            f"adapter_targets() names {pattern!r}, which matches none of its linear layers or embeddings",
        )
    if not blocks:
        return
    from registry.training.strategy import recompute_blocks  # here: the training wing imports Lightning

    backbone.eval()  # no dropout: the two passes must see the same function of the same inputs
    inputs = tuple(value if value is None else value.detach() for value in _backbone_inputs(channels))
    with _during("forward and backward in eval mode"):
        plain = _gradients(backbone, inputs)
    recompute_blocks(backbone)
    with _during("forward and backward with its layers() recomputed (train.activation_checkpointing)"):
        recomputed = _gradients(backbone, inputs)
    _expect(
        all(torch.allclose(a, b, atol=1e-5) for a, b in zip(plain, recomputed, strict=True)),
        "recomputing its layers() in the backward pass (train.activation_checkpointing) changes the gradients",
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


def exercise_dataset(component: Component, registry: Registry) -> None:
    """Token ids ``[B, seq_len]`` inside the vocabulary; the same seed gives the same stream, also resumed at batch 2;
    a batch's context (``Dataset.context``) leaves every row something to score.

    A dataset that draws on the training device (``device_batches``) is checked the same way, on the CPU.
    """
    dataset = component.build()
    with _during("batches"):
        streams = [dataset.batches(BATCH, 0) for _ in range(2)]
    with _during("batches_from"):
        resumed = next(batches_from(dataset, 2, BATCH, 0))
    _check_stream(dataset, streams, resumed, "", "batches_from(2, ...)")
    with _during("context"):
        context = context_of(dataset, resumed)
    _expect(
        context is None
        or (context.dtype == torch.bool and context.shape == resumed.shape and bool((~context).any(dim=1).all())),
        f"context of a batch must be None or bool {tuple(resumed.shape)} leaving each row a position to score",
    )
    cpu = torch.device("cpu")
    with _during("device_batches"):
        on_device = [device_batches(dataset, start, BATCH, 0, cpu) for start in (0, 0, 2)]
    if on_device[0] is None:
        return
    _expect(
        all(stream is not None for stream in on_device),
        "device_batches returns a stream for some starts and None for others",
    )
    with _during("device_batches"):
        resumed = next(cast(Iterator[torch.Tensor], on_device[2]))
    _check_stream(dataset, on_device[:2], resumed, "device_batches: ", "device_batches(2, ...)")


def _check_stream(dataset: Any, streams: list[Any], resumed: torch.Tensor, prefix: str, resumed_name: str) -> None:
    """Two streams of one seed agree, hold ``[B, seq_len]`` token ids, and their third batch is ``resumed``."""
    with _during(prefix.rstrip(": ") or "batches"):
        batch, again = next(streams[0]), [next(streams[1]) for _ in range(3)]
    _expect(
        tuple(batch.shape) == (BATCH, dataset.seq_len),
        f"{prefix}batch of shape {tuple(batch.shape)}, expected {(BATCH, dataset.seq_len)}",
    )
    _expect(batch.dtype == torch.long, f"{prefix}batch of dtype {batch.dtype}, expected torch.int64")
    _expect(
        bool(((batch >= 0) & (batch < dataset.vocab_size)).all()),
        f"{prefix}batch holds ids outside 0..{dataset.vocab_size - 1}",
    )
    _expect(torch.equal(batch, again[0]), f"{prefix}the same seed and split give different batches")
    _expect(
        torch.equal(resumed, again[2]),
        f"{resumed_name} is not the stream's third batch: resuming would train on other data",
    )


def exercise_metric(component: Component, registry: Registry) -> None:
    """Scores of one sample set against another: floats, including the primary one."""
    metric = _without_text(component)
    with _during("scoring two sample sets"):
        scores = metric(torch.randint(2, (16, SEQ)), torch.randint(2, (16, SEQ)))
    _expect(
        isinstance(scores, dict) and metric.primary in scores,
        f"scores {scores} lack the primary score {metric.primary!r}",
    )
    _expect(all(isinstance(v, float) for v in scores.values()), f"scores must be floats: {scores}")


def _without_text(component: Component, **context: Any) -> Any:
    """Build with no tokenizer; a component that needs text data is then not exercised, not broken."""
    try:
        return component.build(tokenizer=None, **context)
    except IncompatibleComponentsError as error:
        raise MissingResourceError(
            f"needs a text dataset's tokenizer, which a tiny check cannot supply ({error})"
        ) from None


def exercise_importer(entry: PluginImporter, registry: Registry) -> None:
    """The importer's own tiny checkpoint imported as ``ladd import`` does, and the model folder read back: token
    logits of the right shape, finite where not ruled out."""
    from registry.engine.importing import import_checkpoint
    from registry.engine.loading import from_pretrained

    importer = entry.importer()
    with tempfile.TemporaryDirectory(prefix="ladd-import-check-") as scratch:
        with PluginCode() as code:
            try:
                source = importer.example(Path(scratch) / "checkpoint")
            except FAULTS as error:
                if not code.is_fault(error):
                    raise
                raise ExerciseFailure(f"example() raised {describe(error)}") from error
        if source is None:
            raise MissingResourceError("it offers no example checkpoint (Importer.example)")
        folder = import_checkpoint(entry, source, Path(scratch) / "model", [], registry)
        model = from_pretrained(folder, registry).model
        tokens = torch.full((BATCH, model.seq_len), mask_id(model.vocab_size))
        tau = torch.full((BATCH,), 0.5)
        with _during("predicting with the imported model"), torch.no_grad():
            y_t = None if model.latent is None else model.latent_prior(BATCH, _generator())
            logits = model.predict(tokens, tau, y_t, None if y_t is None else tau).tokens
        expected = (BATCH, model.seq_len, model.vocab_size)
        _expect(
            logits is not None and tuple(logits.shape) == expected and _ruled_out_or_finite(logits),
            f"the imported model's token logits must be of shape {expected}, finite or -inf (a token the network "
            f"never gives), with some token finite at every position",
        )


def _ruled_out_or_finite(logits: torch.Tensor) -> bool:
    """Every logit finite or -inf (LLaDA's own mask token, which its network never predicts), none all -inf."""
    return bool((torch.isfinite(logits) | torch.isneginf(logits)).all() and torch.isfinite(logits.amax(-1)).all())


#: completions of arithmetic questions and the data's answers: what a reward is asked to score
_PROMPTS = ("What is 2 plus 3?", "What is 9 minus 4?", "What is 7 plus 1?")
_COMPLETIONS = (" 2 plus 3 is 5.", " 9 minus 4 is 6.", "")
_ANSWERS = (" 2 plus 3 is 5.", " 9 minus 4 is 5.", " 7 plus 1 is 8.")


def exercise_reward(component: Component, registry: Registry) -> None:
    """Three completions scored (a right answer, a wrong one, an empty one): one finite number each."""
    datasets = _built(Companions(registry, component), "dataset")
    try:
        reward = component.build(dataset=datasets[0][1])
    except IncompatibleComponentsError as error:
        raise MissingResourceError(f"needs a dataset that ladd's tiny check cannot supply ({error})") from None
    with _during("scoring three completions"):
        scores = list(reward(list(_PROMPTS), list(_COMPLETIONS), list(_ANSWERS)))
    _expect(
        len(scores) == 3 and all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in scores)
        and all(torch.isfinite(torch.tensor(float(s))) for s in scores),
        f"a reward gives one finite number per completion, got {scores}",
    )


#: a tiny instruction-tuning experiment: the shipped arithmetic pairs, one id per character, a two-layer network
_OBJECTIVE_SETUP = (
    "experiment=demo/arith_sft", "reward=exact_match", "backbone.hidden=16", "backbone.layers=1",
    "backbone.heads=2", "backbone.mlp_hidden=32", "train.batch_size=2",
)


def exercise_objective(component: Component, registry: Registry) -> None:
    """One step of a tiny instruction-tuning experiment whose loss slot holds the objective (with ladd's exact_match
    reward): a finite scalar loss that reaches the parameters, only the declared terms, the checkpointed state taken
    back, and the trainable set it declares (``reach``) a scalar too."""
    from registry.config.composition import compose
    from registry.engine.assembly import build_experiment

    try:
        experiment = build_experiment(compose([*_OBJECTIVE_SETUP, f"loss={component.name}"], registry), registry)
    except IncompatibleComponentsError as error:
        raise MissingResourceError(f"needs an experiment ladd's tiny check cannot supply ({error})") from None
    objective, model, dataset = experiment.objective, experiment.model.train(), experiment.dataset
    batch = next(dataset.batches(2, 0))
    step = ObjectiveStep(1, 0, 7, None, None, context_of(dataset, batch))
    with _during("one step's loss"):
        terms = objective.loss(model, batch, step)
    loss = terms.get("loss") if isinstance(terms, dict) else None
    _expect(
        isinstance(loss, torch.Tensor) and loss.dim() == 0 and bool(torch.isfinite(loss)) and loss.requires_grad,
        f"loss() must return a finite scalar 'loss' with a gradient, got {loss!r}",
    )
    extra = sorted(set(terms) - {"loss"} - set(objective.terms))
    _expect(not extra, f"loss() returns terms {extra} that the objective does not declare (Objective.terms)")
    with _during("taking back the checkpointed state"):
        objective.load_state_dict(objective.state_dict())
    with _during("reach"):
        reached = objective.reach(model)
    _expect(isinstance(reached, torch.Tensor) and reached.dim() == 0, "reach() must return a scalar")


#: Kind -> its exercise: one tiny real use of a component of that kind, run by ``ladd plugins check``.
EXERCISES: dict[str, Callable[[Component, Registry], None]] = {
    "process": exercise_process,
    "latent": exercise_latent,
    "encoder": exercise_encoder,
    "schedule": exercise_schedule,
    "backbone": exercise_backbone,
    "sampler": exercise_sampler,
    "dataset": exercise_dataset,
    "metric": exercise_metric,
    "reward": exercise_reward,
    "objective": exercise_objective,
}
