"""Turning a resolved experiment config into components and a model, with compatibility checks."""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._component import Component
from ._registry import Registry
from .errors import IncompatibleComponentsError, LaddError, UnknownComponentError
from .interfaces import Dataset, Latent, Metric, Sampler
from .kinds import SLOTS
from .model import DiffusionModel, Objective
from .records import checked_components, install_hint
from .safety import check_config


@dataclass
class Experiment:
    """Everything a run needs, built from one config."""

    model: DiffusionModel
    dataset: Dataset
    sampler: Sampler
    metric: Metric
    components: dict[str, Component] = field(default_factory=dict)

    def origins(self) -> dict[str, dict[str, Any]]:
        """Slot -> component description with its origin, as recorded in run folders."""
        return {slot: component.as_dict() for slot, component in self.components.items()}


def selection(cfg: Mapping[str, Any], slot: str) -> tuple[str, dict[str, Any]] | None:
    """The (name, options) chosen for a slot, or None for an empty optional slot."""
    node = cfg.get(slot)
    if node is None:
        if SLOTS[slot].optional:
            return None
        raise IncompatibleComponentsError(f"config has no {slot!r}; choose one with {slot}=NAME")
    options = dict(node)
    if "name" not in options:
        raise IncompatibleComponentsError(f"{slot} has options {sorted(options)} but no component; choose one with {slot}=NAME")
    name = options.pop("name")
    return name, options


def required_selection(cfg: Mapping[str, Any], slot: str) -> tuple[str, dict[str, Any]]:
    """The (name, options) chosen for a slot that may not be empty (``dataset``, ``sampler``, ...)."""
    chosen = selection(cfg, slot)
    if chosen is None:
        raise ValueError(f"slot {slot!r} may be empty: read it with selection()")
    return chosen


def build_experiment(cfg: Mapping[str, Any], registry: Registry) -> Experiment:
    """Build dataset, model, sampler and metric from a plain (resolved) config mapping."""
    check_config(cfg)
    if cfg.get("latent") is not None and "latent_process" not in cfg:
        raise IncompatibleComponentsError(
            "this config predates the latent_process slot (a latent's process options now live there); "
            "re-create it with the current presets"
        )
    components: dict[str, Component] = {}
    built: dict[str, Any] = {}
    for slot in SLOTS.values():
        chosen = selection(cfg, slot.name)
        if slot.needs_latent and built["latent"] is None:
            if chosen is not None:
                raise IncompatibleComponentsError(f"{slot.name} is set but there is no latent channel; set latent=NAME or {slot.name}=null")
            built[slot.name] = None
            continue
        pairing = slot.pairing(built, components) if slot.pairing is not None else None
        if chosen is None:
            if pairing is not None:
                raise IncompatibleComponentsError(
                    f"{pairing[0]} holds {' or '.join(pairing[1])} and needs a process: set {slot.name}=NAME ({_pairings(registry)})"
                )
            built[slot.name] = None
            continue
        name, options = chosen
        component = components[slot.name] = registry.get(slot.kind, name)
        if pairing is not None:  # before building: a process is never built for a state it cannot take
            _check_pairing(registry, slot.name, name, pairing, _state(component, "diffuses"))
        built[slot.name] = component.build(options, **slot.context(built))
        if pairing is not None:
            _check_pairing(registry, slot.name, name, pairing, built[slot.name].diffuses)
    dataset: Dataset = built["dataset"]
    latent: Latent | None = built["latent"]
    objective = Objective(**dict(cfg.get("objective") or {}))
    _check_latent_side(latent, built["encoder"], objective, cfg)
    if objective.latent_time == "clean" and latent is not None and built["latent_backbone"] is None:
        raise IncompatibleComponentsError(
            "objective.latent_time=clean trains the token denoiser on clean latents only, so the latent "
            "needs its own denoiser: set latent_backbone=NAME (e.g. one of the latent-only backbones)"
        )
    sampler: Sampler = built["sampler"]
    if sampler.requires_latent and latent is None:
        raise IncompatibleComponentsError(
            f"sampler {components['sampler'].name!r} generates a latent channel but there is none (latent=null); "
            "use a token-only sampler or choose a latent"
        )
    model = DiffusionModel(
        built["process"], latent, built["backbone"], dataset.vocab_size, dataset.seq_len, objective,
        built["encoder"], built["latent_backbone"], built["latent_process"],
    )
    metric: Metric = built["metric"]
    return Experiment(model, dataset, sampler, metric, components)


def _state(component: Component, attribute: str) -> str | None:
    """The state kind a component's class declares (None when its factory does not import or declares none)."""
    try:
        return getattr(component.factory(), attribute, None)
    except LaddError:
        return None


def _pairings(registry: Registry) -> str:
    """Which latents and processes pair, by the state kind they produce and diffuse."""
    produced: dict[str | None, list[str]] = {}
    diffused: dict[str | None, list[str]] = {}
    for component in registry:
        if component.kind == SLOTS["latent"].kind:
            produced.setdefault(_state(component, "produces"), []).append(component.name)
        elif component.kind == SLOTS["latent_process"].kind:
            diffused.setdefault(_state(component, "diffuses"), []).append(component.name)
    return "valid pairings: " + "; ".join(
        f"latents producing {kind} ({', '.join(names)}) with processes {', '.join(diffused.get(kind, [])) or 'none installed'}"
        for kind, names in produced.items()
        if kind is not None
    )


def _check_pairing(registry: Registry, slot: str, name: str, pairing: tuple[str, tuple[str, ...]], diffuses: str | None) -> None:
    """Refuse, before anything trains, a process in ``slot`` that diffuses none of the states its channel holds."""
    holder, states = pairing
    if diffuses is not None and diffuses not in states:
        raise IncompatibleComponentsError(f"{slot} {name!r} diffuses {diffuses} but {holder} holds {' or '.join(states)}; {_pairings(registry)}")


def _check_latent_side(latent: Latent | None, encoder: Any, objective: Objective, cfg: Mapping[str, Any]) -> None:
    if latent is None:
        return
    if encoder is None:
        raise IncompatibleComponentsError(f"latent {cfg['latent']['name']!r} needs an encoder: set encoder=NAME")
    if (encoder.length, encoder.width) != (latent.length, latent.width):
        raise IncompatibleComponentsError(
            f"encoder produces {encoder.length} x {encoder.width} features but latent {cfg['latent']['name']!r} "
            f"expects {latent.length} x {latent.width} (set encoder.length/width to match latent.length/width)"
        )
    trains_latent = any(stage.get("lambda_latent", 0) > 0 for stage in ((cfg.get("train") or {}).get("stages") or {}).values())
    if objective.p_cfg > 0 and objective.latent_loss_on_dropped and trains_latent and not latent.null_is_target:
        raise IncompatibleComponentsError(
            f"objective.latent_loss_on_dropped=true makes the null latent a target of the latent loss, but latent "
            f"{cfg['latent']['name']!r} has a null latent that no loss can target; leave it false (rows dropped by "
            f"objective.p_cfg then stay out of the latent loss) or set objective.p_cfg=0"
        )


def check_installed(components: dict[str, dict[str, Any]], registry: Registry, owner: str) -> None:
    """Every component ``owner`` recorded must be installed (naming its plugin and how to get it); another version only warns."""
    for slot, wanted in checked_components(components, owner).items():
        try:
            found = registry.get(wanted["kind"], wanted["name"])
        except UnknownComponentError:
            recorded = f"{wanted['kind']} {wanted['name']!r} from plugin {wanted['plugin']!r} (distribution {wanted['distribution']} {wanted['version']})"
            reason = registry.unavailable(wanted["plugin"])
            if reason is not None:
                raise LaddError(f"{owner}'s {slot} is {recorded}, which is not available: {reason}") from None
            install = install_hint(wanted["distribution"], wanted["version"])
            raise LaddError(f"{owner}'s {slot} is {recorded}, which is not installed: {install}") from None
        if (found.origin.distribution, found.origin.version) != (wanted["distribution"], wanted["version"]):
            warnings.warn(
                f"{owner}'s {slot} {wanted['name']!r} was made with {wanted['distribution']} {wanted['version']}, "
                f"installed is {found.origin.distribution} {found.origin.version}",
                stacklevel=2,
            )
