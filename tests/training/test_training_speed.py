"""Training speed paths on CPU: the objective compiles without graph breaks, fused AdamW clips like the plain one,
``train.compile`` trains the same model as eager, the head at the loss rows only gives the same loss, and
inference runs in bf16 when asked."""
from __future__ import annotations

import copy

import pytest
import torch
from safetensors.torch import load_file
from support import TINY

import registry
from registry.config.composition import compose
from registry.config.settings import TrainConfig
from registry.engine.assembly import build_experiment
from registry.engine.evaluation import token_loss
from registry.engine.runs import WEIGHTS_FILE
from registry.engine.sampling import inference_precision, sample
from registry.engine.timesteps import draw_times
from registry.errors import InvalidConfigError
from registry.training.loop import train
from registry.training.module import _fused_adamw

SMALL = ["backbone.hidden=32", "backbone.layers=1"]


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def _model(reg, experiment: str):
    cfg = compose([f"experiment={experiment}", *TINY, *SMALL], reg).plain()
    torch.manual_seed(cfg["seed"])  # as training does before building: the initial weights of its run
    return build_experiment(cfg, reg).model.train()


@pytest.mark.parametrize(
    "experiment", ["binsaw/mdlm_cpu", "binsaw/coladd_joint_cpu", "binsaw/coladd_seq_cpu", "binsaw/ar_cpu"]
)
def test_whole_objective_traces_as_one_graph(reg, experiment):
    model = _model(reg, experiment)
    x0 = torch.randint(2, (8, 16))
    explained = torch._dynamo.explain(lambda x: model.loss(x)["loss"])(x0)
    assert explained.graph_break_count == 0, [str(b.reason)[:200] for b in explained.break_reasons]
    assert explained.graph_count == 1


def test_discrete_latent_backbone_traces_as_one_graph(reg):
    # The VQ library branches on data (code expiry), so only the backbones are compiled (train.compile).
    model = _model(reg, "binsaw/diladd_joint_cpu")
    x0 = torch.randint(2, (8, 16))
    code = model.latent.encode(model.encoder(x0))
    tau = torch.rand(8)
    y_t = model.latent_process.corrupt(code.y0, tau)
    explained = torch._dynamo.explain(lambda x, y, t: model.predict(x, t, y, t).tokens.sum())(
        model.process.corrupt(x0, tau), y_t, tau
    )
    assert explained.graph_break_count == 0, [str(b.reason)[:200] for b in explained.break_reasons]


def _train_weights(reg, tmp_path, name: str, *overrides: str) -> dict[str, torch.Tensor]:
    run = tmp_path / name
    settings = ["train.stages=[{steps:4}]", "train.warmup_steps=1", "train.lr=0.01", "train.ema_decay=0"]
    train(compose(["experiment=binsaw/mdlm_cpu", *TINY, *SMALL, *settings, *overrides], reg), run, reg)
    return load_file(run / WEIGHTS_FILE)


@pytest.mark.slow
def test_fused_adamw_with_clipping_matches_the_plain_optimiser(reg, tmp_path):
    start = {k: v.clone() for k, v in _model(reg, "binsaw/mdlm_cpu").state_dict().items()}
    plain = _train_weights(reg, tmp_path, "plain", "train.fused_adamw=false", "train.grad_clip=0.01")
    fused = _train_weights(reg, tmp_path, "fused", "train.fused_adamw=true", "train.grad_clip=0.01")
    unclipped = _train_weights(reg, tmp_path, "unclipped", "train.fused_adamw=true", "train.grad_clip=0")
    key = "backbone.trunk.blocks.0.qkv.weight"
    assert (plain[key] - start[key]).abs().max() > 1e-3  # the steps moved the weights
    for k in plain:
        torch.testing.assert_close(fused[k], plain[k], rtol=1e-5, atol=1e-6)
    # A clip at 0.01 is active (Adam's update is not scale-free because of its epsilon and weight decay here).
    assert max((unclipped[k] - fused[k]).abs().max() for k in fused) > 1e-4


def test_fused_adamw_choice():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert _fused_adamw(TrainConfig(fused_adamw=None), cuda, "bf16-mixed")
    assert not _fused_adamw(TrainConfig(fused_adamw=None), cpu, "32-true")
    assert _fused_adamw(TrainConfig(fused_adamw=True), cpu, "32-true")
    assert not _fused_adamw(TrainConfig(fused_adamw=None), cuda, "16-mixed")
    with pytest.raises(InvalidConfigError, match="16-mixed"):
        _fused_adamw(TrainConfig(fused_adamw=True), cuda, "16-mixed")


@pytest.mark.slow
def test_compiled_training_matches_eager(reg, tmp_path):
    # Without dropout no random draw happens inside the compiled backbone, so both runs see the same noise.
    eager = _train_weights(reg, tmp_path, "eager", "backbone.dropout=0")
    compiled = _train_weights(reg, tmp_path, "compiled", "backbone.dropout=0", "train.compile=true")
    assert compiled.keys() == eager.keys()
    for k in eager:
        torch.testing.assert_close(compiled[k], eager[k], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "experiment", ["binsaw/mdlm_cpu", "binsaw/coladd_joint_cpu", "binsaw/diladd_joint_cpu", "binsaw/ar_cpu"]
)
def test_head_on_loss_rows_gives_the_same_loss_and_gradients(reg, experiment):
    trained = _model(reg, experiment)
    x0 = torch.randint(2, (8, 16))
    results = []
    for rows_only in (False, True):
        model = copy.deepcopy(trained)  # a training VQ moves its codebook on every call: both calls start alike
        model.objective.head_on_loss_rows = rows_only
        terms = model.loss(x0, torch.Generator().manual_seed(3))
        terms["loss"].backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append(
            (terms, grads, model.token_loss(x0, clean_latent=False, generator=torch.Generator().manual_seed(4)))
        )
    (full, full_grads, full_eval), (rows, rows_grads, rows_eval) = results
    for name in full:
        torch.testing.assert_close(rows[name], full[name], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(rows_eval, full_eval, rtol=1e-6, atol=1e-7)
    assert rows_grads.keys() == full_grads.keys()
    for name in full_grads:
        torch.testing.assert_close(rows_grads[name], full_grads[name], rtol=1e-5, atol=1e-6)


def test_head_on_loss_rows_computes_the_head_only_at_masked_positions(reg):
    model = _model(reg, "binsaw/mdlm_cpu")
    model.objective.head_on_loss_rows = True
    seen = []
    hook = model.backbone.final.head.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[0]))
    x0 = torch.randint(2, (8, 16))
    generator = torch.Generator().manual_seed(5)
    model.loss(x0, generator)
    hook.remove()
    replay = torch.Generator().manual_seed(5)
    x_t = model.process.corrupt(x0, draw_times(8, model.process.horizon, replay, x0.device), replay)
    assert seen == [int((x_t == model.process.mask).sum())] and 0 < seen[0] < x0.numel()


def test_inference_precision_runs_the_networks_in_bf16_only_when_asked():
    layer = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    cpu = torch.device("cpu")
    with inference_precision(cpu, "bf16-mixed"):
        assert layer(x).dtype == torch.bfloat16
    for precision in ("auto", "32-true"):  # auto means full precision off CUDA
        with inference_precision(cpu, precision):
            assert layer(x).dtype == torch.float32
    with pytest.raises(InvalidConfigError, match="valid: auto, bf16-mixed, 32-true"), inference_precision(cpu, "fp8"):
        pass


@pytest.mark.slow
def test_bf16_sampling_and_token_loss_stay_close_to_full_precision(reg, tmp_path):
    experiment = train(
        compose(["experiment=binsaw/mdlm_cpu", *TINY, *SMALL, "train.stages=[{steps:2}]"], reg), tmp_path, reg
    )
    full, _ = sample(experiment, 32, 4, 32, seed=0, precision="32-true")
    half, _ = sample(experiment, 32, 4, 32, seed=0, precision="bf16-mixed")
    assert half.shape == full.shape and set(half.unique().tolist()) <= {0, 1}
    losses = [token_loss(experiment, 1, 64, 0, precision) for precision in ("32-true", "bf16-mixed")]
    assert abs(losses[0] - losses[1]) < 0.02 * losses[0]
