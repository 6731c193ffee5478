"""Instruction tuning's objective: prompts (``Dataset.context``) are never noised and never scored, and the token
loss normalises as LLaDA's SFT guidelines do: the sum over masked response positions of CE / t, divided by each
sequence's answer length (EOS padding included), averaged over the batch."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from chat_fixtures import arithmetic_pairs, chat_tokenizer, write_jsonl

import registry
from registry.config.composition import compose
from registry.distributed import Shard
from registry.engine.assembly import build_experiment
from registry.engine.timesteps import draw_times

SEQ = 16
TINY_DIT = ["backbone.hidden=16", "backbone.layers=1", "backbone.heads=2", "backbone.cond_dim=16", "backbone.dropout=0"]


def _experiment(folder, *extra: str):
    """A tiny model over chat rows of 16 words: the linear schedule with ELBO weights, whose weight is 1 / t."""
    overrides = [
        "~experiment", "dataset=chat", f"dataset.tokenizer={chat_tokenizer(folder / 'tokenizer')}",
        f"dataset.source={write_jsonl(folder / 'pairs.jsonl', arithmetic_pairs(40))}", f"dataset.seq_len={SEQ}",
        f"dataset.cache_dir={folder / 'cache'}", "+dataset.split_map={train: 'train', validation: 'train'}",
        "schedule=linear", "process.weighting=elbo", *extra,
    ]
    reg = registry.load()
    experiment = build_experiment(compose(overrides, reg).plain(), reg)
    with torch.no_grad():  # a head that predicts something: zero-initialised, every position's CE would be log K
        for parameter in experiment.model.backbone.parameters():
            generator = torch.Generator().manual_seed(parameter.numel())
            parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    return experiment


@pytest.fixture(scope="module")
def mdlm(tmp_path_factory):
    return _experiment(tmp_path_factory.mktemp("sft"), *TINY_DIT)


def _batch(experiment, size: int = 8, seed: int = 0):
    x0 = next(experiment.dataset.batches(size, seed))
    return x0, experiment.dataset.context(x0)


@torch.no_grad()
def _published(model, x0: torch.Tensor, prompt_lengths: torch.Tensor, seed: int) -> torch.Tensor:
    """LLaDA's SFT loss written out: noise (the same draws), restore the prompt, CE / p_mask over each answer length."""
    generator = torch.Generator().manual_seed(seed)
    t = draw_times(x0.shape[0], model.process.horizon, generator).double()  # the masking probability of each row
    noisy = torch.where(torch.rand(x0.shape, generator=generator, dtype=torch.float64) < 1 - t[:, None], x0, -1)
    positions = torch.arange(x0.shape[1]).expand_as(x0)
    prompt_mask = positions < prompt_lengths[:, None]
    noisy[prompt_mask] = x0[prompt_mask]  # do not add noise to the prompt
    answer_lengths = (~prompt_mask).sum(dim=1, keepdim=True).repeat(1, x0.shape[1])  # EOS padding included
    masked = noisy == -1
    logits = model.backbone(torch.where(masked, model.vocab_size, noisy), t.float(), None, None).tokens.double()
    p_mask = t[:, None].expand_as(x0)
    token_loss = F.cross_entropy(logits[masked], x0[masked], reduction="none") / p_mask[masked]
    return torch.sum(token_loss / answer_lengths[masked]) / x0.shape[0]


def test_the_sft_loss_is_the_published_formula(mdlm):
    model = mdlm.model.eval()
    x0, context = _batch(mdlm)
    prompt_lengths = context.sum(dim=1)
    assert torch.equal(context, torch.arange(SEQ) < prompt_lengths[:, None]), "a prompt is a row's first positions"
    assert (prompt_lengths > 0).all() and (prompt_lengths < SEQ).all()
    differences = []
    for seed in range(5):
        with torch.no_grad():
            loss = model.loss(x0, torch.Generator().manual_seed(seed), context=context)["token"]
        differences.append(abs(float(loss) - float(_published(model, x0, prompt_lengths, seed))))
    assert max(differences) < 1e-6, differences
    with torch.no_grad():
        plain = model.loss(x0, torch.Generator().manual_seed(0))["token"]
        rows = model.token_loss(x0, False, torch.Generator().manual_seed(0), context=context)
        halves = [model.loss(x0, torch.Generator().manual_seed(0), Shard(r, 2, 0), context=context)["token"]
                  for r in (0, 1)]
    expected = float(_published(model, x0, prompt_lengths, 0))
    assert abs(float(rows.mean()) - expected) < 1e-6, "L^x of a batch is its training loss"
    assert abs(float(sum(halves)) / 2 - expected) < 1e-6, "two ranks' mean is one process's loss"
    assert abs(float(plain) - expected) > 1e-3, "without context the prompt is noised and scored"


def _spied(model):
    """Record what the token network is given, and keep the gradient of its logits."""
    seen, logits = [], []
    original = model.backbone.forward

    def forward(x_t, tau_x, y_t, tau_y, rows=None):
        out = original(x_t, tau_x, y_t, tau_y, rows)
        out.tokens.retain_grad()
        seen.append((x_t.clone(), rows))
        logits.append(out.tokens)
        return out

    model.backbone.forward = forward
    return seen, logits


@pytest.mark.parametrize("variant", [[], ["objective.head_on_loss_rows=true"], ["experiment=demo/coladd"]])
def test_no_prompt_position_is_ever_masked_or_scored(tmp_path, variant):
    extra = [*TINY_DIT, *variant] if variant != ["experiment=demo/coladd"] else [
        "latent=continuous", "latent_process=vp", "latent_schedule=vp_sqrt", "encoder=dit", "backbone=mmdit",
        "sampler=joint", "latent.length=2", "latent.width=4", "encoder.length=2", "encoder.width=4",
        "encoder.hidden=16", "encoder.layers=1", "encoder.heads=2", *TINY_DIT, "objective.p_cfg=0.3",
    ]
    experiment = _experiment(tmp_path, *extra)
    model = experiment.model.train()
    seen, logits = _spied(model)
    masked_responses = 0
    for draw in range(60):
        x0, context = _batch(experiment, seed=draw)
        model.zero_grad(set_to_none=True)
        model.loss(x0, torch.Generator().manual_seed(draw), context=context)["loss"].backward()
        x_t, rows = seen[-1]
        assert torch.equal(x_t[context], x0[context]), f"draw {draw}: a prompt position was noised"
        grad = logits[-1].grad
        if rows is None:
            assert torch.count_nonzero(grad[context]) == 0, f"draw {draw}: a prompt position was scored"
        else:
            assert not (rows & context).any(), f"draw {draw}: the head ran at a prompt position"
        masked_responses += int((x_t[~context] == model.vocab_size).sum())
    assert masked_responses > 100, "responses are noised"


def test_the_held_out_bound_is_the_bound_of_each_answer_given_its_clean_prompt(mdlm):
    from registry.engine.evaluation import bound_per_token
    from registry.engine.likelihood import bound

    x0 = next(mdlm.dataset.batches(4, 0, "validation"))  # the one held-out batch the bound reads
    context = mdlm.dataset.context(x0)
    answers = bound(mdlm.model, x0, ~context, 2, 0, False, 8)  # the prompt given, every other position scored
    expected = float(answers.mean(dim=1).sum() / (~context).sum())
    assert bound_per_token(mdlm, 1, 4, 0, draws=2) == pytest.approx(expected, rel=1e-12)
    whole = bound(mdlm.model, x0, torch.ones_like(context), 2, 0, False, 8)  # the prompt scored too
    assert expected != pytest.approx(float(whole.mean(dim=1).sum() / x0.numel()), rel=1e-3)
