"""Data parallelism: two CPU processes (DDP over gloo) train as one process does on the same global batch.

Plain DDP runs without ``find_unused_parameters``: the two-stage runs below (Di-LADD joint, Co-LADD
sequential) leave latent heads, a latent denoiser and a frozen encoder without gradient in some stage,
which DDP would refuse on the second step unless each stage trained exactly what its loss reaches.

Tolerance: each rank averages its own rows and the gloo all-reduce then averages the ranks, where one
process averages all rows at once, so losses and gradients differ by float32 rounding (about 1e-7
relative per operation), which Adam carries through a few steps: losses agree to 1e-5 relative,
weights to 1e-5 absolute. A wrong split (repeated rows, per-rank noise, an unsynced codebook) shows
up at the 1e-3 level.
"""
from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from support import TESTS, TINY

import registry
from registry.config.composition import compose
from registry.distributed import Shard, connected, gather_rows, share
from registry.engine.assembly import build_experiment
from registry.engine.model import DiffusionModel
from registry.errors import InvalidConfigError
from registry.training.loop import train

COMMON = [*TINY, "train.accelerator=cpu", "seed=3"]
# Dropout and dead-code restarts draw per-rank noise (same distribution, other numbers): off here.
DILADD = [
    "experiment=binsaw/diladd_joint_cpu",
    "backbone.dropout=0",
    "encoder.dropout=0",
    "latent.dead_code_threshold=0",
    "latent.codebook_size=16",
    "train.stages=[{steps:1},{steps:1,lambda_latent:1.0,freeze_encoder:true}]",
    "trainer.max_steps=3",
]
MDLM = ["experiment=binsaw/mdlm_cpu", "backbone.dropout=0", "trainer.max_steps=6"]
#: two processes on this machine under torchrun, each given its rank and the rendezvous by the environment
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
# Co-LADD's posterior noise is per-rank noise too: off here.
COLADD_SEQ = [
    "experiment=binsaw/coladd_seq_cpu",
    "backbone.dropout=0",
    "encoder.dropout=0",
    "latent.std=0",
    "train.stages=[{steps:1},{steps:1,lambda_latent:1.0,freeze_encoder:true}]",
    "trainer.max_steps=3",
]


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory):
    """The two-process runs, started together: Di-LADD and Co-LADD (``train.strategy`` ``ddp`` and ``auto``)
    through Lightning's launcher, MDLM through torchrun."""
    root = tmp_path_factory.mktemp("ddp")
    commands = {
        "diladd": [
            sys.executable,
            "-m",
            "registry.cli",
            "train",
            *COMMON,
            *DILADD,
            "train.devices=2",
            "train.strategy=ddp",
        ],
        "coladd_seq": [sys.executable, "-m", "registry.cli", "train", *COMMON, *COLADD_SEQ, "train.devices=2"],
        "mdlm": [
            *TORCHRUN,
            "-m",
            "registry.cli",
            "train",
            *COMMON,
            *MDLM,
            "train.devices=2",
        ],
    }
    # One thread per rank: the ranks share the machine's cores.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = {}
    for name, command in commands.items():
        with (root / f"{name}.log").open("w") as log:
            process = subprocess.Popen(
                [*command, f"run_dir={root / name}"], stdout=log, stderr=subprocess.STDOUT, env=env
            )
        runs[name] = (process, root / name, root / f"{name}.log")
    yield runs
    for process, _, _ in runs.values():
        if process.poll() is None:
            process.kill()
        process.wait()


def _rows(run_dir):
    with (run_dir / "metrics.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def _assert_trained_alike(runs, name, one):
    """The two-process run logs the one-process losses and ends with its weights."""
    process, two, log = runs[name]
    assert process.wait(timeout=300) == 0, log.read_text()[-4000:]
    return assert_trained_alike(two, one)


def assert_trained_alike(two, one):
    """The run in ``two`` (several processes) logged the losses of the one-process run in ``one`` and ended with its
    weights, up to float32 rounding of the all-reduce; its weights."""
    rows_one, rows_two = _rows(one), _rows(two)
    assert [(r["stage"], r["step"]) for r in rows_two] == [(r["stage"], r["step"]) for r in rows_one], (
        "rank 0 alone writes"
    )
    for a, b in zip(rows_one, rows_two, strict=True):
        for column in ("loss", "token", "latent", "aux"):
            assert (a[column] == "") == (b[column] == ""), column
            if a[column]:
                assert float(b[column]) == pytest.approx(float(a[column]), rel=1e-5), (a["stage"], a["step"], column)
    weights_one, weights_two = load_file(one / "model.safetensors"), load_file(two / "model.safetensors")
    assert weights_two.keys() == weights_one.keys()
    for param, value in weights_one.items():
        torch.testing.assert_close(weights_two[param], value, rtol=0, atol=1e-5, msg=param)
    return weights_two


@pytest.mark.slow
def test_two_ddp_processes_train_diladd_as_one_process(two_process_runs, reg, tmp_path, one_thread):
    """Lightning's launcher (``train.devices=2``) over gloo; both stages, 3 steps each (``trainer.max_steps``).

    The EMA codebook (a buffer, no gradient) matches one process only if the ranks pool their code statistics.
    """
    train(compose([*COMMON, *DILADD], reg), tmp_path, reg)
    assert [(r["stage"], r["step"]) for r in _rows(tmp_path)] == [(str(a), str(b)) for a in (1, 2) for b in (1, 2, 3)]
    weights = _assert_trained_alike(two_process_runs, "diladd", tmp_path)
    assert {"latent.quantizer._codebook.embed", "latent.quantizer._codebook.cluster_size"} <= weights.keys()


@pytest.mark.slow
def test_two_ddp_processes_train_sequential_coladd_as_one_process(
    two_process_runs, reg, tmp_path, one_thread, monkeypatch
):
    """Stage 1 leaves the latent denoiser without gradient, both stages the token network's latent outputs.

    Co-LADD's posterior draw is per-rank noise: scaled by ``latent.std = 0`` here, but drawn all the same,
    off the shared stream by a rank and from it by a single process. So the one-process reference goes
    through the sharded objective with one shard, as the reference of the sharded-objective test does.
    """
    whole = DiffusionModel.loss
    monkeypatch.setattr(
        DiffusionModel,
        "loss",
        lambda self, x0, generator=None, shard=None, **kept_out: whole(
            self, x0, generator, shard or Shard(0, 1, seed=0), **kept_out
        ),
    )
    train(compose([*COMMON, *COLADD_SEQ], reg), tmp_path, reg)
    _assert_trained_alike(two_process_runs, "coladd_seq", tmp_path)


def test_plain_ddp_does_not_search_for_unused_parameters(reg):
    import lightning as L
    from lightning.pytorch.strategies import DDPStrategy

    from registry.training.console import without_srun_advice
    from registry.training.strategy import Hardware

    for strategy in ("auto", "ddp"):
        train_cfg = compose([*COMMON, "train.devices=2", f"train.strategy={strategy}"], reg).train
        with without_srun_advice():  # built as ladd builds its Trainers
            trainer = L.Trainer(**Hardware(train_cfg).trainer_arguments(), logger=False, enable_checkpointing=False)
        assert isinstance(trainer.strategy, DDPStrategy)
        assert trainer.strategy._ddp_kwargs.get("find_unused_parameters", False) is False, strategy


@pytest.mark.slow
def test_two_torchrun_processes_train_mdlm_as_one_process(two_process_runs, reg, tmp_path, one_thread):
    train(compose([*COMMON, *MDLM], reg), tmp_path, reg)
    _assert_trained_alike(two_process_runs, "mdlm", tmp_path)


def _averaged(model, x0, shards, state):
    """Loss terms and gradients averaged over ``shards`` as DDP averages them, each shard from the same RNG state."""
    model.zero_grad()
    terms = {}
    for shard in shards:
        torch.set_rng_state(state)
        shard_terms = model.loss(x0, shard=shard)
        (shard_terms["loss"] / len(shards)).backward()
        for name, value in shard_terms.items():
            terms[name] = terms.get(name, 0.0) + float(value.detach()) / len(shards)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return terms, grads, torch.get_rng_state()


OBJECTIVES = {
    # No component draws noise here, so the sharded objective reproduces the one-process training path itself.
    "mdlm": (["experiment=binsaw/mdlm_cpu", "backbone.dropout=0"], None),
    # CFG drops, independent latent times, Gaussian latent noise, repeated latent draws for the latent denoiser.
    # The posterior noise (zero here) is drawn by the latent at the rank's shape from the rank's own stream,
    # so the reference is one rank holding the whole batch.
    "coladd": (
        [
            "experiment=binsaw/coladd_seq_cpu",
            "backbone.dropout=0",
            "encoder.dropout=0",
            "latent.std=0",
            "objective.latent_time=independent",
            "objective.p_cfg=0.5",
            "objective.latent_repeats=3",
        ],
        Shard(0, 1, seed=11),
    ),
}


@pytest.mark.parametrize("name", OBJECTIVES)
def test_sharded_objective_averages_to_the_whole_batch_objective(name, reg, one_thread):
    """Every draw of the objective is made at the global batch's shape, so shards average to the whole."""
    overrides, reference = OBJECTIVES[name]
    torch.manual_seed(0)
    experiment = build_experiment(compose([*overrides, "dataset.seq_len=16"], reg).plain(), reg)
    model = experiment.model.train()
    x0 = next(experiment.dataset.batches(8, 0, "train"))
    state = torch.get_rng_state()
    terms_one, grads_one, after_one = _averaged(model, x0, [reference], state)
    assert set(terms_one) == ({"loss", "token", "latent"} if model.has_latent else {"loss", "token"})
    for world in (2, 4):
        terms, grads, after = _averaged(model, x0, [Shard(rank, world, seed=11) for rank in range(world)], state)
        assert torch.equal(after, after_one), "the shared stream advances alike for any number of ranks"
        assert terms == pytest.approx(terms_one, rel=1e-5)
        assert grads.keys() == grads_one.keys()
        for param, grad in grads.items():
            torch.testing.assert_close(grad, grads_one[param], rtol=1e-4, atol=1e-7, msg=param)


def test_shard_rows_split_the_batch_and_spread_inverts_take():
    batch, per_row = 6, 3
    parts = [Shard(rank, 3, seed=0).rows(batch, per_row) for rank in range(3)]
    assert sorted(torch.cat(parts).tolist()) == list(range(batch * per_row))
    assert parts[1].tolist() == [3, 4, 5, 12, 13, 14], "rows 1 and 4, each with its 3 repeats"
    shard = Shard(1, 3, seed=0)
    local = torch.randn(4, 2)
    full = shard.spread(local, per_row=2)
    assert full.shape == (12, 2) and torch.equal(shard.take(full, per_row=2), local)
    assert torch.count_nonzero(full) == torch.count_nonzero(local), "zeros outside this rank's rows"
    with pytest.raises(InvalidConfigError, match="does not split evenly"):
        shard.rows(7)


def test_each_rank_draws_its_own_network_noise_and_leaves_the_shared_stream_alone():
    torch.manual_seed(0)
    shared = torch.get_rng_state()

    def draw(rank, step_seed=5):
        shard = Shard(rank, 2, seed=step_seed)
        with shard.own_noise(torch.device("cpu")):
            first = torch.rand(4)
        with shard.own_noise(torch.device("cpu")):
            return first, torch.rand(4)

    (a0, a1), (b0, _) = draw(0), draw(1)
    assert torch.equal(torch.get_rng_state(), shared)
    assert not torch.equal(a0, b0) and not torch.equal(a0, a1), "ranks and successive calls differ"
    assert torch.equal(draw(0)[0], a0) and not torch.equal(draw(0, step_seed=6)[0], a0), (
        "a function of step seed, rank and call"
    )


def test_global_batch_must_split_over_the_processes(reg, tmp_path):
    cfg = compose([*COMMON, "experiment=binsaw/mdlm_cpu", "train.batch_size=15", "train.devices=2"], reg)
    with pytest.raises(InvalidConfigError, match="train.batch_size=15 is the global batch.*2 processes"):
        train(cfg, tmp_path, reg)


def _gather_worker(rank, store_path):
    torch.distributed.init_process_group(
        "gloo", store=torch.distributed.FileStore(store_path, 2), rank=rank, world_size=2
    )
    mine = share(5)
    assert list(mine) == ([0, 1] if rank == 0 else [2, 3, 4])
    gathered = gather_rows(torch.tensor([[i, 10 * i] for i in mine]))
    assert gathered.tolist() == [[i, 10 * i] for i in range(5)]
    torch.distributed.destroy_process_group()


def test_gather_rows_collects_uneven_shares_in_order(tmp_path):
    torch.multiprocessing.start_processes(
        _gather_worker, args=(str(tmp_path / "store"),), nprocs=2, start_method="fork"
    )
    assert list(share(5)) == list(range(5)) and torch.equal(gather_rows(torch.ones(2)), torch.ones(2)), "one process"



def _connected_worker(rank, port, done):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    with connected():
        joined = torch.distributed.is_initialized() and torch.distributed.get_world_size() == 2
        gathered = gather_rows(torch.tensor([rank]))
    (done / str(rank)).write_text(f"{joined} {gathered.tolist()} {torch.distributed.is_initialized()}")


def test_connected_joins_the_group_for_the_block_and_takes_it_down_after(tmp_path):
    """Each rank leaves with no group left (a live gloo group at exit aborts the process)."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    torch.multiprocessing.start_processes(
        _connected_worker, args=(port, tmp_path), nprocs=2, start_method="fork"
    )
    assert [(tmp_path / str(r)).read_text() for r in (0, 1)] == ["True [0, 1] False"] * 2
    with connected():
        assert not torch.distributed.is_initialized(), "one process joins no group"

@pytest.mark.slow
def test_ladd_eval_under_torchrun_shards_and_gathers_the_one_process_result(two_process_runs, tmp_path):
    """Two ranks split the loss batches and the sample chunks; the gathered result is the one-process result."""
    process, run_dir, log = two_process_runs["mdlm"]
    assert process.wait(timeout=300) == 0, log.read_text()[-4000:]
    options = ["--num-samples", "48", "--batch-size", "16", "--loss-batches", "3", "--budgets", "1,4"]
    overrides_env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = tmp_path / "one.json"
    subprocess.run(
        [sys.executable, "-m", "registry.cli", "eval", str(run_dir), *options, "--out", str(one)],
        check=True,
        capture_output=True,
        env=overrides_env,
    )
    two = tmp_path / "two.json"
    done = subprocess.run(
        [
            *TORCHRUN,
            "-m",
            "registry.cli",
            "eval",
            str(run_dir),
            *options,
            "--out",
            str(two),
        ],
        capture_output=True,
        text=True,
        env=overrides_env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert b["token_loss"] == pytest.approx(a["token_loss"], rel=1e-12)
    assert b["scores"] == a["scores"], "identical samples: chunk k has its own seed wherever it is drawn"


@pytest.mark.slow
def test_training_starts_when_preparing_the_data_outlasts_the_process_group_timeout(tmp_path):
    """torchrun, two gloo processes, a 5 s process group timeout; one rank takes 12 s to tokenise the corpus.

    The other waits for the token cache on the file system (saying so), not in the process group, so both
    join it once the cache exists, train, and read the same cache files.
    """
    from safety_cases import ONE_STAGE, text_overrides

    script = TESTS / "slow_preparation.py"
    command = [
        *TORCHRUN,
        str(script),
        "12",
        *COMMON,
        ONE_STAGE,
        *text_overrides(tmp_path),
        "train.devices=2",
        f"run_dir={tmp_path / 'run'}",
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    # whichever rank reaches the cache first prepares it (start-up order is not fixed under load)
    assert output.count("prepares") == 1, output[-4000:]
    assert "waiting 0 min for split 'train'" in output and "is preparing" in output, output[-4000:]
    assert len(_rows(tmp_path / "run")) == 2
