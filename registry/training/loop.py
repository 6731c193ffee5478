"""The generic training loop: Lightning drives any assembled model through its training stages."""
from __future__ import annotations

import dataclasses
import functools
import io
import json
import logging
import math
import os
import signal
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from torch.utils.data import DataLoader, IterableDataset

from registry.config.lr_schedules import lr_factor
from registry.config.settings import OPTIMIZERS, Settings, StageConfig, TrainConfig, checked, resolve_precision
from registry.distributed import Shard, rank, step_seed, world_size
from registry.engine.assembly import Experiment, build_experiment, check_installed
from registry.engine.batches import check_batch, first_batch, stream_ended
from registry.engine.memory import check_fits
from registry.engine.model import DiffusionModel
from registry.engine.runs import COMPONENTS_FILE, WEIGHTS_FILE, RunFolder
from registry.engine.warm_start import warm_start
from registry.errors import InvalidConfigError, LaddError, first_line
from registry.host.registry import Registry
from registry.interfaces import (
    Dataset,
    batches_from,
    context_of,
    device_batches,
    padding_of,
    prepare,
    rank_batches,
)
from registry.storage.files import replacing, write_text
from registry.storage.weights import (
    CorruptFileError,
    check_checkpoint,
    check_dtypes,
    check_shapes,
    load_weights,
    save_weights,
    verify_weights,
)

from .console import progress_bar, quiet_lightning_notices
from .ema import EMAWeights
from .metrics_file import METRICS_FILE, MetricsFile, check_logged_through, read_metrics
from .stopping import Stopped, deferred, received, reclaim, stopping_on_signals
from .trainable import unreached_parameters

#: bytes of an activation under each precision (the mixed and half ones: 2)
_VALUE_BYTES = {"32-true": 4, "64-true": 8}
STAGE_WEIGHTS = "final.safetensors"  # a finished stage's EMA weights, the next stage's starting point
LAST_CHECKPOINT = "last.ckpt"  # a stage's latest checkpoint, where it resumes


class _Stream(IterableDataset):
    """Full batches from a dataset component's seeded stream, checked before they reach the model."""

    def __init__(self, dataset: Dataset, batch_size: int, seed: int, device: torch.device) -> None:
        self.dataset, self.batch_size, self.seed, self.device = dataset, batch_size, seed, device
        self.start = 0  # batches already trained on (set when resuming)

    def __iter__(self) -> Iterator[torch.Tensor]:
        produced = self.start
        on_device = device_batches(self.dataset, self.start, self.batch_size, self.seed, self.device)
        # with several processes each makes only the rows it trains on, where the data can
        own = None
        if world_size() > 1:
            own = rank_batches(self.dataset, self.start, self.batch_size, self.seed, rank(), world_size())
        whole = own if own is not None else batches_from(self.dataset, self.start, self.batch_size, self.seed, "train")
        stream = on_device if on_device is not None else whole
        for batch in stream:
            if on_device is None or produced == self.start:  # checking reads the batch: on the device, once
                check_batch(batch, self.dataset)
            produced += 1
            yield batch
        raise stream_ended(produced, self.batch_size)


class NonFiniteLossError(LaddError, FloatingPointError):
    """A loss term became NaN or infinite."""


class _FiniteWatch:
    """The first step whose loss terms were not all finite, noted on the device and read only when checked."""

    def __init__(self) -> None:
        self.step: torch.Tensor | None = None  # -1 until a step goes bad
        self.values: torch.Tensor | None = None  # that step's terms
        self.names: list[str] = []

    def record(self, names: list[str], values: torch.Tensor, step: int) -> None:
        """Note the terms ``names`` (``values``, one each) of ``step`` if they are the first not all finite."""
        if self.step is None or self.values is None:
            self.step, self.values, self.names = torch.full((), -1, device=values.device), values, names
        first = (self.step < 0) & ~torch.isfinite(values).all()
        self.step = torch.where(first, step, self.step)
        self.values = torch.where(first, values, self.values)

    def check(self) -> None:
        """Stop the run if a step noted so far went bad."""
        if self.step is None or self.values is None or int(self.step) < 0:
            return
        values = dict(zip(self.names, self.values.tolist(), strict=True))
        bad = [name for name, value in values.items() if name != "loss" and not math.isfinite(value)]
        raise NonFiniteLossError(
            f"non-finite loss at step {int(self.step)}: offending term(s) {bad or ['loss']} "
            f"({values}); the run stops rather than skip or zero it"
        )


class LaddModule(L.LightningModule):
    """Lightning wrapper: one optimisation step of the model's objective on this process's share of the global batch."""

    def __init__(self, model: DiffusionModel, train: TrainConfig, seed: int, dataset: Dataset | None = None) -> None:
        super().__init__()
        self.model = model
        self.train_cfg = train
        self.seed = seed
        self.dataset = dataset  # its padding and context (``Dataset.padding``, ``context``) stay out of the loss
        self.stage = 1
        self.resting: list[torch.nn.Parameter] = []  # parameters this stage's loss does not reach
        self.watch = _FiniteWatch()

    def setup(self, stage: str) -> None:
        # Here the processes are joined and the device is known, and neither DDP nor the optimiser has seen
        # the parameters yet: the stage trains exactly what its loss reaches, so DDP needs no search for the rest.
        self.model.to(self.trainer.strategy.root_device)
        self.resting = unreached_parameters(self.model)
        for parameter in self.resting:
            parameter.requires_grad_(False)

    def teardown(self, stage: str) -> None:
        for parameter in self.resting:
            parameter.requires_grad_(True)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        if self.train_cfg.compile:
            # under CUDA graphs (reduce-overhead) the last step's outputs may be reused
            torch.compiler.cudagraph_mark_step_begin()
        world = self.trainer.world_size
        shard = (
            Shard(self.global_rank, world, step_seed(self.seed, self.stage, self.global_step)) if world > 1 else None
        )
        padding = None if self.dataset is None else padding_of(self.dataset, batch)
        context = None if self.dataset is None else context_of(self.dataset, batch)
        terms = self.model.loss(batch, shard=shard, padding=padding, context=context)
        # Every rank holds an equal share, so the mean over ranks is the global batch's mean (a NaN anywhere stops all).
        names = list(terms)
        means = self.trainer.strategy.reduce(torch.stack([terms[k].detach() for k in names]), reduce_op="mean")
        self.last_terms = dict(zip(names, means, strict=True))
        self.watch.record(names, means, self.global_step)
        # Lightning writes its log at the steps that complete a multiple of log_every; handing it the terms at the
        # others costs about a millisecond a step. No progress bar: it would read every term back at every step.
        if (self.global_step + 1) % self.train_cfg.log_every == 0:
            self.log_dict({f"train/{k}": v for k, v in self.last_terms.items()}, on_step=True)
        return terms["loss"]

    def on_train_start(self) -> None:
        self.watch = _FiniteWatch()  # a stage of its own: its terms may differ from the last stage's

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # The host reads the loss only where it logs it (and before any checkpoint or final weights are written),
        # so the device never waits for it; a step past a bad one can have run, but nothing it made is kept.
        if self.global_step % self.train_cfg.log_every == 0:
            self.watch.check()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.watch.check()

    def on_train_end(self) -> None:
        self.watch.check()

    def configure_gradient_clipping(
        self, optimizer: torch.optim.Optimizer, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None
    ) -> None:
        # ladd clips by itself: Lightning refuses to clip for fused optimizers. Under 16-mixed they unscale inside
        # their step, so fused AdamW is not used there and the gradients seen here are unscaled in every case.
        if self.train_cfg.grad_clip > 0:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, self.train_cfg.grad_clip)

    def configure_optimizers(self) -> Any:
        cfg = self.train_cfg
        params = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = getattr(torch.optim, OPTIMIZERS[cfg.optimizer])(
            params,
            lr=cfg.lr,
            betas=tuple(cfg.betas),
            weight_decay=cfg.weight_decay,
            fused=_fused_adamw(cfg, params[0].device, _precision(cfg.precision)),
        )
        # a stage's length is its Trainer's; a module used outside a Trainer (benchmarks) has none, and needs none when
        # constant
        total = self.trainer.max_steps if self._trainer is not None else 0
        factor = functools.partial(
            lr_factor, warmup=cfg.warmup_steps, total=total, schedule=cfg.lr_schedule, min_ratio=cfg.min_lr_ratio
        )
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def _fused_adamw(cfg: TrainConfig, device: torch.device, precision: str) -> bool:
    """Whether the optimiser (AdamW or Adam) runs fused: ``train.fused_adamw``, or on CUDA when unset; never with
    16-mixed's gradient scaler."""
    wanted = cfg.fused_adamw
    if precision == "16-mixed":
        if wanted:
            raise InvalidConfigError(
                "train.fused_adamw=true with precision 16-mixed: the fused step unscales gradients itself, after "
                "ladd has clipped them; use bf16-mixed or train.fused_adamw=false"
            )
        return False
    return device.type == "cuda" if wanted is None else bool(wanted)


def _precision(requested: str) -> str:
    return resolve_precision(requested, "cuda" if torch.cuda.is_available() else "cpu")


class _Hardware:
    """The processes and devices of a run, resolved by Lightning before any process is launched."""

    def __init__(self, train_cfg: TrainConfig) -> None:
        self.name = train_cfg.strategy
        self.arguments = {
            "accelerator": train_cfg.accelerator,
            "devices": train_cfg.devices,
            "num_nodes": train_cfg.num_nodes,
            "precision": _precision(train_cfg.precision),
        }
        # Under SLURM ladd stops on the requeue signal itself (`stopping`), writing its own checkpoint where a
        # rerun looks for it: Lightning neither requeues nor writes or resumes its hpc_ckpt files.
        self.cluster: list[Any] = [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []
        try:
            with _quiet_lightning():
                probe = L.Trainer(
                    **self.arguments,
                    strategy=self.name,
                    plugins=self.cluster,
                    logger=False,
                    enable_checkpointing=False,
                    enable_progress_bar=False,
                )
        except (MisconfigurationException, ValueError) as error:
            raise InvalidConfigError(
                f"train.accelerator={train_cfg.accelerator}, devices={train_cfg.devices}, strategy={self.name}: "
                f"{first_line(error)}"
            ) from None
        if not isinstance(probe.strategy, (DDPStrategy, SingleDeviceStrategy)):
            raise InvalidConfigError(
                f"train.strategy={self.name}: ladd trains with data parallelism (DDP) only, because the EMA of the "
                f"weights (Lightning's WeightAveraging) needs whole parameters on every rank; use train.strategy=ddp"
            )
        self.world, self.rank, self.device = probe.world_size, probe.global_rank, probe.strategy.root_device

    def trainer_arguments(self) -> dict[str, Any]:
        """Arguments of one stage's Trainer.

        Plain DDP runs without ``find_unused_parameters``: each stage trains only the parameters its loss
        reaches (``LaddModule.setup``), so there are none to search for.
        """
        return {**self.arguments, "strategy": self.name, "plugins": [*self.cluster, _AtomicCheckpointIO()]}


@contextmanager
def _quiet_lightning() -> Iterator[None]:
    """Silence Lightning's device report (printed again by each stage's Trainer)."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def _stage_steps(settings: Settings, stage: StageConfig) -> int:
    """Optimisation steps of one stage: ``trainer.max_steps`` when given, else the stage's own ``steps``."""
    max_steps = settings.trainer.max_steps
    return stage.steps if max_steps is None else max_steps


def train(
    cfg: Settings | Mapping[str, Any], run_dir: str | Path, registry: Registry, allow_changes: bool = False
) -> Experiment:
    """Train an experiment through all its stages, resuming from run_dir's checkpoints when there are any.

    Checks the config and the run folder before writing anything (``runs.RunFolder``; ``allow_changes``
    continues a run in progress with changed settings, recording the change), then writes the resolved
    config, the component origins, ``metrics.csv`` and the final EMA weights. With several processes
    (devices x nodes) every rank runs this function; global rank 0 checks, locks and writes the folder.
    ``cfg``: settings checked where the command started, or a plain config, checked here.
    """
    run_dir = Path(run_dir)
    quiet_lightning_notices()
    # the saved config names the folder it lives in
    settings = dataclasses.replace(cfg if isinstance(cfg, Settings) else checked(cfg), run_dir=str(run_dir))
    hardware = _Hardware(settings.train)
    with stopping_on_signals():
        try:
            return _train_checked(settings, run_dir, hardware, registry, allow_changes)
        except Stopped as stop:
            raise stop.at(
                _resume_point(run_dir, len(settings.train.stages_to_run())), quiet=hardware.rank != 0
            ) from None


def _train_checked(
    settings: Settings, run_dir: Path, hardware: _Hardware, registry: Registry, allow_changes: bool
) -> Experiment:
    """:func:`train` once the config is checked: check the folder and the saved state, claim the folder, train."""
    train_cfg, plain = settings.train, settings.plain()
    world, main = hardware.world, hardware.rank == 0
    if train_cfg.batch_size % world:
        raise InvalidConfigError(
            f"train.batch_size={train_cfg.batch_size} is the global batch and must split evenly over "
            f"{world} processes (train.devices x train.num_nodes)"
        )
    if world > 1:
        # Components built below may read it (the VQ codebook sync): Lightning sets it only when it launches
        # the ranks itself, and only once it does; SLURM never does.
        os.environ["WORLD_SIZE"] = str(world)
    folder = RunFolder(run_dir)
    if main:
        folder.check(plain, allow_changes)
    L.seed_everything(settings.seed, workers=True, verbose=False)
    experiment = build_experiment(settings, registry)
    # every process, before any joins the others: one prepares the data (tokenises, on first use) while the
    # others wait for it on the file system, so no process group setup times out meanwhile
    prepare(experiment.dataset, ["train"])
    if train_cfg.init_from is not None:
        _warm_start(experiment, train_cfg.init_from, settings, run_dir, registry, main)
    if main:
        # damaged or unfitting saved state, a foreign metrics file, or data that cannot give a first batch:
        # all refused before anything is written
        _check_saved_state(experiment.model, run_dir, settings)
        read_metrics(run_dir / METRICS_FILE)
        value_bytes = _VALUE_BYTES.get(hardware.arguments["precision"], 2)
        check_fits(experiment.model, train_cfg.batch_size // world, value_bytes, hardware.device, "train.batch_size")
        first_batch(experiment.dataset, train_cfg.batch_size, settings.seed)  # it allocates: after the size check
    with folder.claim(plain, allow_changes) if main else nullcontext():
        if main:
            write_text(run_dir / COMPONENTS_FILE, json.dumps(experiment.origins(), indent=2))
        return _train_stages(experiment, settings, run_dir, hardware, registry)


def _warm_start(
    experiment: Experiment, source: str, settings: Settings, run_dir: Path, registry: Registry, main: bool
) -> None:
    """``train.init_from`` (``source``) for a run that begins (every process loads it; the main one prints the
    table); a run with saved state resumes from it instead, without reading the source again."""
    stages = range(1, len(settings.train.stages_to_run()) + 1)
    saved = [run_dir / "checkpoints" / f"stage{i}" / name for i in stages for name in (STAGE_WEIGHTS, LAST_CHECKPOINT)]
    if any(path.is_file() for path in saved):
        if main:
            print(f"resuming {run_dir}: train.init_from ({source}) started it and is not read again", flush=True)
        return
    report = warm_start(experiment.model, experiment.dataset, source, registry)
    if main:
        print(report.table(), flush=True)


def _check_saved_state(model: DiffusionModel, run_dir: Path, settings: Settings) -> None:
    """Every stage's saved weights or checkpoint is intact, fits ``model`` and is within the stage's steps.

    Checked before the run writes anything.
    """
    for index, (name, stage) in enumerate(settings.train.stages_to_run().items(), start=1):
        stage_dir = run_dir / "checkpoints" / f"stage{index}"
        final, last = stage_dir / STAGE_WEIGHTS, stage_dir / LAST_CHECKPOINT
        if final.is_file():
            tensors = verify_weights(final)
            check_dtypes(model, tensors, final)
            check_shapes(model, {name: tuple(tensor.shape) for name, tensor in tensors.items()}, final)
        elif last.is_file():
            check_checkpoint(last)
            checkpoint = _read_checkpoint(last)
            # LaddModule holds the model as its attribute `model`
            state, step = checkpoint["state_dict"], checkpoint["global_step"]
            check_shapes(
                model, {name.removeprefix("model."): tuple(tensor.shape) for name, tensor in state.items()}, last
            )
            steps = _stage_steps(settings, stage)
            if step > steps:  # Lightning would take the stage for finished and keep weights of more steps
                overridden = settings.trainer.max_steps is not None
                key = "trainer.max_steps" if overridden else f"train.stages.{name}.steps"
                raise LaddError(
                    f"cannot resume from {last}: it is at step {step}, past the {steps} steps of stage {index} "
                    f"({key}={steps}); continue it with {key}={step} or more, or delete it to restart the stage"
                )
            logged = (checkpoint.get("callbacks") or {}).get(MetricsFile.STATE_KEY, {}).get("logged")
            if logged is not None:
                check_logged_through(run_dir / METRICS_FILE, tuple(logged), last)


def _read_checkpoint(last: Path) -> dict[str, Any]:
    """A stage checkpoint holding (EMA) weights and the step it was written at; a file without them is refused."""
    checkpoint = torch.load(last, map_location="cpu", weights_only=True, mmap=True)
    state = checkpoint.get("state_dict") if isinstance(checkpoint, dict) else None
    step = checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict) or type(step) is not int or step < 0:
        raise CorruptFileError(
            f"cannot resume from {last}: it is not a ladd checkpoint (it lacks weights or a step count); delete it "
            f"to restart this stage from its beginning"
        )
    return checkpoint


def _resume_point(run_dir: Path, stages: int) -> str:
    """Where running the same command again continues: the first unfinished stage, at its checkpoint's step."""
    for index in range(1, stages + 1):
        stage_dir = run_dir / "checkpoints" / f"stage{index}"
        if (stage_dir / STAGE_WEIGHTS).is_file():
            continue
        last = stage_dir / LAST_CHECKPOINT
        try:
            step = _read_checkpoint(last)["global_step"] if last.is_file() else 0
        except Exception:  # noqa: BLE001 - a damaged checkpoint is reported when the command runs again
            return f"in stage {index}"
        return f"at step {step} of stage {index}"
    return f"at the end of stage {stages}"


def _train_stages(
    experiment: Experiment, settings: Settings, run_dir: Path, hardware: _Hardware, registry: Registry
) -> Experiment:
    """Run every stage not finished yet, then save the final EMA weights (global rank 0)."""
    train_cfg, main = settings.train, hardware.rank == 0
    if train_cfg.compile:
        experiment.model.compile_backbones(train_cfg.compile_mode)
    module = LaddModule(experiment.model, train_cfg, settings.seed, experiment.dataset)
    for index, stage in enumerate(train_cfg.stages_to_run().values(), start=1):
        experiment.model.begin_stage(stage)
        module.stage = index
        stage_dir = run_dir / "checkpoints" / f"stage{index}"
        if (stage_dir / STAGE_WEIGHTS).is_file():
            load_weights(experiment.model, stage_dir / STAGE_WEIGHTS)
            continue
        # Seeding per stage makes a stage's start independent of whether the run was interrupted before it.
        L.seed_everything(settings.seed + index, workers=True, verbose=False)
        stream = _Stream(experiment.dataset, train_cfg.batch_size, settings.seed + index, hardware.device)
        trainer = L.Trainer(
            **hardware.trainer_arguments(),
            max_steps=_stage_steps(settings, stage),
            max_time=None if stage.max_minutes is None else timedelta(minutes=stage.max_minutes),
            callbacks=[
                EMAWeights(train_cfg.ema_decay),
                ModelCheckpoint(
                    dirpath=stage_dir,
                    save_last=True,
                    save_top_k=0,
                    every_n_train_steps=train_cfg.checkpoint_every,
                    enable_version_counter=False,  # last.ckpt, also after a resume from one a stop wrote
                ),
                _ResumeState(stream, index, experiment.origins(), registry),
                MetricsFile(run_dir / METRICS_FILE, index, train_cfg.log_every),
                *([progress_bar(index, train_cfg.log_every)] if train_cfg.progress else []),
                _StopOnSignal(stage_dir / LAST_CHECKPOINT),  # last but the checkpoint: a step's state is whole there
            ],
            logger=CSVLogger(run_dir, name="logs", version=f"stage{index}"),
            default_root_dir=stage_dir,  # where Lightning would look for checkpoints of its own: none are there
            log_every_n_steps=train_cfg.log_every,
            enable_progress_bar=train_cfg.progress,
            enable_model_summary=False,
        )
        # A private generator keeps the loader's seed draw off the global RNG, which resuming restores.
        loader = DataLoader(stream, batch_size=None, generator=torch.Generator())
        last = stage_dir / LAST_CHECKPOINT
        with warnings.catch_warnings(), deferred():
            # Lightning warns about modules left in eval mode: that is the frozen encoder, on purpose.
            warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode")
            # Lightning's own use of a torch API that torch deprecates; nothing a user can act on.
            warnings.filterwarnings(
                "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
            )
            trainer.fit(module, loader, ckpt_path=last if last.is_file() else None, weights_only=True)
        experiment.model.cpu()
        if main:
            save_weights(experiment.model, stage_dir / STAGE_WEIGHTS)
    if main:
        save_weights(experiment.model, run_dir / WEIGHTS_FILE)
    return experiment


class _AtomicCheckpointIO(TorchCheckpointIO):
    """Writes a checkpoint under a temporary name beside it and renames it, so a kill never leaves a truncated one.

    The bytes go straight there: Lightning's own writer stages them in ``$TMPDIR`` first, where nothing removes
    what a kill leaves, while a resume clears the run folder's temporary files (``runs.RunFolder.claim``).
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        # serialised first, as Lightning does: the same bytes, and a full disk is an OSError of the file's write
        serialised = io.BytesIO()
        torch.save(checkpoint, serialised)
        with replacing(path) as partial:
            partial.write_bytes(serialised.getbuffer())


class _StopOnSignal(Callback):
    """Stops a stage that a signal asked to stop (``stopping``) at the end of a step, writing its checkpoint there.

    The processes agree on the step: each step ends with one reduction of whether any received a signal (on
    a single process, no work). Lightning's own SIGTERM handling is set aside for the fit: it stops processes
    at different steps and deadlocks DDP when it writes a checkpoint there, and it ends with exit status 0.
    """

    def __init__(self, last: Path) -> None:
        self.last = last

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        reclaim()  # from the handler Lightning installed for this fit
        self._stop_if_asked(trainer, save=False)  # a signal that came while the stage was set up: no step taken

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._stop_if_asked(trainer, save=True)  # the step's EMA update and metrics row are done

    def _stop_if_asked(self, trainer: L.Trainer, save: bool) -> None:
        if trainer.strategy.reduce_boolean_decision(received() is not None, all=False):
            if save:
                trainer.save_checkpoint(self.last, weights_only=False)
            raise Stopped(received() or signal.SIGTERM)


class _ResumeState(Callback):
    """Saves and restores what Lightning does not: RNG states, data position, stage and component origins."""

    def __init__(self, stream: _Stream, stage: int, origins: dict[str, dict[str, Any]], registry: Registry) -> None:
        self.stream, self.stage, self.origins, self.registry = stream, stage, origins, registry

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        checkpoint["ladd"] = {
            "stage": self.stage,
            "components": self.origins,
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("ladd")
        if state is None or state["stage"] != self.stage:
            raise LaddError(
                f"checkpoint of stage {None if state is None else state['stage']} found where stage {self.stage} was "
                "expected"
            )
        check_installed(state["components"], self.registry, f"checkpoint of stage {self.stage}")
        torch.set_rng_state(state["rng_cpu"])
        if state["rng_cuda"]:
            torch.cuda.set_rng_state_all(state["rng_cuda"])
        self.stream.start = checkpoint["global_step"]
