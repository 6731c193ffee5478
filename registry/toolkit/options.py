"""Options shared by components' config dataclasses (torch-free, so listing components imports no model code)."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from registry.errors import InvalidConfigError
from registry.ranges import check_choice, check_range

__all__ = [
    "CACHES",
    "CONFIDENCE_SCHEDULES",
    "LOCAL_PATH",
    "REFERENCE",
    "REMASKING",
    "WEIGHTINGS",
    "ConfidenceConfig",
    "Reference",
    "TransformerConfig",
    "check_weighting",
    "local_path_options",
    "references",
    "refers_to",
]

#: Field metadata of an option naming a place on this machine that the component writes to (a cache folder),
#: as in ``cache_dir: str | None = field(default=None, metadata=LOCAL_PATH)``. A config read back from a run
#: folder or an export never sets such an option (it takes its default), so a shared file cannot choose where
#: ladd writes on the machine that reads it.
LOCAL_PATH = {"ladd.local_path": True}

#: The field metadata key of an option that names another registered component (:func:`refers_to`).
REFERENCE = "ladd.reference"


@dataclass(frozen=True)
class Reference:
    """An option naming another registered component, which ladd resolves, builds and records (:func:`refers_to`)."""

    kind: str  # the kind of the component it names
    options: str | None = None  # the option (a dict) holding that component's options
    interface: str | None = None  # a class of registry.interfaces the component must be (None: its kind's)
    inherits: tuple[str, ...] = ()  # options of the naming component passed on where the named one has them unset


def refers_to(
    kind: str, *, options: str | None = None, interface: str | None = None, inherits: Iterable[str] = (),
    help: str | None = None,
) -> dict[str, Any]:
    """Field metadata of an option naming a registered component of ``kind`` (bare or ``PLUGIN:NAME``).

    ``token_decoder: str = field(default="ancestral", metadata=refers_to("sampler", options="token_decoder_options",
    interface="TokenDecoder"))``: ladd looks the name up as it looks up a config's components, builds the component
    from the dict option ``options`` (checked against its config), passes it to the factory as the keyword of the
    option's name (``factory(config, token_decoder=...)``) and records it beside its owner in ``components.json``.
    ``inherits``: options of this component given to the named one when it has them and leaves them unset.
    """
    metadata: dict[str, Any] = {REFERENCE: Reference(kind, options, interface, tuple(inherits))}
    if help is not None:
        metadata["help"] = help
    return metadata


def references(config: type | None) -> dict[str, Reference]:
    """The options of a config dataclass that name other components (:func:`refers_to`), by option name."""
    if config is None:
        return {}
    return {f.name: f.metadata[REFERENCE] for f in dataclasses.fields(config) if REFERENCE in f.metadata}


#: Loss weightings of a process: "elbo", T times the discrete-time ELBO weight of the step; "constant", 1.
WEIGHTINGS = ("elbo", "constant")

#: How confidence decoding scores a proposal: its probability (LLaDA; Dream's maskgit_plus), a uniform draw (LLaDA's
#: random), the top-1 minus top-2 probability (Dream's topk_margin), exp(-entropy) of the position's distribution (in
#: (0, 1]; under Dream's schedule Dream's own -entropy); origin (Dream's schedule only): no order, every masked position
#: committed with the chance 1 - s/t of its time grid
REMASKING = ("low_confidence", "random", "margin", "entropy", "origin")
#: How many proposals a confidence step commits: LLaDA's counts (a block's masked count spread evenly over its steps),
#: or Dream's (int(M (1 - s/t)) of the M masked positions on the grid from 1 to eps, all of them at the last step)
CONFIDENCE_SCHEDULES = ("llada", "dream")
#: The key-value cache of confidence decoding: none, the positions before the block (prefix), or after it too (dual)
CACHES = ("none", "prefix", "dual")


def local_path_options(config: type | None) -> set[str]:
    """The options of a config dataclass marked with :data:`LOCAL_PATH`."""
    if config is None:
        return set()
    return {f.name for f in dataclasses.fields(config) if any(f.metadata.get(key) for key in LOCAL_PATH)}


def check_weighting(weighting: str) -> None:
    """Refuse an unknown weighting, naming the valid ones (an ``InvalidConfigError``, a ``ValueError``)."""
    check_choice("weighting", weighting, WEIGHTINGS)


@dataclass
class TransformerConfig:
    """Width, depth, heads, MLP expansion and residual dropout of a stack of DiT blocks."""

    hidden: int = 64  # width d of every block
    layers: int = 4  # number of blocks
    heads: int = 4  # attention heads (hidden must divide by it)
    mlp_ratio: float = 4.0  # MLP hidden width = mlp_ratio * hidden
    dropout: float = 0.1  # residual dropout in training

    def __post_init__(self) -> None:
        for key in ("hidden", "layers", "heads"):
            check_range(key, getattr(self, key), 1)
        check_range("mlp_ratio", self.mlp_ratio, 0, low_open=True)
        check_range("dropout", self.dropout, 0, 1, high_open=True)
        if self.hidden % self.heads or (self.hidden // self.heads) % 2:
            raise InvalidConfigError(
                f"hidden={self.hidden} must split into heads={self.heads} heads of even width (for RoPE), e.g. "
                "hidden=64 heads=4"
            )


@dataclass
class ConfidenceConfig:
    """Confidence decoding (LLaDA, Dream, Fast-dLLM): how positions are ordered and counted, blocks, temperature,
    threshold and factor, EOS, guidance and the key-value cache."""

    remasking: str = "low_confidence"  # low_confidence | random | margin | entropy | origin: the order of committing
    block_length: int | None = None  # free positions per semi-autoregressive block (null: one block over all of them)
    temperature: float = 1.0  # Gumbel-max temperature over float64 logits; 0 commits the argmax
    threshold: float | None = None  # in (0, 1]: also commit every proposal more confident than this (Fast-dLLM)
    factor: float | None = None  # > 0: Fast-dLLM's factor rule, the n most confident while the n-th >= 1 - f/(n+1)
    bounded: bool = True  # threshold or factor: at least what ends each block within its steps; false: Fast-dLLM's
    schedule: str = "llada"  # llada | dream: how many proposals a step commits (see CONFIDENCE_SCHEDULES)
    eps: float = 1e-3  # schedule=dream: the last time of Dream's grid linspace(1, eps, steps + 1)
    top_p: float | None = None  # schedule=dream: nucleus filter of the (tempered) distribution, in (0, 1]
    top_k: int | None = None  # schedule=dream: only the k most probable tokens are proposed
    alg_temp: float | None = None  # schedule=dream: positions drawn in proportion to softmax(confidence / alg_temp)
    eos_logit_inf: bool = False  # never propose the data's end-of-document token
    eos_confidence_inf: bool = False  # commit proposals of the end-of-document token last
    guidance: float = 1.0  # classifier-free guidance (unconditional: the known tokens masked, or the null latent)
    cache: str = "none"  # none | prefix | dual: Fast-dLLM's approximate key-value cache (a CachingBackbone)
    refresh: int = 0  # with a cache, also recompute every position every this many steps of a block (0: block starts)

    def __post_init__(self) -> None:
        check_choice("remasking", self.remasking, REMASKING)
        check_range("block_length", self.block_length, 1, optional=True)
        check_range("temperature", self.temperature, 0)
        check_range("threshold", self.threshold, 0, 1, low_open=True, optional=True)
        check_range("factor", self.factor, 0, low_open=True, optional=True)
        check_choice("schedule", self.schedule, CONFIDENCE_SCHEDULES)
        check_range("eps", self.eps, 0, 1, low_open=True, high_open=True)
        check_range("top_p", self.top_p, 0, 1, low_open=True, optional=True)
        check_range("top_k", self.top_k, 1, optional=True)
        check_range("alg_temp", self.alg_temp, 0, optional=True)
        check_range("guidance", self.guidance, 0)
        check_choice("cache", self.cache, CACHES)
        check_range("refresh", self.refresh, 0)
        self._check_combinations()

    def _check_combinations(self) -> None:
        adaptive = "threshold" if self.threshold is not None else "factor" if self.factor is not None else None
        if self.threshold is not None and self.factor is not None:
            raise InvalidConfigError("threshold and factor are two rules for how many to commit: set one of them")
        if adaptive and self.remasking == "random":
            raise InvalidConfigError(
                f"{adaptive} commits proposals by their confidence, but remasking=random scores none by confidence; "
                f"valid with a {adaptive}: low_confidence, margin, entropy"
            )
        if not self.bounded and adaptive is None:
            raise InvalidConfigError(
                "bounded=false lets a threshold or factor ignore the step count, but neither is set; set threshold or "
                "factor, or leave bounded=true"
            )
        dream = {"eps": self.eps != 1e-3, "top_p": self.top_p is not None, "top_k": self.top_k is not None,
                 "alg_temp": self.alg_temp is not None, "remasking=origin": self.remasking == "origin"}
        if self.schedule != "dream" and any(dream.values()):
            name = next(key for key, given in dream.items() if given)
            raise InvalidConfigError(f"{name} belongs to Dream's generation: set schedule=dream, or leave it unset")
        if self.schedule == "dream" and (adaptive or self.remasking == "random"):
            name = adaptive or "remasking=random"
            raise InvalidConfigError(
                f"{name} is a rule over LLaDA's schedule; with schedule=dream use remasking low_confidence, margin, "
                f"entropy or origin without a threshold or factor"
            )
        if self.guidance != 1.0 and self.cache != "none":
            raise InvalidConfigError(
                f"guidance={self.guidance} makes two passes over different inputs, which one cache cannot serve: "
                f"set cache=none or guidance=1"
            )
