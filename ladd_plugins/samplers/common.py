"""Pieces every sampler shares: the reverse time grid, the conditioned start, guided token predictions."""
from __future__ import annotations

import torch
from torch import Tensor

from registry.errors import InvalidConfigError, LaddError
from registry.interfaces import DenoiserModel, RevealingProcess, mask_id


def time_grid(steps: int) -> list[tuple[float, float]]:
    """Pairs (tau_t, tau_s) from 1 down to 0 in ``steps`` equal reverse steps."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return [(k / steps, (k - 1) / steps) for k in range(steps, 0, -1)]


def full(batch: int, value: float, device: torch.device) -> Tensor:
    """A time tensor [batch] filled with ``value``."""
    return torch.full((batch,), value, device=device)


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
        raise InvalidConfigError(f"fixed tokens must be ids in [0, {model.vocab_size}) or the mask id {free} at free positions")
    return fixed.to(device)


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
            raise LaddError(
                f"token process {type(model.process).__name__} changed tokens given in `fixed`: conditioning on known "
                "tokens needs a reverse step that never changes an unmasked position (as masked processes do)"
            )
    return tokens


def reveals_first(model: DenoiserModel, fast: bool) -> bool:
    """Whether the exact fast path applies: the token process picks changing positions before predicting."""
    return fast and isinstance(model.process, RevealingProcess)


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

    The guided pass's null latent is noised from a stream seeded with ``null_seed`` (see :func:`guidance_seed`).
    """

    def predict(y: Tensor | None):
        if rows is None:
            return model.predict(x_t, tau_x, y, tau_y)
        return model.predict_rows(x_t, tau_x, y, tau_y, rows)

    out = predict(y_t)
    if y_t is None or guidance == 1.0:
        return out.tokens, out.latent, 1
    if null_seed is None:
        raise ValueError("a guided prediction needs the null_seed that guidance_seed drew")
    noise = torch.Generator(device=x_t.device).manual_seed(null_seed)
    null = model.latent_process.corrupt(model.latent.null(x_t.shape[0], x_t.device).to(y_t.dtype), tau_y, noise)
    unconditional = predict(null).tokens
    logits = model.process.guide(out.tokens.log_softmax(-1), unconditional.log_softmax(-1), guidance)
    return logits, out.latent, 2
