"""Rollouts of prompts and their rewards: what an RL objective and the held-out reward (``ladd reward``) share.

A batch of instruction data holds a prompt in each row (``Dataset.context``) and the data's answer after it. A rollout
keeps the prompt, masks every other position and lets a sampler fill them (``Sampler.sample(..., fixed=...)``); the
completion is what it generated up to and including its first end-of-document id (the model's stop), as d1 counts it.
Rewards are checked here: a reward that raises, gives a value that is no number or NaN, or too few values stops the
run in one line naming it and the row.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

import torch
from torch import Tensor

from registry.distributed import mixed_seed
from registry.errors import LaddError
from registry.interfaces import DenoiserModel, Reward, Sampler, mask_id


def row_seed(seed: int, *index: int) -> int:
    """A 63-bit seed for one item (a prompt's group, an iteration's mask) of a step seeded ``seed``: the same on every
    process and for any number of processes."""
    return mixed_seed(seed, *index)


def check_prompts(context: Tensor | None) -> Tensor:
    """``context`` (``Dataset.context``: the prompts) checked: every row has a prompt and room after it."""
    if context is None:
        raise LaddError(
            "rollouts need prompts, but the dataset marks none (Dataset.context is None): use instruction data, e.g. "
            "dataset=chat"
        )
    full = context.all(dim=1)
    if bool(full.any()):
        row = int(full.nonzero()[0, 0])
        raise LaddError(
            f"the prompt of row {row} takes all {context.shape[1]} positions of the model, leaving none to generate: "
            f"raise dataset.seq_len or shorten the prompt"
        )
    return context


def prompt_canvas(batch: Tensor, context: Tensor, vocab_size: int) -> Tensor:
    """What a sampler starts from (``fixed``): each row's prompt in place, the mask id everywhere else."""
    return torch.where(context, batch, torch.full_like(batch, mask_id(vocab_size)))


def answer_positions(tokens: Tensor, context: Tensor, eos_id: int | None) -> Tensor:
    """Bool ``[N, S]``: the positions after each prompt up to and including the first end-of-document id there (every
    such position when there is none, or the data has no ``eos_id``): a completion, or the data's answer."""
    after = ~context
    if eos_id is None:
        return after
    ends = (tokens == eos_id) & after
    # positions strictly after a row's first end: an end somewhere before them
    past = (torch.cumsum(ends.long(), dim=1) - ends.long()) > 0
    return after & ~past


def texts(tokenizer: Any, tokens: Tensor, positions: Tensor, eos_id: int | None) -> list[str]:
    """Each row's ids at ``positions`` (in order), without the end-of-document id, decoded."""
    rows = []
    for row, keep in zip(tokens.tolist(), positions.tolist(), strict=True):
        rows.append([token for token, kept in zip(row, keep, strict=True) if kept and token != eos_id])
    return [str(text) for text in tokenizer.batch_decode(rows, skip_special_tokens=False)]


@dataclass(frozen=True)
class Prompts:
    """Prompts of a batch as a sampler starts from them and as text, with the data's answers."""

    canvas: Tensor  # [P, S]: the prompt, the mask id elsewhere
    context: Tensor  # [P, S] bool
    texts: list[str]
    references: list[str]


def prompts_of(batch: Tensor, context: Tensor | None, tokenizer: Any, vocab_size: int, eos_id: int | None) -> Prompts:
    """The prompts of rows of instruction data (``Dataset.context``), and the data's answer of each as text."""
    context = check_prompts(context)
    if tokenizer is None:
        raise LaddError("rollouts are scored as text, but the dataset has no tokenizer: use text instruction data")
    return Prompts(
        prompt_canvas(batch, context, vocab_size),
        context,
        texts(tokenizer, batch, context, None),
        texts(tokenizer, batch, answer_positions(batch, context, eos_id), eos_id),
    )


@dataclass(frozen=True)
class Rollouts:
    """``group`` completions of each of ``P`` prompts, row ``p * group + g``."""

    tokens: Tensor  # [P * group, S]: prompt and completion
    latent: Tensor | None  # [P * group, ...]: the clean latent each was drawn with (a LADD sampler), else None
    completion: Tensor  # [P * group, S] bool: the completion's positions (answer_positions)
    order: Tensor | None = None  # [P * group, S]: the step that wrote each position (SampleOutput.order), else None


@torch.no_grad()
def draw_rollouts(
    sampler: Sampler, model: DenoiserModel, prompts: Prompts, group: int, steps: int, seeds: Sequence[int],
    per_call: int = 1,
) -> Rollouts:
    """``group`` completions of each prompt, ``per_call`` prompts' in one sampler call, the ``i``-th call drawn from a
    generator seeded ``seeds[i]``. With one prompt a call, a prompt's completions depend on its seed alone, not on
    the other prompts (nor on how prompts are shared among processes); more a call is faster."""
    tokens, latents, orders = [], [], []
    for call, seed in enumerate(seeds):
        generator = torch.Generator(device=model.device).manual_seed(seed)
        canvas = prompts.canvas[call * per_call : (call + 1) * per_call]
        fixed = canvas.repeat_interleave(group, dim=0).to(model.device)
        out = sampler.sample(model, fixed.shape[0], steps, generator, fixed=fixed)
        tokens.append(out.tokens)
        if out.latent is not None:
            latents.append(out.latent)
        if out.order is not None:
            orders.append(out.order)
    drawn = torch.cat(tokens)
    context = prompts.context.to(drawn.device).repeat_interleave(group, dim=0)
    return Rollouts(
        drawn,
        torch.cat(latents) if latents else None,
        answer_positions(drawn, context, model.eos_id),
        torch.cat(orders) if len(orders) == len(tokens) else None,
    )


def scored(
    reward: Reward, name: str, prompts: Sequence[str], completions: Sequence[str], references: Sequence[str]
) -> Tensor:
    """The reward of every completion as float64 ``[N]``, checked: a reward that raises, gives too few or too many
    values, a value that is no number, or NaN is refused in one line naming ``name`` and the row."""
    try:
        values = list(reward(prompts, completions, references))
    except LaddError:
        raise
    except Exception as error:  # noqa: BLE001 - any failure of the reward's own code is named, not hidden
        raise LaddError(f"reward {name!r} raised {type(error).__name__}: {error}") from error
    if len(values) != len(completions):
        raise LaddError(f"reward {name!r} gave {len(values)} values for {len(completions)} completions: one each")
    for row, value in enumerate(values):
        number = isinstance(value, Real) and not isinstance(value, bool)
        if not number or math.isnan(float(value)) or math.isinf(float(value)):
            raise LaddError(
                f"reward {name!r} gave {value!r} for row {row} (completion {completions[row][:60]!r}): rewards must "
                f"be finite numbers"
            )
    return torch.tensor([float(value) for value in values], dtype=torch.float64)


def group_advantages(rewards: Tensor, group: int, scale: bool) -> tuple[Tensor, Tensor]:
    """Group-relative advantages of ``rewards`` ``[P * group]``: each reward minus its group's mean, divided by the
    group's standard deviation (with 1e-4 added, as TRL does) when ``scale``; and bool ``[P]``, the groups whose
    rewards are all equal (their advantages are zero: they teach nothing but the KL term)."""
    grouped = rewards.view(-1, group)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    flat = (grouped == grouped[:, :1]).all(dim=1)
    if scale:
        centred = centred / (grouped.std(dim=1, keepdim=True) + 1e-4)
    return centred.flatten(), flat
