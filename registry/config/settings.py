"""The typed settings of an experiment: every option with its checks, and the one place a config is validated.

A command validates its config once, where it starts (``checked``, or ``compose`` which ends with it), and
passes the typed ``Settings`` down: the engine reads attributes, never string keys. Torch-free: listing
components, composing configs and reading run folders need no model code.
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from registry.errors import IncompatibleComponentsError, InvalidConfigError
from registry.host.kinds import SLOTS
from registry.ranges import check_choice, check_each, check_range
from registry.storage.files import check_name

from .lr_schedules import SCHEDULES
from .safety import check_config

#: Precisions of training (Lightning's names) and of the networks at inference; "auto" picks per device.
TRAIN_PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")
INFERENCE_PRECISIONS = ("auto", "bf16-mixed", "32-true")
#: optimiser choices: the names of their torch.optim classes (adamw: decoupled weight decay; adam: weight decay
#: added to the gradient)
OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam"}
#: experiment trackers (Lightning's loggers): csv needs nothing more; the others come with ladd[tracking]
LOGGERS = ("csv", "tensorboard", "wandb", "mlflow")
#: seeds stay within the 32-bit range Lightning and NumPy accept, with room for the per-stage offsets
MAX_SEED = 2**31 - 1
#: dtypes the frozen weights (the base that ``train.lora`` and ``train.freeze`` leave untrained) may be held in
FROZEN_DTYPES = ("float32", "bfloat16", "float16")
#: sampling seeds fill the generators' 64 bits, with room for the offsets of chunks and repeats
MAX_SAMPLING_SEED = 2**63 - 1
#: the time in the names of default run and sweep folders
TIME_FORMAT = "%Y-%m-%d_%H-%M-%S"
UNKNOWN_KEY = "no such option (misspelt, or an option of another component?)"
#: ``metadata`` of an option that says how a run executes or reports, not what it learns: it changes no trained
#: weight beyond rounding, so a run in progress takes a new value without ``--allow-changes``
OPERATIONAL = {"ladd": "operational"}
#: Options (``section.name``) and slots (``name``) that were removed, with what acts in their place: a config that
#: still sets one is refused naming it.
REMOVED = {
    "objective.lambda_latent": "each stage sets its own weight of the latent loss: train.stages.NAME.lambda_latent",
    "reward": "the RL objective names its reward: loss.reward=NAME, its options loss.reward_options",
}


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
    """A plain config as this ladd writes it, from one an earlier ladd saved (a run folder's, an export's).

    Options since removed are dropped (none of them acted on what the saved run learnt), and so are removed slots
    left empty; a removed slot that chose a component is kept, for :func:`checked` to refuse naming what replaced it.
    """
    plain = dict(cfg)
    if isinstance(plain.get("train"), Mapping) and "stages" in plain["train"]:
        plain["train"] = {**plain["train"], "stages": named_stages(plain["train"]["stages"])}
    for key in removed_options(plain):
        section, _, name = key.partition(".")
        if name:
            plain[section] = {k: v for k, v in plain[section].items() if k != name}
        elif plain[section] is None:
            del plain[section]
    return plain


def removed_options(cfg: Mapping[str, Any]) -> list[str]:
    """The options of ``REMOVED`` that ``cfg`` sets."""
    found = []
    for key in REMOVED:
        section, _, name = key.partition(".")
        node = cfg.get(section)
        if (name and isinstance(node, Mapping) and name in node) or (not name and section in cfg):
            found.append(key)
    return found


def unknown_option(key: str) -> str:
    """The message for an option the settings do not have: a removed one says what acts in its place."""
    if key in REMOVED:
        return f"{key} was removed ({REMOVED[key]}); delete it from the config"
    return f"{key}: {UNKNOWN_KEY}"


def operational_options() -> dict[str, frozenset[str]]:
    """The options marked ``OPERATIONAL``, by section of the settings (``train``: its hardware and reporting)."""
    found: dict[str, frozenset[str]] = {}
    for section in dataclasses.fields(Settings):
        kind = section.default_factory
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            options = frozenset(f.name for f in dataclasses.fields(kind) if f.metadata == OPERATIONAL)
            if options:
                found[section.name] = options
    return found


def check_patterns(key: str, patterns: list[str]) -> None:
    """Name patterns (``blocks.*.attn.q``): dotted parts, none empty, ``*`` standing for any one part."""
    for index, pattern in enumerate(patterns):
        if not isinstance(pattern, str) or not pattern or "" in pattern.split("."):
            raise InvalidConfigError(
                f"{key}[{index}]={pattern!r} is not a name pattern: dotted parts of module names, none empty, with * "
                f"for any one part (e.g. blocks.*.attn.q)"
            )


@dataclass
class LoraConfig:
    """LoRA adapters (through peft) on linear layers; rank 0 trains without them."""

    rank: int = 0
    alpha: float | None = None  # the adapters' output is scaled by alpha / rank; None: alpha = rank
    dropout: float = 0.0  # dropout on the adapters' input
    # module name patterns, of the model (backbone.blocks.*.attn.q) or of any part of a name (attn.q); None: each
    # backbone's own (Backbone.adapter_targets)
    targets: list[str] | None = None
    # parameter name patterns trained in full beside the adapters (a part new to the network: backbone.latent)
    full: list[str] = field(default_factory=list)

    def check(self) -> None:
        """Range checks, and no adapter options without adapters."""
        check_range("train.lora.rank", self.rank, 0)
        check_range("train.lora.alpha", self.alpha, 0, low_open=True, optional=True)
        check_range("train.lora.dropout", self.dropout, 0, 1, high_open=True)
        if self.targets is not None:
            if not self.targets:
                raise InvalidConfigError(
                    "train.lora.targets=[] adapts nothing: name module patterns, or set null for the backbones' own"
                )
            check_patterns("train.lora.targets", self.targets)
        check_patterns("train.lora.full", self.full)
        if self.rank == 0:
            given = [key for key, value in (("targets", self.targets), ("full", self.full or None)) if value]
            if given:
                raise InvalidConfigError(
                    f"train.lora.{given[0]} is set but train.lora.rank=0 (no adapters); set train.lora.rank (e.g. 16) "
                    f"or leave train.lora.{given[0]} unset"
                )


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
    accelerator: str = field(default="auto", metadata=OPERATIONAL)
    devices: Any = field(default=1, metadata=OPERATIONAL)  # per node: a count, a list of indices, or "auto"
    num_nodes: int = field(default=1, metadata=OPERATIONAL)
    # auto, ddp: DDP when there are several processes (docs/distributed.md); fsdp: parameters, gradients, optimiser
    # state and EMA sharded over the GPUs (docs/finetuning.md)
    strategy: str = field(default="auto", metadata=OPERATIONAL)
    # recompute each block of the backbones (Backbone.layers) in the backward pass instead of keeping its activations
    activation_checkpointing: bool = field(default=False, metadata=OPERATIONAL)
    log_every: int = field(default=50, metadata=OPERATIONAL)
    # steps between checkpoints (last.ckpt of the stage, written atomically)
    checkpoint_every: int = field(default=500, metadata=OPERATIONAL)
    progress: bool = field(default=True, metadata=OPERATIONAL)
    # torch.compile the denoising backbones in place (weights and checkpoints unchanged)
    compile: bool = field(default=False, metadata=OPERATIONAL)
    compile_mode: str | None = field(default=None, metadata=OPERATIONAL)  # torch.compile's mode, e.g. max-autotune
    # None: fused on CUDA (not with 16-mixed, whose scaler it cannot serve)
    fused_adamw: bool | None = field(default=None, metadata=OPERATIONAL)
    # where the settings and loss terms are logged besides metrics.csv: csv, tensorboard, wandb or mlflow
    logger: str = field(default="csv", metadata=OPERATIONAL)
    # a model folder or finished run: every parameter of equal name and shape starts Stage 1 from it (read once,
    # when the run begins; a resumed run continues from its checkpoints)
    init_from: str | None = None
    lora: LoraConfig = field(default_factory=LoraConfig)
    # parameter name patterns frozen for the whole run (with or without LoRA): never trained, never written into the
    # run's files, read again from where the run started when it resumes
    freeze: list[str] = field(default_factory=list)
    # the dtype the frozen weights are held in: bfloat16 halves their memory (under a mixed precision, whose autocast
    # casts per operation); what trains stays float32, and so do its optimiser state and EMA
    frozen_dtype: str = "float32"

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
            raise InvalidConfigError(
                f"train.betas={list(self.betas)} is not valid: AdamW takes two betas, e.g. [0.9, 0.999]"
            )
        check_each("train.betas", self.betas, 0, 1, high_open=True)
        check_range("train.warmup_steps", self.warmup_steps, 0)
        check_range("train.ema_decay", self.ema_decay, 0, 1)
        check_range("train.grad_clip", self.grad_clip, 0)
        check_choice("train.precision", self.precision, TRAIN_PRECISIONS)
        check_choice("train.logger", self.logger, LOGGERS)
        _check_devices(self.devices)
        check_range("train.num_nodes", self.num_nodes, 1)
        check_range("train.log_every", self.log_every, 1)
        check_range("train.checkpoint_every", self.checkpoint_every, 1)
        self.lora.check()
        check_patterns("train.freeze", self.freeze)
        check_choice("train.frozen_dtype", self.frozen_dtype, FROZEN_DTYPES)
        if self.frozen_dtype != "float32" and not (self.lora.rank or self.freeze):
            raise InvalidConfigError(
                f"train.frozen_dtype={self.frozen_dtype} but nothing is frozen: it applies to the base that "
                f"train.lora.rank > 0 or train.freeze leaves untrained"
            )

    @property
    def adapted(self) -> bool:
        """Whether part of the model is a frozen base (LoRA, or parameters frozen by name)."""
        return self.lora.rank > 0 or bool(self.freeze)

    def stages_to_run(self) -> dict[str, StageConfig]:
        """The stages in the order they run (one a preset or override set to null is not among them)."""
        return {name: stage for name, stage in self.stages.items() if stage is not None}


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
            f"train.devices={devices!r} is not valid: it must be a count >= 1, -1 or auto (all), or a list of device "
            "indices"
        )


@dataclass
class EvalConfig:
    """Evaluation: held-out token loss and metric against sampling budgets."""

    num_samples: int = 2000
    batch_size: int = 1000
    budgets: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128])
    loss_batches: int = 8
    seed: int = 1234
    precision: str = (
        "auto"  # the networks at inference: auto (bf16-mixed on CUDA, 32-true elsewhere), bf16-mixed, 32-true
    )
    repeats: int = 1  # sample sets per budget, each from its own seeds against its own reference draw: mean and spread
    floor_draws: int = 1  # independent data-vs-data pairs behind the metric's data floor: mean and spread

    def __post_init__(self) -> None:
        check_range("eval.num_samples", self.num_samples, 1)
        check_range("eval.batch_size", self.batch_size, 1)
        check_each("eval.budgets", self.budgets, 1)
        check_range("eval.loss_batches", self.loss_batches, 1)
        check_range("eval.seed", self.seed, 0, MAX_SAMPLING_SEED)
        check_choice("eval.precision", self.precision, INFERENCE_PRECISIONS)
        check_range("eval.repeats", self.repeats, 1)
        check_range("eval.floor_draws", self.floor_draws, 1)


#: how lm-eval's requests become rows: filled to the model's length with masks, or the given tokens alone
ROW_LENGTHS = ("fixed", "variable")


@dataclass
class HarnessConfig:
    """How ``ladd harness`` makes lm-eval's requests into the rows it scores, as the model's family was trained and is
    evaluated by its own code; ``ladd import`` sets it for the families it imports."""

    # fixed: each row filled to the model's length S with masks (a model trained at one length, MDLM); variable: the
    # context and continuation alone (a model trained at any length: LLaDA's and Dream's evaluators)
    length: str = "fixed"
    special_tokens: bool = False  # encode with the tokenizer's own special tokens (LLaDA's and Dream's evaluators)
    bos: bool = False  # the tokenizer's BOS text before every context (Dream's evaluator with add_bos_token)
    eos: bool = False  # EOS after every continuation, given and never scored (Dream's evaluator)

    def __post_init__(self) -> None:
        check_choice("harness.length", self.length, ROW_LENGTHS)


LATENT_TIMES = ("tied", "independent", "clean")


@dataclass
class Objective:
    """How the latent channel is trained: ``L = L^x + lambda_latent L^y + L_aux`` (App. C), with ``lambda_latent``
    set by each stage (``StageConfig``)."""

    p_cfg: float = 0.0  # classifier-free latent dropout: y0 replaced by the null latent for the token loss
    # True: rows dropped by p_cfg stay in the latent loss with the null latent as target, so the latent
    # denoiser learns to generate it. False (the authors' choice): the latent loss averages over the kept rows.
    latent_loss_on_dropped: bool = False
    # tied: t_y = t_x; independent: t_y drawn independently; clean: tokens see y0 (sequential training)
    latent_time: str = "tied"
    # noise draws per clean latent for a separate latent denoiser: more latent training at almost no cost
    latent_repeats: int = 1
    # output head only where the token loss can be nonzero (masked positions): the same loss, fewer FLOPs
    # with a large vocabulary, at the price of data-dependent shapes (one host sync per step)
    head_on_loss_rows: bool = field(default=False, metadata=OPERATIONAL)
    # training times are drawn in [time_min, time_max] (BD3-LM's clipped schedule: with the log-linear schedule, the
    # mask rate of every block within [eps_min, eps_max]); held-out L^x spans the whole range, an ELBO
    time_min: float = 0.0
    time_max: float = 1.0

    def __post_init__(self) -> None:
        check_range("objective.time_min", self.time_min, 0, 1)
        check_range("objective.time_max", self.time_max, 0, 1)
        if self.time_min > self.time_max:
            raise InvalidConfigError(
                f"objective.time_min={self.time_min} is above objective.time_max={self.time_max}: the training times "
                f"lie between them; valid: 0 <= time_min <= time_max <= 1"
            )
        if self.latent_time not in LATENT_TIMES:
            raise InvalidConfigError(f"objective.latent_time={self.latent_time!r}; valid: {', '.join(LATENT_TIMES)}")
        if not 0.0 <= self.p_cfg < 1.0:
            raise InvalidConfigError(f"objective.p_cfg={self.p_cfg} must lie in [0, 1)")
        if self.latent_repeats < 1:
            raise InvalidConfigError(f"objective.latent_repeats={self.latent_repeats} must be at least 1")


@dataclass
class Settings:
    """Every top-level option that is not a component slot."""

    method: str = "mdlm"  # label of the run in tables and plots
    seed: int = 0
    run_dir: str = f"runs/${{now:{TIME_FORMAT}}}"  # Hydra resolves it when composing; checked() for a plain config
    objective: Objective = field(default_factory=Objective)
    train: TrainConfig = field(default_factory=TrainConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    harness: HarnessConfig = field(default_factory=HarnessConfig)

    def __post_init__(self) -> None:
        check_range("seed", self.seed, 0, MAX_SEED - len(self.train.stages))
        check_name("method", self.method, "eval_METHOD.json")

    def selection(self, slot: str) -> dict[str, Any] | None:
        """A component slot's node (``name`` and the component's options), or None when the slot is empty."""
        return getattr(self, slot, None)

    def stage_steps(self, stage: StageConfig) -> int:
        """Optimisation steps of one stage: ``trainer.max_steps`` when given, else the stage's own ``steps``."""
        return stage.steps if self.trainer.max_steps is None else self.trainer.max_steps

    def plain(self) -> dict[str, Any]:
        """These settings as plain data, as config.yaml and exported models hold them."""
        return dataclasses.asdict(self)


def schema() -> type:
    """The typed top level of every experiment config: the settings, and one slot per row of the slot table,
    filled by its config group."""
    return _schema(tuple(SLOTS))


@functools.cache  # one class per slot table: settings checked at different times compare equal
def _schema(slots: tuple[str, ...]) -> type:
    return dataclasses.make_dataclass("LaddSchema", [(slot, Any, None) for slot in slots], bases=(Settings,))


def checked(cfg: Mapping[str, Any]) -> Settings:
    """The typed settings of a plain config: expressions and import paths refused anywhere, then unknown keys,
    wrong types and out-of-range values, each in one line naming the key."""
    removed = removed_options(cfg)  # a saved config had them dropped (`upgraded`); one given now expects them to act
    if removed:
        raise InvalidConfigError(unknown_option(removed[0]))
    cfg = upgraded(cfg)
    cfg.setdefault("run_dir", f"runs/{datetime.datetime.now():{TIME_FORMAT}}")  # as composing would have resolved it
    check_config(cfg)
    if cfg.get("latent") is not None and "latent_process" not in cfg:
        raise IncompatibleComponentsError(
            "this config predates the latent_process slot (a latent's process options now live there); "
            "re-create it with the current presets"
        )
    settings = _typed(cfg)
    settings.train.stages = named_stages(settings.train.stages)
    if not settings.train.stages:
        raise InvalidConfigError(
            "train.stages is empty: a run needs at least one stage, e.g. train.stages=[{steps:1000}]"
        )
    return settings


def _typed(cfg: Mapping[str, Any]) -> Settings:
    """``cfg`` merged into the schema and converted to its dataclasses, which check their values."""
    try:
        typed = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema()), dict(cfg)))
        return typed  # type: ignore[return-value]  # an instance of schema(), a subclass of Settings
    except ConfigKeyError as error:
        raise InvalidConfigError(unknown_option(error.full_key or "config")) from None
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "config"
        raise InvalidConfigError(f"{key}: {str(error).splitlines()[0]}") from None


def resolve_precision(requested: str, device_type: str) -> str:
    """A Lightning precision name: "auto" is bf16-mixed on CUDA and 32-true elsewhere, for training and inference."""
    if requested != "auto":
        return requested
    return "bf16-mixed" if device_type == "cuda" else "32-true"
