"""diffu-GRPO against d1's formulas written here, on a fixed draw: the completion mask, the rewards and advantages, the
one-pass per-token log-probabilities (completion fully masked, prompt masked at p_mask_prompt, a full forward pass and
a cross-entropy over every position), the clipped ratio, the KL to the reference and the loss."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import registry
from registry.config.composition import compose
from registry.engine.adapters import adapt
from registry.engine.assembly import build_experiment
from registry.interfaces import ObjectiveStep, context_of, mask_id
from registry.toolkit import sampling
from registry.toolkit.rollouts import row_seed

TINY_NET = ["backbone.hidden=16", "backbone.layers=1", "backbone.heads=2", "backbone.mlp_hidden=32"]
GRPO = [
    "experiment=demo/arith_grpo", "train.init_from=null", *TINY_NET, "train.lora.rank=4", "loss.group=3",
    "loss.steps=6", "loss.iterations=2", "loss.epsilon=0.05", "loss.beta=0.04", "loss.p_mask_prompt=0.3",
    # an untrained network answers no question: a reward its random text meets about half the time
    "loss.reward=format", "loss.reward_options.pattern='.*[0-9][0-9].*'",
]
P_MASK, EPSILON, BETA = 0.3, 0.05, 0.04


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def _experiment(reg, *overrides):
    cfg = compose([*GRPO, *overrides], reg)
    torch.manual_seed(0)
    experiment = build_experiment(cfg, reg)
    adapt(experiment.model, cfg.train)
    with torch.no_grad():  # adapters that change the policy: the base (the reference) differs from it
        for name, parameter in experiment.model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(len(name))) * 0.3)
    return experiment


def d1_forward_process(batch, prompt_index, mask, p_mask_prompt, uniform):
    """d1's forward_process: prompt ids masked where the draw is below p_mask_prompt, every other position masked."""
    is_mask_prompt = prompt_index & (uniform < p_mask_prompt)
    return torch.where(is_mask_prompt | ~prompt_index, mask, batch)


def d1_per_token_logps(model, input_ids, prompt_index, uniform, p_mask_prompt):
    """d1's _get_per_token_logps: one forward pass of the whole masked row, cross-entropy at every position."""
    perturbed = d1_forward_process(input_ids, prompt_index, mask_id(model.vocab_size), p_mask_prompt, uniform)
    logits = model.predict(perturbed, torch.ones(input_ids.shape[0]), None, None).tokens
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), input_ids.reshape(-1), reduction="none")
    return -loss.view(input_ids.shape)


def d1_completion_mask(completion_ids, eos):
    """d1: every completion position up to and including the first EOS."""
    is_eos = completion_ids == eos
    eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long)
    eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
    return (torch.arange(is_eos.size(1)).expand(is_eos.size(0), -1) <= eos_idx.unsqueeze(1)).int()


def d1_loss(per_token_logps, old, ref, advantages, completion_mask, epsilon, beta):
    """d1's compute_loss."""
    per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
    coef_1 = torch.exp(per_token_logps - old)
    coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon)
    per_token_loss1 = coef_1 * advantages.unsqueeze(1)
    per_token_loss2 = coef_2 * advantages.unsqueeze(1)
    per_token_loss = -torch.min(per_token_loss1, per_token_loss2) + beta * per_token_kl
    loss = (per_token_loss * completion_mask).sum() / completion_mask.sum()
    kl = (per_token_kl * completion_mask).sum() / completion_mask.sum()
    clip = ((per_token_loss1 < per_token_loss2).float() * completion_mask).sum() / completion_mask.sum()
    return loss, kl, clip


def _uniform(rows, length, seed):
    """The uniform draw of each row's prompt mask (one generator per row, as the rollouts seed them)."""
    return torch.stack([torch.rand(length, generator=torch.Generator().manual_seed(row_seed(seed, r))) for r in rows])


def _reward(text):
    return 1.0 if re.fullmatch(r".*[0-9][0-9].*", text.strip(), re.DOTALL) else 0.0


def test_estimator_and_loss_equal_d1s_formulas_on_a_fixed_draw(reg):
    experiment = _experiment(reg)
    model, objective, dataset = experiment.model.train(), experiment.objective, experiment.dataset
    batch = next(dataset.batches(2, 3))
    context = context_of(dataset, batch)
    first = objective.loss(model, batch, ObjectiveStep(1, 0, 11, None, None, context))
    rollouts = objective.batch
    group, tokens, prompt = 3, rollouts.tokens, rollouts.context
    rows = torch.arange(tokens.shape[0])
    eos = dataset.eos_id

    # the completion mask: d1's on the positions after each row's prompt (prompts here are left-aligned)
    for row in rows.tolist():
        start = int(prompt[row].sum())
        expected = d1_completion_mask(tokens[row : row + 1, start:], eos)[0].bool()
        assert torch.equal(rollouts.completion[row, start:], expected) and not rollouts.completion[row, :start].any()

    # rewards (of the completion's text) and advantages (minus the group mean)
    answers = dataset.tokenizer.batch_decode(
        [
            [t for t, keep in zip(row, kept, strict=True) if keep and t != eos]
            for row, kept in zip(tokens.tolist(), rollouts.completion.tolist(), strict=True)
        ]
    )
    rewards = torch.tensor([_reward(answer) for answer in answers], dtype=torch.float64)
    assert torch.equal(rollouts.rewards, rewards) and not bool(rollouts.flat.all()), "a draw with something to learn"
    grouped = rewards.view(-1, group)
    assert torch.allclose(rollouts.advantages.double(), (grouped - grouped.mean(1, keepdim=True)).flatten())

    # d1's per-token log-probabilities of iteration 1's mask, before any update (the old ones) and of the base
    seed = int(rollouts.seeds[1])
    uniform = _uniform(rows.tolist(), tokens.shape[1], seed)
    completion = rollouts.completion.int()
    with torch.no_grad():
        old = d1_per_token_logps(model, tokens, prompt, uniform, P_MASK)
        base = _experiment(reg)  # the same weights, every adapter's B zero: the base alone
        base.model.load_state_dict(model.state_dict())
        for name, parameter in base.model.named_parameters():
            if "lora_B" in name:
                parameter.zero_()
        reference = d1_per_token_logps(base.model.train(), tokens, prompt, uniform, P_MASK)
    assert torch.allclose(rollouts.old[1] * completion, old * completion, atol=1e-5)
    assert torch.allclose(rollouts.reference[1] * completion, reference * completion, atol=1e-5)

    # an update between the iterations: the ratio moves away from 1 and the clip acts
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_A" in name:
                parameter.mul_(1.5)
    second = objective.loss(model, batch, ObjectiveStep(1, 1, 12, None, None, context))
    current = d1_per_token_logps(model, tokens, prompt, uniform, P_MASK)
    loss, kl, clip = d1_loss(current, old, reference, rollouts.advantages, completion, EPSILON, BETA)
    assert float(clip) > 0, "the draw must exercise the clip"
    assert torch.allclose(second["loss"], loss, atol=1e-6)
    assert torch.allclose(second["kl"], kl, atol=1e-6) and torch.allclose(second["clip"], clip)
    assert torch.allclose(second["loss"], second["policy"] + BETA * second["kl"])
    # iteration 0 took its ratio against the log-probabilities it was made with: 1, nothing clipped
    uniform0 = _uniform(rows.tolist(), tokens.shape[1], int(rollouts.seeds[0]))
    assert torch.isfinite(first["loss"]) and float(first["clip"]) == 0.0
    assert uniform0.shape == uniform.shape and not torch.equal(uniform0, uniform), "a fresh prompt mask per iteration"


def test_gradient_is_d1s(reg):
    """The gradient of the loss equals that of d1's formula on the same draw (the estimator is differentiable in the
    same way: no detached path, the head applied at the completion alone)."""
    experiment = _experiment(reg, "loss.iterations=1")
    model, objective, dataset = experiment.model.train(), experiment.objective, experiment.dataset
    batch = next(dataset.batches(2, 4))
    context = context_of(dataset, batch)
    terms = objective.loss(model, batch, ObjectiveStep(1, 0, 5, None, None, context))
    rollouts = objective.batch
    params = [p for p in model.parameters() if p.requires_grad]
    ours = torch.autograd.grad(terms["loss"], params)
    rows = torch.arange(rollouts.tokens.shape[0]).tolist()
    uniform = _uniform(rows, rollouts.tokens.shape[1], int(rollouts.seeds[0]))
    logps = d1_per_token_logps(model, rollouts.tokens, rollouts.context, uniform, P_MASK)
    reference = rollouts.reference[0]
    completion = rollouts.completion.int()
    loss, _, _ = d1_loss(logps, logps.detach(), reference, rollouts.advantages, completion, EPSILON, BETA)
    theirs = torch.autograd.grad(loss, params)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ours, theirs, strict=True))
    assert any(float(g.abs().sum()) > 0 for g in ours)


@pytest.mark.parametrize("passes", [6, 2])
def test_passes_along_the_trajectory_score_each_token_in_the_state_the_sampler_wrote_it_in(reg, monkeypatch, passes):
    """With ``passes`` > 1 (TraceRL's estimate), a token written at step k of the 6 is scored from the sampler's own
    state at the first step of k's span (all 6 spans: the state it was written in), read here from the sampler as it
    ran; the prompt clean (p_mask_prompt 0). The backbone is untimed, so the token time does not enter."""
    steps = 6
    experiment = _experiment(reg, "loss.iterations=1", "loss.beta=0", "loss.p_mask_prompt=0", f"loss.passes={passes}")
    model, objective, dataset = experiment.model.train(), experiment.objective, experiment.dataset
    states = []
    original = sampling.token_step

    def recording(model, chain, *args, **kwargs):
        states.append(chain.x.clone())
        return original(model, chain, *args, **kwargs)

    monkeypatch.setattr(sampling, "token_step", recording)
    batch = next(dataset.batches(2, 7))
    objective.loss(model, batch, ObjectiveStep(1, 0, 3, None, None, context_of(dataset, batch)))
    rollouts = objective.batch
    assert len(states) == steps, "one sampler call of six steps draws the batch"
    rows = torch.arange(rollouts.tokens.shape[0])
    expected = torch.zeros(rollouts.tokens.shape)
    mask = mask_id(model.vocab_size)
    with torch.no_grad():
        for step in range(steps):
            written = (states[step] == mask) & ((states[step + 1] if step + 1 < steps else rollouts.tokens) != mask)
            start = -(-(step * passes // steps) * steps // passes)  # the first step of this step's span
            logits = model.predict(states[start], torch.ones(rows.shape[0]), None, None).tokens
            logps = torch.log_softmax(logits.float(), dim=-1).gather(-1, rollouts.tokens.unsqueeze(-1)).squeeze(-1)
            expected = torch.where(written, logps, expected)
        ours = objective.estimate(model, rollouts, rows, 0)
    completion = rollouts.completion
    assert bool(completion.any()) and bool((expected[completion] < 0).all())
    assert torch.allclose(ours[completion], expected[completion], atol=1e-5)
    assert not bool(ours[~completion].any())


def test_passes_need_a_sampler_that_reports_its_order_and_no_more_passes_than_steps(reg):
    experiment = _experiment(reg, "loss.passes=3")
    model, objective, dataset = experiment.model.train(), experiment.objective, experiment.dataset
    batch = next(dataset.batches(2, 7))
    objective.loss(model, batch, ObjectiveStep(1, 0, 3, None, None, context_of(dataset, batch)))
    objective.batch.order = None  # as a sampler that does not say which step wrote each position
    rows = torch.arange(objective.batch.tokens.shape[0])
    with pytest.raises(registry.LaddError, match=r"loss.passes=3 .*\(SampleOutput.order\).* or loss.passes=1"):
        objective.estimate(model, objective.batch, rows, 0)
    with pytest.raises(registry.InvalidConfigError, match=r"passes=7 is more than the rollouts' steps=6"):
        build_experiment(compose([*GRPO, "loss.passes=7"], reg), reg)
