"""Hydra config assembly: every registered component becomes an option of its kind's config group."""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from registry.errors import InvalidConfigError, LaddError, did_you_mean
from registry.host.component import Component, split_name
from registry.host.config_types import typed_config
from registry.host.kinds import SLOTS
from registry.host.presets import CONFIG_MODULE
from registry.host.registry import Registry

from .safety import check_config, check_interpolations
from .settings import Settings, StageConfig, checked, named_stages, schema, unknown_option

PRIMARY_CONFIG = "train"
STAGES_KEY = "train.stages"


def _option_node(component: Component, name: str | None = None) -> DictConfig:
    """The config node for one component: its config dataclass plus the name that selects it (``name``: its bare
    registry name unless given, such as its qualified one).

    Typed, so overrides are converted and checked, but open: a preset's options for the component it
    selected merge in even when the command line selects another one, and compose() sorts them out.
    """
    name_field = ("name", str, dataclasses.field(default=name or component.name))
    bases = () if component.spec.config is None else (typed_config(component.spec.config),)
    node = OmegaConf.structured(dataclasses.make_dataclass(f"{component.name}_option", [name_field], bases=bases))
    OmegaConf.set_struct(node, False)
    return node


def _schema_node() -> DictConfig:
    """The schema, with every optional slot empty unless a preset or the command line fills it."""
    node = OmegaConf.structured(schema())
    with open_dict(node):
        node.defaults = ["_self_", *({slot.name: None} for slot in SLOTS.values() if slot.optional)]
    return node


def register_configs(registry: Registry) -> None:
    """Store the schema and, per slot, one option per bare name and one per qualified name (``PLUGIN:NAME``) in Hydra's
    ConfigStore."""
    store = ConfigStore.instance()
    store.store(name="ladd_schema", node=_schema_node())
    for slot in SLOTS.values():
        # every name, a clashing one too: it fails with the clash where it is built, not here
        for name in registry.names(slot.kind):
            store.store(group=slot.name, name=name, node=_option_node(registry.option(slot.kind, name)))
        for component in (c for c in registry if c.kind == slot.kind):
            store.store(group=slot.name, name=component.qualified, node=_option_node(component, component.qualified))


def search_path_override(registry: Registry, extra: Sequence[str] = ()) -> list[str]:
    """A Hydra override adding plugin-contributed YAML folders (and the user's ``extra`` entries) to the search path."""
    dirs = [f"file://{Path(d).resolve()}" for d in registry.config_dirs] + list(extra)
    return [f"hydra.searchpath=[{','.join(dirs)}]"] if dirs else []


def check_selections(overrides: list[str], registry: Registry) -> None:
    """Look up every component the overrides select, sweeps included, so an unknown or clashing name fails with the
    registry's message."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return  # Hydra reports malformed overrides itself
    for override in parsed:
        slot = SLOTS.get(override.key_or_group)
        if slot is None or override.package is not None or override.is_delete():
            continue
        value = override.value()
        if isinstance(value, Glob) or override.is_interval_sweep():
            continue  # a glob matches registered names only; an interval names none
        for name in override.sweep_string_iterator() if override.is_sweep_override() else [value]:
            if name is not None:
                registry.get(slot.kind, str(name))


def empty_slots_as_deletions(overrides: list[str]) -> list[str]:
    """``SLOT=null`` for an optional slot as Hydra's ``~SLOT`` (Hydra cannot set a config group to null from the command
    line)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return overrides  # Hydra reports malformed overrides itself
    return [
        f"~{override.key_or_group}"
        if override.key_or_group in SLOTS
        and SLOTS[override.key_or_group].optional
        and override.package is None
        and not override.is_delete()
        and not override.is_sweep_override()
        and override.value() is None
        else text
        for text, override in zip(overrides, parsed, strict=True)
    ]


def compose(overrides: list[str], registry: Registry, searchpath: Sequence[str] = ()) -> Settings:
    """The checked settings of an experiment composed from presets and ``overrides`` (resolved; Hydra's own runtime
    settings, ``hydra:``, are dropped, never used)."""
    from hydra.errors import HydraException

    check_selections(overrides, registry)
    overrides = empty_slots_as_deletions(overrides)
    register_configs(registry)
    parsed = [parse_override(override) for override in overrides]
    # a list replaces every stage, which Hydra cannot do to a mapping: it is set after composing
    replaces_stages = [o.key_or_group == STAGES_KEY and isinstance(o.value(), list) for o in parsed]
    stage_lists = [o.value() for o, replaces in zip(parsed, replaces_stages, strict=True) if replaces]
    hydra_overrides = [text for text, replaces in zip(overrides, replaces_stages, strict=True) if not replaces]
    _check_stages_named(hydra_overrides, registry, searchpath)
    try:
        cfg = _hydra_compose(hydra_overrides, registry, searchpath)
        stages = named_stages(stage_lists[-1] if stage_lists else cfg.train.stages)
        cfg.train.stages = {
            name: OmegaConf.merge(OmegaConf.structured(StageConfig), stage) for name, stage in stages.items()
        }
    except (HydraException, OmegaConfBaseException) as error:
        raise composition_error(error) from None
    check_interpolations(cfg)
    selected = _typed_selections(parsed)
    presets = _preset_choices(hydra_overrides, selected, registry, searchpath)
    reset = _keep_to_selected(cfg, selected, presets, _typed_options(parsed), registry)
    try:
        plain = to_plain(cfg)
    except OmegaConfBaseException as error:
        raise InvalidConfigError(f"{error.full_key}: {str(error).splitlines()[0]}") from None
    check_config(plain)  # an import-path key is refused as such, not taken for an unknown option
    emptied = _empty_latent_slots(plain, _typed_slots(parsed))
    if emptied:
        print(
            "ladd: note: left out what presets set for the latent channel, which latent=null removes: "
            f"{', '.join(emptied)}",
            file=sys.stderr,
        )
    left_out = reset + _fit_options(plain, _typed_options(parsed), registry)
    if left_out:
        print(
            "ladd: note: left out options that presets set for other components than the ones selected: "
            f"{', '.join(left_out)}",
            file=sys.stderr,
        )
    return checked(plain)


def _stage_named(override: Override) -> str | None:
    """The stage an override sets (``train.stages.NAME...=VALUE``, adding with ``+`` too); None for any other, for
    dropping a stage (null, ``~``) and for ``train.stages`` itself."""
    parts = override.key_or_group.split(".")
    if parts[:2] != STAGES_KEY.split(".") or len(parts) < 3 or override.is_delete():
        return None
    return None if len(parts) == 3 and override.value() is None else parts[2]


def _check_stages_named(overrides: Sequence[str], registry: Registry, searchpath: Sequence[str]) -> None:
    """Refuse, in one line naming the experiment's stages, an override of a stage it does not have (Hydra and
    OmegaConf meet one as a traceback or a wrong type)."""
    from hydra.errors import HydraException

    named = {text: _stage_named(parse_override(text)) for text in overrides}
    setting = {text: name for text, name in named.items() if name is not None}
    if not setting:
        return
    try:
        stages = named_stages(_hydra_compose([o for o in overrides if o not in setting], registry, searchpath)
                              .train.stages)
    except (HydraException, OmegaConfBaseException):
        return  # the composition itself fails: it says why
    for text, name in setting.items():
        if name not in stages:
            raise InvalidConfigError(
                f"{text}: this experiment has no stage {name!r} (its stages: {', '.join(stages) or 'none'}); to add "
                f"one, give every stage: {STAGES_KEY}=[{{steps:...}},{{steps:...}}]"
            )


def _hydra_compose(overrides: Sequence[str], registry: Registry, searchpath: Sequence[str]) -> DictConfig:
    """Hydra's composition of the primary config with ``overrides`` (raising Hydra's and OmegaConf's errors)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module(CONFIG_MODULE, version_base=None):
        return hydra_compose(PRIMARY_CONFIG, overrides=[*search_path_override(registry, searchpath), *overrides])


def _typed_selections(parsed: Sequence[Override]) -> dict[str, str]:
    """Slot -> the component the command line selects there by name, last one first (``null`` selects none)."""
    selected: dict[str, str] = {}
    for o in (o for o in parsed if o.key_or_group in SLOTS and o.package is None):
        if o.is_delete() or o.is_sweep_override() or o.value() is None:
            selected.pop(o.key_or_group, None)
        else:
            selected[o.key_or_group] = str(o.value())
    return selected


def _preset_choices(
    overrides: Sequence[str], selected: Mapping[str, str], registry: Registry, searchpath: Sequence[str]
) -> dict[str, Any]:
    """What the presets select in each slot the command line selects a component for, found by composing without
    the command line's selections and options there; empty when that does not compose (nothing is then kept)."""
    from hydra.errors import HydraException

    if not selected:
        return {}
    others = [text for text in overrides if parse_override(text).key_or_group.split(".")[0] not in selected]
    try:
        presets = _hydra_compose(others, registry, searchpath)
    except (HydraException, OmegaConfBaseException):
        return {}
    return {slot: (presets.get(slot) or {}).get("name") for slot in selected}


def _keep_to_selected(
    cfg: DictConfig, selected: Mapping[str, str], presets: Mapping[str, Any], typed: set[str], registry: Registry
) -> list[str]:
    """In each slot where the command line selects another component than the presets did, the options the
    presets set go back to that component's defaults (they were set for the presets' choice); typed ones stay.
    Returns the keys put back."""
    reset = []
    for slot, name in selected.items():
        if _same_component(registry, SLOTS[slot].kind, presets.get(slot), name):
            continue  # the presets set their options for this very component
        node = cfg[slot]
        selected_node = _option_node(registry.option(SLOTS[slot].kind, name))
        defaults = cast(dict, OmegaConf.to_container(selected_node, resolve=False))
        current = cast(dict, OmegaConf.to_container(node, resolve=False))
        for key, value in current.items():
            if key in defaults and key != "name" and f"{slot}.{key}" not in typed and value != defaults[key]:
                node[key] = defaults[key]
                reset.append(f"{slot}.{key}")
    return reset


def _same_component(registry: Registry, kind: str, first: Any, second: str) -> bool:
    """Whether two names select the same component (``confidence`` and ``builtin:confidence``); where one selects
    none or several (a clash), whether their bare names agree."""
    if first is None:
        return False
    resolved: list[Component | None] = []
    for name in (str(first), second):
        try:
            resolved.append(registry.get(kind, name))
        except LaddError:
            resolved.append(None)
    if resolved[0] is not None and resolved[1] is not None:
        return resolved[0] is resolved[1]
    return split_name(str(first))[1] == split_name(second)[1]


def parse_override(override: str) -> Override:
    """One command-line override parsed by Hydra's grammar (a malformed one is a one-line error)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_override(override)
    except HydraException as error:
        raise composition_error(error) from None


def _typed_options(parsed: Sequence[Override]) -> set[str]:
    """``slot.option`` for every component option the command line sets."""
    keys = (o.key_or_group.split(".") for o in parsed if o.package is None and not o.is_delete())
    return {f"{key[0]}.{key[1]}" for key in keys if len(key) > 1 and key[0] in SLOTS}


def _typed_slots(parsed: Sequence[Override]) -> set[str]:
    """The slots the command line selects a component for."""
    return {o.key_or_group for o in parsed if o.package is None and not o.is_delete() and o.key_or_group in SLOTS}


def _empty_latent_slots(plain: dict[str, Any], typed: set[str]) -> list[str]:
    """Without a latent, empty the slots of the latent channel that presets filled; one typed on the command
    line stays, for assembly to refuse. Returns the slots emptied."""
    if "name" in (plain.get("latent") or {}):
        return []
    emptied = [
        slot.name
        for slot in SLOTS.values()
        if slot.needs_latent and plain.get(slot.name) is not None and slot.name not in typed
    ]
    for name in emptied:
        plain[name] = None
    return emptied


def _fit_options(plain: dict[str, Any], typed: set[str], registry: Registry) -> list[str]:
    """Leave out of each slot the options its component lacks, which presets set for the component they selected
    there; such an option typed on the command line is an error. Returns the keys left out."""
    left_out = []
    for slot in SLOTS.values():
        node = plain.get(slot.name)
        if node is None:
            continue
        component = registry.get(slot.kind, node["name"]) if "name" in node else None
        known = set() if component is None else set(component.option_names())
        for key in [k for k in node if k != "name" and k not in known]:
            if f"{slot.name}.{key}" in typed:
                if component is None:
                    raise InvalidConfigError(
                        f"{slot.name}.{key}: no {slot.name} is selected; choose one with {slot.name}=NAME"
                    )
                raise InvalidConfigError(f"{slot.name}.{key}: {component.unknown_option(key)}")
            del node[key]
            left_out.append(f"{slot.name}.{key}")
        if component is None:
            plain[slot.name] = None
    return left_out


def composition_error(error: Exception) -> InvalidConfigError:
    """Hydra's multi-line composition error as one line."""
    from hydra.errors import MissingConfigException

    if isinstance(error, MissingConfigException) and error.options:
        group, _, name = str(error.missing_cfg_file).rpartition("/")
        return InvalidConfigError(
            f"unknown {group} {name!r}{did_you_mean(name, error.options)} valid {group} names: "
            f"{', '.join(error.options)}"
        )
    message = str(error).splitlines()[0]
    if message.startswith("Ambiguous value for argument"):  # Hydra's word for a sweep's values without -m
        argument = message.split("'", 1)[1].rsplit("'", 1)[0]
        return InvalidConfigError(
            f"{argument!r} gives several values, which is a sweep: `ladd train -m {argument}` trains one run per "
            f"value; for one value holding commas, quote it"
        )
    if message.startswith("Could not override"):
        key = message.split("'")[1]
        return InvalidConfigError(unknown_option(key))
    cause = error.__cause__ or error.__context__
    reason = str(cause).splitlines()[0] if cause is not None and str(cause) else message
    if "Cannot merge DictConfig with ListConfig" in reason:  # OmegaConf names no key; the likely one is known
        where = message.split(":")[0]
        return InvalidConfigError(
            f"{where}: a list where the configs it builds on have a mapping; {STAGES_KEY} is a mapping of named "
            f"stages: write `stages: {{stage1: {{steps: ...}}, stage2: {{...}}}}` instead of a list"
        )
    detail = "" if reason == message else f": {reason}"
    return InvalidConfigError(f"{message}{detail}")


def to_plain(cfg: DictConfig) -> dict[str, Any]:
    """Resolved plain-dict copy of a config."""
    return cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))  # a DictConfig's keys are strings
