"""What a plugin written for an older plugin contract meets: the version it declares, checked as it loads, and the
changes ladd recognises in a component written before them, each reported in one line naming the change.

``docs/contract.md`` is the changelog these lines point to. A change is listed here only where ladd can tell, from what
a component's class holds, that it was written before the change; the others are told where they fail (a sampler
without ``needs`` refused for a latent model, say).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from registry.contract import CHANGELOG, CONTRACT_VERSION, DECLARATION
from registry.errors import PluginLoadError


def declared_contract(plugin: Any) -> int | None:
    """The contract version a plugin module declares (``LADD_CONTRACT = 3``), checked; None when it declares none."""
    declared = getattr(plugin, DECLARATION, None)
    if declared is None:
        return None
    if isinstance(declared, bool) or not isinstance(declared, int) or declared < 1:
        raise PluginLoadError(
            f"{DECLARATION} = {declared!r} must be the whole number of the plugin contract it was written for "
            f"(this ladd implements {CONTRACT_VERSION})"
        )
    if declared > CONTRACT_VERSION:
        raise PluginLoadError(
            f"it was written for plugin contract {declared}, newer than this ladd's {CONTRACT_VERSION}: upgrade ladd "
            f"(pip install -U ladd)"
        )
    return declared


def written_for(contract: int | None) -> str:
    """How a message names the contract a plugin was written for."""
    if contract is None:
        return f"declares no contract version ({DECLARATION})"
    return f"was written for plugin contract {contract}"


@dataclass(frozen=True)
class Change:
    """A change of the contract that breaks components of ``kind`` written before it, and how to recognise one."""

    version: int  # the contract version that made the change
    kind: str
    before: str  # what such a component was, before the change
    now: str  # what it must be since
    written_before: Callable[[Any], bool]  # given the component's class or instance


def _latent_is_a_process(latent: Any) -> bool:
    """A latent of contract 1 was itself a process: it diffused ``y`` with ``step`` and declared no ``produces``."""
    return getattr(latent, "produces", None) is None and callable(getattr(latent, "step", None))


CHANGES: tuple[Change, ...] = (
    Change(
        2,
        "latent",
        "a latent was its own process (prior, corrupt, loss, step; built as factory(config, schedule=...))",
        "a latent says what y is (produces, values; built as factory(config)) and the process chosen with "
        "latent_process=NAME (its schedule: latent_schedule=NAME) diffuses it",
        _latent_is_a_process,
    ),
)


def change_missed(kind: str, component: Any) -> Change | None:
    """The contract change a component of ``kind`` (its class or an instance) was written before, or None."""
    return next((c for c in CHANGES if c.kind == kind and c.written_before(component)), None)


def migration_line(change: Change, contract: int | None) -> str:
    """Why a component written before ``change`` cannot work here, and where the migration note is."""
    return (
        f"{written_for(contract)} and predates contract {change.version}: until then {change.before}; since then "
        f"{change.now} (this ladd implements contract {CONTRACT_VERSION}; {CHANGELOG}, contract {change.version}, "
        f"says how to port it)"
    )
