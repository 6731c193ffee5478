"""Turning a resolved experiment config into components and a model, with compatibility checks."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

from ._component import Component
from ._registry import Registry
from .errors import IncompatibleComponentsError, LaddError, UnknownComponentError
from .interfaces import TOKEN_STATES, Channels, Dataset, Latent, Metric, Process, Sampler
from .model import DiffusionModel, Objective
from .safety import check_config

#: Config slots and the component kind each one selects. Optional slots may be null.
SLOTS: dict[str, str] = {
    "dataset": "dataset",
    "process": "process",
    "schedule": "schedule",
    "latent": "latent",
    "latent_process": "process",
    "latent_schedule": "schedule",
    "encoder": "encoder",
    "backbone": "backbone",
    "latent_backbone": "backbone",
    "sampler": "sampler",
    "metric": "metric",
}
OPTIONAL_SLOTS = ("latent", "latent_process", "latent_schedule", "encoder", "latent_backbone")


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
        if slot in OPTIONAL_SLOTS:
            return None
        raise IncompatibleComponentsError(f"config has no {slot!r}; choose one with {slot}=NAME")
    options = dict(node)
    if "name" not in options:
        raise IncompatibleComponentsError(f"{slot} has options {sorted(options)} but no component; choose one with {slot}=NAME")
    name = options.pop("name")
    return name, options


def build_experiment(cfg: Mapping[str, Any], registry: Registry) -> Experiment:
    """Build dataset, model, sampler and metric from a plain (resolved) config mapping."""
    check_config(cfg)
    components: dict[str, Component] = {}

    def build(slot: str, **context: Any) -> Any:
        chosen = selection(cfg, slot)
        if chosen is None:
            return None
        name, options = chosen
        component = registry.get(SLOTS[slot], name)
        components[slot] = component
        return component.build(options, **context)

    if cfg.get("latent") is not None and "latent_process" not in cfg:
        raise IncompatibleComponentsError(
            "this config predates the latent_process slot (a latent's process options now live there); "
            "re-create it with the current presets"
        )
    dataset: Dataset = build("dataset")
    _check_pairing(cfg, registry, "process", "the token channel", TOKEN_STATES)
    process: Process = build("process", schedule=build("schedule"), vocab_size=dataset.vocab_size)
    _check_pairing(cfg, registry, "process", "the token channel", TOKEN_STATES, process)
    latent: Latent | None = build("latent")
    latent_process: Process | None = None
    if latent is not None:
        holder = f"latent {cfg['latent']['name']!r}"
        if getattr(latent, "produces", None) is None:
            raise IncompatibleComponentsError(
                f"{holder} does not declare the state it produces: set its class attribute `produces` "
                "(registry.interfaces.IDS, VECTORS or a kind of your own)"
            )
        _check_pairing(cfg, registry, "latent_process", holder, (latent.produces,))
        latent_process = build("latent_process", schedule=build("latent_schedule"), vocab_size=latent.values)
        _check_pairing(cfg, registry, "latent_process", holder, (latent.produces,), latent_process)
    elif cfg.get("latent_process") is not None:
        raise IncompatibleComponentsError("latent_process is set but there is no latent channel; set latent=NAME or latent_process=null")
    encoder = build("encoder", vocab_size=dataset.vocab_size, seq_len=dataset.seq_len, tokenizer=dataset.tokenizer)
    objective = Objective(**dict(cfg.get("objective") or {}))
    _check_latent_side(latent, encoder, objective, cfg)
    backbone = build("backbone", channels=Channels(dataset.vocab_size, dataset.seq_len, latent))
    latent_backbone = build("latent_backbone", channels=Channels(0, 0, latent)) if latent is not None else None
    if objective.latent_time == "clean" and latent is not None and latent_backbone is None:
        raise IncompatibleComponentsError(
            "objective.latent_time=clean trains the token denoiser on clean latents only, so the latent "
            "needs its own denoiser: set latent_backbone=NAME (e.g. one of the latent-only backbones)"
        )
    sampler: Sampler = build("sampler")
    if sampler.requires_latent and latent is None:
        raise IncompatibleComponentsError(
            f"sampler {components['sampler'].name!r} generates a latent channel but there is none (latent=null); "
            "use a token-only sampler or choose a latent"
        )
    model = DiffusionModel(
        process, latent, backbone, dataset.vocab_size, dataset.seq_len, objective, encoder, latent_backbone, latent_process
    )
    return Experiment(model, dataset, sampler, build("metric", tokenizer=dataset.tokenizer), components)


def _state(component: Component, attribute: str) -> str | None:
    """The state kind a component's class declares (None when its factory does not import or declares none)."""
    try:
        return getattr(component.factory(), attribute, None)
    except LaddError:
        return None


def _pairings(registry: Registry) -> str:
    """Which latents and processes pair, by the state kind they produce and diffuse."""
    produced: dict[str, list[str]] = {}
    diffused: dict[str, list[str]] = {}
    for component in registry:
        if component.kind == SLOTS["latent"]:
            produced.setdefault(_state(component, "produces"), []).append(component.name)
        elif component.kind == SLOTS["latent_process"]:
            diffused.setdefault(_state(component, "diffuses"), []).append(component.name)
    kinds = [kind for kind in produced if kind is not None]
    return "valid pairings: " + "; ".join(
        f"latents producing {kind} ({', '.join(produced[kind])}) with processes {', '.join(diffused.get(kind, [])) or 'none installed'}"
        for kind in kinds
    )


def _check_pairing(
    cfg: Mapping[str, Any], registry: Registry, slot: str, holder: str, states: tuple[str, ...], process: Process | None = None
) -> None:
    """Refuse, before anything trains, a process in ``slot`` that diffuses none of the ``states`` ``holder`` can hold.

    Without ``process`` the check reads the class the slot selects (so a process is never built for a state
    it cannot take); with it, the built process's own declaration.
    """
    chosen = selection(cfg, slot)
    if chosen is None:
        raise IncompatibleComponentsError(f"{holder} holds {' or '.join(states)} and needs a process: set {slot}=NAME ({_pairings(registry)})")
    diffuses = _state(registry.get(SLOTS[slot], chosen[0]), "diffuses") if process is None else process.diffuses
    if diffuses is not None and diffuses not in states:
        raise IncompatibleComponentsError(
            f"{slot} {chosen[0]!r} diffuses {diffuses} but {holder} holds {' or '.join(states)}; {_pairings(registry)}"
        )


def _check_latent_side(latent: Latent | None, encoder: Any, objective: Objective, cfg: Mapping[str, Any]) -> None:
    if latent is None:
        if encoder is not None:
            raise IncompatibleComponentsError("an encoder is set but the latent has no channel; set latent=NAME or encoder=null")
        return
    if encoder is None:
        raise IncompatibleComponentsError(f"latent {cfg['latent']['name']!r} needs an encoder: set encoder=NAME")
    if (encoder.length, encoder.width) != (latent.length, latent.width):
        raise IncompatibleComponentsError(
            f"encoder produces {encoder.length} x {encoder.width} features but latent {cfg['latent']['name']!r} "
            f"expects {latent.length} x {latent.width} (set encoder.length/width to match latent.length/width)"
        )
    trains_latent = any(stage.get("lambda_latent", 0) > 0 for stage in (cfg.get("train") or {}).get("stages") or [])
    if objective.p_cfg > 0 and objective.latent_loss_on_dropped and trains_latent and not latent.null_is_target:
        raise IncompatibleComponentsError(
            f"objective.latent_loss_on_dropped=true makes the null latent a target of the latent loss, but latent "
            f"{cfg['latent']['name']!r} has a null latent that no loss can target; leave it false (rows dropped by "
            f"objective.p_cfg then stay out of the latent loss) or set objective.p_cfg=0"
        )


def check_installed(components: dict[str, dict[str, Any]], registry: Registry, owner: str) -> None:
    """Every component ``owner`` recorded must be installed (naming its plugin and how to get it); another version only warns."""
    for slot, wanted in components.items():
        try:
            found = registry.get(wanted["kind"], wanted["name"])
        except UnknownComponentError:
            recorded = f"{wanted['kind']} {wanted['name']!r} from plugin {wanted['plugin']!r} (distribution {wanted['distribution']} {wanted['version']})"
            reason = registry.unavailable(wanted["plugin"])
            if reason is not None:
                raise LaddError(f"{owner}'s {slot} is {recorded}, which is not available: {reason}") from None
            install = f"pip install '{wanted['distribution']}=={wanted['version']}'" if wanted["distribution"] else "install its plugin"
            raise LaddError(f"{owner}'s {slot} is {recorded}, which is not installed: {install}") from None
        if (found.origin.distribution, found.origin.version) != (wanted["distribution"], wanted["version"]):
            warnings.warn(
                f"{owner}'s {slot} {wanted['name']!r} was made with {wanted['distribution']} {wanted['version']}, "
                f"installed is {found.origin.distribution} {found.origin.version}",
                stacklevel=2,
            )
