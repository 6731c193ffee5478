"""The autoregressive baseline: causal backbone, teacher-forced process, left-to-right sampler, preset."""
from __future__ import annotations

import math

import pytest
import torch
from support import TINY

import registry
from ladd_plugins.backbones.causal import CausalTransformer
from ladd_plugins.processes.autoregressive import AutoregressiveProcess
from ladd_plugins.samplers.ancestral import AncestralSampler
from ladd_plugins.samplers.autoregressive import AutoregressiveSampler
from ladd_plugins.samplers.config import AncestralConfig, AutoregressiveConfig
from registry.config.settings import Objective
from registry.engine.compute import counting
from registry.engine.loading import load_run
from registry.engine.model import DiffusionModel
from registry.errors import InvalidConfigError
from registry.interfaces import (
    Channels,
    Dataset,
    Denoised,
    DenoiserModel,
    TransformerShape,
    mask_id,
)
from registry.toolkit.options import TransformerConfig
from registry.toolkit.sampling import time_grid, times

VOCAB, SEQ = 4, 8
MASK = mask_id(VOCAB)


class Cycles(Dataset):
    """Cyclic runs ``a, a+1, a+2, ... (mod K)`` from a uniform start ``a``: only the first token is uncertain."""

    vocab_size, seq_len = VOCAB, SEQ

    def batches(self, batch_size: int, seed: int, split: str = "train"):
        generator = torch.Generator().manual_seed(seed)
        while True:
            start = torch.randint(VOCAB, (batch_size, 1), generator=generator)
            yield (start + torch.arange(SEQ)) % VOCAB


def _model(seed: int = 0, perturb: bool = True) -> DiffusionModel:
    """A tiny AR model; ``perturb`` adds noise to every weight so zero-initialised heads and gates matter."""
    torch.manual_seed(seed)
    backbone = CausalTransformer(
        TransformerConfig(hidden=32, layers=2, heads=2, dropout=0.0), Channels(VOCAB, SEQ, None)
    )
    if perturb:
        with torch.no_grad():
            for parameter in backbone.parameters():
                parameter.add_(0.3 * torch.randn_like(parameter))
    return DiffusionModel(AutoregressiveProcess(vocab_size=VOCAB), None, backbone, VOCAB, SEQ, Objective()).eval()


class Recording(DenoiserModel):
    """A model that records the inputs and rows of every fast-path call before delegating."""

    def __init__(self, inner: DiffusionModel) -> None:
        self.inner, self.process, self.latent = inner, inner.process, inner.latent
        self.seq_len, self.vocab_size = inner.seq_len, inner.vocab_size
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    device = property(lambda self: self.inner.device)
    caches_token_predictions = property(lambda self: self.inner.caches_token_predictions)

    def predict(self, x_t, tau_x, y_t, tau_y, rows=None) -> Denoised:
        self.calls.append((x_t.clone(), torch.ones_like(x_t, dtype=torch.bool) if rows is None else rows.clone()))
        return self.inner.predict(x_t, tau_x, y_t, tau_y, rows)


def test_loss_is_the_next_token_cross_entropy_of_each_prefix():
    model = _model()
    x0 = torch.randint(VOCAB, (5, SEQ), generator=torch.Generator().manual_seed(1))
    # position i scored from a forward pass that sees only x0[:, :i] (later tokens replaced by noise)
    hand = torch.zeros(5, SEQ)
    for i in range(SEQ):
        probe = torch.where(torch.arange(SEQ) < i, x0, torch.randint(VOCAB + 1, x0.shape))
        log_probs = model.backbone(probe, None, None, None).tokens[:, i].double().log_softmax(-1)
        hand[:, i] = -log_probs[torch.arange(5), x0[:, i]].float()
    logits = model.backbone(x0, None, None, None).tokens
    tau = torch.rand(5)
    assert torch.allclose(model.process.loss(logits, x0, x0, tau), hand.mean(1), atol=1e-5)
    # through the generic objective: corrupt keeps x0 and the time is ignored
    assert torch.equal(model.process.corrupt(x0, tau), x0)
    assert torch.allclose(model.loss(x0)["token"], hand.mean(), atol=1e-5)


@pytest.mark.parametrize("j", [0, 3, SEQ - 1])
def test_changing_token_j_changes_no_logits_at_or_before_j(j):
    model = _model()
    x = torch.randint(VOCAB, (3, SEQ), generator=torch.Generator().manual_seed(j))
    changed = x.clone()
    changed[:, j] = (x[:, j] + 1) % VOCAB
    before, after = (model.backbone(v, None, None, None).tokens for v in (x, changed))
    assert torch.allclose(before[:, : j + 1], after[:, : j + 1], atol=1e-6)
    if j < SEQ - 1:
        assert (before[:, j + 1] - after[:, j + 1]).abs().max() > 1e-3, "the next position must see token j"


def test_backbone_declares_its_shape_and_no_time_input():
    backbone = _model().backbone
    assert backbone.transformer_shape() == TransformerShape(2, SEQ, 32, 4.0, SEQ, VOCAB)
    assert backbone.token_time_conditioned is False


@pytest.mark.slow
def test_training_on_cycles_reaches_the_entropy_floor_and_samples_valid_cycles():
    model = _model(perturb=False).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    stream = Cycles().batches(64, seed=0)
    losses = []
    for _ in range(200):
        loss = model.loss(next(stream))["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    floor = math.log(VOCAB) / SEQ  # only the first token is uncertain
    assert losses[0] > 1.2 and sum(losses[-20:]) / 20 < floor + 0.05, (losses[0], losses[-20:])
    out = AutoregressiveSampler().sample(model.eval(), 400, 1, torch.Generator().manual_seed(0))
    steps_ok = ((out.tokens[:, 1:] - out.tokens[:, :-1]) % VOCAB == 1).all(dim=1)
    assert float(steps_ok.double().mean()) > 0.97
    assert torch.bincount(out.tokens[:, 0], minlength=VOCAB).min() > 60, (
        "the first token stays spread over the vocabulary"
    )


@pytest.mark.parametrize("prompt", [0, 3])
def test_sampler_reveals_left_to_right_one_position_per_network_call(prompt):
    model = Recording(_model())
    fixed = torch.full((6, SEQ), MASK)
    fixed[:, :prompt] = torch.randint(VOCAB, (6, prompt), generator=torch.Generator().manual_seed(2))
    out = AutoregressiveSampler(AutoregressiveConfig(cache=False)).sample(
        model, 6, 1, torch.Generator().manual_seed(0), fixed=fixed
    )
    assert out.network_calls == len(model.calls) == SEQ - prompt
    for k, (x_t, rows) in enumerate(model.calls):
        position = prompt + k
        assert bool(rows[:, position].all()) and int(rows.sum()) == 6, "exactly the next position of every row"
        assert bool((x_t[:, :position] != MASK).all()) and bool((x_t[:, position:] == MASK).all())
    assert torch.equal(out.tokens[:, :prompt], fixed[:, :prompt]) and int(out.tokens.max()) < VOCAB


def test_sampler_ignores_the_step_count_and_matches_the_plain_chain_with_s_steps():
    model = _model()
    fixed = torch.full((50, SEQ), MASK)
    fixed[:, 2] = 1
    fixed[:, 5] = 3
    runs = [
        AutoregressiveSampler().sample(model, 50, steps, torch.Generator().manual_seed(4), fixed=fixed)
        for steps in (1, 64)
    ]
    plain = AncestralSampler(AncestralConfig(fast=False)).sample(
        model, 50, SEQ, torch.Generator().manual_seed(4), fixed=fixed
    )
    assert torch.equal(runs[0].tokens, runs[1].tokens) and torch.equal(runs[0].tokens, plain.tokens)
    # the plain path predicts before it steps, so it also pays for steps that reveal nothing
    assert runs[0].network_calls == SEQ - 2 <= plain.network_calls


def test_cached_logits_of_a_window_equal_the_full_pass_once_the_tokens_before_it_are_final():
    backbone = _model().backbone
    x = torch.randint(VOCAB, (3, SEQ), generator=torch.Generator().manual_seed(5))
    full = backbone(x, None, None, None).tokens
    cache = backbone.new_cache(3, torch.device("cpu"))
    first = backbone(x, None, None, None, cache=cache, window=slice(0, 3)).tokens
    # later positions read positions 0..2 from the cache; position 3's input is token 2, final here
    later = backbone(x, None, None, None, cache=cache, window=slice(3, SEQ)).tokens
    assert torch.allclose(torch.cat([first, later], dim=1), full, atol=1e-5)


@pytest.mark.parametrize("prompt", ["none", "prefix", "ragged"])
def test_the_cache_gives_the_plain_chains_tokens_and_runs_one_new_position_per_call(prompt):
    model = _model()
    fixed = torch.full((40, SEQ), MASK)
    if prompt == "prefix":
        fixed[:, :3] = 1
    elif prompt == "ragged":  # rows reveal different positions at one step: the window spans them all
        fixed[::2, :4] = 2
        fixed[1::4, 5] = 0
    runs = []
    for cache in (True, False):
        with counting(model) as meter:
            out = AutoregressiveSampler(AutoregressiveConfig(cache=cache)).sample(
                model, 40, 1, torch.Generator().manual_seed(6), fixed=None if prompt == "none" else fixed
            )
        runs.append((out, meter.spent()))
    (cached, spent), (plain, spent_plain) = runs
    assert torch.equal(cached.tokens, plain.tokens)
    assert cached.network_calls == plain.network_calls == spent.calls
    assert spent_plain.positions == 40 * SEQ * plain.network_calls
    if prompt == "none":
        assert spent.positions == 40 * SEQ, "each call runs the one position it reveals"
    assert spent.flops < spent_plain.flops / 2


@pytest.mark.parametrize("seq_len", [*range(1, 20), 100, 128, 500, 1000])
def test_s_equal_steps_reveal_one_position_each_for_any_length_and_prompt(seq_len):
    process = AutoregressiveProcess(vocab_size=2)
    x = torch.full((3, seq_len), mask_id(2))
    x[1, : seq_len // 3] = 0  # a prefix prompt
    x[2, ::2] = 1  # every other position known
    free = (x == mask_id(2)).sum(1)
    for k, (tau_t, tau_s) in enumerate(time_grid(seq_len)):
        reveal = process.reveal(x, times(3, tau_t, "cpu"), times(3, tau_s, "cpu"))
        assert torch.equal(reveal.sum(1), (free > k).long()), "one position per step while any is free"
        assert torch.equal(reveal.long().argmax(1)[free > k], (x == mask_id(2)).long().argmax(1)[free > k]), (
            "the leftmost"
        )
        x = torch.where(reveal, 0, x)
    assert not bool((x == mask_id(2)).any())


def test_too_few_steps_for_one_token_per_call_is_refused():
    with pytest.raises(InvalidConfigError, match="one token per network call"):
        AncestralSampler(AncestralConfig()).sample(_model(), 2, SEQ // 2, torch.Generator().manual_seed(0))


@pytest.mark.slow
def test_preset_trains_through_the_cli_and_samples(ladd, tmp_path):
    out = ladd("train", "experiment=binsaw/ar_cpu", *TINY, "train.stages=[{steps:2}]", f"run_dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    experiment, settings = load_run(tmp_path, registry.load())
    assert tuple(settings.selection(slot)["name"] for slot in ("process", "backbone", "sampler")) == (
        "autoregressive",
        "causal",
        "autoregressive",
    )
    assert "train/loss" in (tmp_path / "logs" / "stage1" / "metrics.csv").read_text()
    sampled = experiment.sampler.sample(experiment.model.eval(), 4, 2, torch.Generator().manual_seed(0))
    assert sampled.tokens.shape == (4, 16) and int(sampled.tokens.max()) <= 1 and sampled.network_calls == 16
