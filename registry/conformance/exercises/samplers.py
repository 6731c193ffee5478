"""The exercise of a sampler: samples of models that have what it declares it needs (``Needs``: a latent channel or
none, a kind of token process, a caching or block backbone), keeping the known tokens; at twice the trained length
when it declares ``variable_length``; and, for a token decoder, inside every sampler that runs a token decoder's
steps."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

from registry.config.settings import Objective
from registry.engine.model import DiffusionModel
from registry.engine.sampling import takes_latent
from registry.errors import IncompatibleComponentsError, InvalidConfigError, MissingResourceError
from registry.host.component import Component
from registry.host.registry import Registry
from registry.interfaces import Backbone, Channels, Latent, Needs, Process, Sampler, needs_of
from registry.toolkit.options import references

from ..probes import ProbeAttentionBackbone, ProbeBackbone, ProbeEncoder
from .common import (
    BATCH,
    CPU,
    SEQ,
    VOCAB,
    WORKS,
    Companions,
    ExerciseFailure,
    built,
    during,
    expect,
    fixed_tokens,
    generator,
    latent_processes,
    schedule,
    token_processes,
    with_a_partner,
)

#: the block of the block-causal probe: the probe's rows hold SEQ // BLOCK blocks
BLOCK = 2
#: the promise of a sampler declaring ``variable_length``
ANY_LENGTH = "variable_length (sample(..., length=N) at twice the trained length)"
#: the token networks a sampler may need: plain, keeping a key-value cache, block-causal with an exact cache
NETWORKS: tuple[Callable[[Channels], Backbone], ...] = (
    ProbeBackbone,
    ProbeAttentionBackbone,
    lambda channels: ProbeAttentionBackbone(channels, BLOCK),
)


def exercise_sampler(component: Component, registry: Registry) -> None:
    """A sample call on small models that have what it declares it needs: without a latent channel for a token-only
    sampler (the default), with one for ``Needs(latent=True)``, both for ``Needs()``; a token decoder also inside
    each of ladd's samplers (and its own plugin's) that runs a token decoder's steps."""
    companions = Companions(registry, component)
    sampler: Sampler = registry.instantiate(component)[0]
    exercise_instance(sampler, f"sampler {component.name!r}", companions)
    _decode_inside(component, sampler, companions)


def exercise_instance(sampler: Sampler, label: str, companions: Companions, promise: str = WORKS) -> None:
    """Sample the models ``sampler``'s declared needs call for (a failure breaking ``promise`` unless it breaks a
    promise of its own)."""
    try:
        _exercise(sampler, label, companions)
    except ExerciseFailure as failure:
        if failure.promise != WORKS:
            raise
        raise ExerciseFailure(str(failure), promise) from failure


def _exercise(sampler: Sampler, label: str, companions: Companions) -> None:
    chosen = schedule(companions)
    needs = needs_of(sampler)
    has_latent = "latent" if needs.latent else None  # so that only the token process can be what is missing
    network = _token_network(needs, has_latent)
    processes = [
        (name, process)
        for name, process in token_processes(companions, chosen)
        if not needs.unmet(has_latent, name, process) and (needs.blocks is not True or process.position_times)
    ]
    if not processes:
        raise MissingResourceError(f"no registered token process is the kind it needs ({needs.token_process})")
    if needs.latent is not True:

        def alone(process: Any) -> None:
            model = DiffusionModel(process, None, network(Channels(VOCAB, SEQ, None)), VOCAB, SEQ, Objective(),
                                   schedule=chosen)
            sample_check(model, label, sampler)
            if sampler.variable_length:
                _check_any_length(model, label, sampler)

        with_a_partner(processes, alone)
    if needs.latent is False:
        return
    if network is not ProbeBackbone:
        raise MissingResourceError("it needs a latent channel beside a caching or block backbone, which a tiny check's "
                                   "probe networks cannot be")
    channels = [
        (f"{name} and {lp}", (latent, latent_process))
        for name, latent in built(companions, "latent")
        for lp, latent_process in latent_processes(companions, latent, chosen)
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
            schedule=chosen,
        )
        sample_check(model, label, sampler)

    pairs = [(f"{p} and {c}", (process, channel)) for p, process in processes for c, channel in channels]
    with_a_partner(pairs, use)


def _token_network(needs: Needs, has_latent: str | None) -> Callable[[Channels], Backbone]:
    """The first probe token network that has what ``needs`` asks of a token backbone (its interface, blocks)."""
    unmet = None
    for network in NETWORKS:
        unmet = needs.unmet(has_latent, "", None, "probe", network(Channels(VOCAB, SEQ, None)))
        if unmet is None:
            return network
    assert unmet is not None
    raise MissingResourceError(f"it needs {unmet[0]}, which a tiny check's probe networks cannot be")


def _decode_inside(component: Component, sampler: Sampler, companions: Companions) -> None:
    """A sampler that other samplers take as an option (a token decoder, ``refers_to`` with its interface), run inside
    each of ladd's and its own plugin's such samplers that accepts it."""
    for host in companions.tiers(component.kind)[0]:
        for option, reference in references(host.spec.config).items():
            interface = reference.interface
            if host is component or reference.kind != component.kind or interface is None:
                continue
            if not isinstance(sampler, getattr(importlib.import_module("registry.interfaces"), interface)):
                continue
            try:
                inside = companions.registry.instantiate(host, {option: component.qualified})[0]
            except (IncompatibleComponentsError, InvalidConfigError):
                continue  # a kind of decoder the host declares it refuses (one that keeps a cache of its own)
            promise = f"{interface} (its steps run by sampler {host.qualified!r} as its {option})"
            exercise_instance(inside, f"sampler {host.name!r} with it as {option}", companions, promise)


def sample_with(model: DiffusionModel, companions: Companions, accept: Callable[[Sampler], bool]) -> None:
    """Sample ``model`` with a registered sampler that ``accept``s and whose declared needs the model meets (the
    first it works with)."""
    samplers = built(companions, "sampler", lambda sampler: accept(sampler) and _fits(sampler, model))
    with_a_partner(samplers, lambda sampler: sample_check(model, "the sampler", sampler))


def _fits(sampler: Sampler, model: DiffusionModel) -> bool:
    """Whether ``model`` has what ``sampler`` declares it needs (a latent channel or none, a kind of token process)."""
    return needs_of(sampler).unmet("latent" if model.latent is not None else None, "", model.process) is None


def sample_check(model: DiffusionModel, label: str, sampler: Sampler) -> None:
    """Samples of ``model`` by ``sampler``: real token ids keeping the known tokens, the latent of the null latent's
    shape; given a clean latent too when the sampler declares ``takes_latent``."""
    fixed = fixed_tokens()
    known = fixed != VOCAB
    with during(f"sampling with {label}"):
        out = sampler.sample(model.eval(), BATCH, SEQ, generator(), fixed=fixed)
    tokens = out.tokens
    expect(
        tokens.shape == (BATCH, SEQ) and tokens.dtype == torch.long,
        f"{label} gives samples of {tokens.dtype}, shape {tuple(tokens.shape)}",
    )
    expect(
        bool(((tokens >= 0) & (tokens < VOCAB)).all()), f"samples hold ids outside 0..{VOCAB - 1}: {tokens.tolist()}"
    )
    expect(torch.equal(tokens[known], fixed[known]), "samples do not keep the tokens given in `fixed`")
    if model.latent is not None:
        null = model.latent.null(BATCH, CPU)
        expect(
            out.latent is not None and out.latent.shape == null.shape,
            f"the sampled latent must have the null latent's shape {tuple(null.shape)}",
        )
    if model.latent is not None and takes_latent(sampler):
        with during(f"encoding with latent {type(model.latent).__name__!r}"):
            given = model.encode(tokens)
        with during(f"sampling with {label} given a clean latent"):
            held = sampler.sample(model, BATCH, SEQ, generator(), fixed=fixed, latent=given)
        returned = held.latent is not None and torch.equal(held.latent, given)
        expect(returned, f"{label} given a clean latent must return it as its latent")
        kept = torch.equal(held.tokens[known], fixed[known])
        expect(kept, "samples given a clean latent do not keep the tokens of `fixed`")


def _check_any_length(model: DiffusionModel, label: str, sampler: Sampler) -> None:
    """Samples of twice the model's length (``length=``), of that shape, keeping the known tokens up to each row's
    end."""
    length = 2 * model.seq_len
    fixed = fixed_tokens(length)
    with during(f"sampling {length} positions with {label}", ANY_LENGTH):
        out = sampler.sample(model.eval(), BATCH, SEQ, generator(), fixed=fixed, length=length)  # type: ignore[call-arg]
    tokens = out.tokens
    expect(
        tuple(tokens.shape) == (BATCH, length) and tokens.dtype == torch.long,
        f"{label} asked for {length} positions gives samples of {tokens.dtype}, shape {tuple(tokens.shape)}",
        ANY_LENGTH,
    )
    expect(
        bool(((tokens >= 0) & (tokens < VOCAB)).all()),
        f"samples of {length} positions hold ids outside 0..{VOCAB - 1}",
        ANY_LENGTH,
    )
    ends = torch.full((BATCH,), length) if out.lengths is None else out.lengths.cpu()
    known = (fixed != VOCAB) & (torch.arange(length)[None, :] < ends[:, None])
    expect(
        torch.equal(tokens[known], fixed[known]),
        f"samples of {length} positions do not keep the tokens given in `fixed`",
        ANY_LENGTH,
    )
