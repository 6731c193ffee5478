"""The interface of each component kind: core code talks to these and nothing else.

Time is always a float tensor ``tau`` in [0, 1] of shape ``[B]`` (``tau = t / T``); 0 is clean data,
1 is pure noise. Token ids are ``LongTensor[B, S]`` over a vocabulary of ``K`` real tokens; the mask
state is the extra id ``K`` (see :func:`mask_id`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from .errors import IncompatibleComponentsError

if TYPE_CHECKING:
    from .distributed import Shard

__all__ = [
    "Schedule",
    "Process",
    "BoundDraw",
    "RevealingProcess",
    "MaskingProcess",
    "Latent",
    "LatentCode",
    "Encoder",
    "AttentionPattern",
    "Backbone",
    "CachingBackbone",
    "TransformerShape",
    "Denoised",
    "Channels",
    "Sampler",
    "TokenDecoder",
    "SampleOutput",
    "DenoiserModel",
    "TrainableModel",
    "Objective",
    "ObjectiveStep",
    "Reward",
    "Dataset",
    "PreparedData",
    "Metric",
    "Importer",
    "Launcher",
    "Needs",
    "needs_of",
    "declares_needs",
    "mask_id",
    "batches_from",
    "device_batches",
    "prepare",
    "padding_of",
    "context_of",
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


@dataclass
class BoundDraw:
    """Noisy states a process drew for its terms of a negative ELBO (``Process.bound_draw``), one per row.

    ``weight`` is the row's importance weight under the process's draw scheme; ``rows`` (bool, the state's shape
    up to its position axis) marks the positions whose predictions ``bound_terms`` reads, or None for all.
    """

    state: Tensor
    tau: Tensor  # [N]
    weight: Tensor  # [N]
    rows: Tensor | None = None

    def select(self, index: slice | Tensor) -> BoundDraw:
        """The draws at ``index`` (a slice or index tensor over the rows)."""
        rows = None if self.rows is None else self.rows[index]
        return BoundDraw(self.state[index], self.tau[index], self.weight[index], rows)


def _no_bound(process: Process) -> IncompatibleComponentsError:
    return IncompatibleComponentsError(
        f"process {type(process).__name__} gives no variational bound (it does not declare elbo = True), so no "
        f"likelihood can be reported for a model that uses it"
    )


class Process(ABC):
    """A forward noising process on one channel, its weighted training loss and its reverse step.

    ``prediction`` is whatever the backbone's head for this channel outputs: logits over the
    real vocabulary for masked processes, a clean-sample estimate for Gaussian ones.
    """

    horizon: int  # training horizon T: discrete-time ELBO weights use tau - 1/T as the previous time
    #: the state kind this process diffuses (built as ``factory(config, schedule=..., vocab_size=...)``, where
    #: ``vocab_size`` counts the values of an ``IDS`` state and is None for others)
    diffuses: str = IDS
    #: True when ``corrupt``, ``loss`` and ``position_loss`` also take a time per position (``tau``
    #: ``[B, S]``, beside one per sequence ``[B]``): a backbone of block attention trains each block at its own time
    position_times: bool = False
    #: whether ``step`` takes the known tokens (``fixed=``); False for a step written without the keyword, which ladd
    #: then calls without it (a prompt is refused if its chain changed a known token)
    takes_fixed: bool = True
    #: True when the process gives the terms of its negative ELBO (``bound_draw``, ``bound_state``, ``bound_terms``,
    #: ``prior_bound``): the bound of the reverse chain on the grid ``1/T, ..., 1`` that the model defines, whatever
    #: weighting trains it. ``ladd harness`` and the bound of ``ladd eval`` need it.
    elbo: bool = False
    #: True when the bound is the exact negative log-likelihood, read in one teacher-forced pass (a causal model):
    #: one draw suffices, and greedy decoding is read off the same pass
    exact_likelihood: bool = False
    #: True when ``loss`` weights each step as the ELBO does, so that its mean over noise levels is a Monte-Carlo
    #: estimate of the negative ELBO of the chain (for a model of tokens alone an upper bound on ``-log p``); False
    #: for another weighting (a constant one), whose loss bounds nothing. ``ladd eval`` says which ``L^x`` is.
    elbo_weighted: bool = False

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
        uniform-noise process, writes them back. ladd calls a step of a process declaring ``takes_fixed = False``
        without it.
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

    def bound_draw(self, x0: Tensor, scored: Tensor | None, u: Tensor, generator: torch.Generator) -> BoundDraw:
        """Noisy states of the clean ``x0`` (``[N, positions, ...]``) for this channel's terms of the negative ELBO.

        Only the ``scored`` positions (bool ``[N, positions]``; None: all) are noised and scored; the others stay as
        ``x0`` holds them (a prompt, or the mask id at positions left unknown). ``u`` (``[N]``, in [0, 1)) are uniform
        draws the caller stratifies over a row's draws; the process turns them into its own times.
        """
        raise _no_bound(self)

    def bound_state(self, x0: Tensor, scored: Tensor | None, tau: Tensor, generator: torch.Generator) -> Tensor:
        """A draw of the state at ``tau`` (``[N]``) from the forward process the bound uses: the other channel's
        input when a two-channel model scores one channel at that channel's times."""
        raise _no_bound(self)

    def bound_terms(self, prediction: Tensor, x0: Tensor, draw: BoundDraw) -> Tensor:
        """``[N]`` nats: this channel's terms at the draw's states, weighted so that their mean over draws is an
        unbiased estimate of the sum of the reconstruction and diffusion terms ``L_0 + L_1 + ... + L_{T-1}`` over the
        scored positions. ``prediction`` covers the draw's ``rows`` only when they are given (as ``loss_rows``)."""
        raise _no_bound(self)

    def prior_bound(self, x0: Tensor, scored: Tensor | None) -> Tensor:
        """``[N]`` nats: the endpoint term ``L_T``, the KL of the forward process's end to the prior (0 when the
        forward process ends in the prior exactly)."""
        raise _no_bound(self)

    def bound_subsets(self, x0: Tensor, scored: Tensor | None) -> BoundDraw | None:
        """Every state the bound averages over for a network that ignores time, with weights whose sum of
        ``bound_terms`` is the bound exactly (one row ``x0`` ``[1, positions]``); None when the process has no finite
        set of states (the default)."""
        return None


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


class MaskingProcess(RevealingProcess):
    """A revealing process with an absorbing mask state: what confidence decoders (LLaDA, Fast-dLLM) need.

    Its prior is all mask id (``mask_id(vocab_size)``), a position once unmasked never changes, and its prediction
    is logits over the real tokens: so a decoder may choose which masked positions to commit, and commit them to
    any token of the prediction, instead of drawing both from the process's bridge.
    """


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

    def posterior_entropy(self, features: Tensor) -> Tensor:
        """``[B]`` nats: the entropy of ``encode``'s distribution of ``y0`` given encoder features ``[B, M, d_l]``
        (differential for real vectors, 0 for a deterministic code). A likelihood bound subtracts it (the encoder
        term of the paper's App. C.1); a latent without it gives no bound."""
        raise IncompatibleComponentsError(
            f"latent {type(self).__name__} gives no posterior entropy (posterior_entropy), the encoder term of the "
            f"variational bound, so no likelihood can be reported for a model that uses it"
        )


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


@dataclass(frozen=True)
class AttentionPattern:
    """Which token positions the attention of a backbone lets each position see (``Backbone.attention``).

    ``block`` None: every position sees every other (bidirectional). ``block`` b: the positions are cut into blocks of
    b from the left, and a block sees itself and the blocks before it (block-causal), at most ``span`` positions in all
    counting its own (None: every block before it). A backbone of a block pattern is trained on each block noised
    given the clean blocks before it: its ``forward`` takes the clean tokens as ``context`` in training.
    """

    block: int | None = None
    span: int | None = None

    def first_seen(self, position: int) -> int:
        """The first position that a query at ``position`` sees."""
        if self.block is None or self.span is None:
            return 0
        return max(0, position // self.block * self.block + self.block - self.span)

    def pairs(self, length: int) -> int:
        """The query-key pairs that one pass over ``length`` positions attends over."""
        if self.block is None:
            return length * length
        total = 0
        for start in range(0, length, self.block):
            stop = min(start + self.block, length)
            total += (stop - start) * (stop - self.first_seen(start))
        return total


class Backbone(nn.Module, ABC):
    """A denoising network. Built as ``factory(config, channels=Channels(...))``."""

    #: False when token predictions do not depend on ``tau_x`` (enables the sampler's no-change cache)
    token_time_conditioned: bool = True
    #: the column of the token logits that holds the network's own mask state, kept in the softmax as the family's
    #: code keeps it (LLaDA's, Dream's); None: no column gives the mask probability (SUBS, ladd's own networks)
    mask_column: int | None = None
    #: what each token position attends to; with a block pattern, ``forward`` also takes ``context`` (the clean
    #: tokens ``[B, S]``) in training, and each block of ``x_t`` is denoised given the clean blocks before it (see
    #: ``forward``); such a backbone denoises the token channel alone (no latent channel)
    attention: AttentionPattern = AttentionPattern()

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

        A backbone of a block ``attention`` pattern has the signature ``forward(x_t, tau_x, y_t, tau_y, rows=None,
        context=None)`` (a ``CachingBackbone``: ``..., rows=None, cache=None, window=None, context=None``). Training
        calls it with ``context=x0``, the clean tokens ``[B, S]``, and ``tau_x`` a time per position ``[B, S]`` (one
        per block): the prediction at each position of block ``b`` may read the noisy positions of block ``b`` and
        the clean positions of the blocks before it that the pattern lets it see, nothing else. Sampling calls it
        without ``context``, with ``x_t`` of any length ``[B, N]``, each position seeing what the pattern lets it
        see. It denoises the token channel alone: a latent channel with block attention is refused when the
        experiment assembles (``y_t`` is then always None). ``ladd plugins check`` perturbs later blocks to hold it
        to this.
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


class CachingBackbone(Backbone):
    """A backbone that keeps its attention keys and values between calls and can recompute a window of positions.

    ``forward(..., cache=new_cache(batch, device))`` without a window runs every position and writes each layer's
    keys and values into the cache; with ``window`` (a ``slice`` of the positions attention sees: the tokens
    ``0..S-1``, then any latent slots) it recomputes only those positions, writes theirs into the cache and reads
    every other position's from it. Token logits come back for the window's token positions (``[B, W, K]``), or at
    ``rows`` (bool ``[B, S]``, False outside the window) as ``[N, K]``; a latent prediction only when the window
    covers the latent slots (``window.stop`` None), else None. When other positions changed since they were cached,
    a windowed pass is Fast-dLLM's approximation; ``cache_exact`` says it equals the full pass (a block-causal
    network reading the committed blocks before the window). Called without ``cache``, it is a plain ``Backbone``.
    A window may also start where the cached positions end: the cache grows (a block-causal network's next block).
    """

    #: True when a windowed pass equals the full pass exactly; False for the approximate cache of full attention
    cache_exact: bool = False

    def new_cache(self, batch: int, device: torch.device) -> Any:
        """An empty cache for ``batch`` sequences (``registry.toolkit.attention.KVCache`` unless overridden)."""
        from .toolkit.attention import KVCache

        return KVCache()

    @abstractmethod
    def forward(
        self,
        x_t: Tensor | None,
        tau_x: Tensor | None,
        y_t: Tensor | None,
        tau_y: Tensor | None,
        rows: Tensor | None = None,
        cache: Any = None,
        window: slice | None = None,
    ) -> Denoised:
        """``Backbone.forward``; with ``cache``, writing it (no ``window``) or reading it outside ``window``."""


class DenoiserModel(ABC):
    """What a sampler sees of a trained model (implemented by the core's model)."""

    process: Process
    #: the token process's schedule (the ``schedule`` slot's), for a sampler that paces its steps by the signal
    schedule: Schedule | None = None
    latent: Latent | None  # None without a latent channel
    latent_process: Process | None  # the process on the latent channel's ``y``
    seq_len: int
    vocab_size: int
    #: the end-of-document id of the data the model was trained on (text), None when sequences have no documents
    eos_id: int | None = None
    #: the token backbone's ``Backbone.mask_column``: decoders that propose it leave the position masked, and a
    #: process's own step draws no token there; None: SUBS
    mask_column: int | None = None

    @property
    def attention(self) -> AttentionPattern:
        """The attention pattern of the token backbone (``Backbone.attention``)."""
        return AttentionPattern()

    @abstractmethod
    def predict(
        self,
        x_t: Tensor | None,
        tau_x: Tensor | None,
        y_t: Tensor | None,
        tau_y: Tensor | None,
        rows: Tensor | None = None,
        cache: Any = None,
        window: slice | None = None,
    ) -> Denoised:
        """Predictions of the denoiser, with token logits only at ``rows`` when given (as ``Backbone.forward``).

        Token logits are the network's own at every position, also where ``x_t`` holds a token: they are not replaced
        by that token (as MDLM's SUBS parameterisation does); the processes' steps keep revealed tokens themselves.
        ``tau_x`` None: the latent is generated on its own (sequential strategy) and only its prediction is
        returned, from the separate latent denoiser when there is one; ``x_t`` then holds known tokens (mask
        id elsewhere) for a denoiser that reads tokens, or is None for all masked.
        ``cache`` (from :meth:`new_cache`) and ``window``: the token backbone's key-value cache, as
        ``CachingBackbone.forward`` takes them; samplers pass them only when they use a cache, so a model written
        without the keywords serves every sampler that does not.
        """

    def new_cache(self, batch: int) -> Any:
        """An empty key-value cache of the token backbone for ``batch`` sequences; an ``IncompatibleComponentsError``
        when the backbone is no ``CachingBackbone``."""
        raise IncompatibleComponentsError(f"{type(self).__name__} keeps no key-value cache of its token backbone")

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


class TrainableModel(DenoiserModel):
    """What an objective sees of the model it trains (implemented by the core's model): a ``DenoiserModel`` that is a
    ``torch.nn.Module`` (``train``, ``eval``, ``parameters``), with its own variational bound and its frozen base."""

    training: bool

    @abstractmethod
    def train(self, mode: bool = True) -> Any:
        """Training mode (dropout, the latent's own updates) or, with ``mode=False``, evaluation mode; the model."""

    @abstractmethod
    def loss(
        self,
        x0: Tensor,
        generator: torch.Generator | None = None,
        shard: Shard | None = None,
        padding: Tensor | None = None,
        context: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """The model's training bound on ``x0`` and its terms (``loss``, ``token``, and ``latent``, ``aux`` where the
        model has them): the LADD objective, MDLM's without a latent channel, LLaDA's SFT loss where ``context`` marks
        prompts (docs/architecture.md, "The objective"). With ``generator`` its draws come from it alone; without one,
        from torch's global stream (which training seeds per stage and checkpoints restore)."""

    def frozen_base(self) -> AbstractContextManager[None]:
        """A context in which the model predicts as its frozen base (its LoRA adapters switched off): the reference
        policy of an RL objective, with no second copy of the weights. An ``IncompatibleComponentsError`` when the
        model has no adapters (``train.lora.rank=0``)."""
        raise IncompatibleComponentsError(f"{type(self).__name__} has no frozen base with adapters over it")


@dataclass
class SampleOutput:
    """Generated tokens ``[N, S]``, the final latent (if any) and the number of network calls.

    ``lengths`` (``[N]``, a sampler that stops early): the tokens each sequence holds before its end, which are
    followed by the end-of-document id up to ``S``; None when every sequence fills ``S``.

    ``order`` (``[N, S]`` int64, a sampler that traces its steps): the token step (0-based) that unmasked each
    position, -1 where none did (``fixed`` gave it); what a trajectory-aware RL estimate scores each token in. None
    when the sampler does not say.
    """

    tokens: Tensor
    latent: Tensor | None = None
    network_calls: int = 0
    lengths: Tensor | None = None
    order: Tensor | None = None


@dataclass(frozen=True)
class Needs:
    """What a component needs of the experiment around it, declared on its class (``needs = Needs(...)``).

    ladd checks it when the experiment assembles, before anything trains, and when ``ladd sample`` or
    ``ladd eval`` choose another sampler for a trained model; a mismatch is one line naming both components.
    """

    latent: bool | None = None  # True: a latent channel; False: none (a token-only model); None: either
    token_process: type | None = None  # an interface the token process must implement, e.g. RevealingProcess
    backbone: type | None = None  # an interface the token backbone must implement, e.g. CachingBackbone
    #: True: a token backbone of a block attention pattern (decoded block by block); False: one without (decoded all
    #: at once); None: either. Checked on a built backbone, whose options set its pattern
    blocks: bool | None = None
    #: what asks for the backbone (an option's value, e.g. "its option cache='prefix' keeps the backbone's key-value
    #: cache"), said when the backbone is not one; empty: the component itself
    why: str = ""

    def unmet(
        self, latent: str | None, process_name: str, process: Any, backbone_name: str = "", backbone: Any = None
    ) -> tuple[str, str] | None:
        """What is missing, as (what is needed and what is there, the change to the config), or None.

        ``latent``: the selected latent's name (None without one); ``process``: the token process, or its class;
        ``backbone``: the token backbone, or its class (None: not checked).
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
        wanted, kind = self.backbone, backbone if isinstance(backbone, type) else type(backbone)
        if wanted is not None and backbone is not None and not issubclass(kind, wanted):
            interface = f"{wanted.__module__}.{wanted.__qualname__}"
            reason = f" ({self.why})" if self.why else ""
            return f"a token backbone that is a {interface}{reason}, but backbone {backbone_name!r} is not one", (
                "choose another backbone"
            )
        if self.blocks is not None and backbone is not None and not isinstance(backbone, type):
            block = getattr(backbone, "attention", AttentionPattern()).block
            if (block is not None) != self.blocks:
                wanted_pattern = "in blocks" if self.blocks else "without blocks"
                held = f"in blocks of {block}" if block is not None else "without blocks"
                need = f"a token backbone that attends {wanted_pattern}, but backbone {backbone_name!r} attends {held}"
                return need, "choose another backbone"
        return None


def needs_of(component: Any) -> Needs:
    """What a component (or its class) declares it needs; a sampler's ``requires_latent = True`` counts as a latent."""
    needs = getattr(component, "needs", None)
    needs = needs if isinstance(needs, Needs) else Needs()
    if getattr(component, "requires_latent", False) is True:
        return replace(needs, latent=True)
    return needs


def declares_needs(component: Any) -> bool:
    """Whether a component (or its class) declares its ``needs`` (or the older ``requires_latent``) itself, rather than
    keeping its interface's default."""
    interfaces = {Sampler, Schedule, Process, RevealingProcess, Latent, Encoder, Backbone, Dataset, Metric}
    kind = component if isinstance(component, type) else type(component)
    owners = [vars(component)] if not isinstance(component, type) and hasattr(component, "__dict__") else []
    owners += [vars(cls) for cls in kind.__mro__ if cls not in interfaces and cls is not object]
    return any("needs" in owner or "requires_latent" in owner for owner in owners)


class Sampler(ABC):
    """A reverse-time sampling strategy. Built as ``factory(config)``."""

    #: what the sampler needs of the model: a latent channel or none, a kind of token process. The default is a
    #: token-only sampler (``Needs(latent=False)``): one that samples a latent channel declares ``Needs(latent=True)``,
    #: one that samples a model with or without one ``Needs()``
    needs: Needs = Needs(latent=False)
    #: True when tokens are denoised given a finished clean latent (sequential); evaluation follows it
    conditions_on_clean_latent: bool = False
    #: True when ``sample`` takes ``length=`` (the positions to generate, any whole number >= 1; default the model's
    #: length): ladd passes it to such a sampler only (``ladd sample --length``), and ``fixed`` is then that long
    variable_length: bool = False
    #: True when ``sample`` takes a clean latent to draw tokens given (``latent=``); ladd gives one to no other sampler
    takes_latent: bool = False

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
        latent. ladd passes it only to a sampler declaring ``takes_latent = True``, and calls the others without it.
        """


class TokenDecoder(Sampler):
    """A sampler of the token channel whose steps another sampler can run: the token decoder of LADD's samplers.

    ``rules(model, chain, steps)`` yields the rules of the token chain's reverse steps
    (``registry.toolkit.sampling.TokenRule``), at most ``steps`` of them, each made after the step before it ran
    (``chain`` is the ``registry.toolkit.sampling.TokenChain`` they move). ``registry.toolkit.sampling.decode_tokens``
    runs them alone (a token-only model, or given a clean latent at latent time 0: sequential LADD); a joint sampler
    runs them beside its latent steps, one rule per step of its time grid, and a block sampler on each block.

    The tokens: ``model.vocab_size`` is K, the real token ids are ``0 .. K-1`` and the mask id is K
    (``registry.interfaces.mask_id(model.vocab_size)``); ``chain.x`` holds the current tokens ``[N, L]`` (the mask id
    where a position is still unknown; ``L`` is ``model.seq_len``, or the block's length when a block sampler runs the
    rules), ``chain.known`` the positions ``fixed`` gives (never to be written). A rule's logits are over the K real
    ids. ``registry.toolkit.sampling.RuleDecoder`` is this interface with ``sample`` provided (the chain from all
    masks to tokens under the rules): a decoder subclasses it and writes ``rules`` alone.
    """

    @abstractmethod
    def rules(self, model: DenoiserModel, chain: Any, steps: int) -> Iterable[Any]:
        """The token steps' rules, one per reverse step, at most ``steps``."""


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

    def context(self, batch: Tensor) -> Tensor | None:
        """Bool ``[B, S]``: the positions of ``batch`` that only condition the rest (an instruction's prompt), never
        noised and never scored. With context, the token loss and ``L^x`` average each row over its other positions
        and the batch over its rows (per-sequence normalisation, as instruction tuning does). None (the default)
        when rows hold no context; a row must keep at least one position out of it."""
        return None

    def prompt_ids(self, text: str) -> list[int] | None:
        """The ids a generation from the user's ``text`` starts with when the data frames its prompts (a chat
        template around the text, the assistant's turn opened), or None (the default) for the text's own ids."""
        return None

    def oracle_token_loss(self) -> float | None:
        """The exact optimal token loss when the data model is known (None otherwise)."""
        return None

    #: True when :meth:`verify` is the task's own checker of an answer (the ``checker`` reward runs it)
    verifies: bool = False

    def verify(self, prompt: str, completion: str, reference: str) -> float:
        """The task's own score of ``completion`` (text) as an answer to ``prompt``, whose data answer is
        ``reference``: a program's tests, a puzzle's rules, a checked equation. Only for a dataset declaring
        ``verifies = True``."""
        raise IncompatibleComponentsError(f"{type(self).__name__} ships no checker of answers (Dataset.verifies)")


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


class Reward(ABC):
    """A verifiable reward: one number per completion of a prompt, given the data's own answer (its ``reference``).
    Built as ``factory(config, dataset=...)``: the dataset of the experiment (its tokenizer, its task's checker)."""

    @abstractmethod
    def __call__(
        self, prompts: Sequence[str], completions: Sequence[str], references: Sequence[str]
    ) -> Sequence[float]:
        """The reward of each ``completions[i]`` (text) of ``prompts[i]``, whose data answer is ``references[i]``: one
        finite number each. ladd stops a run on an exception, a missing value, a non-number or a NaN, naming the
        reward and the row."""


@dataclass(frozen=True)
class ObjectiveStep:
    """What the training loop tells an objective at one optimisation step."""

    stage: int  # the stage's position, from 1
    step: int  # optimisation steps of the stage done before this one
    #: the step's seed: the same on every process, a function of the run's seed, the stage and the step alone, so a
    #: resumed run draws what an uninterrupted one drew
    seed: int
    shard: Shard | None = None  # this process's rows of the global batch (several processes), else None
    padding: Tensor | None = None  # ``Dataset.padding`` of the batch
    context: Tensor | None = None  # ``Dataset.context`` of the batch: the prompts

    def generator(self, device: torch.device | str) -> torch.Generator:
        """A generator on ``device`` seeded with the step's seed: every draw of the step may come from it."""
        return torch.Generator(device=device).manual_seed(self.seed)


class Objective(ABC):
    """What a training step minimises, given the model and the step's global batch (the ``loss`` slot; empty: the
    model's own bound). Built as ``factory(config, dataset=..., sampler=...)``: the experiment's data and its sampler
    (an RL objective's rollouts); a reward it scores with is an option naming one (``refers_to("reward")``), built by
    ladd and passed as that option's keyword.

    The training loop (stages, EMA, LoRA, resume, several processes, loggers) is the same for every objective: it
    calls :meth:`loss` once per optimisation step and steps the optimiser on its ``loss``.
    """

    #: the terms :meth:`loss` returns besides ``loss``, in order: the columns of ``metrics.csv`` and what every logger
    #: gets (``train/NAME``). A term may be left out of every step of a stage (its column stays empty there)
    terms: tuple[str, ...] = ()
    #: True when the loss reads the model's frozen base (``TrainableModel.frozen_base``: a reference policy); such an
    #: objective is refused before anything trains unless the run trains LoRA adapters over a base
    needs_frozen_base: bool = False

    @abstractmethod
    def loss(self, model: TrainableModel, batch: Tensor, step: ObjectiveStep) -> dict[str, Tensor]:
        """``loss`` (a scalar to minimise, the mean over the global batch of this process's share, as
        ``TrainableModel.loss`` gives it) and the :attr:`terms` (scalars, the same on every process or averaging over
        the processes to the global value). ``batch`` is the global batch (``step.shard`` names this process's rows).
        """

    def reach(self, model: TrainableModel) -> Tensor:
        """A scalar that depends on exactly the parameters :meth:`loss` trains (the stage's trainable set, found by
        walking its autograd graph); the default: the model's bound on one row of zeros."""
        return model.loss(torch.zeros(1, model.seq_len, dtype=torch.long, device=model.device))["loss"]

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the objective between steps (e.g. rollouts reused over several steps): tensors,
        numbers, strings, lists and dicts of them. The default: nothing."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: B027 - nothing to take back by default
        """Take back what :meth:`state_dict` gave, on resume."""

    def records(self) -> list[dict[str, Any]]:
        """What the objective sampled since it was last asked, as JSON-ready records (rollouts with their rewards),
        which training appends to the run's ``rollouts.jsonl``. The default: none."""
        return []


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


def context_of(dataset: Dataset, batch: Tensor) -> Tensor | None:
    """``dataset.context(batch)``; None for a dataset written without the ``Dataset`` base."""
    return dataset.context(batch) if isinstance(dataset, Dataset) else None


class Importer(ABC):
    """Turns another library's checkpoint into a ladd model: ``ladd import NAME SOURCE OUT``.

    An importer declares the model and fills its weights; ladd does the rest. In order, ladd checks that a local
    source holds only regular files (no link, device or FIFO anywhere under it), calls ``read(source)``
    (the checkpoint checked whole, before anything is built), ``overrides(checkpoint)`` (the model's config), builds
    the model from that config (refusing one too large for this machine's memory, and a user's override of what the
    importer sets), sets every parameter to NaN, calls ``fill(model, checkpoint)``, checks that every parameter was
    filled with finite values, and writes the model folder with ``record(checkpoint)`` and the SHA-256 of each file
    of ``files(checkpoint)`` as its source, and the files of ``carried(checkpoint)`` inside it (the model is built with
    them in place). ``registry.toolkit.checkpoints`` reads configs and safetensors files.
    """

    @abstractmethod
    def read(self, source: str) -> Any:
        """The checkpoint at ``source`` (a folder, or a hub id where the hub is reachable), checked whole: what the
        other methods are given. A source that is not such a checkpoint raises ``LaddError``, one line naming why."""

    @abstractmethod
    def overrides(self, checkpoint: Any) -> list[str]:
        """The config of the model the checkpoint fills, as ``KEY=VALUE`` overrides: a preset and the options that fix
        the network's sizes. A user may change any other setting; one of these keys (or a component of their slots)
        is refused, naming it."""

    @abstractmethod
    def fill(self, model: nn.Module, checkpoint: Any) -> None:
        """Copy the checkpoint's values into every parameter of ``model`` (named as in a model folder's weights:
        ``backbone.``...), in place under ``torch.no_grad()``."""

    @abstractmethod
    def record(self, checkpoint: Any) -> dict[str, str]:
        """Where the weights came from (a hub id and revision, or a folder's name), recorded in the model folder."""

    @abstractmethod
    def files(self, checkpoint: Any) -> list[Path]:
        """The files the weights are read from; the model folder records each one's name and SHA-256."""

    def carried(self, checkpoint: Any) -> dict[str, Path]:
        """Files the model folder carries besides its weights, by their path inside it, from the given files: what its
        config names ``model:PATH`` (an imported model's tokenizer: ``dataset.tokenizer=model:tokenizer``). None (the
        default): ``{}``."""
        return {}

    def example(self, folder: Path) -> str | None:
        """A tiny checkpoint of this format written into ``folder``, whose source (``folder`` itself, typically) ``ladd
        plugins check`` imports, loads and samples; None (the default) when the importer offers none, and is then not
        exercised."""
        return None

    def reference(self, checkpoint: Any, tokens: Tensor, tau: Tensor) -> Tensor | None:
        """The token logits ``[B, S, K]`` the checkpoint's own network gives for ``tokens`` ``[B, S]`` (real ids, the
        mask id where unknown) at times ``tau`` ``[B]``, computed from the checkpoint as its own library computes them,
        not through ladd's model: ``ladd plugins check`` holds the imported example's logits against them. None (the
        default): not compared."""
        return None

    def vocabulary(self, checkpoint: Any) -> list[str] | None:
        """The token of each row of the network's token table (ids ``0 .. K-1``), as the checkpoint records it (its
        vocabulary file): ``ladd plugins check`` holds the imported model's tokenizer against it, id by id. None (the
        default): the tokenizer is held to the table's size alone."""
        return None


class Launcher(ABC):
    """Runs the jobs of a sweep (``ladd train -m ... launcher=NAME``): in this process, in processes of this machine, or
    through a scheduler. Built as ``factory(config)``; its options come from the command line or a user's file, never
    from a preset.

    A job is a picklable callable of no arguments that returns its exit status: 0 when it finished, 128 + N when
    signal N stopped it (its run resumes where it stopped when the job runs again), another number when it failed. A
    job writes only its own files, so jobs may run in any order and at once; running one again continues it.
    """

    #: True when :meth:`launch` returns only once every job has ended; False when it returns once the jobs are queued
    #: with a scheduler that runs them later (:meth:`alive` then says which are still queued or running)
    waits: bool = True

    @abstractmethod
    def launch(self, jobs: Sequence[Callable[[], int]], folder: Path, started: Callable[[int, str], None]) -> None:
        """Run or queue every job of ``jobs``, calling ``started(position, job_id)`` as each one is handed over (the
        id names it to :meth:`alive`). ``folder`` is the launcher's own, for scripts and logs.

        A launcher that waits stops starting jobs once one returns 128 + N (a signal asked the sweep to stop). When an
        exception reaches it while it waits (ladd stopping on a signal), it passes the signal on to the jobs it runs,
        so that each stops at a checkpoint, waits for them and lets the exception through. A launcher that queues
        raises ``LaddError`` with the scheduler's own message when the scheduler refuses the jobs, having queued none.
        """

    def alive(self, job_ids: Sequence[str], folder: Path) -> set[str]:
        """Those of ``job_ids`` (from an earlier :meth:`launch` with the same ``folder``) still queued or running. The
        default, for a launcher whose jobs end with its :meth:`launch`: none."""
        return set()

    def log(self, job_id: str, folder: Path) -> Path | None:
        """The file holding what job ``job_id`` wrote to its standard error, when the launcher keeps one (None: it
        does not)."""
        return None
