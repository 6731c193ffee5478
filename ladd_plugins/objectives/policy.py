"""What the RL objectives share: rollouts made every ``iterations`` steps and trained on in between, their rewards
and group-relative advantages, the masks of the log-probability passes, and the latent's place in the policy.

A batch of rollouts is made at the steps ``0, mu, 2 mu, ...`` of a stage from the step's seed alone (every prompt's
group from a generator of its own, every row's prompt mask likewise), so a run resumed from a checkpoint draws what an
uninterrupted one drew; the batch is kept in the checkpoint for the steps that reuse it. With several processes each
draws the rollouts of its own prompts and all of them are gathered, so every process holds (and a checkpoint keeps)
the whole batch, and the loss is normalised over the whole batch as one process normalises it.

The policy of a LADD model draws a latent plan and then tokens given it. The tokens' log-probabilities are taken given
the clean plan the sampler drew, as the sequential sampler draws them; with ``latent_in_policy`` each code of the plan
is one more action too, whose log-probability is the latent denoiser's in one pass from the fully masked latent (given
the prompt, where the network that denoises the latent reads it).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from registry.distributed import gather_rows
from registry.errors import IncompatibleComponentsError, LaddError
from registry.interfaces import (
    IDS,
    Dataset,
    MaskingProcess,
    Objective,
    ObjectiveStep,
    Reward,
    Sampler,
    TrainableModel,
)
from registry.toolkit.rollouts import (
    Prompts,
    draw_rollouts,
    group_advantages,
    prompts_of,
    row_seed,
    scored,
    texts,
)

from .config import RolloutOptions

ROLLOUT, MASK = 0, 1  # what a seed of a step is for (row_seed's first index)


@dataclass
class RolloutBatch:
    """The rollouts of one batch of prompts (global: every process's), row ``p * group + g``."""

    stage: int
    step: int  # the step of the stage that made it
    tokens: Tensor  # [N, S]: prompt and completion
    context: Tensor  # [N, S] bool: the prompt
    completion: Tensor  # [N, S] bool: the completion, its first end-of-document id included
    rewards: Tensor  # [N] float64
    advantages: Tensor  # [N] float32
    flat: Tensor  # [P] bool: groups whose rewards are all equal
    seeds: Tensor  # [iterations] int64: the seeds of the iterations' masks
    latent: Tensor | None = None  # [N, M]: the plan each was drawn with (a LADD model), the tokens scored given it
    order: Tensor | None = None  # [N, S]: the sampler's step that wrote each position (SampleOutput.order), if told
    old: Tensor | None = None  # [iterations, N, A]: the log-probabilities when made (iterations > 1)
    reference: Tensor | None = None  # [iterations, N, A]: the frozen base's
    credited: bool = False  # whether the plan's codes are actions of the policy (``latent_in_policy``)

    def state(self) -> dict[str, Any]:
        """As a checkpoint keeps it."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RolloutBatch:
        return cls(**state)

    def actions(self, rows: Tensor) -> Tensor:
        """Bool ``[n, A]`` of ``rows``: the completion's positions, then every code of the plan when it is credited."""
        completion = self.completion[rows]
        if self.latent is None or not self.credited:
            return completion
        return torch.cat([completion, torch.ones_like(self.latent[rows], dtype=torch.bool)], dim=1)


@contextmanager
def sampling(model: TrainableModel) -> Iterator[None]:
    """Rollouts are drawn in eval mode without gradients; the model is back in its mode after."""
    was = model.training
    model.train(False)
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was)


def masked_prompt(context: Tensor, completion_free: Tensor, rows: Tensor, seed: int, p: float) -> Tensor:
    """Bool ``[n, S]``: positions masked in a log-probability pass: each prompt id with probability ``p`` (one uniform
    draw per position of the row, from a generator of the row's own seed) and every position after the prompt."""
    masked = torch.empty_like(context)
    for index, row in enumerate(rows.tolist()):
        generator = torch.Generator(device=context.device).manual_seed(row_seed(seed, row))
        noise = torch.rand(context.shape[1], generator=generator, device=context.device)
        masked[index] = (context[index] & (noise < p)) | completion_free[index]
    return masked


def latent_credit(model: TrainableModel, wanted: bool) -> bool:
    """Whether the plan is part of the policy: ``wanted`` and a latent channel, whose codes must be ids diffused by a
    masking process (one pass from the fully masked latent gives their log-probabilities)."""
    if not wanted or model.latent is None:
        return False
    latent, process = model.latent_channel()
    if getattr(latent, "produces", None) != IDS or not isinstance(process, MaskingProcess):
        raise IncompatibleComponentsError(
            f"the plan's log-probability is read in one pass from a latent of ids under a masking process (Di-LADD's "
            f"codes), but latent {type(latent).__name__} produces {getattr(latent, 'produces', None)} under "
            f"{type(process).__name__}: set loss.latent_in_policy=false (the tokens alone are the policy)"
        )
    return True


def token_logps(
    model: TrainableModel, tokens: Tensor, inputs: Tensor, scored: Tensor, tau: Tensor, latent: Tensor | None
) -> Tensor:
    """``[n, S]``: the log-probability of each id of ``tokens`` at ``scored`` predicted from ``inputs`` (ids, the mask
    where hidden) at time ``tau``, given the clean ``latent`` when there is one; 0 elsewhere. The output head runs at
    the scored positions alone."""
    y0 = None if latent is None else latent
    tau_y = None if latent is None else torch.zeros_like(tau)
    logits = model.predict(inputs, tau, y0, tau_y, rows=scored).tokens
    if logits is None:
        raise IncompatibleComponentsError(f"{type(model).__name__} gives no token logits")
    logps = torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens[scored].unsqueeze(-1)).squeeze(-1)
    return torch.zeros(tokens.shape, dtype=logps.dtype, device=tokens.device).masked_scatter(scored, logps)


def code_logps(model: TrainableModel, inputs: Tensor, latent: Tensor, noisy: Tensor, tau_y: Tensor) -> Tensor:
    """``[n, M]``: the log-probability of each code of the plan ``latent`` predicted from the latent ``noisy`` (codes,
    the mask where hidden) at time ``tau_y``, given the token ids ``inputs`` where the latent's denoiser reads them."""
    prediction = model.predict(inputs, None, noisy, tau_y).latent
    if prediction is None:
        raise IncompatibleComponentsError(f"{type(model).__name__} gives no prediction of the latent")
    return torch.log_softmax(prediction.float(), dim=-1).gather(-1, latent.unsqueeze(-1)).squeeze(-1)


class PolicyObjective(Objective):
    """An RL objective over rollouts of the experiment's sampler, scored by the ``reward`` slot's component.

    A subclass gives the estimate of the policy's log-probabilities that its loss uses (:meth:`estimate`), whether its
    loss reads the rollouts' log-probabilities when made (``needs_old``) and the frozen base's (``needs_frozen_base``),
    and the loss itself (:meth:`surrogate`).
    """

    #: the statistics of the rollouts every step reports, after the subclass's own terms
    ROLLOUT_TERMS = ("reward", "reward_std", "flat", "length")

    def __init__(self, config: RolloutOptions, dataset: Dataset, sampler: Sampler, reward: Reward) -> None:
        if dataset.tokenizer is None:
            raise IncompatibleComponentsError(
                f"{type(self).__name__} scores rollouts as text, but dataset {type(dataset).__name__} has no "
                f"tokenizer: use instruction data (dataset=chat)"
            )
        self.config, self.dataset, self.sampler, self.reward = config, dataset, sampler, reward
        self.batch: RolloutBatch | None = None
        self._records: list[dict[str, Any]] = []

    needs_old = False

    def estimate(self, model: TrainableModel, batch: RolloutBatch, rows: Tensor, iteration: int) -> Tensor:
        """The log-probability estimate of ``rows`` in the pass of ``iteration`` (the plan's codes among the actions
        when ``batch.latent`` is set): ``[n, A]`` per action, or ``[n]`` per sequence."""
        raise NotImplementedError

    def surrogate(
        self, model: TrainableModel, batch: RolloutBatch, rows: Tensor, iteration: int, world: int
    ) -> dict[str, Tensor]:
        """``loss`` and the subclass's terms on this process's ``rows``, normalised over the whole batch and scaled by
        the number of processes ``world`` (the processes' mean is the whole batch's value)."""
        raise NotImplementedError

    def loss(self, model: TrainableModel, batch: Tensor, step: ObjectiveStep) -> dict[str, Tensor]:
        iteration = step.step % self.config.iterations
        if iteration == 0:
            self.batch = self._rollouts(model, batch, step)
        elif self.batch is None or (self.batch.stage, self.batch.step) != (step.stage, step.step - iteration):
            raise LaddError(
                f"step {step.step} of stage {step.stage} trains on the rollouts of step {step.step - iteration}, which "
                f"the checkpoint does not hold: restart the stage (delete its last.ckpt)"
            )
        rollouts = self.batch
        world = 1 if step.shard is None else step.shard.world
        rows = self._own_rows(rollouts, step).to(rollouts.tokens.device)
        terms = self.surrogate(model, rollouts, rows, iteration, world)
        rewards = rollouts.rewards
        terms.update({
            "reward": rewards.mean().float(),
            "reward_std": rewards.std().float() if rewards.numel() > 1 else torch.zeros((), dtype=torch.float32),
            "flat": rollouts.flat.float().mean(),
            "length": rollouts.completion.sum(dim=1).float().mean(),
        })
        return {name: value.to(terms["loss"].device) for name, value in terms.items()}

    def reach(self, model: TrainableModel) -> Tensor:
        """The estimate on one row of zeros whose first half is its prompt: what the loss trains."""
        seq_len, device = model.seq_len, model.device
        context = torch.zeros(1, seq_len, dtype=torch.bool, device=device)
        context[:, : max(1, seq_len // 2)] = True
        credit = latent_credit(model, self.config.latent_in_policy)
        latent = None if model.latent is None else torch.zeros_like(model.latent_prior(1))
        # the completion written left to right over the sampler's steps
        written = torch.cumsum(~context, dim=1) - 1
        order = torch.where(context, -1, written * self.config.steps // int((~context).sum()))
        probe = RolloutBatch(
            0, 0, torch.zeros(1, seq_len, dtype=torch.long, device=device), context, ~context,
            torch.zeros(1, dtype=torch.float64), torch.ones(1), torch.zeros(1, dtype=torch.bool),
            torch.zeros(self.config.iterations, dtype=torch.long), latent, order, credited=credit,
        )
        return self.estimate(model, probe, torch.zeros(1, dtype=torch.long, device=device), 0).sum()

    def state_dict(self) -> dict[str, Any]:
        return {} if self.batch is None else {"rollouts": self.batch.state()}

    def load_state_dict(self, state: Any) -> None:
        self.batch = RolloutBatch.from_state(dict(state["rollouts"])) if state else None

    def records(self) -> list[dict[str, Any]]:
        taken, self._records = self._records, []
        return taken

    def _own_rows(self, rollouts: RolloutBatch, step: ObjectiveStep) -> Tensor:
        """The rows this process trains on: its prompts' groups (all of them with one process)."""
        rows = torch.arange(rollouts.tokens.shape[0])
        if step.shard is None:
            return rows
        group = self.config.group
        prompts = step.shard.rows(rows.shape[0] // group)
        return (prompts[:, None] * group + torch.arange(group)).flatten()

    def _rollouts(self, model: TrainableModel, batch: Tensor, step: ObjectiveStep) -> RolloutBatch:
        """Draw, score and measure this process's share of the rollouts of ``batch``, then gather the whole."""
        config, dataset = self.config, self.dataset
        prompts = prompts_of(batch, step.context, dataset.tokenizer, model.vocab_size, model.eos_id)
        count = batch.shape[0]
        mine = torch.arange(count) if step.shard is None else step.shard.rows(count)
        own = Prompts(
            prompts.canvas[mine], prompts.context[mine],
            [prompts.texts[i] for i in mine.tolist()], [prompts.references[i] for i in mine.tolist()],
        )
        credit = latent_credit(model, config.latent_in_policy)
        calls = mine[:: config.rollout_batch].tolist()  # a call's seed: of its first prompt
        with sampling(model):
            drawn = draw_rollouts(
                self.sampler, model, own, config.group, config.steps, [row_seed(step.seed, ROLLOUT, p) for p in calls],
                config.rollout_batch,
            )
        if model.latent is not None and drawn.latent is None:
            raise IncompatibleComponentsError(
                f"a LADD model's tokens are scored given the plan they were drawn with, but sampler "
                f"{type(self.sampler).__name__} returns no latent with its samples: choose a LADD sampler (sequential, "
                f"joint)"
            )
        completions = texts(dataset.tokenizer, drawn.tokens, drawn.completion, model.eos_id)
        repeat = config.group
        rewards = scored(
            self.reward,
            type(self.reward).__name__,
            [text for text in own.texts for _ in range(repeat)],
            completions,
            [text for text in own.references for _ in range(repeat)],
        )
        gather = _Gather(step, count, repeat)
        tokens = gather(drawn.tokens)
        context = gather(own.context.to(drawn.tokens.device).repeat_interleave(repeat, dim=0))
        rewards = gather(rewards.to(drawn.tokens.device)).cpu()
        advantages, flat = group_advantages(rewards, repeat, config.scale_rewards)
        seeds = torch.tensor([row_seed(step.seed, MASK, k) for k in range(config.iterations)], dtype=torch.long)
        rollouts = RolloutBatch(
            step.stage, step.step, tokens, context, gather(drawn.completion), rewards,
            advantages.float().to(tokens.device), flat, seeds,
            None if drawn.latent is None else gather(drawn.latent),
            None if drawn.order is None else gather(drawn.order), credited=credit,
        )
        rows = self._own_rows(rollouts, step).to(tokens.device)
        if self.needs_old and config.iterations > 1:
            with torch.no_grad():
                rollouts.old = gather(self._estimates(model, rollouts, rows), dim=1)
        if self.needs_frozen_base:
            with torch.no_grad(), model.frozen_base():
                rollouts.reference = gather(self._estimates(model, rollouts, rows), dim=1)
        if config.record_every and step.step % config.record_every == 0:
            self._records.extend(self._recorded(rollouts, prompts))
        return rollouts

    def _estimates(self, model: TrainableModel, rollouts: RolloutBatch, rows: Tensor) -> Tensor:
        """``[iterations, n, A]``: the estimate of every iteration's pass on ``rows``."""
        return torch.stack([self.estimate(model, rollouts, rows, k) for k in range(self.config.iterations)])

    def _recorded(self, rollouts: RolloutBatch, prompts: Prompts) -> list[dict[str, Any]]:
        """The first prompts of the batch with their completions, rewards and advantages (and plans), as text."""
        group, tokenizer, eos = self.config.group, self.dataset.tokenizer, self.dataset.eos_id
        records = []
        for prompt in range(min(self.config.record_groups, len(prompts.texts))):
            rows = slice(prompt * group, (prompt + 1) * group)
            record: dict[str, Any] = {
                "prompt": prompts.texts[prompt],
                "reference": prompts.references[prompt],
                "completions": texts(tokenizer, rollouts.tokens[rows], rollouts.completion[rows], eos),
                "rewards": rollouts.rewards[rows].tolist(),
                "advantages": rollouts.advantages[rows].tolist(),
            }
            if rollouts.latent is not None:
                record["plans"] = rollouts.latent[rows].tolist()
            records.append(record)
        return records


class _Gather:
    """Every process's rows of a tensor of rollouts, in the order of the global batch (prompt-major)."""

    def __init__(self, step: ObjectiveStep, prompts: int, group: int) -> None:
        self.shard, self.prompts, self.group = step.shard, prompts, group

    def __call__(self, tensor: Tensor, dim: int = 0) -> Tensor:
        if self.shard is None:
            return tensor
        moved = tensor.movedim(dim, 0)
        gathered = gather_rows(moved.contiguous())  # rank-major: each rank's prompts in its order
        world, per_rank = self.shard.world, self.prompts // self.shard.world
        # prompt p is rank p % world's (p // world)-th
        blocks = torch.tensor([(p % world) * per_rank + p // world for p in range(self.prompts)])
        order = (blocks[:, None] * self.group + torch.arange(self.group)).flatten().to(gathered.device)
        return gathered.index_select(0, order).movedim(0, dim)

