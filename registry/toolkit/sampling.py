"""Sampler helpers: the reverse time grid, known tokens, a given clean latent, guided token predictions and the token
chain's step, which every token decoder runs (``token_step`` with a ``TokenRule``)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from registry.contract import deprecated
from registry.errors import InvalidConfigError, LaddError
from registry.interfaces import (
    Denoised,
    DenoiserModel,
    Process,
    RevealingProcess,
    SampleOutput,
    TokenDecoder,
    mask_id,
)

__all__ = [
    "Conditioning",
    "ProcessRule",
    "RuleDecoder",
    "TokenChain",
    "TokenRule",
    "check_fixed_kept",
    "decode_tokens",
    "denoise_tokens",
    "guidance_seed",
    "held_latent",
    "known_tokens",
    "latent_step",
    "process_rules",
    "revealing",
    "reverse_step",
    "run_rules",
    "start_chain",
    "start_tokens",
    "takes_fixed",
    "time_grid",
    "times",
    "token_logits",
    "token_step",
]


def time_grid(steps: int) -> list[tuple[float, float]]:
    """Pairs (tau_t, tau_s) from 1 down to 0 in ``steps`` equal reverse steps."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return [(k / steps, (k - 1) / steps) for k in range(steps, 0, -1)]


def times(batch: int, tau: float, device: torch.device) -> Tensor:
    """A time tensor ``[batch]`` filled with ``tau``."""
    return torch.full((batch,), tau, device=device)


def known_tokens(
    model: DenoiserModel, num_samples: int, fixed: Tensor | None, device: torch.device, length: int | None = None
) -> Tensor | None:
    """``fixed`` checked (shape, dtype, ids) and moved to ``device``; None when nothing is known. ``length``: the
    positions generated (the model's length by default)."""
    if fixed is None:
        return None
    length = model.seq_len if length is None else length
    if fixed.shape != (num_samples, length) or fixed.dtype != torch.long:
        raise InvalidConfigError(
            f"fixed tokens must be a LongTensor of shape ({num_samples}, {length}), "
            f"got {fixed.dtype} of shape {tuple(fixed.shape)}"
        )
    free = mask_id(model.vocab_size)
    if bool(((fixed < 0) | (fixed > free)).any()):
        raise InvalidConfigError(
            f"fixed tokens must be ids in [0, {model.vocab_size}) or the mask id {free} at free positions"
        )
    return fixed.to(device)


def held_latent(model: DenoiserModel, num_samples: int, latent: Tensor | None, device: torch.device) -> Tensor | None:
    """A given clean latent checked against the model's (the null latent's shape and kind of dtype; real ids, or finite
    values) and moved to ``device`` in the null latent's dtype; None when none is given."""
    if latent is None:
        return None
    channel = model.latent_channel()[0]
    null = channel.null(num_samples, device)
    if latent.shape != null.shape or latent.is_floating_point() != null.is_floating_point():
        kind = "floats" if null.is_floating_point() else "ids"
        raise InvalidConfigError(
            f"a clean latent for {num_samples} samples must hold {kind} of shape {tuple(null.shape)}, as this model's "
            f"latent does, got {latent.dtype} of shape {tuple(latent.shape)}"
        )
    if null.is_floating_point():
        if not bool(torch.isfinite(latent).all()):
            raise InvalidConfigError("a clean latent must be finite, but this one holds NaN or infinity")
    elif channel.values is not None and bool(((latent < 0) | (latent >= channel.values)).any()):
        raise InvalidConfigError(f"a clean latent's ids must be real codes, in [0, {channel.values}) (no mask id)")
    return latent.to(device=device, dtype=null.dtype)


def start_tokens(
    model: DenoiserModel, num_samples: int, device: torch.device, generator: torch.Generator, fixed: Tensor | None
) -> Tensor:
    """The token chain's start: a prior draw with the known tokens of ``fixed`` written in (mask id: free)."""
    x = model.process.prior((num_samples, model.seq_len), device, generator)
    known = known_tokens(model, num_samples, fixed, device)
    return x if known is None else torch.where(known == mask_id(model.vocab_size), x, known)


def check_fixed_kept(tokens: Tensor, fixed: Tensor | None, model: DenoiserModel) -> Tensor:
    """``tokens``, after checking that the reverse chain left every known token of ``fixed`` in place."""
    if fixed is not None:
        fixed = fixed.to(tokens.device)
        known = fixed != mask_id(model.vocab_size)
        if not torch.equal(tokens[known], fixed[known]):
            name = type(model.process).__name__
            if takes_fixed(model.process):
                fix = "must return them unchanged"
            else:
                fix = "must take them (step(..., fixed=None)), keep them and not declare takes_fixed = False"
            raise LaddError(
                f"token process {name} changed tokens given in `fixed` (a prompt or an infill): its step {fix}"
            )
    return tokens


def takes_fixed(process: Process) -> bool:
    """Whether ``process.step`` takes the known tokens (``fixed=``), as the process declares (``Process.takes_fixed``,
    True unless its step was written without the keyword)."""
    return getattr(process, "takes_fixed", True) is not False and type(process) not in _WITHOUT_FIXED


#: process classes whose step turned out to lack ``fixed`` without declaring it: called without it from then on
_WITHOUT_FIXED: set[type] = set()


def reverse_step(
    process: Process,
    x_t: Tensor,
    prediction: Tensor,
    tau_t: Tensor,
    tau_s: Tensor,
    generator: torch.Generator,
    fixed: Tensor | None,
) -> Tensor:
    """``process.step``, given the known tokens ``fixed`` when there are some; a process declaring ``takes_fixed =
    False`` is called without them (``check_fixed_kept`` then tells whether it kept them). A step without the keyword
    that does not declare it is called without it too, with a deprecation line, until the contract that refuses it."""
    if fixed is None or not takes_fixed(process):
        return process.step(x_t, prediction, tau_t, tau_s, generator)
    try:
        return process.step(x_t, prediction, tau_t, tau_s, generator, fixed=fixed)
    except TypeError as error:
        if "unexpected keyword argument 'fixed'" not in str(error):
            raise
        kind = type(process)
        deprecated("takes_fixed", f"token process {kind.__name__} ({kind.__module__})")
        _WITHOUT_FIXED.add(kind)
        return process.step(x_t, prediction, tau_t, tau_s, generator)


def revealing(model: DenoiserModel, fast: bool) -> RevealingProcess | None:
    """The token process when the exact fast path applies (it picks changing positions before predicting), else None."""
    return model.process if fast and isinstance(model.process, RevealingProcess) else None


def latent_step(
    model: DenoiserModel, y_t: Tensor, prediction: Tensor | None, tau_t: Tensor, tau_s: Tensor,
    generator: torch.Generator,
) -> Tensor:
    """One reverse step of the latent channel from ``tau_t`` to ``tau_s`` with the network's latent ``prediction``."""
    if prediction is None:
        raise LaddError("the model predicted no latent: a latent step needs a model with a latent channel")
    _, latent_process = model.latent_channel()
    return latent_process.step(y_t, prediction, tau_t, tau_s, generator)


def guidance_seed(generator: torch.Generator, guidance: float) -> int | None:
    """The seed of the guided pass's null-latent noise, drawn once per sampling call from ``generator``; None unguided.

    Every step reuses it, so the noise does not depend on how many network calls a path makes: the fast
    path stays equal to the plain one, and unguided sampling draws nothing more.
    """
    if guidance == 1.0:
        return None
    return int(torch.randint(1 << 62, (), generator=generator, device=generator.device))


def token_logits(
    model: DenoiserModel,
    x_t: Tensor,
    tau_x: Tensor,
    y_t: Tensor | None,
    tau_y: Tensor | None,
    guidance: float,
    null_seed: int | None = None,
    rows: Tensor | None = None,
    known: Tensor | None = None,
    cache: Any = None,
    window: slice | None = None,
) -> tuple[Tensor, Tensor | None, int]:
    """Token logits (at ``rows`` only when given; guided when ``guidance != 1``), the latent prediction, network calls.

    The guided pass's null latent is noised (unless the latent's ``noised_null`` is False) from a stream seeded
    with ``null_seed`` (see :func:`guidance_seed`). Without a latent the unconditional pass sees the ``known``
    positions (bool ``[B, S]``: a prompt's) masked, as LLaDA guides; with none known it is the conditional one and
    is not computed. ``cache`` and ``window``: the token backbone's key-value cache (``DenoiserModel.predict``),
    passed only when given; a guided prediction has two inputs and takes no cache.
    """
    cached = {} if cache is None else {"cache": cache, "window": window}
    out = model.predict(x_t, tau_x, y_t, tau_y, rows, **cached)
    conditional = _token_prediction(out)
    if guidance == 1.0 or (y_t is None and (known is None or not bool(known.any()))):
        return conditional, out.latent, 1
    if cache is not None:
        raise InvalidConfigError("a guided prediction makes two passes over different inputs: it takes no cache")
    if y_t is None:
        assert known is not None  # the unguided return above took every other case
        unguided = torch.where(known, mask_id(model.vocab_size), x_t)
        unconditional = _token_prediction(model.predict(unguided, tau_x, None, None, rows))
    else:
        if null_seed is None or tau_y is None:
            raise ValueError(
                "a guided prediction needs the latent's time tau_y and the null_seed that guidance_seed drew"
            )
        noise = torch.Generator(device=x_t.device).manual_seed(null_seed)
        latent, latent_process = model.latent_channel()
        null = latent.null(x_t.shape[0], x_t.device).to(y_t.dtype)
        if latent.noised_null:
            null = latent_process.corrupt(null, tau_y, noise)
        unconditional = _token_prediction(model.predict(x_t, tau_x, null, tau_y, rows))
    logits = model.process.guide(conditional.log_softmax(-1), unconditional.log_softmax(-1), guidance)
    return logits, out.latent, 2


def _token_prediction(out: Denoised) -> Tensor:
    """The token logits of a prediction made at a token time; an error if the denoiser gave none."""
    if out.tokens is None:
        raise LaddError("the denoiser returned no token logits for a prediction at a token time (tau_x)")
    return out.tokens


@dataclass
class TokenChain:
    """The token channel between reverse steps: its tokens, the known ones, the network calls spent so far, and
    which step wrote each position."""

    x: Tensor  # [B, S] ids, the mask id where still masked
    fixed: Tensor | None = None  # known tokens (mask id at the free positions) on x's device; None: none known
    calls: int = 0
    #: the last full prediction, reused while the tokens do not change and the denoiser ignores the token time
    logits: Tensor | None = None
    steps: int = 0  # the token steps taken so far
    #: [B, S] int64: the step (0-based) that unmasked each position, -1 where none has (SampleOutput.order)
    order: Tensor | None = None

    def known(self, model: DenoiserModel) -> Tensor | None:
        """Bool ``[B, S]``: the positions of known tokens; None when none are known."""
        return None if self.fixed is None else self.fixed != mask_id(model.vocab_size)

    def advance(self, model: DenoiserModel, x: Tensor | None = None) -> None:
        """End a step at tokens ``x`` (None: unchanged), noting the step as the writer of each position it unmasked."""
        if self.order is None:
            self.order = torch.full_like(self.x, -1)
        if x is not None:
            mask = mask_id(model.vocab_size)
            self.order = torch.where((self.x == mask) & (x != mask), self.steps, self.order)
            self.x = x
        self.steps += 1


def start_chain(
    model: DenoiserModel, num_samples: int, device: torch.device, generator: torch.Generator, fixed: Tensor | None
) -> TokenChain:
    """The token chain at its start (:func:`start_tokens`), with the known tokens checked and on ``device``."""
    x = start_tokens(model, num_samples, device, generator, fixed)
    return TokenChain(x, known_tokens(model, num_samples, fixed, device))


@dataclass(frozen=True)
class Conditioning:
    """What the token predictions see besides the tokens: a latent at its time, and classifier-free guidance."""

    latent: Tensor | None = None  # y at the time tau_y (a held clean latent at 0, or the joint chain's noisy one)
    tau_y: Tensor | None = None
    guidance: float = 1.0
    null_seed: int | None = None  # from guidance_seed: the guided pass's null-latent noise


class TokenRule(ABC):
    """How one reverse step of the token chain chooses where to predict and what to write there.

    :func:`token_step` asks ``rows`` first (random draws that do not depend on the prediction come there), then
    predicts at those rows at ``time`` (through ``cache`` and ``window`` when set), then asks ``commit``.
    """

    #: the token backbone's key-value cache and the window of positions recomputed in it (``CachingBackbone``)
    cache: Any = None
    window: slice | None = None

    @abstractmethod
    def rows(self, model: DenoiserModel, chain: TokenChain, generator: torch.Generator) -> Tensor | None:
        """Bool ``[B, S]``: the positions whose prediction the step needs (none: no network call), or None for all."""

    @abstractmethod
    def time(self, model: DenoiserModel, chain: TokenChain) -> Tensor:
        """The token time ``[B]`` the denoiser is told."""

    @abstractmethod
    def commit(
        self, model: DenoiserModel, chain: TokenChain, logits: Tensor, rows: Tensor | None, generator: torch.Generator
    ) -> Tensor:
        """The tokens after the step, from the logits at ``rows`` (``[N, K]``; ``[B, S, K]`` when ``rows`` is None)."""


class ProcessRule(TokenRule):
    """The token process's own reverse step from ``tau_t`` to ``tau_s`` (MDLM's ancestral step), which never draws the
    network's own mask (``DenoiserModel.mask_column``).

    ``fast`` with a ``RevealingProcess``: the exact fast path, drawing the revealing positions first and predicting
    there only; otherwise a prediction at every position and the process's ``step``.
    """

    def __init__(self, tau_t: Tensor, tau_s: Tensor, fast: bool = True) -> None:
        self.tau_t, self.tau_s, self.fast = tau_t, tau_s, fast

    def rows(self, model: DenoiserModel, chain: TokenChain, generator: torch.Generator) -> Tensor | None:
        process = revealing(model, self.fast)
        return None if process is None else process.reveal(chain.x, self.tau_t, self.tau_s, generator)

    def time(self, model: DenoiserModel, chain: TokenChain) -> Tensor:
        return self.tau_t

    def commit(
        self, model: DenoiserModel, chain: TokenChain, logits: Tensor, rows: Tensor | None, generator: torch.Generator
    ) -> Tensor:
        process = revealing(model, self.fast)
        if model.mask_column is not None:  # the process's step draws real tokens: the network's mask gets none (SUBS)
            logits = logits.index_fill(-1, torch.tensor([model.mask_column], device=logits.device), float("-inf"))
        if rows is not None and process is not None:
            return process.fill(chain.x, rows, logits, generator)
        return reverse_step(model.process, chain.x, logits, self.tau_t, self.tau_s, generator, chain.fixed)


def token_step(
    model: DenoiserModel,
    chain: TokenChain,
    rule: TokenRule,
    generator: torch.Generator,
    condition: Conditioning = Conditioning(),
    every_step: bool = False,
) -> Tensor | None:
    """One reverse step of the token chain under ``rule``: ``chain`` moves (its tokens, its calls); returns the
    latent prediction of the network call (None when none was made).

    A step whose rule needs no position calls no network, unless ``every_step`` (a joint sampler's latent needs the
    network at every step). Without ``every_step``, a full prediction is reused while the tokens do not change and
    the denoiser ignores the token time (it would be recomputed from identical inputs).
    """
    rows = rule.rows(model, chain, generator)
    if rows is not None and not every_step and not bool(rows.any()):
        chain.advance(model)
        return None
    latent_prediction = None
    if rows is None and not every_step and chain.logits is not None and model.caches_token_predictions:
        logits = chain.logits
    else:
        logits, latent_prediction, used = token_logits(
            model, chain.x, rule.time(model, chain), condition.latent, condition.tau_y, condition.guidance,
            condition.null_seed, rows, chain.known(model), rule.cache, rule.window,
        )
        chain.calls += used
    x = rule.commit(model, chain, logits, rows, generator)
    chain.logits = logits if rows is None and torch.equal(x, chain.x) else None
    chain.advance(model, x)
    return latent_prediction


def process_rules(chain: TokenChain, steps: int, fast: bool = True) -> Iterator[ProcessRule]:
    """The token process's reverse steps on the time grid of ``steps`` steps, one rule each."""
    batch, device = chain.x.shape[0], chain.x.device
    for tau_t, tau_s in time_grid(steps):
        yield ProcessRule(times(batch, tau_t, device), times(batch, tau_s, device), fast)


def run_rules(
    model: DenoiserModel, chain: TokenChain, rules: Iterable[TokenRule], generator: torch.Generator,
    condition: Conditioning,
) -> TokenChain:
    """``chain`` after a token step under each rule in turn."""
    for rule in rules:
        token_step(model, chain, rule, generator, condition)
    return chain


def decode_tokens(
    decoder: TokenDecoder,
    model: DenoiserModel,
    num_samples: int,
    steps: int,
    generator: torch.Generator,
    fixed: Tensor | None = None,
    latent: Tensor | None = None,
    guidance: float = 1.0,
) -> SampleOutput:
    """The token chain from all-mask to clean under ``decoder``'s rules, given known tokens and, for a model with a
    latent channel, a clean latent (held at latent time 0); the latent is returned as the output's."""
    device = model.device
    chain = start_chain(model, num_samples, device, generator, fixed)
    tau_y = None if latent is None else times(num_samples, 0.0, device)
    condition = Conditioning(latent, tau_y, guidance, guidance_seed(generator, guidance))
    run_rules(model, chain, decoder.rules(model, chain, steps), generator, condition)
    return SampleOutput(check_fixed_kept(chain.x, fixed, model), latent, chain.calls, order=chain.order)


class RuleDecoder(TokenDecoder):
    """A ``TokenDecoder`` whose ``sample`` is provided: the token chain from all masks to tokens under its ``rules``
    (:func:`decode_tokens`), keeping ``fixed``, with ``guidance`` as its classifier-free guidance. A decoder writes
    ``rules`` alone, and overrides ``sample`` only to do more."""

    #: the classifier-free guidance of this decoder's own ``sample`` (a sampler running its rules passes its own)
    guidance: float = 1.0

    @torch.no_grad()
    def sample(  # type: ignore[override]  # no latent keyword: a LADD sampler hands its latent to decode_tokens
        self,
        model: DenoiserModel,
        num_samples: int,
        steps: int,
        generator: torch.Generator,
        fixed: Tensor | None = None,
    ) -> SampleOutput:
        """The token chain from all masks to tokens under this decoder's rules, keeping ``fixed``."""
        return decode_tokens(self, model, num_samples, steps, generator, fixed, guidance=self.guidance)


def denoise_tokens(
    model: DenoiserModel,
    num_samples: int,
    steps: int,
    generator: torch.Generator,
    device: torch.device,
    latent: Tensor | None = None,
    guidance: float = 1.0,
    fast: bool = True,
    fixed: Tensor | None = None,
) -> tuple[Tensor, int]:
    """Run the token chain from all-mask to clean, optionally conditioned on a fixed clean latent and known tokens.

    Fast path (exact): draw the positions that reveal first, then compute the output head and the
    categorical draw there only; a step that reveals nothing calls no network. Plain path: predict
    every position, and reuse the last prediction while nothing changes and the denoiser ignores
    the token time (it would be recomputed from identical inputs); any process runs on it. Known tokens
    (``fixed``) start in place and every step is given them, so the chain only fills the free positions.
    """
    chain = start_chain(model, num_samples, device, generator, fixed)
    tau_y = None if latent is None else times(num_samples, 0.0, device)
    condition = Conditioning(latent, tau_y, guidance, guidance_seed(generator, guidance))
    run_rules(model, chain, process_rules(chain, steps, fast), generator, condition)
    return check_fixed_kept(chain.x, fixed, model), chain.calls
