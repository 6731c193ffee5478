"""One optimisation step of a model's objective under Lightning: ``LaddModule``, its optimiser and its loss checks.

The module trains the parameters that require gradients; whatever decides which those are (a stage's
trainable set here, adapters and frozen parameters in ``engine.adapters``) acts on the model before the optimiser
is built. Over a frozen base, the module's state (what checkpoints hold) is what trains alone.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch

from registry.config.lr_schedules import lr_factor
from registry.config.settings import OPTIMIZERS, TrainConfig
from registry.distributed import Shard, mixed_seed, step_seed
from registry.engine.adapters import Base
from registry.engine.model import DiffusionModel
from registry.engine.objectives import objective_of
from registry.errors import InvalidConfigError, LaddError
from registry.interfaces import Dataset, Objective, ObjectiveStep, context_of, padding_of

from .strategy import precision
from .trainable import unreached_parameters


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
    """Lightning wrapper: one optimisation step of the objective on this process's share of the global batch."""

    #: where a checkpoint keeps the objective's state (``Objective.state_dict``)
    OBJECTIVE_KEY = "ladd_objective"

    def __init__(
        self, model: DiffusionModel, train: TrainConfig, seed: int, dataset: Dataset | None = None,
        base: Base | None = None, objective: Objective | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.objective = objective_of(objective)  # the model's own bound unless the loss slot names another
        self.train_cfg = train
        self.seed = seed
        self.dataset = dataset  # its padding and context (``Dataset.padding``, ``context``) stay out of the loss
        self.base = base  # the frozen weights, never in the module's state
        self.strict_loading = base is None  # a sharded load fills the state without the base; it checks nothing else
        self.stage = 1
        self.resting: list[torch.nn.Parameter] = []  # parameters this stage's loss does not reach
        self.watch = _FiniteWatch()

    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        """The module's state, over a frozen base what trains alone: what a checkpoint holds.

        Called by a wrapper (a prefix given: FSDP, which renames the entries afterwards) the state is whole, and the
        strategy leaves the base out (``sharding``).
        """
        state = super().state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)
        if self.base is not None and not prefix:
            for name in [name for name in state if name.removeprefix("model.") not in self.base.trained]:
                del state[name]
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Load a checkpoint's state: over a frozen base, exactly what trains (the base is the module's own)."""
        if self.base is None:
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        names = {name.removeprefix("model.") for name in state_dict}
        if names != self.base.trained:
            difference = sorted(names ^ self.base.trained)[0]
            raise LaddError(
                f"the checkpoint's state {'lacks' if difference not in names else 'holds'} {difference}: it was "
                f"written with other adapter settings (train.lora, train.freeze); train into a new run_dir"
            )
        return super().load_state_dict(state_dict, strict=False, assign=assign)

    def setup(self, stage: str) -> None:
        # Here the processes are joined and the device is known, and neither DDP nor the optimiser has seen
        # the parameters yet: the stage trains exactly what its loss reaches, so DDP needs no search for the rest.
        self.model.to(self.trainer.strategy.root_device)
        with self.trainer.precision_plugin.forward_context():  # as a step runs: frozen weights may be in bfloat16
            self.resting = unreached_parameters(self.model, self.objective)
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
        seed = objective_seed(self.seed, self.stage, self.global_step)
        step = ObjectiveStep(self.stage, self.global_step, seed, shard, padding, context)
        terms = self.objective.loss(self.model, batch, step)
        # Every rank holds an equal share, so the mean over ranks is the global batch's mean (a NaN anywhere stops all).
        names = list(terms)
        means = self.trainer.strategy.reduce(torch.stack([terms[k].detach() for k in names]), reduce_op="mean")
        self.last_terms = dict(zip(names, means, strict=True))
        self.watch.record(names, means, self.global_step)
        # Lightning writes its log at the steps that complete a multiple of log_every; handing it the terms at the
        # others costs about a millisecond a step. No progress bar: it would read every term back at every step.
        # "step" numbers the row as metrics.csv does: the steps done, this one included (Lightning's count is 0-based).
        if (self.global_step + 1) % self.train_cfg.log_every == 0:
            self.log_dict({**self._logged_terms(), "step": float(self.global_step + 1)}, on_step=True)
        return terms["loss"]

    def _logged_terms(self) -> dict[str, Any]:
        return {f"train/{k}": v for k, v in self.last_terms.items()}

    def on_train_start(self) -> None:
        self.watch = _FiniteWatch()  # a stage of its own: its terms may differ from the last stage's

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # The host reads the loss only where it logs it (and before any checkpoint or final weights are written),
        # so the device never waits for it; a step past a bad one can have run, but nothing it made is kept.
        if self.global_step % self.train_cfg.log_every == 0:
            self.watch.check()
        elif self.global_step == self.trainer.max_steps:  # a stage's last step is logged wherever it falls
            self.watch.check()
            for logger in self.loggers:
                logger.log_metrics({k: float(v) for k, v in self._logged_terms().items()}, step=self.global_step)
                logger.save()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.watch.check()
        state = self.objective.state_dict()
        if state:
            checkpoint[self.OBJECTIVE_KEY] = state

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.objective.load_state_dict(checkpoint.get(self.OBJECTIVE_KEY, {}))

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
            fused=_fused_adamw(cfg, params[0].device, precision(cfg.precision)),
        )
        # a stage's length is its Trainer's; a module used outside a Trainer (benchmarks) has none, and needs none when
        # constant
        total = self.trainer.max_steps if self._trainer is not None else 0
        factor = functools.partial(
            lr_factor, warmup=cfg.warmup_steps, total=total, schedule=cfg.lr_schedule, min_ratio=cfg.min_lr_ratio
        )
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def objective_seed(seed: int, stage: int, step: int) -> int:
    """The seed of a step's objective (``ObjectiveStep.seed``): a function of the run's seed, the stage and the step,
    apart from the stream the shards' noise draws from."""
    return mixed_seed("objective", seed, stage, step)


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
