"""Re-scoring on several processes: the ``torchrun`` process group, each rank's device and shard of the images, and
the all-reduce of the running sums, so every rank ends with the numbers of one process."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np
import torch
import torch.distributed as dist

from fl_core.compute.device import resolve_device


def distributed_rank() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@contextlib.contextmanager
def distributed_session() -> Iterator[tuple[int, int]]:
    """Join the ``torchrun`` process group when ``WORLD_SIZE`` > 1 (NCCL with CUDA, else gloo); yield (rank, world).

    The group is destroyed on exit if this context created it.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not dist.is_available() or dist.is_initialized():
        yield distributed_rank()
        return
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    try:
        yield distributed_rank()
    finally:
        dist.destroy_process_group()


def rank_device(device: str | torch.device | None) -> torch.device:
    """The device of this process: ``cuda:LOCAL_RANK`` under torchrun with CUDA, else :func:`resolve_device`."""
    resolved = resolve_device(device)
    if resolved.type == "cuda" and resolved.index is None and "LOCAL_RANK" in os.environ:
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return resolved


def shard_range(n: int, rank: int, world: int) -> range:
    """Contiguous block of indices of ``rank`` (sizes differ by at most one)."""
    return range(rank * n // world, (rank + 1) * n // world)


def all_reduce_sums(tally: torch.Tensor, resumed: int, seconds: float) -> tuple[np.ndarray, int, float]:
    """(summed tally as float64, summed resumed images, the slowest rank's seconds) over all ranks; this rank's own
    values outside a process group. NCCL reduces on the tally's device, gloo on the CPU."""
    if distributed_rank()[1] == 1:
        return tally.double().cpu().numpy(), resumed, seconds
    reduced = tally.to(tally.device if dist.get_backend() == "nccl" else "cpu")
    resumed_total = torch.tensor([float(resumed)], dtype=reduced.dtype, device=reduced.device)
    slowest = torch.tensor([seconds], dtype=reduced.dtype, device=reduced.device)
    dist.all_reduce(reduced)
    dist.all_reduce(resumed_total)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return reduced.double().cpu().numpy(), int(resumed_total.item()), float(slowest.item())
