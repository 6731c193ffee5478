"""The generic training loop: Lightning drives any assembled model through its training stages.

``train`` checks the config, the run folder and the saved state before it writes anything, then runs each
stage not finished yet as one Lightning fit of ``module.LaddModule`` on the processes and devices that
``strategy.Hardware`` resolved, resuming where ``resume`` finds a checkpoint.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import warnings
from collections.abc import Iterator, Mapping
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader, IterableDataset

from registry.config.settings import Settings, checked
from registry.distributed import rank, world_size
from registry.engine.adapters import Base, load_state, save_state, save_tensors_of, start
from registry.engine.assembly import Experiment, build_experiment
from registry.engine.batches import check_batch, first_batch, stream_ended
from registry.engine.loading import load_run
from registry.engine.memory import check_fits
from registry.engine.runs import COMPONENTS_FILE, WEIGHTS_FILE, RunFolder, recorded_components
from registry.errors import InvalidConfigError, LaddError
from registry.host.plugin_code import unasked_interrupt
from registry.host.registry import Registry
from registry.interfaces import Dataset, batches_from, device_batches, prepare, rank_batches
from registry.storage.files import write_text
from registry.storage.weights import first_non_finite

from .console import progress_bar, quiet_lightning_notices, without_srun_advice
from .ema import EMAWeights
from .metrics_file import METRICS_FILE, MetricsFile, metrics_columns, read_metrics
from .module import LaddModule
from .records_file import RECORDS_FILE, RecordsFile, read_records
from .resume import (
    ResumeState,
    StopOnSignal,
    check_saved_state,
    has_saved_state,
    is_checkpoint,
    resume_point,
    stage_checkpoint,
)
from .stopping import RESUME_HINT, Stopped, deferred, stopping_on_signals
from .strategy import Hardware, check_layers
from .tracking import Tracking


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
    hardware = Hardware(settings.train)
    with stopping_on_signals():
        try:
            return _train_checked(settings, RunFolder(run_dir), hardware, registry, allow_changes)
        except Stopped as stop:
            where = resume_point(RunFolder(run_dir), len(settings.train.stages_to_run()))
            raise stop.at(where, quiet=hardware.rank != 0) from None


def _train_checked(
    settings: Settings, folder: RunFolder, hardware: Hardware, registry: Registry, allow_changes: bool
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
    if main:
        folder.check(plain, allow_changes)
    tracking = Tracking(train_cfg.logger, folder, settings, main)
    L.seed_everything(settings.seed, workers=True, verbose=False)
    # a resumed run keeps the components it recorded, whatever has been installed since
    experiment = build_experiment(settings, registry, recorded_components(folder.path))
    # every process, before any joins the others: one prepares the data (tokenises, on first use) while the
    # others wait for it on the file system, so no process group setup times out meanwhile
    prepare(experiment.dataset, ["train"])
    base = _start(experiment, settings, folder, registry, main)
    if main and not has_saved_state(folder, len(train_cfg.stages_to_run())):
        _check_starting_weights(experiment)
    check_layers(experiment.model, train_cfg.activation_checkpointing, hardware.shards > 1)
    if main:
        # damaged or unfitting saved state, a foreign metrics file, or data that cannot give a first batch:
        # all refused before anything is written
        columns = metrics_columns(experiment.objective.terms)
        check_saved_state(experiment.model, folder, settings, base, columns)
        read_metrics(folder.path / METRICS_FILE, columns)
        read_records(folder.path / RECORDS_FILE)
        check_fits(hardware.estimate(experiment.model, base, train_cfg.batch_size // world), hardware.device)
        first_batch(experiment.dataset, train_cfg.batch_size, settings.seed)  # it allocates: after the size check
    with folder.claim(plain, allow_changes) if main else nullcontext():
        if main:
            write_text(folder.path / COMPONENTS_FILE, json.dumps(experiment.origins(), indent=2))
        try:
            _train_stages(experiment, settings, folder, hardware, registry, tracking, base)
        except BaseException as error:
            tracking.end("killed" if isinstance(error, Stopped) else "failed")
            raise
        tracking.end("success")
    if (base is not None or hardware.shards > 1) and main:
        # the whole model, adapters merged, out of any shards, the base in its own dtype: as reading the run gives it
        return load_run(folder.path, registry)[0]
    return experiment


def _start(
    experiment: Experiment, settings: Settings, folder: RunFolder, registry: Registry, main: bool
) -> Base | None:
    """Where the run starts: ``train.init_from`` (every process loads it; the main one prints the table) and the
    adapters over the frozen base. A resumed run continues from its checkpoints without reading the source again,
    unless it trains over a frozen base, which its files never hold: that is read again, and checked."""
    source = settings.train.init_from
    resuming = has_saved_state(folder, len(settings.train.stages_to_run()))
    if source is not None and resuming and not settings.train.adapted:
        if main:
            print(f"resuming {folder.path}: train.init_from ({source}) started it and is not read again", flush=True)
        return None
    base, report = start(experiment, settings, registry)
    if main and report is not None:
        again = f"resuming {folder.path}: its frozen base read again from train.init_from ({source})"
        print(again if resuming else report.table(), flush=True)
    return base


class _Interrupts(Callback):
    """Notes a KeyboardInterrupt that ends a stage: code raised it (a Ctrl-C stops training without one), and
    Lightning would end the process for it with no word of where."""

    def __init__(self) -> None:
        self.raised: KeyboardInterrupt | None = None

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt):
            self.raised = exception


def _check_starting_weights(experiment: Experiment) -> None:
    """Refuse to begin from weights holding NaN or inf (a damaged checkpoint a component loads), naming the component
    and the tensor, rather than meet them as a non-finite loss at step 0."""
    name = first_non_finite(experiment.model.state_dict())
    if name is None:
        return
    slot = name.split(".")[0]  # the model holds each component under its slot's name
    chosen = experiment.components.get(slot)
    component = slot if chosen is None else f"{slot} {chosen.name!r}"
    raise LaddError(
        f"{component} holds non-finite values (NaN or inf) in {name} before training: the weights it was built "
        f"from are damaged; replace them (a pretrained model's files), or choose another"
    )


def _train_stages(
    experiment: Experiment,
    settings: Settings,
    folder: RunFolder,
    hardware: Hardware,
    registry: Registry,
    tracking: Tracking,
    base: Base | None,
) -> None:
    """Run every stage not finished yet, then save the final EMA weights (global rank 0)."""
    train_cfg, main = settings.train, hardware.rank == 0
    hardware.prepare(experiment.model, base)
    if train_cfg.compile:
        experiment.model.compile_backbones(train_cfg.compile_mode)
    module = LaddModule(experiment.model, train_cfg, settings.seed, experiment.dataset, base, experiment.objective)
    columns = metrics_columns(experiment.objective.terms)
    stages = list(train_cfg.stages_to_run().values())
    for index, stage in enumerate(stages, start=1):
        experiment.model.begin_stage(stage)
        module.stage = index
        stage_dir, last = folder.stage_dir(index), folder.last_checkpoint(index)
        if folder.stage_weights(index).is_file():
            load_state(experiment.model, base, folder.stage_weights(index), f"run {folder.path}", settings)
            continue
        # Seeding per stage makes a stage's start independent of whether the run was interrupted before it.
        L.seed_everything(settings.seed + index, workers=True, verbose=False)
        stream = _Stream(experiment.dataset, train_cfg.batch_size, settings.seed + index, hardware.device)
        interrupts, stops = _Interrupts(), StopOnSignal(last)
        steps_before = sum(settings.stage_steps(before) for before in stages[: index - 1])
        with without_srun_advice():
            trainer = L.Trainer(
                **hardware.trainer_arguments(),
                max_steps=settings.stage_steps(stage),
                max_time=None if stage.max_minutes is None else timedelta(minutes=stage.max_minutes),
                callbacks=[
                    EMAWeights(train_cfg.ema_decay),
                    stage_checkpoint(stage_dir, train_cfg.checkpoint_every),
                    ResumeState(stream, index, experiment.origins(), registry, base),
                    MetricsFile(folder.path / METRICS_FILE, index, train_cfg.log_every, columns),
                    RecordsFile(folder.path / RECORDS_FILE, index),
                    *([progress_bar(index, train_cfg.log_every)] if train_cfg.progress else []),
                    stops,  # last but the checkpoint: a step's state is whole there
                    interrupts,
                ],
                logger=tracking.stage_logger(index, steps_before),
                default_root_dir=stage_dir,  # where Lightning would look for checkpoints of its own: none are there
                log_every_n_steps=train_cfg.log_every,
                enable_progress_bar=train_cfg.progress,
                enable_model_summary=False,
            )
        # A private generator keeps the loader's seed draw off the global RNG, which resuming restores.
        loader = DataLoader(stream, batch_size=None, generator=torch.Generator())
        with warnings.catch_warnings(), without_srun_advice(), deferred():
            # Lightning warns about modules left in eval mode: that is the frozen encoder, on purpose.
            warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode")
            # Lightning's own use of a torch API that torch deprecates; nothing a user can act on.
            warnings.filterwarnings(
                "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
            )
            try:
                trainer.fit(module, loader, ckpt_path=last if is_checkpoint(last) else None, weights_only=True)
            except SystemExit as exit:  # Lightning's end of a KeyboardInterrupt
                if interrupts.raised is None:
                    raise
                raise LaddError(f"{unasked_interrupt(interrupts.raised)}; {RESUME_HINT}") from exit
        whole = hardware.whole_state(trainer)  # gathered from the shards (on the first process), or None
        if whole is None:
            experiment.model.cpu()
        if main:
            if whole is None:
                save_state(experiment.model, base, folder.stage_weights(index))
            else:
                save_tensors_of(whole, base, folder.stage_weights(index))
        stops.stop_if_asked()
    if main:
        if hardware.shards > 1:  # one stage (``sharding``), whose weights are the run's
            shutil.copyfile(folder.stage_weights(len(stages)), folder.path / WEIGHTS_FILE)
        else:
            save_state(experiment.model, base, folder.path / WEIGHTS_FILE)
