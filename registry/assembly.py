"""Turning a resolved experiment config into components and a model, with compatibility checks."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

from ._component import Component
from ._registry import Registry
from .errors import IncompatibleComponentsError, LaddError, UnknownComponentError
from .interfaces import Dataset, Latent, Metric, Sampler
from .kinds import SLOTS
from .model import DiffusionModel, Objective
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
    name = options.pop("name")
    return name, options


def build_experiment(cfg: Mapping[str, Any], registry: Registry) -> Experiment:
    """Build dataset, model, sampler and metric from a plain (resolved) config mapping."""
    check_config(cfg)
    components: dict[str, Component] = {}
    built: dict[str, Any] = {}
    for slot in SLOTS.values():
        chosen = selection(cfg, slot.name) if slot.wanted(built) else None
        if chosen is None:
            built[slot.name] = None
            continue
        name, options = chosen
        components[slot.name] = registry.get(slot.kind, name)
        built[slot.name] = components[slot.name].build(options, **slot.context(built))
    dataset: Dataset = built["dataset"]
    latent: Latent = built["latent"]
    objective = Objective(**dict(cfg.get("objective") or {}))
    _check_latent_side(latent, built["encoder"], objective, cfg)
    if objective.latent_time == "clean" and latent.length > 0 and built["latent_backbone"] is None:
        raise IncompatibleComponentsError(
            "objective.latent_time=clean trains the token denoiser on clean latents only, so the latent "
            "needs its own denoiser: set latent_backbone=NAME (e.g. one of the latent-only backbones)"
        )
    sampler: Sampler = built["sampler"]
    if sampler.requires_latent and latent.length == 0:
        raise IncompatibleComponentsError(
            f"sampler {components['sampler'].name!r} generates a latent channel but latent "
            f"{components['latent'].name!r} has none; use a token-only sampler or choose a latent"
        )
    model = DiffusionModel(
        built["process"], latent, built["backbone"], dataset.vocab_size, dataset.seq_len, objective,
        built["encoder"], built["latent_backbone"],
    )
    metric: Metric = built["metric"]
    return Experiment(model, dataset, sampler, metric, components)


def _check_latent_side(latent: Latent, encoder: Any, objective: Objective, cfg: Mapping[str, Any]) -> None:
    if latent.length == 0:
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
    trains_latent = any(stage.get("lambda_latent", 0) > 0 for stage in ((cfg.get("train") or {}).get("stages") or {}).values())
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
