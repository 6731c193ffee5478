"""Training part of a network over a frozen base: LoRA adapters (through peft) and parameters frozen by name.

``train.lora.rank > 0`` adds low-rank adapters to the linear layers (and embeddings) that ``train.lora.targets``
names, by default those each backbone declares (``Backbone.adapter_targets``), and freezes every parameter but the
adapters and those ``train.lora.full`` names; ``train.freeze`` freezes parameters by name, with or without adapters.
What stays frozen is the run's *base*. It is never written into the run's files: checkpoints and weights hold only
what trains (the adapters, the parameters trained in full, the buffers), and the base is made again where the run
started (``train.init_from``, else the seeded initialisation) whenever the run resumes or is read, and checked
against the SHA-256 of its tensors that the run recorded when it began (``Base.digest``).

Patterns are dotted names whose parts match a run of consecutive parts of a name (glob characters within a
part, ``*`` for any one part): ``attn.q`` names every module ``...attn.q``, ``blocks.*.ff`` every feed-forward
of a block, ``encoder`` everything under a module of that name.
"""
from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy
import torch
from torch import Tensor, nn

from registry.config.settings import LoraConfig, Settings, TrainConfig
from registry.errors import IncompatibleComponentsError, InvalidConfigError, LaddError, MissingResourceError
from registry.host.registry import Registry
from registry.interfaces import Backbone
from registry.storage.weights import (
    check_dtypes,
    check_finite,
    check_shapes,
    load_weights,
    read_tensors,
    save_tensors,
    save_weights,
    tensors_digest,
)

from .assembly import Experiment
from .memory import GIB, available_bytes
from .warm_start import WarmStart, warm_start

#: the metadata entry of a weights file that holds only what trains over a base: the base's SHA-256
BASE_KEY = "ladd.base_sha256"
#: the modules LoRA adapts (peft's LoRA layers for them)
ADAPTABLE = (nn.Linear, nn.Embedding)


def matches(name: str, pattern: str) -> bool:
    """Whether ``pattern``'s dotted parts match a run of consecutive parts of the dotted ``name``."""
    parts, wanted = name.split("."), pattern.split(".")
    return any(
        all(fnmatchcase(part, want) for part, want in zip(parts[start : start + len(wanted)], wanted, strict=True))
        for start in range(len(parts) - len(wanted) + 1)
    )


@dataclass(frozen=True)
class Base:
    """The frozen part of a run's network, known by the SHA-256 of its tensors as the run started."""

    digest: str  # of the frozen parameters (names before adapters, dtypes, shapes, values)
    parameters: int  # frozen values
    frozen: frozenset[str]  # the frozen parameters' names, adapters in place
    # the model's state entries a run trains and saves (adapters, trained parameters, buffers), a tied one once
    trained: frozenset[str]
    adapted: int  # modules given adapters (0: parameters frozen by name alone)

    def record(self) -> dict[str, Any]:
        """What a run folder and an exported adapter record of the base."""
        return {"sha256": self.digest, "parameters": self.parameters, "adapted_modules": self.adapted}

    def check(self, recorded: str, what: str, fix: str) -> None:
        """Refuse when ``recorded`` (the digest ``what`` was trained over) is not this base's."""
        check_base(recorded, self.digest, what, fix)


def check_base(recorded: str, digest: str, what: str, fix: str) -> None:
    """Refuse when the base ``what`` was trained over (``recorded``) is not the one here (``digest``)."""
    if recorded != digest:
        raise LaddError(
            f"{what} was trained over a base whose frozen weights have SHA-256 {recorded[:16]}..., but the base here "
            f"has {digest[:16]}... (other weights, or another model); {fix}"
        )


def seed_for_building(seed: int) -> None:
    """Seed every generator a component's initialisation may draw from, as training does before it builds."""
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def start(experiment: Experiment, settings: Settings, registry: Registry) -> tuple[Base | None, WarmStart | None]:
    """Where a run starts, in an experiment built after :func:`seed_for_building`: ``train.init_from``'s weights
    (when set), then the adapters over the frozen base (None when everything trains)."""
    source = settings.train.init_from
    report = None if source is None else warm_start(experiment.model, experiment.dataset, source, registry)
    return adapt(experiment.model, settings.train), report


def adapt(
    model: nn.Module, train: TrainConfig, expected: tuple[str, str, str] | None = None, identify: bool = True
) -> Base | None:
    """Freeze what ``train`` leaves untrained and add its LoRA adapters, in place; None when everything trains.

    ``expected``: (digest, what, fix), the base that what is loaded onto it was trained over: checked before any
    adapter is added. Parameters that do not train for other reasons (a frozen pretrained encoder) keep doing so.
    ``identify``: False for a model without values (on the meta device): the base's digest is left empty.
    """
    if not train.adapted:
        return None
    if train.lora.rank:
        _peft()  # a missing extra is said before anything else
    parameters = dict(model.named_parameters())
    by_name = _named(parameters, train.freeze, "train.freeze")
    full = _named(parameters, train.lora.full, "train.lora.full")
    if by_name & full:
        raise InvalidConfigError(
            f"train.freeze and train.lora.full both name {sorted(by_name & full)[0]}: a parameter is frozen or "
            f"trained in full, not both"
        )
    frozen = (set(parameters) - full if train.lora.rank else set()) | by_name
    digest = tensors_digest({name: parameters[name].detach() for name in frozen}) if identify else ""
    if expected is not None:
        check_base(expected[0], digest, *expected[1:])
    frozen_ids = {id(parameters[name]) for name in frozen}
    trains = {id(p): p.requires_grad for p in parameters.values()}
    targets = _targets(model, train.lora) if train.lora.rank else []
    if targets:
        device = next(model.parameters()).device
        if device.type != "meta":
            _check_adapter_size(model, train.lora.rank, targets, device)
        with torch.device(device) if device.type == "meta" else contextlib.nullcontext():  # a dry run's: no values
            _inject(model, train.lora, targets)
    for parameter in model.parameters():  # peft marks every parameter but its adapters untrained
        parameter.requires_grad_(id(parameter) not in frozen_ids and trains.get(id(parameter), True))
    state: dict[int, str] = {}  # each tensor under its first name: a tied weight is saved once
    for name, tensor in model.state_dict(keep_vars=True).items():
        state.setdefault(id(tensor), name)
    return Base(
        digest=digest,
        parameters=sum(parameters[name].numel() for name in frozen),
        frozen=frozenset(name for key, name in state.items() if key in frozen_ids),
        trained=frozenset(name for key, name in state.items() if key not in frozen_ids),
        adapted=len(targets),
    )


def _named(names: Iterable[str], patterns: list[str], key: str, what: str = "parameter") -> set[str]:
    """The ``names`` that ``patterns`` name (of ``what``: parameters, or modules), each pattern naming at least one."""
    names = list(names)
    chosen: set[str] = set()
    for index, pattern in enumerate(patterns):
        found = {name for name in names if matches(name, pattern)}
        if not found:
            raise InvalidConfigError(
                f"{key}[{index}]={pattern!r} matches no {what} of the model; they are named like {_examples(names)}"
            )
        chosen |= found
    return chosen


def _targets(model: nn.Module, lora: LoraConfig) -> list[str]:
    """The names of the modules to adapt: those ``lora.targets`` names, else each backbone's own targets."""
    adaptable = [name for name, module in model.named_modules() if isinstance(module, ADAPTABLE)]
    if lora.targets is not None:
        return sorted(_named(adaptable, lora.targets, "train.lora.targets", "linear layer or embedding"))
    chosen: set[str] = set()
    for path, module in model.named_modules():
        if not isinstance(module, Backbone):
            continue
        inside = [name.removeprefix(f"{path}.") for name in adaptable if name.startswith(f"{path}.")]
        for pattern in module.adapter_targets():
            found = {f"{path}.{name}" for name in inside if matches(name, pattern)}
            if not found:
                raise IncompatibleComponentsError(
                    f"the {path} declares the adapter target {pattern!r} (Backbone.adapter_targets), which matches "
                    f"none of its linear layers ({_examples(inside)}); set train.lora.targets"
                )
            chosen |= found
    if not chosen:
        raise InvalidConfigError(
            f"train.lora.rank={lora.rank} but train.lora.targets is unset and no backbone declares adapter targets "
            f"(Backbone.adapter_targets): name the modules to adapt, e.g. train.lora.targets=[...], among "
            f"{_examples(adaptable)}"
        )
    return sorted(chosen)


def _examples(names: Iterable[str], count: int = 6) -> str:
    """A few of ``names`` with their block numbers written N, each once."""
    seen = list(dict.fromkeys(re.sub(r"(?<=\.)\d+(?=\.|$)", "N", name) for name in names))
    return ", ".join(seen[:count]) + (", ..." if len(seen) > count else "") if seen else "(none)"


def _check_adapter_size(model: nn.Module, rank: int, targets: list[str], device: torch.device) -> None:
    """Refuse adapters whose values alone exceed the free memory of ``device``, before any is allocated."""
    values = 0
    for name in targets:
        module = model.get_submodule(name)
        if isinstance(module, nn.Linear):
            values += rank * (module.in_features + module.out_features)
        elif isinstance(module, nn.Embedding):
            values += rank * (module.num_embeddings + module.embedding_dim)
    size, free = values * torch.get_default_dtype().itemsize, available_bytes(device)
    if free is not None and size > free:
        raise InvalidConfigError(
            f"train.lora.rank={rank} gives the {len(targets)} adapted modules {values:,} values ({size / GIB:.1f} "
            f"GiB before their gradients and optimiser state), more than the {free / GIB:.1f} GiB {device.type} has "
            f"free: choose a smaller train.lora.rank (ladd train --dry-run prints one step's memory)"
        )


def _inject(model: nn.Module, lora: LoraConfig, targets: list[str]) -> None:
    """peft's LoRA layers in place of the ``targets`` (full module names)."""
    peft = _peft()
    config = peft.LoraConfig(
        r=lora.rank,
        lora_alpha=lora.rank if lora.alpha is None else lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        bias="none",
    )
    peft.inject_adapter_in_model(config, model)


def _peft() -> Any:
    try:
        import peft
    except ImportError:
        raise MissingResourceError(
            "train.lora needs peft, which is not installed: pip install 'ladd[lora]'"
        ) from None
    return peft


def merge_adapters(model: nn.Module) -> int:
    """Fold every LoRA adapter into the layer it adapts, in place (the layers get back their own names and modules);
    the number merged."""
    if not any("lora_" in name for name, _ in model.named_parameters()):
        return 0
    from peft.tuners.lora import LoraLayer

    merged = 0
    for name, module in list(model.named_modules()):
        if isinstance(module, LoraLayer):
            module.merge(safe_merge=True)
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, module.get_base_layer())
            merged += 1
    return merged


def cast_base(model: nn.Module, base: Base, dtype: torch.dtype) -> None:
    """Hold the frozen parameters in ``dtype`` (what trains keeps its own)."""
    for name, parameter in model.named_parameters():
        if name in base.frozen:
            parameter.data = parameter.data.to(dtype)


def save_state(model: nn.Module, base: Base | None, path: str | Path) -> Path:
    """A run's weights: the whole model's, or over a frozen base what trains alone."""
    return save_weights(model, path) if base is None else save_adapted(model, base, path)


def save_tensors_of(tensors: dict[str, Tensor], base: Base | None, path: str | Path) -> Path:
    """A run's weights given as tensors (gathered from shards): all of them, or over a frozen base what trains."""
    if base is None:
        return save_tensors(tensors, path, {})
    return save_tensors({name: tensors[name] for name in sorted(base.trained)}, path, {BASE_KEY: base.digest})


def load_state(model: nn.Module, base: Base | None, path: str | Path, what: str, settings: Settings) -> None:
    """Load what :func:`save_state` wrote for a run of ``settings`` (``what`` names the run)."""
    if base is None:
        load_weights(model, path)
    else:
        load_adapted(model, base, path, what, base_fix(settings))


def base_fix(settings: Settings) -> str:
    """What makes a run's base again: the source it started from, or the versions that initialised it."""
    source = settings.train.init_from
    if source is not None:
        return f"train.init_from ({source}) must hold the weights the run began with: restore them"
    return (
        "the base is the seeded initialisation, which other versions of torch or of the components may draw "
        "differently: use the versions the run was trained with"
    )


def trained_state(model: nn.Module, base: Base) -> dict[str, Tensor]:
    """The entries of ``model``'s state that a run over ``base`` saves."""
    return {name: tensor for name, tensor in model.state_dict().items() if name in base.trained}


def save_adapted(model: nn.Module, base: Base, path: str | Path) -> Path:
    """What trains over ``base`` as safetensors naming the base's digest, written atomically."""
    tensors = {name: tensor.detach().contiguous() for name, tensor in trained_state(model, base).items()}
    return save_tensors(tensors, path, {BASE_KEY: base.digest})


def load_adapted(model: nn.Module, base: Base, path: str | Path, what: str, fix: str) -> None:
    """Load what trains over ``base`` from ``path``: every entry, of this base (``what`` names the file's owner)."""
    path = Path(path)
    tensors, metadata = read_tensors(path)
    recorded = metadata.get(BASE_KEY)
    if recorded is None:
        raise LaddError(f"{path} holds whole weights, not what trains over a frozen base; {fix}")
    base.check(recorded, what, fix)
    missing, extra = sorted(base.trained - set(tensors)), sorted(set(tensors) - base.trained)
    if missing or extra:
        problem = f"lacks {missing[0]}" if missing else f"holds {extra[0]}, which does not train here"
        raise LaddError(f"{path} {problem}: it was written with other adapter settings; {fix}")
    check_dtypes(model, tensors, path)
    check_shapes(model, {name: tuple(tensor.shape) for name, tensor in tensors.items()}, path)
    check_finite(tensors, path)
    model.load_state_dict(tensors, strict=False)
