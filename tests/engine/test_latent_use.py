"""Using a trained latent: encoding references, sampling given a clean latent, interpolating between two latents,
and the files in between; each refusal is one line naming the problem and the fix."""
from __future__ import annotations

import math

import pytest
import torch
from support import TINY
from torch import Tensor, nn

import registry
from ladd_plugins.datasets.text.tokenizer import characters
from ladd_plugins.latents.continuous import ContinuousLatent, ContinuousLatentConfig
from ladd_plugins.processes.masked import MaskedProcess, MaskedProcessConfig
from ladd_plugins.processes.vp import VPGaussianProcess, VPProcessConfig
from ladd_plugins.schedules.closed_form import LinearSchedule, ScheduleConfig
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.interpolation import code_path, interpolate, spherical
from registry.engine.latents import load_latents, save_latents
from registry.engine.references import read_references
from registry.engine.sampling import check_takes_latent
from registry.errors import LaddError
from registry.host.registry import load
from registry.interfaces import IDS, VECTORS, Denoised, DenoiserModel, Latent, SampleOutput, Sampler, mask_id
from registry.storage.weights import read_tensors, save_tensors, state_digest
from registry.toolkit.sampling import held_latent

#: P(x_i = 1) per position, for a latent whose first coordinate is positive (row 0) or not (row 1)
ONES = torch.tensor([[0.9, 0.8, 0.1, 0.2], [0.1, 0.3, 0.7, 0.95]])


class LatentOracle(nn.Module, DenoiserModel):
    """Exact denoiser of tokens independent given a latent: binary positions with P(1) the row of ``ONES`` that the
    sign of the latent's first coordinate picks. It records the latent and time of every token prediction."""

    def __init__(self) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(()))
        self.seq_len, self.vocab_size = ONES.shape[1], 2
        schedule = LinearSchedule(ScheduleConfig())
        self.process = MaskedProcess(MaskedProcessConfig(horizon=1000), schedule=schedule, vocab_size=2)
        self.latent = ContinuousLatent(ContinuousLatentConfig(length=1, width=3))
        self.latent_process = VPGaussianProcess(VPProcessConfig(), LinearSchedule(ScheduleConfig()))
        self.seen: list[tuple[Tensor, Tensor]] = []
        self.latent_calls = 0

    @property
    def device(self) -> torch.device:
        return self.anchor.device

    @property
    def caches_token_predictions(self) -> bool:
        return True

    def predict(self, x_t, tau_x, y_t, tau_y, rows=None) -> Denoised:
        if tau_x is None:
            self.latent_calls += 1
            return Denoised(latent=torch.zeros_like(y_t))
        self.seen.append((y_t.clone(), tau_y.clone()))
        ones = ONES[(y_t[:, 0, 0] <= 0).long()]
        logits = torch.stack([(1 - ones).log(), ones.log()], dim=-1)
        return Denoised(tokens=logits if rows is None else logits[rows], latent=torch.zeros_like(y_t))


def _signs(n: int) -> Tensor:
    """n clean latents, the first half with a positive first coordinate, the second half with a negative one."""
    latent = torch.randn(n, 1, 3, generator=torch.Generator().manual_seed(1)).abs()
    latent[n // 2 :, 0, 0] *= -1
    return latent


SAMPLERS = [registry.build("sampler", "joint"), registry.build("sampler", "sequential", {"latent_steps": 5})]


@pytest.mark.parametrize("sampler", SAMPLERS, ids=["joint", "sequential"])
def test_a_given_latent_conditions_every_token_step_at_time_zero_and_gives_the_exact_conditional(sampler):
    n, model = 4000, LatentOracle()
    latent = _signs(n)
    out = sampler.sample(model, n, 8, torch.Generator().manual_seed(0), latent=latent)
    assert torch.equal(out.latent, latent) and model.latent_calls == 0
    assert model.seen and all(torch.equal(y, latent) and not bool(t.any()) for y, t in model.seen)
    assert out.network_calls == len(model.seen)
    for half, ones in ((out.tokens[: n // 2], ONES[0]), (out.tokens[n // 2 :], ONES[1])):
        frequency = half.double().mean(0)
        tolerance = 5 * (ones.double() * (1 - ones.double()) / (n // 2)).sqrt()
        assert bool(((frequency - ones.double()).abs() < tolerance).all()), (frequency, ones)


def test_joint_and_sequential_samplers_give_the_same_samples_given_the_same_latent():
    latent = _signs(6)
    first, second = (s.sample(LatentOracle(), 6, 4, torch.Generator().manual_seed(3), latent=latent) for s in SAMPLERS)
    assert torch.equal(first.tokens, second.tokens) and first.network_calls == second.network_calls


@pytest.mark.parametrize("sampler", SAMPLERS, ids=["joint", "sequential"])
def test_known_tokens_stay_in_place_given_a_latent(sampler):
    fixed = torch.full((50, 4), mask_id(2))
    fixed[:, 0], fixed[:, 3] = 0, 1
    out = sampler.sample(LatentOracle(), 50, 4, torch.Generator().manual_seed(0), fixed=fixed, latent=_signs(50))
    assert bool((out.tokens[:, 0] == 0).all()) and bool((out.tokens[:, 3] == 1).all())


def test_a_given_latent_of_another_shape_or_with_the_mask_id_is_refused():
    model = LatentOracle()
    with pytest.raises(LaddError, match=r"must hold floats of shape \(2, 1, 3\)"):
        held_latent(model, 2, torch.zeros(2, 1, 4), model.device)
    with pytest.raises(LaddError, match="must be finite"):
        held_latent(model, 1, torch.full((1, 1, 3), math.nan), model.device)
    model.latent = Codes()
    with pytest.raises(LaddError, match=r"real codes, in \[0, 5\)"):
        held_latent(model, 2, torch.tensor([[1], [5]]), model.device)


class Codes(Latent):
    """A latent of ids over 5 codes, for the checks that read only its declarations."""

    produces, values, length, width = IDS, 5, 1, 2

    def encode(self, features):
        raise NotImplementedError

    def null(self, batch, device):
        return torch.full((batch, self.length), self.values, dtype=torch.long, device=device)

    def input_layer(self, width):
        return nn.Identity()

    def output_layer(self, width):
        return nn.Identity()


class OldSampler(Sampler):
    def sample(self, model, num_samples, steps, generator, fixed=None) -> SampleOutput:
        raise AssertionError("never called")


def test_a_sampler_that_takes_no_latent_is_refused_before_sampling():
    check_takes_latent(SAMPLERS[0])
    with pytest.raises(LaddError, match="OldSampler cannot draw samples given a latent: it does not declare"):
        check_takes_latent(OldSampler())


def _experiment(name: str, *overrides: str):
    registry = load()
    return build_experiment(compose([f"experiment=binsaw/{name}", *TINY, *overrides], registry), registry)


def test_encode_gives_the_posterior_mean_in_eval_mode_whatever_the_models_mode():
    model = _experiment("coladd_seq_cpu").model.train()
    x0 = torch.randint(2, (5, 16), generator=torch.Generator().manual_seed(0))
    first = model.encode(x0)
    assert model.training, "encode restores the model's mode"
    assert torch.equal(first, model.encode(x0))
    model.eval()
    with torch.no_grad():
        features = model.encoder(x0)
        drawn = model.latent.encode(features).y0
    assert torch.equal(first, features), "the posterior's mean, not a draw around it"
    assert 0 < float((drawn - features).abs().max()) < 0.1
    assert torch.allclose(first.norm(dim=-1), torch.ones(5, 1)), "the sawtooth encoder's features are L2-normalised"


def test_encode_gives_the_codes_and_leaves_the_codebook_as_it_was():
    model = _experiment("diladd_seq_cpu").model.train()
    x0 = torch.randint(2, (6, 16), generator=torch.Generator().manual_seed(0))
    before = {name: value.clone() for name, value in model.state_dict().items()}
    codes = model.encode(x0)
    assert all(torch.equal(value, before[name]) for name, value in model.state_dict().items())
    model.eval()
    with torch.no_grad():
        assert torch.equal(codes, model.latent.encode(model.encoder(x0)).y0)
    assert codes.dtype == torch.long and codes.shape == (6, 1)


@pytest.mark.parametrize("sampler", ["joint", "sequential"])
def test_diladd_samples_given_codes_hold_exactly_those_codes(sampler):
    experiment = _experiment("diladd_seq_cpu", f"sampler={sampler}")
    model = experiment.model.eval()
    codes = model.encode(torch.randint(2, (5, 16), generator=torch.Generator().manual_seed(0)))
    out = experiment.sampler.sample(model, 5, 4, torch.Generator().manual_seed(1), latent=codes)
    assert torch.equal(out.latent, codes)
    assert out.tokens.shape == (5, 16) and int(out.tokens.max()) < 2


def test_a_model_without_a_latent_has_nothing_to_encode():
    with pytest.raises(LaddError, match="no latent channel"):
        _experiment("mdlm_cpu").model.encode(torch.zeros(1, 16, dtype=torch.long))


def test_spherical_interpolation_walks_the_great_circle_in_equal_angles():
    start = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    theta = torch.tensor([2.0, 0.5])  # angles between the ends of each vector
    end = torch.stack([torch.stack([theta[0].cos(), theta[0].sin(), torch.zeros(())]),
                       torch.stack([torch.zeros(()), theta[1].cos(), theta[1].sin()])])
    path = interpolate(ContinuousLatent(ContinuousLatentConfig(length=2, width=3)), start, end, 5)
    assert path.shape == (5, 2, 3) and torch.equal(path[0], start) and torch.allclose(path[-1], end, atol=1e-6)
    assert torch.allclose(path.norm(dim=-1), torch.ones(5, 2), atol=1e-6)
    for k in range(5):
        assert torch.allclose((path[k] * start).sum(-1), (k / 4 * theta).cos(), atol=1e-6)
    lengths = spherical(2 * start, end, torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)).norm(dim=-1)
    assert torch.allclose(lengths, torch.tensor([[2.0, 2.0], [1.5, 1.5], [1.0, 1.0]]), atol=1e-6)


def test_a_code_path_changes_one_position_at_a_time():
    start, end = torch.tensor([3, 1, 4, 1, 5]), torch.tensor([3, 9, 2, 1, 6])
    path = interpolate(Codes(), start, end, 4)
    assert path.tolist() == [[3, 1, 4, 1, 5], [3, 9, 4, 1, 5], [3, 9, 2, 1, 5], [3, 9, 2, 1, 6]]
    longer = code_path(start, end, 7)
    assert torch.equal(longer[0], start) and torch.equal(longer[-1], end)
    assert [int((longer[k] != longer[k + 1]).sum()) for k in range(6)] in ([0, 1, 1, 0, 1, 0], [1, 0, 1, 0, 1, 0])
    assert torch.equal(code_path(start, start, 3), start.repeat(3, 1))


def test_interpolation_refuses_one_point_and_a_latent_of_another_kind():
    latent = ContinuousLatent(ContinuousLatentConfig(length=1, width=2))
    with pytest.raises(LaddError, match="at least 2 points"):
        interpolate(latent, torch.zeros(1, 2), torch.ones(1, 2), 1)
    latent.produces = "sphere"
    with pytest.raises(LaddError, match=f"interpolates latents of '{VECTORS}'"):
        interpolate(latent, torch.zeros(1, 2), torch.ones(1, 2), 3)


class Ids:
    """A dataset without a tokenizer: ids over a vocabulary of 3, sequences of 4, and optionally an end id."""

    vocab_size, seq_len, tokenizer = 3, 4, None

    def __init__(self, eos_id: int | None = None) -> None:
        self.eos_id = eos_id


class Text:
    """A text dataset over a character tokenizer, sequences of 6."""

    seq_len = 6

    def __init__(self) -> None:
        self.tokenizer = characters("abc ")
        self.vocab_size, self.eos_id = len(self.tokenizer), self.tokenizer.eos_token_id


def test_id_references_are_read_in_order_and_cut_with_one_note(tmp_path):
    path = tmp_path / "refs.txt"
    path.write_text("0 1 2 0\n\n2 2 1 0 1 1\n")
    read = read_references(path, Ids())
    assert read.tokens.tolist() == [[0, 1, 2, 0], [2, 2, 1, 0]]
    assert read.notes == [f"1 reference(s) longer than the model's 4 tokens cut to 4 (line 3 of {path})"]


def test_text_references_end_with_the_end_of_document_id_and_are_padded_with_it(tmp_path):
    dataset, lines, records = Text(), tmp_path / "refs.txt", tmp_path / "refs.jsonl"
    lines.write_text("ab c\nabcabcab\n")
    records.write_text('{"text": "ab c"}\n{"text": "abcabcab"}\n{"text": "ignored", "ids": [1, 2]}\n')
    ids = dataset.tokenizer("ab c", add_special_tokens=False)["input_ids"]
    for path in (lines, records):
        read = read_references(path, dataset)
        assert read.tokens[0].tolist() == ids + [dataset.eos_id] * 2
        assert read.tokens[1].tolist() == dataset.tokenizer("abcabc", add_special_tokens=False)["input_ids"]
    assert read.tokens[2].tolist() == [1, 2] + [dataset.eos_id] * 4, "the ids `ladd sample` wrote, as they are"


def test_a_short_id_reference_is_padded_with_the_end_id_or_refused_without_one(tmp_path):
    path = tmp_path / "refs.txt"
    path.write_text("1 2\n")
    assert read_references(path, Ids(eos_id=0)).tokens.tolist() == [[1, 2, 0, 0]]
    with pytest.raises(LaddError, match="no end-of-document id to pad with: give references of 4 tokens"):
        read_references(path, Ids())


@pytest.mark.parametrize(
    ("content", "dataset", "message"),
    [
        (b"", Ids(), r"holds no reference \(it is empty or blank\): write one reference per line"),
        (b"\n  \n", Ids(), "holds no reference"),
        (b"0 1 \xff 2\n", Ids(), r"is not UTF-8 text \(byte 0xff at offset 4\): save it as UTF-8"),
        (b"0 1\n0 3 1 1\n", Ids(), "line 2 of .* holds id 3, outside this model's vocabulary of 3 ids"),
        (b"0 x 1 1\n", Ids(), "'x' is not a token id"),
        (b"ab\nzz\n", Text(), "line 2 of .* holds text the tokenizer does not know"),
    ],
    ids=["empty", "blank", "not-utf8", "outside-vocabulary", "not-an-id", "unknown-text"],
)
def test_bad_reference_files_are_refused_in_one_line(tmp_path, content, dataset, message):
    path = tmp_path / "refs.txt"
    path.write_bytes(content)
    with pytest.raises(LaddError, match=message) as refused:
        read_references(path, dataset)
    assert "\n" not in str(refused.value)


def test_a_jsonl_line_without_text_or_with_ids_outside_the_vocabulary_is_refused(tmp_path):
    path = tmp_path / "refs.jsonl"
    path.write_text('{"words": "ab"}\n')
    with pytest.raises(LaddError, match="line 1 of .* is not a JSON object with a 'text' string"):
        read_references(path, Text())
    path.write_text('{"ids": [1, 2]}\n{"ids": [1, 99]}\n')
    with pytest.raises(LaddError, match="line 2 of .* holds id 99, outside this model's vocabulary"):
        read_references(path, Text())


def test_latents_round_trip_and_are_refused_by_another_model(tmp_path):
    model = _experiment("coladd_seq_cpu").model
    latents = model.encode(torch.randint(2, (3, 16), generator=torch.Generator().manual_seed(0)))
    path = save_latents(tmp_path / "lat.safetensors", model, latents)
    assert torch.equal(load_latents(path, model), latents)
    other = _experiment("coladd_seq_cpu", "seed=1").model
    with pytest.raises(LaddError, match="was encoded by another model .* encode the references with this model"):
        load_latents(path, other)
    wider = _experiment("coladd_seq_cpu", "latent.width=16").model
    wrong_shape = (r"was encoded by another model .*\(its latents are torch.float32 of shape \[1, 32\], this model's "
                   r"torch.float32 of shape \[1, 16\]\)")
    with pytest.raises(LaddError, match=wrong_shape):
        load_latents(path, wider)
    codes = _experiment("diladd_seq_cpu").model  # Co-LADD's latents given to a Di-LADD model: another model's
    with pytest.raises(LaddError, match=r"was encoded by another model .*\(its latents are torch.float32 of shape "
                                        r"\[1, 32\], this model's torch.int64 of shape \[\d+\]\)"):
        load_latents(path, codes)
    _, metadata = read_tensors(path)
    save_tensors({"latents": latents.double()}, tmp_path / "converted.safetensors", metadata)
    with pytest.raises(LaddError, match=r"holds latents torch.float64 of shape \[1, 32\], but this model encodes "
                                        r"torch.float32 of shape \[1, 32\], as `ladd encode` writes them: the file was "
                                        r"converted or edited"):
        load_latents(tmp_path / "converted.safetensors", model)
    save_tensors({"latents": latents}, tmp_path / "other.safetensors", {"format": "something else"})
    with pytest.raises(LaddError, match="is not a latent file written by `ladd encode`"):
        load_latents(tmp_path / "other.safetensors", model)
    (tmp_path / "edited.safetensors").write_bytes(path.read_bytes().replace(b"ladd-latents/1", b"ladd-latents/0"))
    with pytest.raises(LaddError, match="is corrupt"):
        load_latents(tmp_path / "edited.safetensors", model)


def test_the_weights_digest_names_the_values_not_where_or_how_they_are_stored():
    first, second = nn.Linear(3, 2), nn.Linear(3, 2)
    second.load_state_dict(first.state_dict())
    first.register_buffer("count", torch.tensor(2.0))
    second.register_buffer("count", torch.tensor(2.0))
    second.weight.data = second.weight.data.t().contiguous().t()  # the same values in another memory layout
    assert state_digest(first) == state_digest(second)
    second.count += 1
    assert state_digest(first) != state_digest(second)
