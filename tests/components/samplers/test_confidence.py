"""Confidence decoding against a direct implementation of LLaDA's published ``generate()`` written here, and the
threshold, random and EOS rules, the time a timed denoiser is told, and the joint and sequential LADD samplers
running its steps."""
from __future__ import annotations

import math
import re

import pytest
import torch
from support import TINY
from torch import Tensor, nn

import registry
from ladd_plugins.processes.masked import MaskedProcess, MaskedProcessConfig
from ladd_plugins.samplers.confidence import ConfidenceSampler
from ladd_plugins.schedules.closed_form import LinearSchedule, ScheduleConfig
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.errors import IncompatibleComponentsError, InvalidConfigError
from registry.interfaces import Denoised, DenoiserModel
from registry.toolkit.decoding import dream_counts, factor_counts, masked_time, select, transfer_counts
from registry.toolkit.options import ConfidenceConfig

GEN = 32  # generated positions, as LLaDA's gen_length
VOCAB = 5


class BagOracle(nn.Module, DenoiserModel):
    """An untimed float64 denoiser: a position's logits depend on its own token, the mean over all tokens and, when
    ``positional``, its position. Without that term every masked position predicts the same: exact ties."""

    def __init__(self, seq_len: int, positional: bool, timed: bool = False, eos_id: int | None = None) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seq_len)
        self.own = torch.randn(VOCAB + 1, VOCAB, generator=generator, dtype=torch.float64)
        self.mix = torch.randn(VOCAB + 1, VOCAB, generator=generator, dtype=torch.float64)
        self.place = torch.randn(seq_len, VOCAB, generator=generator, dtype=torch.float64) * positional
        self.anchor = nn.Parameter(torch.zeros(()))
        self.seq_len, self.vocab_size, self.eos_id = seq_len, VOCAB, eos_id
        self.process = MaskedProcess(MaskedProcessConfig(), LinearSchedule(ScheduleConfig()), VOCAB)
        self.schedule = self.process.schedule
        self.latent, self.latent_process = None, None
        self.timed = timed
        self.seen: list[tuple[Tensor, Tensor]] = []  # (x_t, tau_x) of every call

    @property
    def device(self) -> torch.device:
        return self.anchor.device

    @property
    def caches_token_predictions(self) -> bool:
        return not self.timed

    def predict(self, x_t, tau_x, y_t, tau_y, rows=None) -> Denoised:
        self.seen.append((x_t.clone(), tau_x.clone()))
        logits = self.own[x_t] + self.mix[x_t].mean(1, keepdim=True) + self.place
        return Denoised(tokens=logits if rows is None else logits[rows])


def llada_generate(logits_of, prompt: Tensor, steps: int, block_length: int, cfg_scale: float, mask: int) -> Tensor:
    """LLaDA's ``generate()`` at temperature 0 with low-confidence remasking, written from its published algorithm;
    torch.topk's unspecified order among equal confidences replaced by the stated rule: the leftmost first."""
    batch, length = prompt.shape[0], prompt.shape[1] + GEN
    x = torch.full((batch, length), mask, dtype=torch.long)
    x[:, : prompt.shape[1]] = prompt
    prompt_index = x != mask
    blocks = GEN // block_length
    per_block = steps // blocks
    for block in range(blocks):
        end = prompt.shape[1] + (block + 1) * block_length
        block_masked = (x[:, end - block_length : end] == mask).sum(1).tolist()
        counts = [[m // per_block + (i < m % per_block) for i in range(per_block)] for m in block_masked]
        for step in range(per_block):
            masked = x == mask
            logits = logits_of(x)
            if cfg_scale > 0:
                unconditional = logits_of(torch.where(prompt_index, mask, x))
                logits = unconditional + (cfg_scale + 1) * (logits - unconditional)
            x0 = logits.argmax(-1)
            x0_p = torch.softmax(logits.double(), -1).gather(-1, x0[..., None]).squeeze(-1)
            x0_p[:, end:] = -math.inf
            x0 = torch.where(masked, x0, x)
            confidence = torch.where(masked, x0_p, -math.inf)
            for row in range(batch):
                order = sorted(range(length), key=lambda q: (-float(confidence[row, q]), q))
                for q in order[: counts[row][step]]:
                    x[row, q] = x0[row, q]
    return x


def _dit(seq_len: int) -> DenoiserModel:
    """The MDLM sawtooth preset's DiT (no time conditioning) with random weights, over binary tokens."""
    reg = registry.load()
    torch.manual_seed(0)
    experiment = build_experiment(compose(["experiment=binsaw/mdlm_cpu", f"dataset.seq_len={seq_len}"], reg), reg)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in experiment.model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return experiment.model.eval()


MODELS = {
    "ties": lambda length: BagOracle(length, positional=False),
    "positions": lambda length: BagOracle(length, positional=True),
    "dit": _dit,
}
GRID = [
    (model, prompt, steps, block, guidance)
    for model in ("ties", "positions")
    for prompt in (0, 4)
    for steps, block in ((32, 32), (32, 8), (8, 8))
    for guidance in (1.0, 2.0)
]
# the real network on the settings that exercise blocks, a prompt and guidance (each case costs seconds)
GRID += [("dit", 4, 32, 8, 1.0), ("dit", 4, 8, 8, 2.0), ("dit", 0, 32, 32, 1.0)]


@pytest.mark.parametrize(("model_name", "prompt_length", "steps", "block_length", "guidance"), GRID)
def test_temperature_zero_gives_the_tokens_of_lladas_generate(model_name, prompt_length, steps, block_length, guidance):
    model = MODELS[model_name](prompt_length + GEN)
    mask = model.vocab_size
    prompt = torch.randint(model.vocab_size, (3, prompt_length), generator=torch.Generator().manual_seed(2))
    tau = torch.ones(3)
    with torch.no_grad():
        expected = llada_generate(
            lambda x: model.predict(x, tau, None, None).tokens, prompt, steps, block_length, guidance - 1, mask
        )
        fixed = torch.full((3, prompt_length + GEN), mask)
        fixed[:, :prompt_length] = prompt
        config = ConfidenceConfig(temperature=0.0, block_length=block_length, guidance=guidance)
        out = ConfidenceSampler(config).sample(model, 3, steps, torch.Generator().manual_seed(0), fixed=fixed)
    assert torch.equal(out.tokens, expected)
    if model_name == "ties" and prompt_length == 0:  # every masked position ties at every step: left to right
        assert out.network_calls == steps


def test_threshold_one_commits_exactly_one_token_per_step():
    model = BagOracle(GEN, positional=True)
    out = ConfidenceSampler(ConfidenceConfig(threshold=1.0)).sample(model, 2, GEN, torch.Generator().manual_seed(0))
    masked = [int((x == VOCAB).sum()) for x, _ in model.seen]
    assert masked == [2 * (GEN - step) for step in range(GEN)] and out.network_calls == GEN
    assert int((out.tokens == VOCAB).sum()) == 0


def test_a_threshold_commits_every_confident_proposal_and_still_ends_within_its_steps():
    model = BagOracle(GEN, positional=True)
    eager = ConfidenceSampler(ConfidenceConfig(threshold=0.05)).sample(model, 2, GEN, torch.Generator().manual_seed(0))
    assert eager.network_calls < GEN / 2, "a low threshold commits many tokens per step"
    few = ConfidenceSampler(ConfidenceConfig(threshold=1.0)).sample(model, 2, 4, torch.Generator().manual_seed(0))
    assert few.network_calls == 4 and int((few.tokens == VOCAB).sum()) == 0, "steps bound the calls"


def test_random_remasking_is_reproducible_from_the_seed_and_orders_by_it():
    model = BagOracle(GEN, positional=True)
    sampler = ConfidenceSampler(ConfidenceConfig(remasking="random", temperature=0.0))

    def orders(seed: int) -> list[Tensor]:
        model.seen.clear()
        sampler.sample(model, 2, 8, torch.Generator().manual_seed(seed))
        return [x for x, _ in model.seen]

    assert all(torch.equal(a, b) for a, b in zip(orders(3), orders(3), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(orders(3), orders(4), strict=True))


def test_selection_keeps_the_count_and_breaks_ties_to_the_left():
    scores = torch.tensor([[0.5, 0.9, 0.5, 0.5, 0.2], [0.1, 0.1, 0.1, 0.1, 0.1]], dtype=torch.float64)
    candidates = torch.tensor([[True, True, True, True, True], [False, True, True, False, True]])
    chosen = select(scores, candidates, torch.tensor([3, 2]))
    assert chosen.tolist() == [[True, True, True, False, False], [False, True, True, False, False]]
    above = select(scores, candidates, torch.tensor([1, 1]), threshold=0.4)
    assert above.tolist() == [[True, True, True, True, False], [False, True, False, False, False]]


def test_transfer_counts_spread_as_llada_does():
    assert transfer_counts(torch.tensor([10, 3]), 4).tolist() == [[3, 3, 2, 2], [1, 1, 1, 0]]


def test_fast_dllms_factor_rule_commits_while_each_next_confidence_clears_its_bar():
    # bars for the 2nd, 3rd, 4th most confident: 1 - f/3, 1 - f/4, 1 - f/5 (f = 1: 0.667, 0.75, 0.8)
    scores = torch.tensor([[0.9, 0.7, 0.2, 0.76, 0.1], [0.95, 0.9, 0.85, 0.3, 0.1], [0.9, 0.9, 0.9, 0.9, 0.1]])
    rows = torch.ones_like(scores, dtype=torch.bool)
    rows[2, 4] = False
    counts = factor_counts(scores.double(), rows, 1.0)
    # row 0: 0.9, 0.76 >= 0.667, 0.7 < 0.75: two; row 1: 0.3 < 0.8 at the 4th place: three;
    # row 2: every one of its four clears its bar: four
    assert counts.tolist() == [2, 3, 4]
    short_last = torch.tensor([[0.9, 0.8, 0.1]], dtype=torch.float64)  # the 3rd (last) falls short: all three anyway
    assert factor_counts(short_last, torch.ones_like(short_last, dtype=torch.bool), 1.0).tolist() == [3]
    one = torch.tensor([[0.01, 0.5]], dtype=torch.float64)
    assert factor_counts(one, torch.tensor([[True, False]]), 1.0).tolist() == [1], "at least one"


def test_dreams_counts_take_int_m_of_one_minus_s_over_t_on_its_float32_grid():
    grid = torch.linspace(1, 1e-3, 5)  # float32, as Dream's
    for index in range(4):
        count, chance = dream_counts(torch.tensor([10, 7]), 4, index, 1e-3)
        ratio = 1 - grid[index + 1] / grid[index]
        last = index == 3
        assert count.tolist() == ([10, 7] if last else [int(10 * ratio), int(7 * ratio)])
        assert float(chance) == (1.0 if last else float(ratio))
    assert dream_counts(torch.tensor([10]), 4, 0, 1e-3)[0].tolist() == [2], "10 * (1 - 0.75025) = 2.4975"


class _OwnMask(BagOracle):
    """A bag oracle whose last real column is the network's own mask: the argmax at the first position, nowhere
    else."""

    mask_column = VOCAB - 1

    def predict(self, x_t, tau_x, y_t, tau_y, rows=None) -> Denoised:
        logits = super().predict(x_t, tau_x, y_t, tau_y).tokens.clone()
        logits[..., VOCAB - 1] = -50.0
        logits[:, 0, VOCAB - 1] = 50.0
        return Denoised(tokens=logits if rows is None else logits[rows])


def test_a_proposal_of_the_networks_own_mask_takes_its_place_and_leaves_the_position_masked():
    model = _OwnMask(8, positional=True)
    out = ConfidenceSampler(ConfidenceConfig(temperature=0.0)).sample(model, 2, 2, torch.Generator())
    # two steps of four: each commits the mask at the first position (the most confident) and three real tokens
    assert [int((x[0] == VOCAB).sum()) for x, _ in model.seen] == [8, 5]
    assert out.tokens[:, 0].tolist() == [VOCAB, VOCAB] and (out.tokens == VOCAB).sum(1).tolist() == [2, 2]


@pytest.mark.parametrize(("steps", "block_length"), [(4, 4), (8, 2), (2, 8)])
def test_positions_left_masked_stay_candidates_in_later_blocks_as_in_lladas_generate(steps, block_length):
    from decoding_reference import llada_generate

    model = _OwnMask(8, positional=True)
    own, mask = model.mask_column, model.vocab_size
    expected = llada_generate(lambda x: model.predict(torch.where(x == own, mask, x), torch.ones(1), None, None).tokens,
                              torch.zeros(1, 0, dtype=torch.long), steps, 8, block_length, own)
    out = ConfidenceSampler(ConfidenceConfig(temperature=0.0, block_length=block_length)).sample(
        model, 1, steps, torch.Generator())
    assert torch.equal(out.tokens.masked_fill(out.tokens == mask, own), expected)


def test_an_unbounded_threshold_ignores_the_steps_and_ends_a_block_that_no_longer_moves():
    model = BagOracle(GEN, positional=True)
    sampler = ConfidenceSampler(ConfidenceConfig(threshold=1.0, bounded=False, temperature=0.0))
    out = sampler.sample(model, 2, 4, torch.Generator())
    assert out.network_calls == GEN and int((out.tokens == VOCAB).sum()) == 0, "one a step, past the 4 steps asked"
    stuck = _OwnMask(8, positional=False)
    held = ConfidenceSampler(ConfidenceConfig(threshold=0.99, bounded=False, temperature=0.0))
    tokens = held.sample(stuck, 1, 2, torch.Generator()).tokens
    assert len(stuck.seen) == 1 and bool((tokens == VOCAB).all()), "a step that moved no token ended the block"


def test_eos_options_never_propose_eos_or_commit_it_last():
    eos = 2
    model = BagOracle(GEN, positional=True, eos_id=eos)
    never = ConfidenceSampler(ConfidenceConfig(eos_logit_inf=True)).sample(model, 4, 8, torch.Generator())
    assert not bool((never.tokens == eos).any())
    last = ConfidenceSampler(ConfidenceConfig(eos_confidence_inf=True, temperature=0.0))
    plain = ConfidenceSampler(ConfidenceConfig(temperature=0.0)).sample(model, 1, GEN, torch.Generator())
    model.seen.clear()
    tokens = last.sample(model, 1, GEN, torch.Generator()).tokens
    assert not torch.equal(tokens, plain.tokens), "the option must change the order here"
    states = [x for x, _ in model.seen] + [tokens]
    waited = 0
    for x, after in zip(states, states[1:], strict=False):  # one token per step: each step's proposals and its pick
        masked = x[0] == VOCAB
        proposals = model.predict(x, torch.ones(1), None, None).tokens[0].argmax(-1)[masked]
        picked = int(after[0][(after[0] != x[0])][0])
        if picked == eos:
            assert bool((proposals == eos).all()), "EOS is committed only when every proposal is EOS"
        waited += int(picked != eos and bool((proposals == eos).any()))
    assert waited, "some step put an EOS proposal off"
    model.seen.clear()
    with pytest.raises(InvalidConfigError, match="eos_logit_inf=true acts on the end-of-document token"):
        ConfidenceSampler(ConfidenceConfig(eos_logit_inf=True)).sample(BagOracle(GEN, True), 1, 4, torch.Generator())


def test_a_timed_denoiser_is_told_the_time_of_the_masked_share():
    model = BagOracle(GEN, positional=True, timed=True)
    ConfidenceSampler(ConfidenceConfig()).sample(model, 2, 4, torch.Generator().manual_seed(0))
    for x, tau in model.seen:  # linear schedule: the masked share itself
        assert torch.allclose(tau.double(), (x == VOCAB).double().mean(1), atol=1e-6)
    assert [round(float(tau[0]), 6) for _, tau in model.seen] == [1.0, 0.75, 0.5, 0.25]
    assert torch.allclose(masked_time(model, torch.full((1, 4), VOCAB)), torch.ones(1))


@pytest.mark.parametrize(
    ("options", "steps", "line"),
    [
        ({"block_length": 5}, 8, "block_length=5 must divide the 32 free positions"),
        ({"block_length": 8}, 2, "steps=2 is fewer than the 4 blocks"),
    ],
)
def test_a_block_plan_that_cannot_work_is_refused_in_one_line_before_a_network_call(options, steps, line):
    model = BagOracle(GEN, positional=True)
    with pytest.raises(InvalidConfigError, match=line):
        ConfidenceSampler(ConfidenceConfig(**options)).sample(model, 2, steps, torch.Generator())
    assert model.seen == []


@pytest.mark.parametrize(
    ("options", "line"),
    [
        ({"threshold": 1.5}, "threshold=1.5 is out of range: it must be in (0, 1]"),
        ({"threshold": 0}, "threshold=0.0 is out of range"),
        ({"remasking": "lowest"}, "remasking='lowest' is not valid: it must be one of low_confidence, random, margin"),
        ({"remasking": "random", "threshold": 0.9}, "valid with a threshold: low_confidence, margin, entropy"),
        ({"cache": "full"}, "cache='full' is not valid: it must be one of none, prefix, dual"),
        ({"cache": "dual", "guidance": 2.0}, "set cache=none or guidance=1"),
        ({"threshold": 0.5, "factor": 1.0}, "threshold and factor are two rules for how many to commit: set one"),
        ({"factor": 0}, "factor=0.0 is out of range: it must be > 0"),
        ({"bounded": False}, "bounded=false lets a threshold or factor ignore the step count, but neither is set"),
        ({"top_p": 0.9}, "top_p belongs to Dream's generation: set schedule=dream"),
        ({"remasking": "origin"}, "remasking=origin belongs to Dream's generation: set schedule=dream"),
        ({"schedule": "dream", "threshold": 0.9}, "threshold is a rule over LLaDA's schedule"),
        ({"schedule": "dream", "remasking": "random"}, "remasking=random is a rule over LLaDA's schedule"),
        ({"schedule": "bd3"}, "schedule='bd3' is not valid: it must be one of llada, dream"),
    ],
)
def test_bad_options_are_refused_naming_the_valid_choices(options, line):
    with pytest.raises(InvalidConfigError, match=re.escape(line)):
        registry.build("sampler", "confidence", options)


def test_a_process_that_does_not_mask_and_a_backbone_that_cannot_cache_are_refused_before_anything_is_built():
    reg = registry.load()
    with pytest.raises(IncompatibleComponentsError, match="needs a token process that is a .*MaskingProcess"):
        build_experiment(compose(["experiment=binsaw/ar_cpu", *TINY, "sampler=confidence"], reg), reg)
    from ladd_plugins.backbones.hf_masked_lm import HFMaskedLM
    from registry.interfaces import CachingBackbone, Needs

    unmet = Needs(backbone=CachingBackbone).unmet(None, "masked", None, "hf_masked_lm", HFMaskedLM)
    assert unmet == (
        "a token backbone that is a registry.interfaces.CachingBackbone, but backbone 'hf_masked_lm' is not one",
        "choose another backbone",
    )


def _ladd_model(variant: str) -> DenoiserModel:
    reg = registry.load()
    torch.manual_seed(0)
    return build_experiment(compose([f"experiment=binsaw/{variant}_cpu", *TINY], reg), reg).model.eval()


def test_sequential_ladd_decodes_its_latent_with_any_token_decoder():
    model = _ladd_model("coladd_seq")
    options = {"latent_steps": 3, "token_decoder": "confidence", "token_decoder_options": {"block_length": 4}}
    sampler = registry.build("sampler", "sequential", options)
    out = sampler.sample(model, 3, 8, torch.Generator().manual_seed(0))
    assert out.network_calls == 3 + 8 and int((out.tokens == model.vocab_size).sum()) == 0
    held = sampler.sample(model, 3, 8, torch.Generator().manual_seed(0), latent=out.latent)
    assert torch.equal(held.latent, out.latent) and held.network_calls == 8
    not_a_decoder = "token_decoder=.joint. is no registry.interfaces.TokenDecoder .* valid: .*confidence"
    with pytest.raises(InvalidConfigError, match=not_a_decoder):
        registry.build("sampler", "sequential", {"token_decoder": "joint"})
    with pytest.raises(InvalidConfigError, match="token_decoder_options: .*remasking='x'"):
        registry.build(
            "sampler", "sequential", {"token_decoder": "confidence", "token_decoder_options": {"remasking": "x"}}
        )


@pytest.mark.parametrize("options", [{}, {"threshold": 0.6}])
def test_joint_ladd_runs_a_confidence_rule_beside_its_latent_steps(options):
    model = _ladd_model("coladd_joint")
    sampler = registry.build("sampler", "joint", {"token_decoder": "confidence", "token_decoder_options": options})
    out = sampler.sample(model, 3, 8, torch.Generator().manual_seed(0))
    assert out.network_calls == 8, "the latent needs the network at every step"
    assert int((out.tokens == model.vocab_size).sum()) == 0 and out.latent is not None
    with pytest.raises(InvalidConfigError, match="joint sampler cannot use"):
        registry.build("sampler", "joint", {"token_decoder": "confidence", "token_decoder_options": {"cache": "dual"}})


def test_the_time_estimate_of_a_job_probes_with_step_counts_a_block_decoder_takes():
    from registry.engine.sampling_limits import check_sampling_time

    reg = registry.load()
    cfg = compose(["experiment=binsaw/mdlm_cpu", *TINY, "sampler=confidence", "sampler.block_length=4"], reg)
    experiment = build_experiment(cfg, reg)
    check_sampling_time(experiment, 2100, 8, 8, max_hours=1.0)  # timed: 263 chunks x 8 steps; probes of 4 and 8 steps
    with pytest.raises(InvalidConfigError, match="steps=2 is fewer than the 4 blocks"):
        check_sampling_time(experiment, 9000, 2, 8, max_hours=1.0)


def test_a_cache_on_a_backbone_that_keeps_none_is_blamed_on_the_cache_option():
    from ladd_plugins.backbones.hf_masked_lm import HFMaskedLM
    from registry.interfaces import needs_of

    sampler = registry.build("sampler", "confidence", {"cache": "prefix"})
    need, _ = needs_of(sampler).unmet(None, "masked", None, "hf_masked_lm", HFMaskedLM)
    assert need == (
        "a token backbone that is a registry.interfaces.CachingBackbone (its option cache='prefix' keeps the "
        "backbone's key-value cache; cache='none' needs none), but backbone 'hf_masked_lm' is not one"
    )
    assert needs_of(registry.build("sampler", "confidence", {})).unmet(None, "masked", None, "hf_masked_lm",
                                                                      HFMaskedLM) is None
