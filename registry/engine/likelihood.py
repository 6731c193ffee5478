"""Likelihood of trained models: the full variational bound of a row's scored tokens, and greedy decoding.

A row is ``S`` token ids with a bool mask of the positions it scores. The others are given: a prompt (real ids),
kept clean and never scored, or positions left unknown (the mask id), kept masked and never scored, so the bound
is that of the scored tokens given the prompt, the unknown positions summed out.

The bound is the paper's App. C.1 bound of the model the sampler's strategy defines: the token channel's terms,
and with a latent channel its terms, its endpoint term and the encoder term (the posterior's entropy subtracted),
on the latent the encoder draws from the whole row. Joint models score both channels at one time (a draw at each
channel's own times, the other channel drawn at the same time); models sampled sequentially score the tokens given
the clean latent and the latent's own chain (given the prompt when the token network denoises the latent).

Every row draws from its own generator, seeded from the run's seed and the row's content, so a row's estimate does
not depend on the batch, the order or the process it is scored in: ``ladd eval``'s bound and ``ladd harness``'s
requests agree on equal rows.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch import Tensor

from registry.distributed import own_noise
from registry.errors import IncompatibleComponentsError, InvalidConfigError
from registry.interfaces import BoundDraw, mask_id
from registry.toolkit.sampling import latent_step

from .model import DiffusionModel
from .sampling import inference_precision

#: Likelihood modes: ``mc``, LLaDA's Monte Carlo estimator; ``exact``, every masked set of a short continuation.
MODES = ("mc", "exact")
#: ``exact`` mode enumerates 2^L - 1 masked sets: continuations of at most this many tokens
EXACT_LIMIT = 12


def row_seed(seed: int, tokens: Tensor, scored: Tensor) -> int:
    """A 63-bit seed from the run's ``seed`` and one row's content (its ids and scored positions)."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(seed.to_bytes(8, "little", signed=False))
    digest.update(tokens.detach().cpu().to(torch.int64).numpy().tobytes())
    digest.update(scored.detach().cpu().to(torch.bool).numpy().tobytes())
    return int.from_bytes(digest.digest(), "little") >> 1


def _generator(seed: int, tokens: Tensor, scored: Tensor) -> torch.Generator:
    return torch.Generator().manual_seed(row_seed(seed, tokens, scored))


def _stratified(draws: int, generator: torch.Generator) -> Tensor:
    """``draws`` uniforms in [0, 1), one per stratum, with one shared random offset."""
    offset = torch.rand((), generator=generator, dtype=torch.float64)
    return (offset + torch.arange(draws, dtype=torch.float64)) / draws


@dataclass
class _Draws:
    """Every network input of some rows' draws (on the CPU), concatenated over rows."""

    x0: Tensor  # [R, S] clean rows (the mask id at unknown positions)
    token: BoundDraw  # the token channel's draws
    token_latent: Tensor | None = None  # the latent the token pass sees (noised at the token times, or clean)
    y0: Tensor | None = None  # clean latents drawn from the encoder's posterior
    latent: BoundDraw | None = None  # the latent channel's draws
    latent_tokens: Tensor | None = None  # the tokens the latent pass sees
    fixed: Tensor | None = None  # [R] nats added to every draw: endpoint and encoder terms


def check_bound(model: DiffusionModel, clean_latent: bool) -> None:
    """Refuse a model whose components give no bound, before any request runs."""
    parts = [("process", model.process)]
    if model.latent_process is not None:
        parts.append(("latent_process", model.latent_process))
    for slot, process in parts:
        if not process.elbo:
            raise IncompatibleComponentsError(
                f"{slot} {type(process).__name__} gives no variational bound (it does not declare elbo = True): no "
                f"likelihood can be reported for this model"
            )
    block = model.attention.block
    if block is not None:  # the chain's bound denoises every position at once; such a model is decoded block by block
        raise IncompatibleComponentsError(
            f"the token backbone attends in blocks of {block}, so the model is decoded block by block and the bound of "
            f"a chain over all positions at once is not its likelihood; its NELBO is the sum of its blocks' (L^x)"
        )
    if model.latent_process is not None and not clean_latent and model.latent_process.horizon != model.process.horizon:
        raise IncompatibleComponentsError(
            f"a joint model's bound needs both channels on one time grid, but process.horizon="
            f"{model.process.horizon} and latent_process.horizon={model.latent_process.horizon}"
        )


def check_rows(model: DiffusionModel, tokens: Tensor, scored: Tensor) -> None:
    """Rows of at most the model's length (a model trained at variable length scores shorter ones) whose scored
    positions hold real token ids."""
    if tokens.dim() != 2 or not 0 < tokens.shape[1] <= model.seq_len or scored.shape != tokens.shape:
        raise InvalidConfigError(
            f"rows to score must be [N, L] ids, L <= {model.seq_len}, with a bool [N, L] of scored positions, got "
            f"{tuple(tokens.shape)} and {tuple(scored.shape)}"
        )
    values = tokens[scored]
    if bool(((values < 0) | (values >= model.vocab_size)).any()):
        raise InvalidConfigError(f"scored positions must hold real token ids, in [0, {model.vocab_size})")


@torch.no_grad()
def bound(
    model: DiffusionModel,
    tokens: Tensor,
    scored: Tensor,
    draws: int,
    seed: int,
    clean_latent: bool,
    batch_size: int,
    precision: str = "auto",
    mode: str = "mc",
) -> Tensor:
    """``[N, D]`` float64: unbiased estimates (nats) of the bound on ``-log p`` of each row's scored tokens.

    ``mode="mc"`` makes ``D = draws`` Monte Carlo draws per row (one for an exact likelihood, such as a causal
    model's); ``mode="exact"`` sums every masked set of the scored positions (``D = 1``), for a token-only model
    whose network ignores the time. ``clean_latent``: the sampler's strategy (sequential: tokens given the clean
    latent). The networks run ``batch_size`` rows at a time under ``precision``.
    """
    check_bound(model, clean_latent)
    check_rows(model, tokens, scored)
    if draws < 1:
        raise InvalidConfigError(f"draws={draws} is out of range: it must be >= 1")
    if mode not in MODES:
        raise InvalidConfigError(f"likelihood mode {mode!r} is not valid: it must be one of {', '.join(MODES)}")
    model.eval()
    tokens, scored = tokens.cpu(), scored.cpu()
    if mode == "exact":
        return _exact(model, tokens, scored, batch_size, precision)
    if model.process.exact_likelihood and model.latent is None:
        draws = 1
    features = _features(model, tokens, batch_size, precision)
    parts = [
        _row_draws(model, tokens[n], scored[n], None if features is None else features[n : n + 1], draws, seed,
                   clean_latent)
        for n in range(tokens.shape[0])
    ]
    joined = _join(parts)
    return _score(model, joined, clean_latent, batch_size, precision).view(tokens.shape[0], draws)


def _features(model: DiffusionModel, tokens: Tensor, batch_size: int, precision: str) -> Tensor | None:
    """The encoder's features of every row (on the model's device), computed once for all of a row's draws; None
    without a latent channel."""
    if model.latent is None:
        return None
    if model.encoder is None:
        raise IncompatibleComponentsError("a latent channel needs an encoder: no bound without one")
    device = model.device
    with inference_precision(device, precision):
        return torch.cat([model.encoder(chunk.to(device)) for chunk in tokens.split(batch_size)])


def _row_draws(
    model: DiffusionModel, tokens: Tensor, scored: Tensor, features: Tensor | None, draws: int, seed: int,
    clean_latent: bool,
) -> _Draws:
    """One row's draws, every one from the row's own generator in a fixed order."""
    generator = _generator(seed, tokens, scored)
    x0, free = tokens.expand(draws, -1), scored.expand(draws, -1)
    process = model.process
    token = process.bound_draw(x0, free, _stratified(draws, generator), generator)
    fixed = process.prior_bound(tokens[None], scored[None])
    if features is None:
        return _Draws(x0, token, fixed=fixed.expand(draws))
    latent, latent_process = model.latent_channel()
    device = model.device
    with own_noise(None, device, generator):
        y0 = latent.encode(features.expand(draws, *features.shape[1:])).y0.cpu()
    entropy = latent.posterior_entropy(features).cpu()
    moved = latent_process.bound_draw(y0, None, _stratified(draws, generator), generator)
    if clean_latent:
        token_latent, latent_tokens = y0, x0.masked_fill(free, mask_id(model.vocab_size))
    else:
        token_latent = latent_process.bound_state(y0, None, token.tau, generator)
        latent_tokens = process.bound_state(x0, free, moved.tau, generator)
    fixed = (fixed - entropy).expand(draws) + latent_process.prior_bound(y0, None)
    return _Draws(x0, token, token_latent, y0, moved, latent_tokens, fixed)


def _cat(tensors: list[Tensor | None]) -> Tensor | None:
    """The tensors joined along rows; None when every part lacks it."""
    present = [t for t in tensors if t is not None]
    return torch.cat(present) if present else None


def _cat_draws(records: list[BoundDraw]) -> BoundDraw:
    rows = [r.rows for r in records]
    joined = _cat(rows) if all(r is not None for r in rows) else None
    state, tau, weight = (torch.cat([getattr(r, name) for r in records]) for name in ("state", "tau", "weight"))
    return BoundDraw(state, tau, weight, joined)


def _join(parts: list[_Draws]) -> _Draws:
    """The draws of several rows as one batch."""
    latent = [p.latent for p in parts if p.latent is not None]
    return _Draws(
        torch.cat([p.x0 for p in parts]),
        _cat_draws([p.token for p in parts]),
        _cat([p.token_latent for p in parts]),
        _cat([p.y0 for p in parts]),
        _cat_draws(latent) if latent else None,
        _cat([p.latent_tokens for p in parts]),
        _cat([p.fixed for p in parts]),
    )


def _on(draw: BoundDraw, index: slice, device: torch.device) -> BoundDraw:
    part = draw.select(index)
    rows = None if part.rows is None else part.rows.to(device)
    return BoundDraw(part.state.to(device), part.tau.to(device), part.weight.to(device), rows)


def _score(model: DiffusionModel, draws: _Draws, clean_latent: bool, batch_size: int, precision: str) -> Tensor:
    """``[R]`` float64: each draw's bound, the networks run ``batch_size`` draws at a time."""
    device, total = model.device, []
    for start in range(0, draws.x0.shape[0], batch_size):
        part = slice(start, start + batch_size)
        x0 = draws.x0[part].to(device)
        token = _on(draws.token, part, device)
        tau = token.tau.float()
        y_t = None if draws.token_latent is None else draws.token_latent[part].to(device)
        tau_y = None if y_t is None else (torch.zeros_like(tau) if clean_latent else tau)
        with inference_precision(device, precision):
            out = model.predict(token.state, tau, y_t, tau_y, token.rows)
        if out.tokens is None:
            raise IncompatibleComponentsError("the denoiser returned no token logits: no token bound")
        terms = model.process.bound_terms(out.tokens, x0, token)
        if draws.latent is not None and draws.y0 is not None and draws.latent_tokens is not None:
            terms = terms + _latent_terms(model, draws, part, clean_latent, precision)
        if draws.fixed is not None:
            terms = terms + draws.fixed[part].to(device)
        total.append(terms.cpu())
    return torch.cat(total)


def _latent_terms(model: DiffusionModel, draws: _Draws, part: slice, clean_latent: bool, precision: str) -> Tensor:
    """The latent channel's terms at its own draws, the tokens as the strategy shows them."""
    assert draws.latent is not None and draws.y0 is not None and draws.latent_tokens is not None
    device = model.device
    moved = _on(draws.latent, part, device)
    tau = moved.tau.float()
    x_t = draws.latent_tokens[part].to(device)
    with inference_precision(device, precision):
        if clean_latent:
            out = model.predict(x_t, None, moved.state, tau)
        else:  # the token head at no position: only the latent prediction is read
            out = model.predict(x_t, tau, moved.state, tau, torch.zeros_like(x_t, dtype=torch.bool))
    if out.latent is None:
        raise IncompatibleComponentsError("the denoiser returned no latent prediction: no latent bound")
    return model.latent_channel()[1].bound_terms(out.latent, draws.y0[part].to(device), moved)


def _exact(model: DiffusionModel, tokens: Tensor, scored: Tensor, batch_size: int, precision: str) -> Tensor:
    """``[N, 1]``: the bound summed over every masked set of each row's scored positions."""
    if model.latent is not None or not model.caches_token_predictions:
        what = "has a latent channel" if model.latent is not None else "reads the token time"
        raise IncompatibleComponentsError(
            f"exact likelihood enumerates the masked sets of a continuation for a token-only network that ignores the "
            f"time, but this model {what}; use the Monte Carlo mode (mc)"
        )
    longest = int(scored.sum(dim=1).max()) if scored.numel() else 0
    if longest > EXACT_LIMIT:
        raise InvalidConfigError(
            f"exact likelihood enumerates the 2^L - 1 masked sets of a continuation of L tokens; one here has L = "
            f"{longest}, above {EXACT_LIMIT}: use the Monte Carlo mode (mc)"
        )
    totals = []
    for n in range(tokens.shape[0]):
        subsets = model.process.bound_subsets(tokens[n][None], scored[n][None])
        if subsets is None:
            raise IncompatibleComponentsError(
                f"process {type(model.process).__name__} gives no finite set of states (bound_subsets): no exact mode"
            )
        rows = subsets.state.shape[0]
        row = _Draws(tokens[n].expand(rows, -1), subsets, fixed=torch.zeros(rows, dtype=torch.float64))
        prior = model.process.prior_bound(tokens[n][None], scored[n][None])
        totals.append(_score(model, row, False, batch_size, precision).sum() + prior.cpu().sum())
    return torch.stack(totals).view(-1, 1)


@torch.no_grad()
def greedy_matches(
    model: DiffusionModel,
    tokens: Tensor,
    scored: Tensor,
    seed: int,
    clean_latent: bool,
    batch_size: int,
    precision: str = "auto",
) -> Tensor:
    """Bool ``[N]``: whether the model's greedy decoding of each row's scored positions gives its tokens.

    A causal model (``exact_likelihood``): the argmax of every teacher-forced prediction. A masked model: ``L``
    steps from all scored positions masked, each committing the argmax at the most confident masked position
    (LLaDA's check); a latent channel follows its own reverse chain on the same grid (``L`` steps: after them for
    a sequential model, alongside them for a joint one), from a prior draw of the row's generator.
    """
    check_rows(model, tokens, scored)
    model.eval()
    found = []
    for start in range(0, tokens.shape[0], batch_size):
        rows, chosen = tokens[start : start + batch_size].cpu(), scored[start : start + batch_size].cpu()
        if model.process.exact_likelihood:
            found.append(_teacher_forced(model, rows, chosen, precision))
        else:
            found.append(_decoded(model, rows, chosen, seed, clean_latent, precision))
    return torch.cat(found) if found else torch.zeros(0, dtype=torch.bool)


def _teacher_forced(model: DiffusionModel, tokens: Tensor, scored: Tensor, precision: str) -> Tensor:
    device = model.device
    x, rows = tokens.to(device), scored.to(device)
    with inference_precision(device, precision):
        logits = model.predict(x, torch.ones(x.shape[0], device=device), None, None, rows).tokens
    assert logits is not None
    hits = torch.ones_like(x, dtype=torch.bool)
    hits[rows] = logits.argmax(dim=-1) == x[rows]
    return hits.all(dim=1).cpu()


def _decoded(
    model: DiffusionModel, tokens: Tensor, scored: Tensor, seed: int, clean_latent: bool, precision: str
) -> Tensor:
    """Confidence-greedy decoding of a batch of rows; each row's latent steps draw from the row's generator."""
    device, mask = model.device, mask_id(model.vocab_size)
    generators = [_generator(seed, tokens[n], scored[n]) for n in range(tokens.shape[0])]
    free = scored.sum(dim=1).to(device)
    x = tokens.masked_fill(scored, mask).to(device)
    y = None
    if model.latent is not None:
        _, latent_process = model.latent_channel()
        null = model.latent_channel()[0].null(1, device)
        y = torch.cat([latent_process.prior(tuple(null.shape), torch.device("cpu"), g) for g in generators]).to(device)
        if clean_latent:
            for step in range(int(free.max())):
                t, s = _times(free, step, device)
                with inference_precision(device, precision):
                    prediction = model.predict(x, None, y, t).latent
                y = _latent_steps(model, y, prediction, t, s, generators, free > step)
    for step in range(int(free.max()) if free.numel() else 0):
        t, s = _times(free, step, device)
        open_rows = (x == mask) & scored.to(device)
        tau_y = None if y is None else (torch.zeros_like(t) if clean_latent else t)
        with inference_precision(device, precision):
            out = model.predict(x, t, y, tau_y, open_rows)
        assert out.tokens is not None
        probs = out.tokens.double().softmax(dim=-1)
        confidence, choice = probs.max(dim=-1)
        if model.mask_column is not None:  # the network's own mask as the argmax leaves the position masked (LLaDA)
            choice = choice.masked_fill(choice == model.mask_column, mask)
        best = torch.full(x.shape, -1.0, dtype=torch.float64, device=device)
        best[open_rows] = confidence
        picked = torch.zeros_like(x)
        picked[open_rows] = choice
        position = best.argmax(dim=1)
        active = open_rows.any(dim=1)
        index = torch.arange(x.shape[0], device=device)
        x[index[active], position[active]] = picked[index[active], position[active]]
        if y is not None and not clean_latent:
            y = _latent_steps(model, y, out.latent, t, s, generators, active)
    return (x == tokens.to(device)).all(dim=1).cpu()


def _times(free: Tensor, step: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """The grid times of ``step`` (from 0) of each row's ``free``-step chain: ``(L - step) / L`` to the next."""
    length = free.clamp(min=1).double()
    t = ((length - step) / length).clamp(min=0.0)
    s = ((length - step - 1) / length).clamp(min=0.0)
    return t.float().to(device), s.float().to(device)


def _latent_steps(
    model: DiffusionModel, y: Tensor, prediction: Tensor | None, t: Tensor, s: Tensor,
    generators: list[torch.Generator], active: Tensor,
) -> Tensor:
    """One latent step per active row, each from its own generator (on the CPU), the others unchanged."""
    if prediction is None:
        raise IncompatibleComponentsError("the denoiser returned no latent prediction: no latent step")
    rows = []
    for n, generator in enumerate(generators):
        if not bool(active[n]):
            rows.append(y[n : n + 1])
            continue
        moved = latent_step(model, y[n : n + 1].cpu(), prediction[n : n + 1].cpu(), t[n : n + 1].cpu(),
                            s[n : n + 1].cpu(), generator)
        rows.append(moved.to(y.device))
    return torch.cat(rows)
