"""Turning a resolved experiment config into components and a model, with compatibility checks."""
from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from registry.config.settings import Settings, checked
from registry.errors import IncompatibleComponentsError, LaddError, UnknownComponentError
from registry.host.component import Component, qualify
from registry.host.kinds import SLOTS
from registry.host.references import Resolved
from registry.host.registry import Registry, recorded_plugin_of
from registry.interfaces import Dataset, Latent, Metric, Objective, Sampler, declares_needs, needs_of
from registry.storage.records import checked_components, install_hint

from .model import DiffusionModel
from .objectives import objective_of


@dataclass
class Experiment:
    """Everything a run needs, built from one config."""

    model: DiffusionModel
    dataset: Dataset
    sampler: Sampler
    metric: Metric
    components: dict[str, Component] = field(default_factory=dict)
    #: slot -> the component with those its options name (a sampler's token decoder, an objective's reward), as chosen
    resolved: dict[str, Resolved] = field(default_factory=dict)
    #: what a training step minimises: the ``loss`` slot's objective, else the model's own bound
    objective: Objective = field(default_factory=lambda: objective_of(None))

    def origins(self) -> dict[str, dict[str, Any]]:
        """Slot -> component description with its origin (and those of the components it names, ``nested``), as
        recorded in run folders."""
        return {
            slot: (self.resolved[slot] if slot in self.resolved else Resolved(component)).record()
            for slot, component in self.components.items()
        }


def selection(settings: Settings, slot: str) -> tuple[str, dict[str, Any]] | None:
    """The (name, options) chosen for a slot, or None for an empty optional slot."""
    node = settings.selection(slot)
    if node is None:
        if SLOTS[slot].optional:
            return None
        raise IncompatibleComponentsError(f"config has no {slot!r}; choose one with {slot}=NAME")
    options = dict(node)
    if "name" not in options:
        raise IncompatibleComponentsError(
            f"{slot} has options {sorted(options)} but no component; choose one with {slot}=NAME"
        )
    name = options.pop("name")
    return name, options


def required_selection(settings: Settings, slot: str) -> tuple[str, dict[str, Any]]:
    """The (name, options) chosen for a slot that may not be empty (``dataset``, ``sampler``, ...)."""
    chosen = selection(settings, slot)
    if chosen is None:
        raise ValueError(f"slot {slot!r} may be empty: read it with selection()")
    return chosen


def build_experiment(
    cfg: Settings | Mapping[str, Any], registry: Registry, recorded: Mapping[str, Any] | None = None
) -> Experiment:
    """Build dataset, model, sampler and metric from settings (or a plain resolved config, checked here).

    ``recorded``: the components a run or a model recorded (slot -> kind, name, plugin, ...); a name two plugins
    register is then the recorded plugin's.
    """
    settings = cfg if isinstance(cfg, Settings) else checked(cfg)
    resolved: dict[str, Resolved] = {}
    chosen = {slot: selection(settings, slot) for slot in SLOTS}
    components = {
        slot: registry.get(SLOTS[slot].kind, pick[0], recorded_plugin(recorded, slot))
        for slot, pick in chosen.items()
        if pick is not None
    }
    # declared needs, read from the classes first: a mismatch is refused before anything is built
    _check_needs(components, {s: _declared(c) for s, c in components.items()}, _declared(components["process"]))
    built: dict[str, Any] = {}
    for slot in SLOTS.values():
        if slot.needs_latent and built["latent"] is None:
            if chosen[slot.name] is not None:
                raise IncompatibleComponentsError(
                    f"{slot.name} is set but there is no latent channel; set latent=NAME or {slot.name}=null"
                )
            built[slot.name] = None
            continue
        pairing = slot.pairing(built, components) if slot.pairing is not None else None
        pick = chosen[slot.name]
        if pick is None:
            if pairing is not None:
                raise IncompatibleComponentsError(
                    f"{pairing[0]} holds {' or '.join(pairing[1])} and needs a process: set {slot.name}=NAME "
                    f"({_pairings(registry)})"
                )
            built[slot.name] = None
            continue
        name, options = pick
        component = components[slot.name]
        if pairing is not None:  # before building: a process is never built for a state it cannot take
            _check_pairing(registry, slot.name, component.name, pairing, _state(component, "diffuses"))
        entry = recorded.get(slot.name) if isinstance(recorded, Mapping) else None
        built[slot.name], resolved[slot.name] = registry.instantiate(
            component, options, entry, **slot.context(built)
        )
        if pairing is not None:
            _check_pairing(registry, slot.name, component.name, pairing, built[slot.name].diffuses)
    _check_needs(components, {s: built[s] for s in components}, built["process"])
    dataset: Dataset = built["dataset"]
    latent: Latent | None = built["latent"]
    objective = settings.objective
    _check_latent_side(latent, built["encoder"], settings, components.get("latent"))
    if objective.latent_time == "clean" and latent is not None and built["latent_backbone"] is None:
        raise IncompatibleComponentsError(
            "objective.latent_time=clean trains the token denoiser on clean latents only, so the latent "
            "needs its own denoiser: set latent_backbone=NAME (e.g. one of the latent-only backbones)"
        )
    sampler: Sampler = built["sampler"]
    model = DiffusionModel(
        built["process"],
        latent,
        built["backbone"],
        dataset.vocab_size,
        dataset.seq_len,
        objective,
        built["encoder"],
        built["latent_backbone"],
        built["latent_process"],
        built["schedule"],
        dataset.eos_id,
    )
    metric: Metric = built["metric"]
    _check_frozen_base(built["loss"], chosen, settings)
    return Experiment(model, dataset, sampler, metric, components, resolved, objective_of(built["loss"]))


def with_sampler(
    experiment: Experiment, registry: Registry, name: str, options: Mapping[str, Any] | None = None
) -> Experiment:
    """``experiment`` sampled by sampler ``name`` (built from ``options``) instead of its own, when the trained model
    has what that sampler declares it needs: ``ladd sample --sampler``, ``ladd eval --sampler`` and ``ladd compare``."""
    slot = SLOTS["sampler"]
    component = registry.get(slot.kind, name)
    sampler, resolved = registry.instantiate(component, options)
    model, recorded = experiment.model, experiment.components
    latent = None if model.latent is None else getattr(recorded.get("latent"), "name", type(model.latent).__name__)
    process = getattr(recorded.get("process"), "name", type(model.process).__name__)
    backbone = getattr(recorded.get("backbone"), "name", type(model.backbone).__name__)
    unmet = needs_of(sampler).unmet(latent, process, model.process, backbone, model.backbone)
    if unmet is not None:
        raise IncompatibleComponentsError(
            f"{slot.name} {name!r} needs {unmet[0]}{_undeclared(sampler, component)}; choose another {slot.kind} for "
            f"this model"
        )
    return dataclasses.replace(
        experiment,
        sampler=sampler,
        components={**recorded, slot.name: component},
        resolved={**experiment.resolved, slot.name: resolved},
    )


def with_metric(
    experiment: Experiment, registry: Registry, name: str, options: Mapping[str, Any] | None = None
) -> Experiment:
    """``experiment`` scored by metric ``name`` (built from ``options``, with the dataset's tokenizer) instead of its
    own: ``ladd eval --metric``."""
    slot = SLOTS["metric"]
    component = registry.get(slot.kind, name)
    metric, resolved = registry.instantiate(component, options, **slot.context({"dataset": experiment.dataset}))
    return dataclasses.replace(
        experiment,
        metric=metric,
        components={**experiment.components, slot.name: component},
        resolved={**experiment.resolved, slot.name: resolved},
    )


def _check_needs(components: Mapping[str, Component], declared: Mapping[str, Any], process: Any) -> None:
    """Refuse a component whose declared ``needs`` (a latent channel or none, a kind of token process or backbone)
    are unmet.

    ``declared``: slot -> the component's class (None when unknown before it is built) or the built component.
    """
    latent = None if "latent" not in components else components["latent"].name
    process_name, backbone = components["process"].name, declared.get("backbone")
    for slot, holder in declared.items():
        needs = None if holder is None else needs_of(holder)
        unmet = None if needs is None else needs.unmet(
            latent, process_name, process, components["backbone"].name, backbone
        )
        if unmet is not None:
            need, fix = unmet
            name, kind = components[slot].name, SLOTS[slot].kind
            note = _undeclared(holder, components[slot])
            raise IncompatibleComponentsError(f"{slot} {name!r} needs {need}{note}; {fix} or choose another {kind}")


def _undeclared(holder: Any, component: Component) -> str:
    """For a component keeping its interface's default ``needs`` of no latent (a sampler's, since contract 3): a note
    saying so, naming its plugin."""
    if needs_of(holder).latent is not False or declares_needs(holder):
        return ""
    return (
        f" (plugin {component.origin.plugin!r} declares no `needs` for it, which since plugin contract 3 means a "
        f"token-only sampler; one that samples a latent channel declares needs = Needs(latent=True), or Needs() "
        f"for either: docs/contract.md)"
    )


def _declared(component: Component) -> type | None:
    """The class a component's factory is, whose declarations hold before it is built (None for a function factory)."""
    try:
        factory = component.factory()
    except LaddError:
        return None  # reported where it is built
    return factory if isinstance(factory, type) else None


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
        f"latents producing {kind} ({', '.join(names)}) with processes "
        f"{', '.join(diffused.get(kind, [])) or 'none installed'}"
        for kind, names in produced.items()
        if kind is not None
    )


def _check_pairing(
    registry: Registry, slot: str, name: str, pairing: tuple[str, tuple[str, ...]], diffuses: str | None
) -> None:
    """Refuse, before anything trains, a process in ``slot`` that diffuses none of the states its channel holds."""
    holder, states = pairing
    if diffuses is not None and diffuses not in states:
        raise IncompatibleComponentsError(
            f"{slot} {name!r} diffuses {diffuses} but {holder} holds {' or '.join(states)}; {_pairings(registry)}"
        )


def _check_latent_side(latent: Latent | None, encoder: Any, settings: Settings, chosen: Component | None) -> None:
    if latent is None or chosen is None:
        return
    name = chosen.name
    if encoder is None:
        raise IncompatibleComponentsError(f"latent {name!r} needs an encoder: set encoder=NAME")
    if (encoder.length, encoder.width) != (latent.length, latent.width):
        raise IncompatibleComponentsError(
            f"encoder produces {encoder.length} x {encoder.width} features but latent {name!r} "
            f"expects {latent.length} x {latent.width} (set encoder.length/width to match latent.length/width)"
        )
    objective = settings.objective
    trains_latent = any(stage.lambda_latent > 0 for stage in settings.train.stages_to_run().values())
    if objective.p_cfg > 0 and objective.latent_loss_on_dropped and trains_latent and not latent.null_is_target:
        raise IncompatibleComponentsError(
            f"objective.latent_loss_on_dropped=true makes the null latent a target of the latent loss, but latent "
            f"{name!r} has a null latent that no loss can target; leave it false (rows dropped by "
            f"objective.p_cfg then stay out of the latent loss) or set objective.p_cfg=0"
        )


def _check_frozen_base(objective: Objective | None, chosen: Mapping[str, Any], settings: Settings) -> None:
    """Refuse an objective that reads the frozen base (a reference policy) in a run without one."""
    if objective is None or not objective.needs_frozen_base or settings.train.lora.rank > 0:
        return
    raise IncompatibleComponentsError(
        f"loss {chosen['loss'][0]!r} takes the frozen base under LoRA adapters as its reference, but train.lora.rank=0 "
        f"trains no adapters: set train.lora.rank (e.g. 16), or turn its reference off (its options: ladd show "
        f"objective {chosen['loss'][0]})"
    )


def recorded_plugin(recorded: Mapping[str, Any] | None, slot: str) -> str | None:
    """The plugin recorded for ``slot``'s component, or None when nothing usable is recorded."""
    return recorded_plugin_of(recorded.get(slot) if isinstance(recorded, Mapping) else None)


def check_installed(components: dict[str, dict[str, Any]], registry: Registry, owner: str) -> None:
    """Every component ``owner`` recorded (those its components name included) must be installed from the plugin it
    recorded, whatever else registers its name (naming the plugin and how to get it); another version only warns."""
    for slot, wanted in checked_components(components, owner).items():
        _check_recorded(wanted, registry, f"{owner}'s {slot}")


def _check_recorded(wanted: Mapping[str, Any], registry: Registry, what: str) -> None:
    """The recorded component ``wanted`` (``what``: how messages name it) and those it names are installed."""
    try:
        found = registry.get(wanted["kind"], qualify(wanted["plugin"], wanted["name"]))
    except UnknownComponentError:
        recorded = (
            f"{wanted['kind']} {wanted['name']!r} from plugin {wanted['plugin']!r} "
            f"(distribution {wanted['distribution']} {wanted['version']})"
        )
        reason = registry.unavailable(wanted["plugin"])
        if reason is not None:
            raise LaddError(f"{what} is {recorded}, which is not available: {reason}") from None
        install = install_hint(wanted["distribution"], wanted["version"])
        raise LaddError(f"{what} is {recorded}, which is not installed: {install}") from None
    if (found.origin.distribution, found.origin.version) != (wanted["distribution"], wanted["version"]):
        warnings.warn(
            f"{what} {wanted['name']!r} was made with {wanted['distribution']} {wanted['version']}, "
            f"installed is {found.origin.distribution} {found.origin.version}",
            stacklevel=3,
        )
    for option, nested in (wanted.get("nested") or {}).items():
        _check_recorded(nested, registry, f"{what}'s {option}")
