"""Prefix prompts and infilling: every sampler keeps known tokens and samples the free ones from the right law."""
from __future__ import annotations

import pytest
import torch
from support import TINY
from torch import Tensor, nn

import registry
from ladd_plugins.datasets.binsaw.dataset import BinarySawtooth, BinarySawtoothConfig
from ladd_plugins.processes.autoregressive import AutoregressiveProcess
from ladd_plugins.processes.masked import MaskedProcess, MaskedProcessConfig
from ladd_plugins.samplers.ancestral import AncestralSampler
from ladd_plugins.samplers.autoregressive import AutoregressiveSampler
from ladd_plugins.samplers.config import AncestralConfig, AutoregressiveConfig
from ladd_plugins.schedules.closed_form import LinearSchedule, ScheduleConfig
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.errors import InvalidConfigError
from registry.interfaces import Denoised, DenoiserModel, mask_id

#: the tiny presets each built-in sampler is run on
PRESETS = {
    "ancestral": ["mdlm"],
    "confidence": ["mdlm"],
    "joint": ["coladd_joint", "diladd_joint"],
    "sequential": ["coladd_seq", "diladd_seq"],
    "autoregressive": ["ar"],
    "blockwise": ["mdlm +setup=bd3lm backbone.block_size=4"],  # block diffusion: the DiT made block-causal
}
SEQ = 16  # TINY's dataset.seq_len
MASK = mask_id(2)


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.fixture(scope="module")
def tiny_models(reg):
    """Preset name (and overrides) -> a TINY-sized model with random (not zero-initialised) weights, built once."""
    models = {}

    def get(variant: str):
        if variant not in models:
            torch.manual_seed(0)
            name, *overrides = variant.split()
            settings = compose([f"experiment=binsaw/{name}_cpu", *TINY, *overrides], reg).plain()
            model = build_experiment(settings, reg).model
            generator = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
            models[variant] = model.eval()
        return models[variant]

    return get


def _pattern(name: str, n: int, generator: torch.Generator) -> Tensor:
    """Known binary tokens at a prefix, at both ends (infilling) or at random positions; the mask elsewhere."""
    known = torch.zeros(n, SEQ, dtype=torch.bool)
    if name == "prefix":
        known[:, :5] = True
    elif name == "infill":
        known[:, :4] = known[:, -4:] = True
    else:
        known = torch.rand(n, SEQ, generator=generator) < 0.5
    return torch.where(known, torch.randint(2, (n, SEQ), generator=generator), MASK)


def test_every_builtin_sampler_is_covered(reg):
    assert {c.name for c in reg if c.kind == "sampler" and c.origin.plugin == "builtin"} == set(PRESETS)


#: the options each sampler is run with: both paths where a sampler has the ``fast`` option
OPTIONS = {"autoregressive": [{}], "confidence": [{}, {"cache": "prefix"}]}
#: (sampler, preset, options)
CASES = [
    (sampler, variant, options)
    for sampler, variants in PRESETS.items()
    for variant in variants
    for options in OPTIONS.get(sampler, [{"fast": True}, {"fast": False}])
]


@pytest.mark.parametrize("pattern", ["prefix", "infill", "scattered"])
@pytest.mark.parametrize("sampler, variant, options", CASES, ids=[f"{s}-{v}-{o}" for s, v, o in CASES])
def test_samplers_keep_known_tokens_and_fill_every_free_one(sampler, variant, options, pattern, reg, tiny_models):
    options = dict(options)
    if sampler == "sequential":
        options["latent_steps"] = 3
    model, n = tiny_models(variant), 12
    fixed = _pattern(pattern, n, torch.Generator().manual_seed(len(pattern)))
    out = reg.build("sampler", sampler, options).sample(model, n, 4, torch.Generator().manual_seed(0), fixed=fixed)
    known = fixed != MASK
    assert torch.equal(out.tokens[known], fixed[known])
    assert int(out.tokens.max()) <= 1, "no free position may stay masked"
    free_tokens = out.tokens[~known].float()
    assert 0.0 < float(free_tokens.mean()) < 1.0, "free positions are sampled, not copied from a constant"


def test_sequential_di_ladd_generates_its_latent_reading_the_known_tokens(reg, tiny_models):
    """The MM-DiT that denoises the codes reads the prompt, so the latent is drawn given it."""
    model = tiny_models("diladd_seq")
    generator = torch.Generator().manual_seed(0)
    fixed = _pattern("prefix", 4, generator)
    seen = []
    hook = model.backbone.register_forward_hook(lambda module, args, out: seen.append(args[0].clone()))
    try:
        reg.build("sampler", "sequential", {"latent_steps": 3}).sample(model, 4, 2, generator, fixed=fixed)
    finally:
        hook.remove()
    assert all(torch.equal(x, fixed) for x in seen[:3]), "every latent step sees the prompt and nothing else"


def test_fast_path_calls_no_network_where_nothing_is_free(tiny_models):
    model = tiny_models("mdlm")
    fixed = torch.randint(2, (3, SEQ), generator=torch.Generator().manual_seed(0))
    out = AncestralSampler(AncestralConfig()).sample(model, 3, 8, torch.Generator().manual_seed(0), fixed=fixed)
    assert torch.equal(out.tokens, fixed) and out.network_calls == 0
    one_free = fixed.clone()
    one_free[:, 7] = MASK
    out = AncestralSampler(AncestralConfig()).sample(model, 3, 64, torch.Generator().manual_seed(0), fixed=one_free)
    assert 1 <= out.network_calls <= 3, "one call per step that reveals something, at most one per sample here"


def test_bad_fixed_tokens_are_refused(tiny_models):
    sampler, model = AncestralSampler(AncestralConfig()), tiny_models("mdlm")
    with pytest.raises(InvalidConfigError, match="shape"):
        sampler.sample(model, 3, 4, torch.Generator(), fixed=torch.full((2, SEQ), MASK))
    with pytest.raises(InvalidConfigError, match="mask id"):
        sampler.sample(model, 3, 4, torch.Generator(), fixed=torch.full((3, SEQ), MASK + 1))


def test_sequential_sampling_checks_fixed_tokens_before_the_latent_reads_them(reg, tiny_models):
    sequential, model = reg.build("sampler", "sequential", {"latent_steps": 2}), tiny_models("diladd_seq")
    with pytest.raises(InvalidConfigError, match="shape"):
        sequential.sample(model, 3, 2, torch.Generator(), fixed=torch.full((3, SEQ + 1), MASK))


@pytest.mark.parametrize(
    "process, times",
    [
        (
            MaskedProcess(MaskedProcessConfig(), LinearSchedule(ScheduleConfig()), 5),
            [(1.0, 0.9), (0.5, 0.25), (0.3, 0.0)],
        ),
        # one reveal per row and step: each step takes at most 1/12 of the remaining time
        (AutoregressiveProcess(vocab_size=5), [(1.0, 11 / 12), (0.25, 0.25 * 11 / 12)]),
    ],
    ids=["masked", "autoregressive"],
)
def test_reverse_steps_never_touch_unmasked_positions(process, times):
    generator = torch.Generator().manual_seed(0)
    x_t = torch.where(torch.rand(64, 12, generator=generator) < 0.5, torch.randint(5, (64, 12), generator=generator), 5)
    logits = torch.randn(64, 12, 5, generator=generator)
    known = x_t != 5
    for tau_t, tau_s in times:
        t, s = torch.full((64,), tau_t), torch.full((64,), tau_s)
        reveal = process.reveal(x_t, t, s, generator)
        assert bool(reveal.any()) and not bool((reveal & known).any()), "reveal picks masked positions only"
        x_s = process.step(x_t, logits, t, s, generator)
        assert torch.equal(x_s[known], x_t[known]) and not torch.equal(x_s, x_t)


class SawtoothOracle(nn.Module, DenoiserModel):
    """The exact binary-sawtooth denoiser: P(x_i = 1 | visible tokens) by quadrature over the shift y.

    ``causal``: position i sees the tokens before it only (the law an autoregressive model learns).
    """

    def __init__(self, process, causal: bool, seq_len: int = 8, grid: int = 256) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(()))
        self.process, self.causal = process, causal
        self.latent, self.latent_process = None, None
        self.dataset = BinarySawtooth(BinarySawtoothConfig(seq_len=seq_len))
        self.seq_len, self.vocab_size = seq_len, 2
        y = (torch.arange(grid, dtype=torch.float64) + 0.5) / grid
        self.omega = self.dataset.omega(torch.arange(1, seq_len + 1, dtype=torch.float64), y[:, None]).T  # [S, G]
        self.calls = 0

    device = property(lambda self: self.anchor.device)
    caches_token_predictions = True

    def probability_of_one(self, x_t: Tensor) -> Tensor:
        """``[B, S]``: E[omega(i, y) | the visible tokens] under the uniform prior on y."""
        ones, zeros = ((x_t == v).double()[..., None] for v in (1, 0))
        per_token = ones * self.omega.log() + zeros * (1 - self.omega).log()  # [B, S, G]
        evidence = per_token.cumsum(1) - per_token if self.causal else per_token.sum(1, keepdim=True)
        return (evidence.softmax(-1) * self.omega).sum(-1)

    def predict(self, x_t, tau_x, y_t, tau_y, rows=None) -> Denoised:
        if tau_x is None:
            raise AssertionError("the sawtooth oracle has no latent channel")
        self.calls += 1
        p = self.probability_of_one(x_t)
        logits = torch.stack([(1 - p).log(), p.log()], -1).float()
        return Denoised(tokens=logits if rows is None else logits[rows])


def _fixed(pattern: list[int], n: int) -> Tensor:
    return torch.tensor([MASK if v < 0 else v for v in pattern]).expand(n, -1).clone()


def _assert_frequencies(samples: Tensor, expected: Tensor) -> None:
    """Frequencies of ones per column within 5 binomial standard errors of ``expected``."""
    frequencies = samples.double().mean(0)
    tolerance = 5 * (expected * (1 - expected) / samples.shape[0]).sqrt()
    assert bool(((frequencies - expected).abs() <= tolerance).all()), (frequencies, expected)


INFILL = [0, 1, -1, -1, -1, -1, 1, 0]  # free middle: P(one) is about .71, .29, .29, .71 there (0.5 unconditionally)
FREE = slice(2, 6)


def test_oracle_matches_rejection_sampling_of_the_data():
    oracle = SawtoothOracle(MaskedProcess(MaskedProcessConfig(), LinearSchedule(ScheduleConfig()), 2), causal=False)
    x, _ = oracle.dataset.sample(200_000, torch.Generator().manual_seed(0))
    fixed = _fixed(INFILL, 1)[0]
    accepted = x[((x == fixed) | (fixed == MASK)).all(1)]
    assert len(accepted) > 10_000
    _assert_frequencies(accepted[:, FREE], oracle.probability_of_one(fixed[None])[0, FREE])


@pytest.mark.parametrize("fast", [True, False])
def test_masked_chain_infills_with_the_exact_conditional_marginals(fast):
    oracle = SawtoothOracle(MaskedProcess(MaskedProcessConfig(), LinearSchedule(ScheduleConfig()), 2), causal=False)
    n, fixed = 4000, _fixed(INFILL, 4000)
    expected = oracle.probability_of_one(fixed[:1])[0, FREE]
    assert float((expected - 0.5).abs().min()) > 0.15, "the context must move the free marginals away from 1/2"
    # two steps reveal several positions at once: their joint law is approximate, each marginal stays exact
    out = AncestralSampler(AncestralConfig(fast=fast)).sample(
        oracle, n, 2, torch.Generator().manual_seed(int(fast)), fixed=fixed
    )
    _assert_frequencies(out.tokens[:, FREE], expected)
    assert out.network_calls == oracle.calls <= 2


def test_autoregressive_chain_continues_a_prompt_with_the_exact_joint_law():
    oracle = SawtoothOracle(AutoregressiveProcess(vocab_size=2), causal=True)
    prompt = [1, 1, 0]
    n, fixed = 4000, _fixed(prompt + [-1] * 5, 4000)
    out = AutoregressiveSampler(AutoregressiveConfig(cache=False)).sample(
        oracle, n, 1, torch.Generator().manual_seed(0), fixed=fixed
    )
    assert out.network_calls == 5
    posterior = SawtoothOracle(MaskedProcess(MaskedProcessConfig(), LinearSchedule(ScheduleConfig()), 2), causal=False)
    _assert_frequencies(out.tokens[:, 3:], posterior.probability_of_one(fixed[:1])[0, 3:])
    # positions 3 and 7 share omega (two periods over 8 positions): they agree more often than independent draws would
    p3 = float(posterior.probability_of_one(fixed[:1])[0, 3])
    after = [posterior.probability_of_one(_fixed(prompt + [v] + [-1] * 4, 1))[0, 7] for v in (0, 1)]
    agree = p3 * after[1] + (1 - p3) * (1 - after[0])
    independent = p3**2 + (1 - p3) ** 2
    assert agree - independent > 0.08, "the statistic must tell the joint law from independent draws (5 s.e. is 0.04)"
    _assert_frequencies((out.tokens[:, 3] == out.tokens[:, 7]).long()[:, None], agree.reshape(1))
