"""Every component kind and every config slot in one table, which the registry, the config schema,
assembly and ``ladd plugins check`` read.

A new kind is one ``KindSpec`` (plus its interface in ``registry/interfaces.py`` and its exercise, a module of
``registry/conformance/exercises/`` and a line in that package's table); a new slot is one ``Slot``. This module
imports no torch: listing components reads it, and the interface is named, then looked up where it is used.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: What a slot's build context is made from: every slot built before it (None for an empty optional slot).
Built = Mapping[str, Any]


@dataclass(frozen=True)
class KindSpec:
    """A component kind: its interface and the keywords its factories receive."""

    name: str
    interface: str  # a class of registry.interfaces
    context: tuple[str, ...] = ()  # keyword arguments ladd passes to every factory of this kind
    #: whether an experiment's config selects components of this kind through its slots (False: a command chooses
    #: one, as ``ladd train -m`` chooses its launcher, and no run records it)
    experiment: bool = True

    def interface_class(self) -> type:
        """The interface every component of this kind implements."""
        return getattr(importlib.import_module("registry.interfaces"), self.interface)

    def lacks(self, instance: Any) -> list[str]:
        """What ``instance`` lacks of this kind's interface (torch.nn.Module for a network, abstract methods), or []."""
        from torch import nn

        interface = self.interface_class()
        if isinstance(instance, interface):
            return []
        module = ["torch.nn.Module"] if issubclass(interface, nn.Module) and not isinstance(instance, nn.Module) else []
        abstract = sorted(getattr(interface, "__abstractmethods__", ()))
        return module + [name for name in abstract if not callable(getattr(instance, name, None))]


def _no_context(built: Built) -> dict[str, Any]:
    return {}


def _dataset_sizes(built: Built) -> dict[str, Any]:
    dataset = built["dataset"]
    return {"vocab_size": dataset.vocab_size, "seq_len": dataset.seq_len, "tokenizer": dataset.tokenizer}


def _token_process(built: Built) -> dict[str, Any]:
    return {"schedule": built["schedule"], "vocab_size": built["dataset"].vocab_size}


def _latent_process(built: Built) -> dict[str, Any]:
    return {"schedule": built["latent_schedule"], "vocab_size": built["latent"].values}


def _token_channel(built: Built, components: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    from registry.interfaces import TOKEN_STATES

    return "the token channel", TOKEN_STATES


def _latent_channel(built: Built, components: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    from registry.errors import IncompatibleComponentsError

    holder, produces = f"latent {components['latent'].name!r}", getattr(built["latent"], "produces", None)
    if produces is None:
        raise IncompatibleComponentsError(
            f"{holder} does not declare the state it produces: set its class attribute `produces` "
            "(registry.interfaces.IDS, VECTORS or a kind of your own)"
        )
    return holder, (produces,)


def _token_backbone(built: Built) -> dict[str, Any]:
    from registry.interfaces import Channels  # torch: only when an experiment is built

    dataset = built["dataset"]
    return {"channels": Channels(dataset.vocab_size, dataset.seq_len, built["latent"])}


def _latent_backbone(built: Built) -> dict[str, Any]:
    from registry.interfaces import Channels

    return {"channels": Channels(0, 0, built["latent"])}


def _tokenizer(built: Built) -> dict[str, Any]:
    return {"tokenizer": built["dataset"].tokenizer}


def _objective(built: Built) -> dict[str, Any]:
    # the dataset reaches the reward the objective names (its option ``reward``) too
    return {"dataset": built["dataset"], "sampler": built["sampler"]}


@dataclass(frozen=True)
class Slot:
    """A config key that selects one component of ``kind``, built with ``context`` from the slots before it."""

    name: str
    kind: str
    optional: bool = False  # may be null (no component)
    context: Callable[[Built], dict[str, Any]] = field(default=_no_context, compare=False)
    needs_latent: bool = False  # part of the latent channel: must stay empty without a latent
    #: for a process slot: what its process must diffuse, as (the channel's description, the states it holds)
    pairing: Callable[[Built, Mapping[str, Any]], tuple[str, tuple[str, ...]]] | None = field(
        default=None, compare=False
    )


KIND_SPECS: dict[str, KindSpec] = {
    spec.name: spec
    for spec in (
        KindSpec("process", "Process", ("schedule", "vocab_size")),
        KindSpec("latent", "Latent"),
        KindSpec("encoder", "Encoder", ("vocab_size", "seq_len", "tokenizer")),
        KindSpec("schedule", "Schedule"),
        KindSpec("backbone", "Backbone", ("channels",)),
        KindSpec("sampler", "Sampler"),
        KindSpec("dataset", "Dataset"),
        KindSpec("metric", "Metric", ("tokenizer",)),
        KindSpec("launcher", "Launcher", experiment=False),
        KindSpec("reward", "Reward", ("dataset",)),
        KindSpec("objective", "Objective", ("dataset", "sampler")),
    )
}
KINDS: tuple[str, ...] = tuple(KIND_SPECS)

#: Config slots in build order: each slot's context reads only the slots above it.
SLOTS: dict[str, Slot] = {
    slot.name: slot
    for slot in (
        Slot("dataset", "dataset"),
        Slot("schedule", "schedule"),
        Slot("process", "process", context=_token_process, pairing=_token_channel),
        Slot("latent", "latent", optional=True),
        Slot("latent_schedule", "schedule", optional=True, needs_latent=True),
        Slot(
            "latent_process",
            "process",
            optional=True,
            context=_latent_process,
            needs_latent=True,
            pairing=_latent_channel,
        ),
        Slot("encoder", "encoder", optional=True, context=_dataset_sizes, needs_latent=True),
        Slot("backbone", "backbone", context=_token_backbone),
        Slot("latent_backbone", "backbone", optional=True, context=_latent_backbone, needs_latent=True),
        Slot("sampler", "sampler"),
        Slot("metric", "metric", context=_tokenizer),
        # empty: the model's own bound (the diffusion objective; LLaDA's SFT loss on instruction data)
        Slot("loss", "objective", optional=True, context=_objective),
    )
}
