"""On the binary sawtooth, whose data model is known, every model's likelihood bound lies above the data's entropy.

No model's cross-entropy can be below the data's entropy H(X), itself above the entropy given the shift (the
oracle row, ``Dataset.oracle_token_loss``): the full variational bound per token on held-out data must lie above
H(X) / S for MDLM, Co-LADD and Di-LADD, while Co-LADD's token term ``L^x`` alone, whose encoder has seen the tokens
it scores, falls below the oracle. H(X) is estimated here from exact likelihoods: p(x) is a one-dimensional
integral over the shift. The models are the CPU presets (S = 32) with shorter training (``BUDGETS``): a bound holds
for any model, and Co-LADD's encoder leaks the tokens to its token term within its first few hundred steps.
"""
from __future__ import annotations

import math

import pytest
import torch

import registry
from registry.config.composition import compose
from registry.engine.evaluation import bound_per_token, token_loss
from registry.training.loop import train

pytestmark = pytest.mark.bench
ROWS, BATCHES = 1000, 4  # held-out rows per batch, batches
#: preset -> its stages' steps here
BUDGETS = {
    "mdlm_cpu": ["train.stages.stage1.steps=400"],
    "coladd_seq_cpu": ["train.stages.stage1.steps=300", "train.stages.stage2.steps=200"],
    "diladd_joint_cpu": ["train.stages.stage1.steps=250", "train.stages.stage2.steps=150"],
}


def data_entropy(dataset, n: int = 20000, grid: int = 8192) -> tuple[float, float]:
    """``-E log p(x) / S`` and its standard error, p(x) integrated over the shift on a midpoint grid."""
    tokens, _ = dataset.sample(n, torch.Generator().manual_seed(11))
    shifts = (torch.arange(grid, dtype=torch.float64) + 0.5) / grid
    positions = torch.arange(1, dataset.seq_len + 1, dtype=torch.float64)
    omega = dataset.omega(positions, shifts[:, None])  # [grid, S]
    logs = []
    for chunk in tokens.double().split(1000):
        per_shift = chunk @ omega.log().T + (1 - chunk) @ (1 - omega).log().T  # [n, grid]
        logs.append(per_shift.logsumexp(dim=1) - math.log(grid))
    nats = -torch.cat(logs) / dataset.seq_len
    return float(nats.mean()), float(nats.std()) / math.sqrt(n)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    reg = registry.load()
    runs = {}
    for preset, budget in BUDGETS.items():
        folder = tmp_path_factory.mktemp(preset)
        config = compose([f"experiment=binsaw/{preset}", *budget, "train.progress=false"], reg)
        runs[preset] = train(config, folder, reg)
    return runs


def test_every_model_s_bound_lies_above_the_data_entropy_while_co_ladd_s_token_term_falls_below_the_oracle(trained):
    dataset = trained["mdlm_cpu"].dataset
    oracle = dataset.oracle_token_loss()
    entropy, error = data_entropy(dataset)
    assert entropy > oracle + 10 * error  # H(X) >= H(X | shift): what the shift adds
    lines = [f"oracle {oracle:.4f}, data entropy {entropy:.4f} +- {error:.4f} nats per token"]
    for preset, experiment in trained.items():
        bound = bound_per_token(experiment, BATCHES, ROWS, seed=0, draws=1)
        tokens = token_loss(experiment, BATCHES, ROWS, seed=0)
        lines.append(f"{preset}: bound {bound:.4f}, L^x {tokens:.4f}")
        assert bound > entropy, lines
    print("\n".join(lines))
    assert token_loss(trained["coladd_seq_cpu"], BATCHES, ROWS, seed=0) < oracle, lines
