"""Padding out of the loss: rows of one sentence each (``packing=pad``) mark the positions after the sentence's
EOS, and the token loss and L^x average over the real positions only, checked against a computation by hand."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import registry
from registry.config.composition import compose
from registry.distributed import Shard
from registry.engine.assembly import build_experiment
from registry.engine.timesteps import draw_times

SENTENCES = ["the cat sat", "a dog", "birds sing in the tall old tree today", "no", "the end of it"]


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    """A tiny MDLM over character rows of 16, one sentence per row (constant loss weight, no dropout)."""
    folder = tmp_path_factory.mktemp("padded")
    (folder / "corpus.txt").write_text("\n".join(SENTENCES) + "\n")
    overrides = [
        "~experiment", "dataset=text", "dataset.tokenizer=text8", "dataset.seq_len=16", "dataset.packing=pad",
        "dataset.txt_documents=line", f"dataset.source={folder / 'corpus.txt'}",
        f"dataset.cache_dir={folder / 'cache'}", "dataset.progress=false",
        "+dataset.split_map={train: 'train', validation: 'train'}", "process.weighting=constant",
        "backbone.hidden=16", "backbone.layers=1", "backbone.heads=2", "backbone.cond_dim=16", "backbone.dropout=0",
    ]
    reg = registry.load()
    return build_experiment(compose(overrides, reg).plain(), reg)


def test_pad_rows_mark_the_positions_after_each_sentences_end(padded):
    rows = torch.from_numpy(padded.dataset.rows("train").astype("int64"))
    padding = padded.dataset.padding(rows)
    lengths = [min(len(s), 15) for s in SENTENCES]  # characters, one id each (at most 15), then EOS
    expected = torch.tensor([[position > length for position in range(16)] for length in lengths])
    assert torch.equal(padding, expected)
    assert (rows[~padding] != padded.dataset.eos_id).sum() == sum(lengths)


@torch.no_grad()
def _by_hand(model, x0: torch.Tensor, padding: torch.Tensor, seed: int) -> torch.Tensor:
    """The constant-weight masked cross-entropy summed over masked real positions, over the count of real positions."""
    generator = torch.Generator().manual_seed(seed)
    tau = draw_times(x0.shape[0], model.process.horizon, generator)
    survives = model.process.schedule.signal(tau.double())[:, None]
    keep = torch.rand(x0.shape, generator=generator, dtype=torch.float64) < survives
    x_t = torch.where(keep, x0, model.vocab_size)
    logits = model.backbone(x_t, tau, None, None).tokens
    nll = -F.log_softmax(logits.double(), dim=-1).gather(-1, x0[..., None])[..., 0]
    counted = (x_t == model.vocab_size) & ~padding
    return (nll * counted).sum() / (~padding).sum()


def test_padding_is_out_of_the_token_loss_and_its_shards_average_to_it(padded):
    model = padded.model.eval()
    x0 = torch.from_numpy(padded.dataset.rows("train").astype("int64"))[:4]
    padding = padded.dataset.padding(x0)
    with torch.no_grad():
        loss = model.loss(x0, torch.Generator().manual_seed(5), padding=padding)["token"]
        whole = model.loss(x0, torch.Generator().manual_seed(5))["token"]
        rows = model.token_loss(x0, False, torch.Generator().manual_seed(5), padding=padding)
        halves = [
            model.loss(x0, torch.Generator().manual_seed(5), Shard(rank, 2, seed=0), padding)["token"]
            for rank in (0, 1)
        ]
    expected = _by_hand(model, x0, padding, 5)
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    assert float(rows.mean()) == pytest.approx(float(expected), rel=1e-5)
    assert float(sum(halves) / 2) == pytest.approx(float(expected), rel=1e-5), "the ranks' mean is the batch's"
    assert float(whole) != pytest.approx(float(expected), rel=1e-3), "without padding the EOS runs count"


def test_held_out_loss_averages_over_the_real_positions(padded):
    from registry.engine.evaluation import token_loss

    x0 = torch.from_numpy(padded.dataset.rows("validation").astype("int64"))
    value = token_loss(padded, batches=1, batch_size=len(x0), seed=0)
    batch = next(padded.dataset.batches(len(x0), 0, "validation"))  # what evaluation reads; batch 0 draws with seed 0
    with torch.no_grad():
        expected = _by_hand(padded.model.eval(), batch, padded.dataset.padding(batch), 0)
    assert value == pytest.approx(float(expected), rel=1e-5)
