"""The generic training loop: Lightning drives any assembled model through its training stages."""
from __future__ import annotations

import json
import pickle
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, WeightAveraging
from lightning.pytorch.loggers import CSVLogger
from omegaconf import OmegaConf
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model
from torch.optim.swa_utils import get_ema_multi_avg_fn
from torch.utils.data import DataLoader, IterableDataset

from ._registry import Registry
from .assembly import Experiment, build_experiment
from .errors import LaddError
from .interfaces import Dataset
from .model import DiffusionModel

CONFIG_FILE = "config.yaml"
COMPONENTS_FILE = "components.json"
WEIGHTS_FILE = "model.safetensors"


class _Stream(IterableDataset):
    """Full batches from a dataset component's seeded stream, checked before they reach the model."""

    def __init__(self, dataset: Dataset, batch_size: int, seed: int) -> None:
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed

    def __iter__(self) -> Iterator[torch.Tensor]:
        produced = 0
        for batch in self.dataset.batches(self.batch_size, self.seed, "train"):
            check_batch(batch, self.dataset)
            produced += 1
            yield batch
        raise LaddError(
            f"the dataset stream ended after {produced} batch(es); training needs an endless stream "
            f"(a dataset with too few sequences for batch size {self.batch_size}?)"
        )


def check_batch(batch: torch.Tensor, dataset: Dataset) -> None:
    """Refuse batches of the wrong shape or with token ids outside the vocabulary (mask excluded)."""
    if batch.dim() != 2 or batch.shape[1] != dataset.seq_len or batch.dtype != torch.long:
        raise LaddError(
            f"dataset batch has shape {tuple(batch.shape)} and dtype {batch.dtype}; expected "
            f"[batch, {dataset.seq_len}] token ids of dtype torch.int64"
        )
    low, high = int(batch.min()), int(batch.max())
    if low < 0 or high >= dataset.vocab_size:
        bad = low if low < 0 else high
        raise LaddError(
            f"dataset produced token id {bad}, outside the vocabulary 0..{dataset.vocab_size - 1} "
            f"(the mask id {dataset.vocab_size} is reserved for the diffusion process)"
        )


class NonFiniteLossError(LaddError, FloatingPointError):
    """A loss term became NaN or infinite."""


class LaddModule(L.LightningModule):
    """Lightning wrapper: one optimisation step of the model's objective."""

    def __init__(self, model: DiffusionModel, train: dict[str, Any]) -> None:
        super().__init__()
        self.model = model
        self.train_cfg = train

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        terms = self.model.loss(batch)
        if not torch.isfinite(terms["loss"]):
            bad = [name for name, value in terms.items() if name != "loss" and not torch.isfinite(value)]
            raise NonFiniteLossError(
                f"non-finite loss at step {self.global_step}: offending term(s) {bad or ['loss']} "
                f"({ {k: float(v.detach()) for k, v in terms.items()} }); the run stops rather than skip or zero it"
            )
        self.log_dict({f"train/{k}": v.detach() for k, v in terms.items()}, prog_bar=True, on_step=True)
        return terms["loss"]

    def configure_optimizers(self) -> Any:
        cfg = self.train_cfg
        params = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(
            params,
            lr=cfg["lr"],
            betas=tuple(cfg["betas"]),
            weight_decay=cfg["weight_decay"],
        )
        warmup = max(1, int(cfg["warmup_steps"]))
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def _precision(requested: str) -> str:
    if requested != "auto":
        return requested
    return "bf16-mixed" if torch.cuda.is_available() else "32-true"


def train(cfg: Any, run_dir: str | Path, registry: Registry) -> Experiment:
    """Train an experiment through all its stages; write config, component origins and EMA weights to run_dir."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    plain = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)
    OmegaConf.save(OmegaConf.create(plain), run_dir / CONFIG_FILE)
    L.seed_everything(plain["seed"], workers=True, verbose=False)
    experiment = build_experiment(plain, registry)
    (run_dir / COMPONENTS_FILE).write_text(json.dumps(experiment.origins(), indent=2))
    train_cfg = plain["train"]
    module = LaddModule(experiment.model, train_cfg)
    for index, stage in enumerate(train_cfg["stages"], start=1):
        if stage["freeze_encoder"]:
            experiment.model.freeze_encoder()
        experiment.model.objective.lambda_latent = stage["lambda_latent"]
        trainer = L.Trainer(
            max_steps=stage["steps"],
            max_time=None if stage.get("max_minutes") is None else timedelta(minutes=stage["max_minutes"]),
            accelerator=train_cfg["accelerator"],
            devices=train_cfg["devices"],
            strategy=train_cfg["strategy"],
            precision=_precision(train_cfg["precision"]),
            gradient_clip_val=train_cfg["grad_clip"],
            callbacks=[
                WeightAveraging(multi_avg_fn=get_ema_multi_avg_fn(train_cfg["ema_decay"]), use_buffers=False),
                ModelCheckpoint(dirpath=run_dir / "checkpoints" / f"stage{index}", save_last=True),
            ],
            logger=CSVLogger(run_dir, name="logs", version=f"stage{index}"),
            log_every_n_steps=train_cfg["log_every"],
            enable_progress_bar=train_cfg["progress"],
            enable_model_summary=False,
        )
        loader = DataLoader(_Stream(experiment.dataset, train_cfg["batch_size"], plain["seed"] + index), batch_size=None)
        with warnings.catch_warnings():
            # Lightning warns about modules left in eval mode: that is the frozen encoder, on purpose.
            warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode")
            trainer.fit(module, loader)
    save_model(experiment.model.cpu(), run_dir / WEIGHTS_FILE)
    return experiment


def load_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Load safetensors or a tensors-only torch file into ``model``; anything needing arbitrary unpickling is refused."""
    path = Path(path)
    if path.suffix == ".safetensors":
        try:
            load_model(model, path)
        except (SafetensorError, RuntimeError) as error:
            raise LaddError(f"cannot load {path} into this model (corrupt file, or weights of another configuration): {error}") from None
        return
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise LaddError(
            f"refusing to load {path}: it holds objects other than tensors, and unpickling them can run code. "
            f"If you trust its author, convert it once to safetensors with: python -c \"import torch; "
            f"from safetensors.torch import save_file; s = torch.load('{path}', weights_only=False); "
            f"s = s.get('state_dict', s); save_file({{k: v.contiguous() for k, v in s.items()}}, "
            f"'{path.with_suffix('.safetensors')}')\""
        ) from None
    model.load_state_dict(state.get("state_dict", state))


def training_key(cfg: dict[str, Any]) -> str:
    """What determines the trained weights: the config without labels, sampler and evaluation settings."""
    return json.dumps({k: v for k, v in cfg.items() if k not in ("method", "run_dir", "sampler", "eval")}, sort_keys=True)


def load_run(run_dir: str | Path, registry: Registry) -> tuple[Experiment, dict[str, Any]]:
    """Rebuild a trained experiment from its run folder (config + EMA weights)."""
    run_dir = Path(run_dir)
    config_path, weights_path = run_dir / CONFIG_FILE, run_dir / WEIGHTS_FILE
    if not config_path.is_file() or not weights_path.is_file():
        raise LaddError(f"{run_dir} is not a finished ladd run (expected {CONFIG_FILE} and {WEIGHTS_FILE} inside)")
    plain = OmegaConf.to_container(OmegaConf.load(config_path), resolve=False)  # saved resolved; never evaluate
    experiment = build_experiment(plain, registry)
    load_weights(experiment.model, weights_path)
    experiment.model.eval()
    return experiment, plain
