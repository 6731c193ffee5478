"""Hydra config assembly: every registered component becomes an option of its kind's config group."""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from ._component import Component
from ._config_types import typed_config
from ._registry import Registry
from .errors import InvalidConfigError, did_you_mean
from .files import check_name
from .kinds import SLOTS
from .lr_schedules import SCHEDULES
from .model import Objective
from .presets import CONFIG_MODULE
from .ranges import check_choice, check_each, check_range
from .safety import check_config, check_interpolations

PRIMARY_CONFIG = "train"
#: Precisions of training (Lightning's names) and of the networks at inference; "auto" picks per device.
TRAIN_PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")
INFERENCE_PRECISIONS = ("auto", "bf16-mixed", "32-true")
OPTIMIZERS = ("adamw", "adam")
#: seeds stay within the 32-bit range Lightning and NumPy accept, with room for the per-stage offsets
MAX_SEED = 2**31 - 1
#: sampling seeds fill the generators' 64 bits, with room for the offsets of chunks and repeats
MAX_SAMPLING_SEED = 2**63 - 1
UNKNOWN_KEY = "no such option (misspelt, or an option of another component?)"
STAGES_KEY = "train.stages"


@dataclass
class StageConfig:
    """One training stage (Stage 1 / Stage 2 of App. C)."""

    steps: int = 1000
    lambda_latent: float = 0.0
    freeze_encoder: bool = False
    max_minutes: float | None = None  # wall-clock cap: the stage ends at `steps` or this, whichever comes first

    def check(self, name: str) -> None:
        """Range checks, naming the stage."""
        check_range(f"train.stages.{name}.steps", self.steps, 1)
        check_range(f"train.stages.{name}.lambda_latent", self.lambda_latent, 0)
        check_range(f"train.stages.{name}.max_minutes", self.max_minutes, 0, low_open=True, optional=True)


def named_stages(stages: Any) -> Any:
    """``train.stages`` keyed by stage name: a list (a config saved before stages had names, or typed on the
    command line) becomes ``stage1``, ``stage2``, ... in order; stages set to null are left out."""
    if isinstance(stages, (list, ListConfig)):
        return {f"stage{index}": stage for index, stage in enumerate(stages, start=1)}
    if isinstance(stages, (dict, DictConfig)):
        return {name: stage for name, stage in stages.items() if stage is not None}
    return stages


def upgraded(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A plain config as this ladd writes it, from one an earlier ladd saved (a run folder's, an export's)."""
    plain = dict(cfg)
    if isinstance(plain.get("train"), Mapping) and "stages" in plain["train"]:
        plain["train"] = {**plain["train"], "stages": named_stages(plain["train"]["stages"])}
    return plain


@dataclass
class TrainerConfig:
    """Lightning-named overrides (``trainer.max_steps=N``) applied to every stage's Lightning fit."""

    max_steps: int | None = None  # steps of every stage; None: each stage's own `steps`

    def __post_init__(self) -> None:
        check_range("trainer.max_steps", self.max_steps, 1, optional=True)


@dataclass
class TrainConfig:
    """Optimisation and hardware settings."""

    batch_size: int = 256  # the global batch: split evenly over all processes (devices x nodes)
    # by name, run in order; an overlay changes one (train.stages.stage2.steps=10) or drops it (stage2: null)
    stages: dict[str, StageConfig | None] = field(default_factory=dict)
    optimizer: str = "adamw"  # adamw (decoupled weight decay) or adam (weight decay added to the gradient)
    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    warmup_steps: int = 500  # linear warm-up of every stage
    lr_schedule: str = "constant"  # after the warm-up: constant, linear or cosine decay over the stage's steps
    min_lr_ratio: float = 0.0  # linear and cosine decay end at min_lr_ratio * lr
    ema_decay: float = 0.99
    grad_clip: float = 1.0
    precision: str = "auto"  # auto: bf16-mixed on GPU, 32-true on CPU
    accelerator: str = "auto"
    devices: Any = 1  # per node: a count, a list of indices, or "auto"
    num_nodes: int = 1
    strategy: str = "auto"  # auto, ddp: DDP when there are several processes (docs/distributed.md); no sharding
    log_every: int = 50
    checkpoint_every: int = 500  # steps between checkpoints (last.ckpt of the stage, written atomically)
    progress: bool = True
    compile: bool = False  # torch.compile the denoising backbones in place (weights and checkpoints unchanged)
    compile_mode: str | None = None  # torch.compile's mode, e.g. max-autotune
    fused_adamw: bool | None = None  # None: fused on CUDA (not with 16-mixed, whose scaler it cannot serve)

    def __post_init__(self) -> None:
        check_range("train.batch_size", self.batch_size, 1)
        check_choice("train.optimizer", self.optimizer, OPTIMIZERS)
        check_choice("train.lr_schedule", self.lr_schedule, SCHEDULES)
        check_range("train.min_lr_ratio", self.min_lr_ratio, 0, 1)
        for name, stage in named_stages(self.stages).items():
            stage.check(name)
        check_range("train.lr", self.lr, 0, low_open=True)
        check_range("train.weight_decay", self.weight_decay, 0)
        if len(self.betas) != 2:
            raise InvalidConfigError(f"train.betas={list(self.betas)} is not valid: AdamW takes two betas, e.g. [0.9, 0.999]")
        check_each("train.betas", self.betas, 0, 1, high_open=True)
        check_range("train.warmup_steps", self.warmup_steps, 0)
        check_range("train.ema_decay", self.ema_decay, 0, 1)
        check_range("train.grad_clip", self.grad_clip, 0)
        check_choice("train.precision", self.precision, TRAIN_PRECISIONS)
        _check_devices(self.devices)
        check_range("train.num_nodes", self.num_nodes, 1)
        check_range("train.log_every", self.log_every, 1)
        check_range("train.checkpoint_every", self.checkpoint_every, 1)


def _check_devices(devices: Any) -> None:
    """``train.devices``: a positive count, -1 or "auto" (all), or a non-empty list of device indices."""
    if devices in ("auto", -1, "-1"):
        return
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    if isinstance(devices, (list, tuple)):
        check_each("train.devices", devices, 0)
        return
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise InvalidConfigError(
            f"train.devices={devices!r} is not valid: it must be a count >= 1, -1 or auto (all), or a list of device indices"
        )


@dataclass
class EvalConfig:
    """Evaluation: held-out token loss and metric against sampling budgets."""

    num_samples: int = 2000
    batch_size: int = 1000
    budgets: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128])
    loss_batches: int = 8
    seed: int = 1234
    precision: str = "auto"  # the networks at inference: auto (bf16-mixed on CUDA, 32-true elsewhere), bf16-mixed, 32-true
    repeats: int = 1  # sample sets per budget, each from its own seeds against its own reference draw: mean and spread
    floor_draws: int = 1  # independent data-vs-data pairs behind the metric's data floor: mean and spread

    def __post_init__(self) -> None:
        check_range("eval.num_samples", self.num_samples, 1)
        check_range("eval.batch_size", self.batch_size, 1)
        check_each("eval.budgets", self.budgets, 1)
        check_range("eval.loss_batches", self.loss_batches, 1)
        check_range("eval.seed", self.seed, 0, MAX_SAMPLING_SEED)
        check_choice("eval.precision", self.precision, INFERENCE_PRECISIONS)


@dataclass
class Settings:
    """Every top-level option that is not a component slot."""

    method: str = "mdlm"  # label of the run in tables and plots
    seed: int = 0
    run_dir: str = "runs/${now:%Y-%m-%d_%H-%M-%S}"
    objective: Objective = field(default_factory=Objective)
    train: TrainConfig = field(default_factory=TrainConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        check_range("seed", self.seed, 0, MAX_SEED - len(self.train.stages))
        check_name("method", self.method, "eval_METHOD.json")


def schema() -> type:
    """The typed top level of every experiment config: the settings, and one slot per row of the slot table, filled by its config group."""
    return dataclasses.make_dataclass("LaddSchema", [(slot, Any, None) for slot in SLOTS], bases=(Settings,))


def check_values(cfg: Mapping[str, Any]) -> None:
    """Refuse expressions and import paths anywhere, then unknown keys, wrong types and out-of-range values of ladd's options."""
    check_config(cfg)
    try:
        checked: Any = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema()), dict(cfg)))  # of schema()'s type
    except ConfigKeyError as error:
        raise InvalidConfigError(f"{error.full_key}: {UNKNOWN_KEY}") from None
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "config"
        raise InvalidConfigError(f"{key}: {str(error).splitlines()[0]}") from None
    if not named_stages(checked.train.stages):
        raise InvalidConfigError("train.stages is empty: a run needs at least one stage, e.g. train.stages=[{steps:1000}]")


def resolve_precision(requested: str, device_type: str) -> str:
    """A Lightning precision name: "auto" is bf16-mixed on CUDA and 32-true elsewhere, for training and inference."""
    if requested != "auto":
        return requested
    return "bf16-mixed" if device_type == "cuda" else "32-true"


def _option_node(component: Component) -> DictConfig:
    """The config node for one component: its config dataclass plus its registry name.

    Typed, so overrides are converted and checked, but open: a preset's options for the component it
    selected merge in even when the command line selects another one, and compose() sorts them out.
    """
    name_field = ("name", str, dataclasses.field(default=component.name))
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
    """Store the schema and one option per (slot, component) in Hydra's ConfigStore."""
    store = ConfigStore.instance()
    store.store(name="ladd_schema", node=_schema_node())
    for slot in SLOTS.values():
        # every name, a clashing one too: it fails with the clash where it is built, not here
        for name in registry.names(slot.kind):
            store.store(group=slot.name, name=name, node=_option_node(registry.option(slot.kind, name)))


def search_path_override(registry: Registry, extra: Sequence[str] = ()) -> list[str]:
    """A Hydra override adding plugin-contributed YAML folders (and the user's ``extra`` entries) to the search path."""
    dirs = [f"file://{Path(d).resolve()}" for d in registry.config_dirs] + list(extra)
    return [f"hydra.searchpath=[{','.join(dirs)}]"] if dirs else []


def check_selections(overrides: list[str], registry: Registry) -> None:
    """Look up every component the overrides select, sweeps included, so an unknown or clashing name fails with the registry's message."""
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
    """``SLOT=null`` for an optional slot as Hydra's ``~SLOT`` (Hydra cannot set a config group to null from the command line)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return overrides  # Hydra reports malformed overrides itself
    return [
        f"~{override.key_or_group}"
        if override.key_or_group in SLOTS and SLOTS[override.key_or_group].optional and override.package is None and not override.is_delete()
        and not override.is_sweep_override() and override.value() is None
        else text
        for text, override in zip(overrides, parsed, strict=True)
    ]


def compose(overrides: list[str], registry: Registry, searchpath: Sequence[str] = ()) -> DictConfig:
    """Compose, resolve and check an experiment config; Hydra's own runtime settings (``hydra:``) are dropped, never used."""
    from hydra.errors import HydraException

    check_selections(overrides, registry)
    overrides = empty_slots_as_deletions(overrides)
    register_configs(registry)
    parsed = [parse_override(override) for override in overrides]
    # a list replaces every stage, which Hydra cannot do to a mapping: it is set after composing
    replaces_stages = [o.key_or_group == STAGES_KEY and isinstance(o.value(), list) for o in parsed]
    stage_lists = [o.value() for o, replaces in zip(parsed, replaces_stages, strict=True) if replaces]
    hydra_overrides = [text for text, replaces in zip(overrides, replaces_stages, strict=True) if not replaces]
    try:
        cfg = _hydra_compose(hydra_overrides, registry, searchpath)
        stages = named_stages(stage_lists[-1] if stage_lists else cfg.train.stages)
        cfg.train.stages = {name: OmegaConf.merge(OmegaConf.structured(StageConfig), stage) for name, stage in stages.items()}
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
        print(f"ladd: note: left out what presets set for the latent channel, which latent=null removes: {', '.join(emptied)}", file=sys.stderr)
    left_out = reset + _fit_options(plain, _typed_options(parsed), registry)
    if left_out:
        print(f"ladd: note: left out options that presets set for other components than the ones selected: {', '.join(left_out)}", file=sys.stderr)
    check_values(plain)
    resolved = OmegaConf.create(plain)
    OmegaConf.set_struct(resolved, True)
    return resolved


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
        if presets.get(slot) == name:
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
    emptied = [slot.name for slot in SLOTS.values() if slot.needs_latent and plain.get(slot.name) is not None and slot.name not in typed]
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
                    raise InvalidConfigError(f"{slot.name}.{key}: no {slot.name} is selected; choose one with {slot.name}=NAME")
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
        return InvalidConfigError(f"unknown {group} {name!r}{did_you_mean(name, error.options)} valid {group} names: {', '.join(error.options)}")
    message = str(error).splitlines()[0]
    if message.startswith("Could not override"):
        key = message.split("'")[1]
        return InvalidConfigError(f"{key}: {UNKNOWN_KEY}")
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
