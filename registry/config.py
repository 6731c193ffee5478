"""Hydra config assembly: every registered component becomes an option of its kind's config group."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from ._component import Component
from ._registry import Registry
from .assembly import SLOTS
from .model import Objective

CONFIG_MODULE = "ladd_configs"
PRIMARY_CONFIG = "train"


@dataclass
class StageConfig:
    """One training stage (Stage 1 / Stage 2 of App. C)."""

    steps: int = 1000
    lambda_latent: float = 0.0
    freeze_encoder: bool = False
    max_minutes: float | None = None  # wall-clock cap: the stage ends at `steps` or this, whichever comes first


@dataclass
class TrainerConfig:
    """Lightning-named overrides (``trainer.max_steps=N``) applied to every stage's Lightning fit."""

    max_steps: int | None = None  # steps of every stage; None: each stage's own `steps`


@dataclass
class TrainConfig:
    """Optimisation and hardware settings."""

    batch_size: int = 256  # the global batch: split evenly over all processes (devices x nodes)
    stages: list[StageConfig] = field(default_factory=lambda: [StageConfig()])
    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    warmup_steps: int = 500
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


@dataclass
class LaddSchema:
    """Typed top level of every experiment config; component slots are filled by config groups."""

    method: str = "mdlm"  # label of the run in tables and plots
    seed: int = 0
    dataset: Any = None
    process: Any = None
    schedule: Any = None
    latent: Any = None
    latent_schedule: Any = None
    encoder: Any = None
    backbone: Any = None
    latent_backbone: Any = None
    sampler: Any = None
    metric: Any = None
    run_dir: str = "runs/${now:%Y-%m-%d_%H-%M-%S}"
    objective: Objective = field(default_factory=Objective)
    train: TrainConfig = field(default_factory=TrainConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def resolve_precision(requested: str, device_type: str) -> str:
    """A Lightning precision name: "auto" is bf16-mixed on CUDA and 32-true elsewhere, for training and inference."""
    if requested != "auto":
        return requested
    return "bf16-mixed" if device_type == "cuda" else "32-true"


def _option_node(component: Component) -> Any:
    """The structured config node for one component: its config dataclass plus its registry name."""
    name_field = ("name", str, dataclasses.field(default=component.name))
    if component.spec.config is None:
        return dataclasses.make_dataclass(f"{component.name}_option", [name_field])
    return dataclasses.make_dataclass(f"{component.name}_option", [name_field], bases=(component.spec.config,))


def register_configs(registry: Registry) -> None:
    """Store the schema and one option per (slot, component) in Hydra's ConfigStore."""
    store = ConfigStore.instance()
    store.store(name="ladd_schema", node=LaddSchema)
    for slot, kind in SLOTS.items():
        for name in registry.names(kind):
            store.store(group=slot, name=name, node=_option_node(registry.get(kind, name)))


def search_path_override(registry: Registry) -> list[str]:
    """A Hydra override adding plugin-contributed YAML folders to the search path."""
    dirs = [f"file://{Path(d).resolve()}" for d in registry.config_dirs]
    return [f"hydra.searchpath=[{','.join(dirs)}]"] if dirs else []


def compose(overrides: list[str], registry: Registry) -> DictConfig:
    """Compose the experiment config outside a Hydra app (used by ``ladd compare`` and tests)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    register_configs(registry)
    GlobalHydra.instance().clear()
    with initialize_config_module(CONFIG_MODULE, version_base=None):
        return hydra_compose(PRIMARY_CONFIG, overrides=[*search_path_override(registry), *overrides])


def to_plain(cfg: DictConfig) -> dict[str, Any]:
    """Resolved plain-dict copy of a config."""
    return OmegaConf.to_container(cfg, resolve=True)
