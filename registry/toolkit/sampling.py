"""Sampler helpers: the reverse time grid, known tokens, a given clean latent, guided token predictions and the token
denoising chain."""
from __future__ import annotations

import torch
from torch import Tensor

from registry.errors import InvalidConfigError, LaddError
from registry.interfaces import Denoised, DenoiserModel, Process, RevealingProcess, mask_id

__all__ = [
    "check_fixed_kept",
    "denoise_tokens",
    "guidance_seed",
    "held_latent",
    "known_tokens",
    "latent_step",
    "revealing",
    "reverse_step",
    "start_tokens",
    "takes_fixed",
    "time_grid",
    "times",
    "token_logits",
]


def time_grid(steps: int) -> list[tuple[float, float]]:
    """Pairs (tau_t, tau_s) from 1 down to 0 in ``steps`` equal reverse steps."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return [(k / steps, (k - 1) / steps) for k in range(steps, 0, -1)]


def times(batch: int, tau: float, device: torch.device) -> Tensor:
    """A time tensor ``[batch]`` filled with ``tau``."""
    return torch.full((batch,), tau, device=device)


def known_tokens(model: DenoiserModel, num_samples: int, fixed: Tensor | None, device: torch.device) -> Tensor | None:
    """``fixed`` checked (shape, dtype, ids) and moved to ``device``; None when nothing is known."""
    if fixed is None:
        return None
    if fixed.shape != (num_samples, model.seq_len) or fixed.dtype != torch.long:
        raise InvalidConfigError(
            f"fixed tokens must be a LongTensor of shape ({num_samples}, {model.seq_len}), "
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
    return getattr(process, "takes_fixed", True) is not False


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
    False`` is called without them (``check_fixed_kept`` then tells whether it kept them)."""
    if fixed is None or not takes_fixed(process):
        return process.step(x_t, prediction, tau_t, tau_s, generator)
    try:
        return process.step(x_t, prediction, tau_t, tau_s, generator, fixed=fixed)
    except TypeError as error:
        if "unexpected keyword argument 'fixed'" not in str(error):
            raise
        kind = type(process)
        raise LaddError(
            f"token process {kind.__name__} ({kind.__module__}) has a step without the `fixed` keyword but does not "
            f"declare `takes_fixed = False`, which plugin contract 3 asks of such a process instead of reading its "
            f"signature (docs/contract.md): declare it, or take `fixed` and keep the known tokens"
        ) from error


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
) -> tuple[Tensor, Tensor | None, int]:
    """Token logits (at ``rows`` only when given; guided when ``guidance != 1``), the latent prediction, network calls.

    The guided pass's null latent is noised (unless the latent's ``noised_null`` is False) from a stream seeded
    with ``null_seed`` (see :func:`guidance_seed`).
    """
    out = model.predict(x_t, tau_x, y_t, tau_y, rows)
    conditional = _token_prediction(out)
    if y_t is None or guidance == 1.0:
        return conditional, out.latent, 1
    if null_seed is None or tau_y is None:
        raise ValueError("a guided prediction needs the latent's time tau_y and the null_seed that guidance_seed drew")
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
    x = start_tokens(model, num_samples, device, generator, fixed)
    known = known_tokens(model, num_samples, fixed, device)
    tau_y = None if latent is None else times(num_samples, 0.0, device)
    process = revealing(model, fast)
    null_seed = guidance_seed(generator, guidance)
    logits, calls = None, 0
    for tau_t, tau_s in time_grid(steps):
        t, s = times(num_samples, tau_t, device), times(num_samples, tau_s, device)
        if process is not None:
            reveal = process.reveal(x, t, s, generator)
            if bool(reveal.any()):
                rows, _, used = token_logits(model, x, t, latent, tau_y, guidance, null_seed, rows=reveal)
                calls += used
                x = process.fill(x, reveal, rows, generator)
            continue
        if logits is None or not model.caches_token_predictions:
            logits, _, used = token_logits(model, x, t, latent, tau_y, guidance, null_seed)
            calls += used
        x_next = reverse_step(model.process, x, logits, t, s, generator, known)
        if not torch.equal(x_next, x):
            logits = None
        x = x_next
    return check_fixed_kept(x, fixed, model), calls
