"""Sum accumulators across the ranks of a ``torch.distributed`` process group.

PyTorch is imported on first use, not with this module (``pip install "metricstream[torch]"``).

``all_reduce`` takes any accumulator or an :class:`~metricstream.AccumulatorGroup`. A sync is one
configuration check plus one collective per kind of state buffer, whatever K and however many
accumulators a group holds (see :mod:`metricstream._sync`):

1. an all-gather of 6 int64 values per rank (``all_gather_single``): the sync protocol, a digest
   of every member's type, configuration and array reductions and of the kind of device the
   collectives run on, the buffer lengths, and the largest counts. If any rank differs, every
   rank raises the same ``ValueError`` naming the member, the field and which rank holds which
   value, and no rank blocks in a collective the others would not join; sums that could
   overflow int64 raise on every rank too.
2. ``all_reduce(SUM)`` of the packed int64 counts, one of the float64 sums if there are any,
   and ``all_reduce(MAX)`` of the arrays an accumulator combines by maximum (its
   ``state_reductions``, e.g. a regression's maximum error) if there are any. A single
   accumulator with one array (the confusion matrix) on the host is reduced in place: on CPU
   backends (gloo, mpi) the tensor shares memory with the accumulator, so it copies nothing.

Counts held on a device (see :mod:`metricstream.device`) are not read to the host first: the
buffers are packed on that device, beside any counts the host holds, and the collectives run on
them; the host reads the check's 6 values per rank and then the result, once. With NCCL the
collectives run on the current CUDA device (``torch.cuda.current_device()``; call
``torch.cuda.set_device(local_rank)`` first, as DDP requires anyway), with gloo and mpi on the
CPU, and ``device=`` chooses for other backends.

Typical use at the end of an epoch, inside a DDP job::

    from metricstream.distributed import all_reduce

    synced = all_reduce(acc, inplace=False)   # every rank gets the global counts
    if rank == 0:
        print(synced.accuracy(), synced.f1(average="macro"))
    acc.reset()                               # the local counts were left untouched
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from . import _sync
from .base import Accumulator, AccumulatorGroup

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["all_reduce"]

INSTALL_HINT = 'pip install "metricstream[torch]"'


# Bound, not constrained: the sum of a ScoreAccumulator is a ScoreAccumulator to mypy.
T = TypeVar("T", bound=Accumulator | AccumulatorGroup)


def all_reduce(
    acc: T,
    group: Any = None,
    *,
    inplace: bool = True,
    device: torch.device | str | None = None,
) -> T:
    """Sum ``acc`` over every rank of ``group``; every rank gets the global counts.

    Must be called by every rank of the group, like any collective. The result is exact
    (integer counts are summed as int64; arrays an accumulator declares ``"max"`` in its
    ``state_reductions`` take the largest value) and equals one accumulator fed with all ranks'
    data. Counts held on a device are combined there (see the module docstring); ``acc`` with
    ``inplace=False`` keeps them where they were.

    Args:
        acc: this rank's accumulator.
        group: the process group (``None``: the default group).
        inplace: ``True`` (default): sum into ``acc`` and return it. ``False``: return a new
            accumulator with the global counts and leave ``acc`` untouched (keep accumulating
            locally, or reset it yourself).
        device: where the tensors of the collectives live. By default the CPU for gloo, mpi or
            mixed ``"cpu:gloo,cuda:nccl"`` groups, and the current CUDA device for NCCL.

    Returns:
        The summed accumulator (``acc`` itself when ``inplace``).

    Raises:
        ImportError: PyTorch is not installed; the message gives the pip command.
        TypeError: ``acc`` is not an accumulator or a group (raised on every rank).
        ValueError: the default process group is not initialized, or the ranks' accumulators are
            configured differently or would collect on different kinds of device (raised on
            every rank, before any count is exchanged), or bad values were counted on a rank's
            device (that rank raises the read's error naming them, the others that it could not
            take part; its state then holds its valid batches, as after any read).
    """
    torch, dist = _import_torch()
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError(
            "torch.distributed is not initialized; call "
            "`torch.distributed.init_process_group(...)` on every rank before `all_reduce`."
        )
    target = _choose_device(torch, dist, group, device)

    world_size = dist.get_world_size(group)
    # Newer torch calls it ``all_gather_single``; older releases ``all_gather_into_tensor``.
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}

    if target.type != "cpu" or _holds_device_counts(acc):
        # Device tensors: the collectives run on them; the host sees the table and the result.
        def gather_tensor(tensor: Any) -> Any:
            every = torch.empty(
                world_size * tensor.numel(), dtype=tensor.dtype, device=tensor.device
            )
            all_gather(every, tensor, group=group)
            return every

        def reduce_tensor(tensor: Any, op: str) -> None:
            dist.all_reduce(tensor, op=ops[op], group=group)

        return _sync.synchronize_tensors(
            acc,
            torch=torch,
            device=target,
            rank=dist.get_rank(group),
            gather=gather_tensor,
            all_reduce=reduce_tensor,
            engine="all_reduce",
            inplace=inplace,
        )

    def gather(vector: np.ndarray) -> np.ndarray:
        mine = torch.from_numpy(vector)
        every = torch.empty(world_size * len(vector), dtype=mine.dtype)
        all_gather(every, mine, group=group)
        return every.numpy()

    def reduce(op: str) -> Callable[[np.ndarray], np.ndarray]:
        def reduce_buffer(buffer: np.ndarray) -> np.ndarray:
            # Shares memory with ``buffer``: the collective writes the result in place.
            dist.all_reduce(torch.from_numpy(buffer), op=ops[op], group=group)
            return buffer

        return reduce_buffer

    return _sync.synchronize(
        acc,
        gather=gather,
        reduce_sum=reduce("sum"),
        reduce_max=reduce("max"),
        engine="all_reduce",
        inplace=inplace,
    )


def _holds_device_counts(acc: Any) -> bool:
    """Whether some member of ``acc`` holds counts on a device that the host has not read."""
    if isinstance(acc, AccumulatorGroup):
        return any(_holds_device_counts(member) for member in acc.members().values())
    state = getattr(acc, "_device", None) if isinstance(acc, Accumulator) else None
    return state is not None and bool(state.dirty or getattr(state, "replayable", False))


def _choose_device(torch: Any, dist: Any, group: Any, device: Any) -> Any:
    if device is not None:
        return torch.device(device)
    backend = str(dist.get_backend(group)).lower()
    # Mixed groups are spelled "cpu:gloo,cuda:nccl"; plain ones "gloo", "nccl", "mpi", ...
    parts = [part.split(":") for part in backend.split(",")]
    if any(len(part) == 2 and part[0] == "cpu" for part in parts):
        return torch.device("cpu")
    names = {part[-1] for part in parts}
    if names & {"gloo", "mpi", "ucc"}:
        return torch.device("cpu")
    if "nccl" in names:
        return torch.device("cuda", torch.cuda.current_device())
    raise ValueError(
        f"cannot tell which device the {backend!r} backend reduces on; pass `device=` "
        f"(for example device='xpu:0')."
    )


def _import_torch() -> tuple[Any, Any]:
    try:
        torch = importlib.import_module("torch")
        dist = importlib.import_module("torch.distributed")
    except ImportError as error:
        raise ImportError(
            f"metricstream.distributed needs PyTorch, which is not installed; {INSTALL_HINT} "
            f"(or see https://pytorch.org for other builds)."
        ) from error
    return torch, dist
