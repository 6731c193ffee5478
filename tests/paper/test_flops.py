"""`ladd flops`: the paper's GFLOPs-per-step table from real backbones on the meta device, and a measured count."""
from __future__ import annotations

import json

import pytest
from support import run_ladd

from registry import load
from registry.config.composition import compose
from registry.paper.flops import flops_report

K = 151_669  # Qwen3 real tokens; the mask is id K (the paper's K = 151,670 counts it)
FREQUENCY_DIM = 256  # sinusoidal features fed to the timestep MLP (layers.TimestepEmbedder's default)
MDLM = {"name": "dit", "hidden": 1024, "layers": 13, "heads": 16, "cond_dim": 256}
LADD = {"name": "mmdit", "hidden": 768, "layers": 12, "heads": 12, "cond_dim": 128}


@pytest.fixture(scope="module")
def registry():
    return load()


def experiment(seq_len: int, backbone: dict, latent_length: int = 0, vocab_size: int = K) -> dict:
    """A plain config whose dataset declares its size; its name is unregistered, so building it would fail."""
    latent = {"name": "continuous", "length": latent_length, "width": 32} if latent_length else None
    return {
        "method": "paper",
        "dataset": {"name": "never-built", "vocab_size": vocab_size, "seq_len": seq_len},
        "latent": latent,
        "latent_schedule": {"name": "vp_sqrt"},
        "latent_process": {"name": "vp"} if latent_length else None,
        "backbone": backbone,
        "train": {"stages": {"stage1": {"steps": 1}}},  # a valid config has a stage; the count reads none
    }


def extra_macs(cfg: dict) -> int:
    """Multiply-adds outside the blocks' projections, attention and MLP and the token head, by hand.

    adaLN: two modulations (3d each) per DiT block, two blocks per MM-DiT layer, 2d per final layer;
    the timestep MLP (256 -> cond -> cond) of each conditioned channel; the latent's input and output
    projections (width 32 <-> d at each of the M slots). Token embeddings are lookups: no multiply-adds.
    """
    b, d, c = cfg["backbone"], cfg["backbone"]["hidden"], cfg["backbone"]["cond_dim"]
    joint = b["name"] == "mmdit"
    streams = 2 if joint else 1
    timestep_mlps = int(joint) + int(b.get("token_time_conditioning", False))
    latent = (cfg["latent"] or {}).get("length", 0) * 32 * d * 2
    return (
        b["layers"] * streams * 2 * c * 3 * d
        + streams * c * 2 * d
        + timestep_mlps * (FREQUENCY_DIM * c + c * c)
        + latent
    )


# Table gflops-per-step (SPEC section 2): (data set, method, S, backbone, M) -> GFLOPs/step
PAPER = [
    ("LM1B MDLM", 128, MDLM, 0, 21.37),
    ("LM1B LADD-128", 128, LADD, 128, 22.95),
    ("LM1B LADD-32", 128, LADD, 32, 14.06),
    ("OWT MDLM", 512, MDLM, 0, 90.73),
    ("OWT LADD-64", 512, LADD, 64, 55.04),
    ("OWT LADD-16", 512, LADD, 16, 49.98),
]


@pytest.mark.parametrize(("label", "seq_len", "backbone", "latent_length", "gflops"), PAPER, ids=[p[0] for p in PAPER])
def test_paper_gflops_per_step_table_and_the_measured_count(registry, label, seq_len, backbone, latent_length, gflops):
    cfg = experiment(seq_len, backbone, latent_length)
    report = flops_report(cfg, registry)
    net = report.backbone
    assert (net.shape.layers, net.shape.length, net.shape.width) == (
        backbone["layers"],
        seq_len + latent_length,
        backbone["hidden"],
    )
    assert (net.shape.head_positions, net.shape.head_outputs, net.shape.mlp_ratio) == (seq_len, K, 4.0)
    assert round(net.gflops_per_step, 2) == gflops  # one multiply-add counted as one operation
    assert net.gflops_per_step_2x == pytest.approx(2 * net.gflops_per_step, rel=1e-15)
    assert net.head_gflops_2x == pytest.approx(2 * seq_len * backbone["hidden"] * K / 1e9, rel=1e-15)
    # FlopCounterMode counts every matrix product and attention of one forward pass (two FLOPs per
    # multiply-add); it must equal the paper's formula plus head plus the parts counted by hand, exactly
    assert net.measured_flops == round(2e9 * net.gflops_per_step) + 2 * seq_len * backbone[
        "hidden"
    ] * K + 2 * extra_macs(cfg)
    assert net.other_gflops_2x == pytest.approx(2 * extra_macs(cfg) / 1e9, rel=1e-6)
    assert report.latent_backbone is None and report.latent_length == latent_length


@pytest.mark.parametrize("backbone", ["dit", "mmdit"])
def test_time_conditioned_small_backbones_measure_formula_plus_hand_count(registry, backbone):
    options = {
        "name": backbone,
        "hidden": 32,
        "layers": 3,
        "heads": 4,
        "cond_dim": 16,
        "mlp_ratio": 2.0,
        "token_time_conditioning": True,
    }
    cfg = experiment(20, options, latent_length=3 if backbone == "mmdit" else 0, vocab_size=7)
    net = flops_report(cfg, registry).backbone
    length = 20 + (3 if backbone == "mmdit" else 0)
    blocks = 3 * ((4 + 2 * 2.0) * length * 32**2 + 2 * length**2 * 32)  # an MLP ratio of 2 this time
    assert net.gflops_per_step * 1e9 == pytest.approx(blocks, rel=1e-15)
    assert net.measured_flops == 2 * (blocks + 20 * 32 * 7 + extra_macs(cfg))


def test_dataset_is_built_only_when_its_config_lacks_the_size(registry):
    cfg = compose(["experiment=binsaw/coladd_seq_cpu"], registry).plain()
    assert "vocab_size" not in cfg["dataset"]
    report = flops_report(cfg, registry)
    assert (report.vocab_size, report.seq_len, report.latent_length) == (2, 32, 1)
    assert report.backbone.shape.length == 33 and report.backbone.shape.head_positions == 32
    latent = report.latent_backbone  # the MLP latent denoiser: no transformer shape, but a measured count
    assert latent.component == "mlp" and latent.shape is None and latent.gflops_per_step is None
    assert latent.measured_flops > 0 and latent.as_dict()["gflops_per_step"] is None


def test_latent_only_dit_covers_no_token_head(registry):
    cfg = {**experiment(128, LADD, 32), "latent_backbone": {**LADD, "name": "dit"}}
    latent = flops_report(cfg, registry).latent_backbone
    assert (latent.shape.length, latent.shape.head_positions) == (32, 0)
    assert latent.head_gflops_2x == 0
    assert latent.gflops_per_step == pytest.approx(12 * (12 * 32 * 768**2 + 2 * 32**2 * 768) / 1e9, rel=1e-15)


@pytest.mark.slow
def test_cli_reports_a_binsaw_experiment_as_json_and_as_a_table():
    out = run_ladd("flops", "experiment=binsaw/mdlm_cpu", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    net = report["backbone"]
    assert net["shape"] == {
        "layers": 2,
        "length": 32,
        "width": 64,
        "mlp_ratio": 4.0,
        "head_positions": 32,
        "head_outputs": 2,
    }
    assert net["gflops_per_step"] == pytest.approx(2 * (12 * 32 * 64**2 + 2 * 32**2 * 64) / 1e9, rel=1e-12)
    assert "ONE operation" in report["convention"] and report["latent_backbone"] is None
    assert net["measured_gflops"] == pytest.approx(
        net["gflops_per_step_2x"] + net["head_gflops_2x"] + net["other_gflops_2x"]
    )

    table = run_ladd("flops", "experiment=binsaw/mdlm_cpu", "backbone.layers=4")
    assert table.returncode == 0, table.stderr
    assert "4x32x64" in table.stdout and "ONE operation" in table.stdout
