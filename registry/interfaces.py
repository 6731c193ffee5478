"""The interface of each component kind: core code talks to these and nothing else.

Time is always a float tensor ``tau`` in [0, 1] of shape ``[B]`` (``tau = t / T``); 0 is clean data,
1 is pure noise. Token ids are ``LongTensor[B, S]`` over a vocabulary of ``K`` real tokens; the mask
state is the extra id ``K`` (see :func:`mask_id`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any

import torch
from torch import Tensor, nn

from .errors import IncompatibleComponentsError

__all__ = [
    "Schedule",
    "Process",
    "RevealingProcess",
    "Latent",
    "LatentCode",
    "Encoder",
    "Backbone",
    "TransformerShape",
    "Denoised",
    "Channels",
    "Sampler",
    "SampleOutput",
    "DenoiserModel",
    "Dataset",
    "PreparedData",
    "Metric",
    "Needs",
    "needs_of",
    "mask_id",
    "batches_from",
    "device_batches",
    "prepare",
    "padding_of",
    "rank_batches",
    "IDS",
    "VECTORS",
    "SEQUENCES",
    "TOKEN_STATES",
]

#: The state kinds the built-in processes diffuse and the built-in latents produce. A plugin may name
#: another (e.g. points on a sphere): a latent pairs with a process when ``produces == diffuses``.
IDS = "ids"  # integer ids over ``values`` real values, plus the mask id ``values``
VECTORS = "vectors"  # real vectors ``[B, M, d_l]``
SEQUENCES = "sequences"  # ids read left to right by a causal network: a token channel only
#: the states a token process may diffuse
TOKEN_STATES = (IDS, SEQUENCES)


def mask_id(vocab_size: int) -> int:
    """The id of the mask state for a vocabulary of ``vocab_size`` real tokens."""
    return vocab_size


class Schedule(ABC):
    """A noise schedule as a signal level ``signal(tau)``, 1 at tau=0 falling to (about) 0 at tau=1.

    For masked processes the signal is the survival probability ``gbar``; for variance-preserving
    Gaussian processes it is ``abar**2`` (so ``sbar**2 = 1 - signal``).
    """

    @abstractmethod
    def signal(self, tau: Tensor) -> Tensor:
        """Signal level at times ``tau`` (same shape, float64 where tau is float64)."""


class Process(ABC):
    """A forward noising process on one channel, its weighted training loss and its reverse step.

    ``prediction`` is whatever the backbone's head for this channel outputs: logits over the
    real vocabulary for masked processes, a clean-sample estimate for Gaussian ones.
    """

    horizon: int  # training horizon T: discrete-time ELBO weights use tau - 1/T as the previous time
    #: the state kind this process diffuses (built as ``factory(config, schedule=..., vocab_size=...)``, where
    #: ``vocab_size`` counts the values of an ``IDS`` state and is None for others)
    diffuses: str = IDS

    @abstractmethod
    def prior(self, shape: tuple[int, ...], device: torch.device, generator: torch.Generator | None = None) -> Tensor:
        """A draw from the terminal distribution (all-mask, or standard Gaussian)."""

    @abstractmethod
    def corrupt(self, x0: Tensor, tau: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """A draw of ``x_tau`` from the forward marginal given clean ``x0``."""

    @abstractmethod
    def loss(self, prediction: Tensor, x0: Tensor, x_t: Tensor, tau: Tensor) -> Tensor:
        """Per-sample weighted loss ``[B]``, averaged over positions (nats per position)."""

    @abstractmethod
    def step(
        self, x_t: Tensor, prediction: Tensor, tau_t: Tensor, tau_s: Tensor,
        generator: torch.Generator | None = None, fixed: Tensor | None = None,
    ) -> Tensor:
        """One reverse step from time ``tau_t`` to ``tau_s < tau_t`` given the prediction at ``tau_t``.

        ``fixed`` (token channel only; None when nothing is known): the known tokens of a prompt or an infill,
        ``[B, S]`` with the mask id at the free positions; the step must return them unchanged at their positions.
        A masking process keeps them anyway (it never changes an unmasked position); another, such as a
        uniform-noise process, writes them back. ladd calls a step whose signature lacks ``fixed`` without it.
        """

    def loss_rows(self, x_t: Tensor) -> Tensor | None:
        """Positions where ``loss`` can be nonzero (bool ``[B, S]``), or None for every position.

        When not None, ``loss`` also accepts the prediction at those rows only (``[N, ...]`` in row-major
        order), and ``objective.head_on_loss_rows`` applies the output head only there.
        """
        return None

    def position_loss(self, prediction: Tensor, x0: Tensor, x_t: Tensor, tau: Tensor) -> Tensor:
        """The weighted loss at each position, ``[B, S]``, whose mean over positions is ``loss``.

        The objective uses it to keep positions that only pad a row out of the loss (``Dataset.padding``),
        and accepts predictions as ``loss`` does. A process without it trains on rows without padding only.
        """
        raise IncompatibleComponentsError(
            f"process {type(self).__name__} gives no loss per position (position_loss), so the padding of the data's "
            f"rows cannot be kept out of its loss; use rows without padding (for text, dataset.packing=wrap)"
        )

    def guide(self, conditional: Tensor, unconditional: Tensor, scale: float) -> Tensor:
        """Classifier-free guidance of two predictions (scale 1 returns the conditional one)."""
        return unconditional + scale * (conditional - unconditional)


class RevealingProcess(Process):
    """A process whose reverse step picks the positions that change before it needs the prediction.

    ``step(x_t, p, t, s, g)`` equals ``fill(x_t, reveal, p[reveal], g)`` with ``reveal = reveal(x_t, t, s, g)``,
    drawing the same random numbers in the same order, so a sampler may compute predictions only at
    the revealed positions (or skip the network when there are none) and stay exact.
    """

    @abstractmethod
    def reveal(self, x_t: Tensor, tau_t: Tensor, tau_s: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Boolean ``[B, S]``: the (masked) positions whose value changes in the step from ``tau_t`` to ``tau_s``."""

    @abstractmethod
    def fill(self, x_t: Tensor, reveal: Tensor, prediction: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """``x_s``: ``x_t`` with new values drawn at ``reveal`` from ``prediction`` (``[N, K]``, one row per revealed
        position)."""

    def step(
        self,
        x_t: Tensor,
        prediction: Tensor,
        tau_t: Tensor,
        tau_s: Tensor,
        generator: torch.Generator | None = None,
        fixed: Tensor | None = None,
    ) -> Tensor:
        """``fill`` at the positions ``reveal`` picks; known tokens stay, as ``reveal`` only picks masked positions."""
        reveal = self.reveal(x_t, tau_t, tau_s, generator)
        return self.fill(x_t, reveal, prediction[reveal], generator)


@dataclass
class LatentCode:
    """A clean latent ``y0``, any auxiliary loss its construction adds (e.g. VQ commitment), and a
    differentiable embedding of ``y0`` through which the token loss reaches the encoder (e.g. the
    straight-through quantised vectors of a discrete latent)."""

    y0: Tensor
    aux_loss: Tensor | None = None
    embedding: Tensor | None = None


class Latent(nn.Module, ABC):
    """What the latent channel's ``y`` is: turns encoder features into ``y0``; a ``Process`` diffuses it.

    ``length`` is M, ``width`` d_l; ``produces`` is the state kind of ``y0`` (a process diffusing the same kind
    is paired with it in the ``latent_process`` slot) and ``values`` the number of values of an ``IDS`` state
    (None for others). Random draws inside ``encode`` (and inside encoders' and backbones' forward passes) use
    torch's global RNG: the core seeds it from the caller's generator around those calls.
    """

    length: int
    width: int
    produces: str
    values: int | None = None
    #: False when the null latent is no valid target of the process's loss (e.g. all mask ids): such a latent
    #: refuses ``objective.latent_loss_on_dropped``, which would make it one
    null_is_target: bool = True
    #: What the token denoiser sees for a row without its latent (dropped by ``objective.p_cfg``; guidance's
    #: unconditional pass): True, the null latent noised to the row's time tau_y; False, the null latent itself
    noised_null: bool = True

    @abstractmethod
    def encode(self, features: Tensor) -> LatentCode:
        """Clean latent from encoder features ``[B, M, d_l]``."""

    def mode(self, features: Tensor) -> Tensor:
        """The most likely clean latent of encoder features: what ``model.encode`` returns and samples are drawn like.

        The default, ``encode(features).y0``, fits a latent whose ``encode`` draws nothing (a quantiser's codes); a
        latent that draws ``y0`` around a centre (a Gaussian posterior) returns that centre.
        """
        return self.encode(features).y0

    @abstractmethod
    def null(self, batch: int, device: torch.device) -> Tensor:
        """The null latent used for classifier-free dropout and unconditional predictions."""

    @abstractmethod
    def input_layer(self, width: int) -> nn.Module:
        """A module mapping ``backbone_input(y_t)`` to hidden states ``[B, M, width]`` inside a backbone."""

    @abstractmethod
    def output_layer(self, width: int) -> nn.Module:
        """A module mapping hidden states ``[B, M, width]`` to the prediction the paired process takes."""

    def backbone_input(self, y_t: Tensor, code: LatentCode | None = None) -> Tensor:
        """What a backbone's latent input layer receives for state ``y_t`` (``code`` is given in training)."""
        return y_t


class Encoder(nn.Module, ABC):
    """Maps clean tokens to latent features ``[B, M, d_l]``; ``trainable`` is False for frozen encoders."""

    length: int
    width: int
    trainable: bool = True

    @abstractmethod
    def forward(self, x0: Tensor, masked: Tensor | None = None) -> Tensor:
        """Features of ``x0``; ``masked`` marks positions masked in ``x_t``, given only while the model trains
        (frozen encoder or not), for encoder-input dropout."""


@dataclass(frozen=True)
class Channels:
    """What a backbone must denoise: the token channel, the latent channel, or both."""

    vocab_size: int  # real tokens K (0 when the backbone has no token channel)
    seq_len: int  # S (0 when no token channel)
    latent: Latent | None  # None when the backbone has no latent channel

    @property
    def tokens(self) -> bool:
        return self.seq_len > 0


@dataclass
class Denoised:
    """A backbone's predictions: token logits ``[B, S, K]`` and/or the latent head's output."""

    tokens: Tensor | None = None
    latent: Tensor | None = None


@dataclass(frozen=True)
class TransformerShape:
    """The sizes that set a transformer backbone's cost per forward pass (read by ``ladd flops``)."""

    layers: int
    length: int  # L: every position attention sees (S + M for a joint token-latent network)
    width: int  # d
    mlp_ratio: float  # r: the MLP's hidden width is r * d
    head_positions: int  # positions the token output head covers (S; 0 for a latent-only network)
    head_outputs: int  # classes of the token output head (K)


class Backbone(nn.Module, ABC):
    """A denoising network. Built as ``factory(config, channels=Channels(...))``."""

    #: False when token predictions do not depend on ``tau_x`` (enables the sampler's no-change cache)
    token_time_conditioned: bool = True

    @abstractmethod
    def forward(
        self,
        x_t: Tensor | None,
        tau_x: Tensor | None,
        y_t: Tensor | None,
        tau_y: Tensor | None,
        rows: Tensor | None = None,
    ) -> Denoised:
        """Predict clean tokens and/or latents from the noisy channels at their times.

        ``rows`` (bool ``[B, S]``) asks for token logits at those positions only, as ``[N, K]`` in row-major
        order (``registry.toolkit.tokens.at_rows``), ideally with the output head applied there alone. None:
        logits ``[B, S, K]`` at every position. A backbone without a token channel ignores it.
        """

    def transformer_shape(self) -> TransformerShape | None:
        """The sizes that set this network's FLOPs, or None when it is not a transformer."""
        return None

    def warm_start_names(self) -> dict[str, str]:
        """Where a related network holds some of this one's parameters, for warm starts (``train.init_from``).

        ``{prefix of names here: prefix of names there}``, both under this backbone's slot: a parameter the
        source lacks under its own name is looked up under the other (MM-DiT's token stream under the names of
        the single-channel DiT). Default: none.
        """
        return {}

    def layers(self) -> Iterable[nn.Module]:
        """The network's repeated blocks, in order: the units of activation checkpointing
        (``train.activation_checkpointing``) and of sharding (``train.strategy=fsdp``).

        Each is called as a module (``block(...)``, its ``forward``) once per forward pass. Default: none, and
        those options are refused for this backbone.
        """
        return ()

    def adapter_targets(self) -> tuple[str, ...]:
        """Name patterns of the modules LoRA adapts by default (``train.lora.targets`` unset), relative to this
        backbone: dotted names whose parts match a run of a module name's parts, ``*`` standing for any one part
        (``blocks.*.attn.q``). Default: none, and ``train.lora`` then needs its ``targets``."""
        return ()


class DenoiserModel(ABC):
    """What a sampler sees of a trained model (implemented by the core's model)."""

    process: Process
    #: the token process's schedule (the ``schedule`` slot's), for a sampler that paces its steps by the signal
    schedule: Schedule | None = None
    latent: Latent | None  # None without a latent channel
    latent_process: Process | None  # the process on the latent channel's ``y``
    seq_len: int
    vocab_size: int

    @abstractmethod
    def predict(
        self,
        x_t: Tensor | None,
        tau_x: Tensor | None,
        y_t: Tensor | None,
        tau_y: Tensor | None,
        rows: Tensor | None = None,
    ) -> Denoised:
        """Predictions of the denoiser, with token logits only at ``rows`` when given (as ``Backbone.forward``).

        ``tau_x`` None: the latent is generated on its own (sequential strategy) and only its prediction is
        returned, from the separate latent denoiser when there is one; ``x_t`` then holds known tokens (mask
        id elsewhere) for a denoiser that reads tokens, or is None for all masked.
        """

    def latent_channel(self) -> tuple[Latent, Process]:
        """The latent and its process; an ``IncompatibleComponentsError`` for a model without a latent channel."""
        if self.latent is None or self.latent_process is None:
            raise IncompatibleComponentsError(
                "this model has no latent channel (latent=null): no latent to draw, noise or condition on"
            )
        return self.latent, self.latent_process

    def latent_prior(self, batch: int, generator: torch.Generator | None = None) -> Tensor:
        """``batch`` draws of the latent process's terminal distribution, shaped like the null latent."""
        device = self.device
        latent, latent_process = self.latent_channel()
        return latent_process.prior(tuple(latent.null(batch, device).shape), device, generator)

    @property
    @abstractmethod
    def device(self) -> torch.device:
        """Where the model's parameters live."""

    @property
    @abstractmethod
    def caches_token_predictions(self) -> bool:
        """True when an unchanged input gives an unchanged token prediction (no time conditioning)."""


@dataclass
class SampleOutput:
    """Generated tokens ``[N, S]``, the final latent (if any) and the number of network calls."""

    tokens: Tensor
    latent: Tensor | None = None
    network_calls: int = 0


@dataclass(frozen=True)
class Needs:
    """What a component needs of the experiment around it, declared on its class (``needs = Needs(...)``).

    ladd checks it when the experiment assembles, before anything trains, and when ``ladd sample`` or
    ``ladd eval`` choose another sampler for a trained model; a mismatch is one line naming both components.
    """

    latent: bool | None = None  # True: a latent channel; False: none (a token-only model); None: either
    token_process: type | None = None  # an interface the token process must implement, e.g. RevealingProcess

    def unmet(self, latent: str | None, process_name: str, process: Any) -> tuple[str, str] | None:
        """What is missing, as (what is needed and what is there, the change to the config), or None.

        ``latent``: the selected latent's name (None without one); ``process``: the token process, or its class.
        """
        if self.latent is True and latent is None:
            return "a latent channel, but there is none (latent=null)", "choose a latent"
        if self.latent is False and latent is not None:
            return f"a model without a latent channel, but latent {latent!r} is selected", "set latent=null"
        wanted = self.token_process
        kind = process if isinstance(process, type) else type(process)
        if wanted is not None and process is not None and not issubclass(kind, wanted):
            interface = f"{wanted.__module__}.{wanted.__qualname__}"
            need = f"a token process that is a {interface}, but process {process_name!r} is not one"
            return need, "choose another process"
        return None


def needs_of(component: Any) -> Needs:
    """What a component (or its class) declares it needs; a sampler's ``requires_latent = True`` counts as a latent."""
    needs = getattr(component, "needs", None)
    needs = needs if isinstance(needs, Needs) else Needs()
    if needs.latent is None and getattr(component, "requires_latent", False) is True:
        return replace(needs, latent=True)
    return needs


class Sampler(ABC):
    """A reverse-time sampling strategy. Built as ``factory(config)``."""

    #: what the sampler needs of the model: a latent channel or none, a kind of token process
    needs: Needs = Needs()
    #: True when tokens are denoised given a finished clean latent (sequential); evaluation follows it
    conditions_on_clean_latent: bool = False

    @property
    def requires_latent(self) -> bool:
        """True when the sampler needs a latent channel (``needs.latent``; a subclass may still set it instead)."""
        return self.needs.latent is True

    @abstractmethod
    def sample(
        self,
        model: DenoiserModel,
        num_samples: int,
        steps: int,
        generator: torch.Generator,
        fixed: Tensor | None = None,
        latent: Tensor | None = None,
    ) -> SampleOutput:
        """Draw ``num_samples`` sequences with ``steps`` token denoising steps.

        ``fixed`` (``[num_samples, S]``) holds tokens kept throughout sampling (a prompt, the context of an
        infill) and the mask id at the free positions. ``latent`` (a sampler of a latent channel; the shape of
        ``model.latent.null(num_samples, ...)``) is a clean latent ``y0`` per sample to draw tokens given, instead
        of generating one: the tokens are denoised given it at latent time 0 and it is returned as the output's
        latent. ladd calls a sampler whose ``sample`` lacks the keyword without it, and refuses to give it one.
        """


@dataclass(frozen=True)
class PreparedData:
    """What ``Dataset.prepare`` made ready for reading one split: where it lies, its size on disk and its tokens."""

    split: str
    location: str  # a folder or file a user can find it in
    size_bytes: int
    tokens: int  # token ids it holds (rows x seq_len)
    rows: int


class Dataset(ABC):
    """A source of token sequences of fixed length ``seq_len`` over ``vocab_size`` real tokens."""

    vocab_size: int
    seq_len: int
    #: the Hugging Face tokenizer of a text dataset (its mask token is ``mask_id(vocab_size)``); None otherwise
    tokenizer: Any = None
    #: the end-of-document id of a text dataset, None when sequences have no documents
    eos_id: int | None = None

    @abstractmethod
    def batches(self, batch_size: int, seed: int, split: str = "train") -> Iterator[Tensor]:
        """An iterator of ``LongTensor[batch_size, seq_len]``; the same seed and split give the same stream."""

    def batches_from(self, start: int, batch_size: int, seed: int, split: str = "train") -> Iterator[Tensor]:
        """The stream of ``batches(batch_size, seed, split)`` from its batch ``start`` on (0 is the first).

        Resuming a run at step k reads the stream from batch k. This default draws and discards the
        first ``start`` batches; override it to start there directly, yielding the same batches.
        """
        return islice(self.batches(batch_size, seed, split), start, None)

    def device_batches(self, start: int, batch_size: int, seed: int, device: torch.device) -> Iterator[Tensor] | None:
        """The training stream drawn on ``device`` from batch ``start`` on, or None to draw on the CPU (the default).

        Training uses it when it is given: no batch crosses from the host and none is read back to be checked
        (only the first), so a step never waits for the host. It need not equal ``batches_from``'s stream (device
        generators differ from the CPU's) but must be as reproducible, and start at ``start`` without replaying.
        """
        return None

    def rank_batches(self, start: int, batch_size: int, seed: int, rank: int, world: int) -> Iterator[Tensor] | None:
        """The training stream of ``batches_from(start, ...)`` with only the rows that process ``rank`` trains on.

        Rows ``rank, rank + world, ...`` of each batch equal ``batches_from``'s; the others hold any valid
        token and are never read. For a dataset whose rows cost work to make (tokenised on the fly), so that
        each process makes only its own. None (the default): every process reads whole batches.
        """
        return None

    def prepare(self, splits: Sequence[str]) -> list[PreparedData]:
        """Make ``splits`` ready to read (e.g. tokenise them into a cache) and describe what was made, one entry each
        (splits that share their data share an entry). ``ladd prepare`` calls it, and training calls it on every
        process before the processes connect, so a long preparation never runs into their connection timeout.
        The default: nothing to prepare."""
        return []

    def padding(self, batch: Tensor) -> Tensor | None:
        """Bool ``[B, S]``: the positions of ``batch`` that only pad a row, kept out of the token loss and ``L^x``;
        None (the default) when no row holds padding."""
        return None

    def oracle_token_loss(self) -> float | None:
        """The exact optimal token loss when the data model is known (None otherwise)."""
        return None


def device_batches(
    dataset: Dataset, start: int, batch_size: int, seed: int, device: torch.device
) -> Iterator[Tensor] | None:
    """``dataset.device_batches(...)``, or None for a dataset written without the ``Dataset`` base."""
    return dataset.device_batches(start, batch_size, seed, device) if isinstance(dataset, Dataset) else None


def batches_from(dataset: Dataset, start: int, batch_size: int, seed: int, split: str = "train") -> Iterator[Tensor]:
    """``dataset.batches_from(...)``; a dataset written without the ``Dataset`` base gets the base's replay."""
    if isinstance(dataset, Dataset):
        return dataset.batches_from(start, batch_size, seed, split)
    return Dataset.batches_from(dataset, start, batch_size, seed, split)


class Metric(ABC):
    """Named scores of generated samples against reference data. Built as ``factory(config, tokenizer=...)``."""

    #: the headline score among those returned (plotted against sampling compute)
    primary: str
    lower_is_better: bool = True

    @abstractmethod
    def __call__(self, samples: Tensor, reference: Tensor) -> dict[str, float]:
        """Scores of ``samples [N, S]`` against ``reference [N, S]``, including ``primary``."""


def rank_batches(
    dataset: Dataset, start: int, batch_size: int, seed: int, rank: int, world: int
) -> Iterator[Tensor] | None:
    """``dataset.rank_batches(...)``, or None for a dataset written without the ``Dataset`` base."""
    return dataset.rank_batches(start, batch_size, seed, rank, world) if isinstance(dataset, Dataset) else None


def prepare(dataset: Dataset, splits: Sequence[str]) -> list[PreparedData]:
    """``dataset.prepare(splits)``; nothing for a dataset written without the ``Dataset`` base."""
    return dataset.prepare(splits) if isinstance(dataset, Dataset) else []


def padding_of(dataset: Dataset, batch: Tensor) -> Tensor | None:
    """``dataset.padding(batch)``; None for a dataset written without the ``Dataset`` base."""
    return dataset.padding(batch) if isinstance(dataset, Dataset) else None
