"""Ranks and data parallelism: who this process is, its rows of a global batch, gathering results."""
from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor

from .errors import InvalidConfigError


def world_size() -> int:
    """Processes taking part: the process group's size, else ``WORLD_SIZE`` (torchrun, Lightning), else 1."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    """This process's global rank: from the process group, else ``RANK`` (torchrun), ``SLURM_PROCID``, or 0."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))


def is_main() -> bool:
    """True on the process that writes shared files (global rank 0)."""
    return rank() == 0


def share(total: int) -> range:
    """The indices of ``total`` items (samples, batches) this rank handles: one contiguous block per rank, in rank
    order."""
    world, me = world_size(), rank()
    return range(me * total // world, (me + 1) * total // world)


def gather_rows(tensor: Tensor) -> Tensor:
    """Every rank's rows, concatenated in rank order (counts may differ); with :func:`share`, the items in order.

    Called on every rank. With NCCL the rows travel through the current CUDA device.
    """
    if world_size() == 1 or not dist.is_initialized():
        return tensor
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else tensor.device
    local = tensor.to(device)
    counts = [torch.zeros((), dtype=torch.long, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, torch.tensor(local.shape[0], device=device))
    most = int(max(counts))
    padded = torch.zeros((most, *local.shape[1:]), dtype=local.dtype, device=device)
    padded[: local.shape[0]] = local
    parts = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(parts, padded)
    return torch.cat([part[: int(n)] for part, n in zip(parts, counts, strict=True)]).to(tensor.device)


@dataclass
class Shard:
    """This process's rows ``rank, rank + world, ...`` of a global batch, and its own stream of network noise.

    Everything the objective draws (times, masks, noise) is drawn at the global batch shape from the
    random stream that all ranks share, then cut to these rows, so the global batch's randomness does
    not depend on the number of ranks. Draws inside the components' forward passes (dropout,
    encoder-input dropout, posterior noise) happen at this rank's shape; :meth:`own_noise` gives them a
    stream of their own, so ranks do not repeat each other's noise and the shared stream stays in step.
    """

    rank: int
    world: int
    seed: int  # the same on every rank; changes each step
    _calls: Iterator[int] = field(default_factory=itertools.count, repr=False)

    def rows(self, batch: int, per_row: int = 1, device: torch.device | str = "cpu") -> Tensor:
        """Indices of this rank's rows of a global batch whose rows come in groups of ``per_row``."""
        if batch % self.world:
            raise InvalidConfigError(
                f"a global batch of {batch} rows does not split evenly over {self.world} processes"
            )
        mine = torch.arange(self.rank, batch, self.world, device=device)
        return (mine[:, None] * per_row + torch.arange(per_row, device=device)).flatten()

    def take(self, tensor: Tensor, per_row: int = 1) -> Tensor:
        """This rank's rows of a global tensor."""
        return tensor.index_select(0, self.rows(tensor.shape[0] // per_row, per_row, tensor.device))

    def spread(self, local: Tensor, per_row: int = 1) -> Tensor:
        """A global-shape tensor holding ``local`` at this rank's rows and zeros elsewhere (differentiable)."""
        batch = local.shape[0] * self.world
        full = local.new_zeros((batch, *local.shape[1:]))
        return full.index_copy(0, self.rows(batch // per_row, per_row, local.device), local)

    def own_noise(self, device: torch.device) -> AbstractContextManager[None]:
        """Random draws inside this block come from a stream of this rank, step and call; the shared one is left as it
        was."""
        return _seeded(mixed_seed(self.seed, self.rank, next(self._calls)), device)


def mixed_seed(*key: int | str) -> int:
    """A 63-bit seed from integers and names, stable across processes and Python versions."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@contextmanager
def _seeded(seed: int, device: torch.device) -> Iterator[None]:
    cuda = (
        (device.index if device.index is not None else torch.cuda.current_device()) if device.type == "cuda" else None
    )
    with torch.random.fork_rng(devices=[] if cuda is None else [cuda]):
        # Only the generators in use: torch.manual_seed would also queue a lazy CUDA seeding per call on CPU.
        torch.default_generator.manual_seed(seed)
        if cuda is not None:
            torch.cuda.default_generators[cuda].manual_seed(seed)
        yield


def take(shard: Shard | None, tensor: Tensor, per_row: int = 1) -> Tensor:
    """``shard.take``; the whole tensor without a shard (one process)."""
    return tensor if shard is None else shard.take(tensor, per_row)


def spread(shard: Shard | None, local: Tensor, per_row: int = 1) -> Tensor:
    """``shard.spread``; the tensor itself without a shard."""
    return local if shard is None else shard.spread(local, per_row)


def own_noise(
    shard: Shard | None, device: torch.device, generator: torch.Generator | None = None
) -> AbstractContextManager[None]:
    """Where torch's global RNG points while components draw inside it (dropout, posterior noise, VQ restarts).

    ``shard.own_noise`` under a shard; without one, a stream seeded from ``generator`` (so the result is a
    function of the caller's generator alone, and the global RNG is left as it was); with neither, the
    global stream itself (training seeds it and checkpoints restore it).
    """
    if shard is not None:
        return shard.own_noise(device)
    if generator is None:
        return nullcontext()
    seed = int(torch.randint(1 << 62, (), generator=generator, device=generator.device))
    return _seeded(seed, device)


def step_seed(seed: int, stage: int, step: int) -> int:
    """The per-step seed of :class:`Shard`: a function of the run's seed, the stage and the step (exact on resume)."""
    return mixed_seed(seed, stage, step)


@contextmanager
def connected() -> Iterator[None]:
    """Within the block, be one rank of the process group that ``torchrun`` or SLURM describe (WORLD_SIZE > 1).

    On leaving, the ranks meet and the group is taken down: a rank that simply exits while its gloo threads still
    run is aborted by the C++ runtime ("terminate called without an active exception", exit -6).
    """
    if world_size() == 1 or not dist.is_available() or dist.is_initialized():
        yield
        return
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        yield
        dist.barrier()  # no rank takes the group down while another still gathers through it
    finally:
        dist.destroy_process_group()
