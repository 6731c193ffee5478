"""What every kind's exercise builds on: the probe sizes, one-line failures naming the broken promise, seeded draws,
and the registered companions put around the component a check judges."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from registry.errors import IncompatibleComponentsError, MissingResourceError
from registry.host.component import Component
from registry.host.registry import Registry
from registry.interfaces import TOKEN_STATES, Latent

VOCAB, SEQ, BATCH = 5, 8, 3
CPU = torch.device("cpu")
#: the promise every component makes: it works at a tiny size inside a model
WORKS = "fails in a tiny model"


class ExerciseFailure(Exception):
    """A component misbehaved while used at a tiny size; the message says in which use, ``promise`` what it broke
    (``WORKS`` when it broke no particular declaration: it failed where it is used)."""

    def __init__(self, detail: str, promise: str = WORKS) -> None:
        super().__init__(detail)
        self.promise = promise

    def line(self, label: str) -> str:
        """The one line naming the component (``label``), the promise it broke and how."""
        promise = self.promise if self.promise == WORKS else f"breaks {self.promise}"
        return f"{label}: {promise}: {self}"


@contextlib.contextmanager
def during(what: str, promise: str = WORKS) -> Iterator[None]:
    """Any exception inside becomes an :class:`ExerciseFailure` saying it happened during ``what``."""
    try:
        yield
    except (ExerciseFailure, MissingResourceError):
        raise
    except Exception as error:
        raise ExerciseFailure(f"{what}: {type(error).__name__}: {error}", promise) from error


def expect(condition: bool, problem: str, promise: str = WORKS) -> None:
    """Fail with ``problem`` (breaking ``promise``) unless ``condition`` holds."""
    if not condition:
        raise ExerciseFailure(problem, promise)


def generator() -> torch.Generator:
    """A generator seeded the same for every use: a check gives the same verdict on every run."""
    return torch.Generator().manual_seed(0)


class Companions:
    """The registered components a check puts around the one it checks, nearest first.

    ladd's own components, then those of the checked component's plugin; other plugins' components only where
    none of those suits the use. So a check judges the component it checks, never another plugin's.
    """

    def __init__(self, registry: Registry, checked: Component) -> None:
        self.registry, self.plugin, self.checked = registry, checked.origin.plugin, checked

    def tiers(self, kind: str) -> list[list[Component]]:
        """The components of ``kind`` in two tiers: ladd's own then the checked plugin's, and the others."""
        found = [c for c in self.registry if c.kind == kind]
        own = [c for c in found if c.origin.own]
        near = own + [c for c in found if c not in own and c.origin.plugin == self.plugin]
        return [near, [c for c in found if c not in near]]


def built(
    companions: Companions, kind: str, accept: Callable[[Any], bool] = lambda _: True, **context: Any
) -> list[tuple[str, Any]]:
    """(``kind 'name'``, default instance) of every registered component of ``kind`` that builds and passes
    ``accept``: of the nearest tier that has one (see :class:`Companions`)."""
    for tier in companions.tiers(kind):
        found = []
        for partner in tier:
            try:
                instance = companions.registry.instantiate(partner, **context)[0]
            except Exception:  # a partner that does not build here is simply not used
                continue
            if accept(instance):
                found.append((f"{kind} {partner.name!r}", instance))
        if found:
            return found
    raise MissingResourceError(f"no registered {kind} fits with its default options here, so this use cannot be made")


def with_a_partner(partners: list[tuple[str, Any]], use: Callable[[Any], None]) -> None:
    """Run ``use`` with the first partner it works with; with none, report the first partner's failure."""
    failures: list[ExerciseFailure] = []
    for label, partner in partners:
        try:
            use(partner)
            return
        except ExerciseFailure as failure:
            failures.append(ExerciseFailure(f"with {label}, {failure}", failure.promise))
    raise failures[0]


def schedule(companions: Companions) -> Any:
    """A registered schedule (ladd's own first)."""
    return built(companions, "schedule")[0][1]


def token_processes(companions: Companions, chosen: Any) -> list[tuple[str, Any]]:
    """Every registered process that diffuses token ids, built for the probe vocabulary on schedule ``chosen``."""
    return built(
        companions, "process", lambda process: process.diffuses in TOKEN_STATES, schedule=chosen, vocab_size=VOCAB
    )


def latent_processes(companions: Companions, latent: Latent, chosen: Any) -> list[tuple[str, Any]]:
    """Every registered process that diffuses what ``latent`` produces."""
    return built(
        companions,
        "process",
        lambda process: process.diffuses == latent.produces,
        schedule=chosen,
        vocab_size=latent.values,
    )


def without_text(component: Component, registry: Registry, **context: Any) -> Any:
    """Build with no tokenizer; a component that needs text data is then not exercised, not broken."""
    try:
        return registry.instantiate(component, tokenizer=None, **context)[0]
    except IncompatibleComponentsError as error:
        raise MissingResourceError(
            f"needs a text dataset's tokenizer, which a tiny check cannot supply ({error})"
        ) from None


def fixed_tokens(length: int = SEQ) -> torch.Tensor:
    """Known tokens for the probe's rows (``[BATCH, length]``, the mask id at free positions): half the positions of
    every row, their values varying along the row and between rows, so that a chain ignoring them keeps them all
    only by a chance far below one in a million."""
    fixed = torch.full((BATCH, length), VOCAB)
    known = torch.arange(0, length, 2)
    rows = torch.arange(BATCH)[:, None]
    fixed[:, known] = (rows * 2 + known[None, :] * 3 + 1) % VOCAB
    return fixed
