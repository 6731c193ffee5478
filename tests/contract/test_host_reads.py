"""Host synchronisations, counted on the CPU: the sawtooth training step of ``ladd train`` makes none of its own."""
from __future__ import annotations

import tempfile
from collections import Counter

import pytest
import torch
from support import TINY

import registry
from registry.config.composition import compose
from registry.host_reads import count_host_reads
from registry.training.loop import train


def test_counts_every_kind_of_read_and_nothing_else():
    x = torch.randn(6)
    with count_host_reads() as reads:
        y = torch.where(x > 0, x * 2, -x).sum() + torch.rand(3).mean()  # device-side only
        torch.multinomial(torch.ones(4), 2)
    assert reads.total == 0 and y.dim() == 0
    with count_host_reads() as reads:
        float(x.sum())
        bool((x > 0).any())
        x[x > 0]
        x.clone()[x < 0] = 0.0
        x.nonzero()
        torch.equal(x, x)
        x.unique()
    assert reads.counts == Counter({"_local_scalar_dense.default": 2, "index.Tensor": 1, "index_put_.default": 1,
                                    "nonzero.default": 1, "equal.default": 1, "_unique2.default": 1})
    assert len(reads.sites) == 7 and all(site.startswith(f"{__file__}:") for site in reads.sites)  # one line each


def _reads_per_step(reg, preset: str) -> Counter:
    """Host reads of one training step of ``preset``'s last stage, from two short runs (setup cancels out)."""
    def run(steps: int) -> Counter:
        cfg = compose(
            [
                f"experiment={preset}",
                *TINY,
                "backbone.hidden=16",
                f"trainer.max_steps={steps}",
                "train.log_every=1000",
                "train.fused_adamw=true",
                "dataset.draw_on_device=true",
                "train.progress=true",
            ],
            reg,
        ).plain()
        cfg["train"]["stages"] = dict(list(cfg["train"]["stages"].items())[-1:])
        with tempfile.TemporaryDirectory() as run_dir, count_host_reads() as reads:
            train(cfg, run_dir, reg)
        return reads.sites

    run(2)  # what a process does once (the generator jump's self-check) falls outside the two counted runs
    setup, sites = run(2), run(7)
    sites.subtract(setup)
    return Counter({site: count for site, count in sites.items() if count})


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.mark.parametrize("preset", ["binsaw/mdlm_cpu", "binsaw/coladd_joint_cpu", "binsaw/coladd_seq_cpu"])
def test_sawtooth_training_step_never_reads_the_device(reg, preset):
    # Lightning's loop, the batch, the objective, backward, clipping, fused AdamW, the EMA, the progress bar and
    # logging between log steps
    assert _reads_per_step(reg, preset) == Counter()


@pytest.mark.parametrize("preset", ["binsaw/diladd_joint_cpu", "binsaw/diladd_seq_cpu"])
def test_diladd_step_reads_only_inside_the_vector_quantiser(reg, preset):
    # vector-quantize-pytorch tests its own flags and dead codes on the host; ladd adds nothing to that
    sites = _reads_per_step(reg, preset)
    assert sites and all("vector_quantize_pytorch" in site for site in sites), sites


def test_terms_are_handed_to_the_logs_only_at_log_steps_and_the_last_and_every_one_is_written(reg, tmp_path):
    cfg = compose(
        ["experiment=binsaw/mdlm_cpu", *TINY, "backbone.hidden=16", "trainer.max_steps=7", "train.log_every=3"], reg
    )
    train(cfg, tmp_path, reg)
    lightning_log = (tmp_path / "logs" / "stage1" / "metrics.csv").read_text().splitlines()
    column = lightning_log[0].split(",").index("step")
    assert [line.split(",")[column] for line in lightning_log[1:]] == ["3", "6", "7"]  # numbered as ours
    ours = (tmp_path / "metrics.csv").read_text().splitlines()
    assert [line.split(",")[1] for line in ours[1:]] == ["3", "6", "7"]
