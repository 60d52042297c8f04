"""Sum accumulators across the ranks of an MPI communicator (mpi4py).

mpi4py is imported on first use, not with this module (``pip install "metricstream[mpi]"``,
plus an MPI library such as Open MPI: ``apt-get install openmpi-bin``).

``allreduce`` takes any accumulator or an :class:`~metricstream.AccumulatorGroup`. Like
:func:`metricstream.distributed.all_reduce`, a sync is one check plus one collective per state
dtype: an ``Allgather`` of 6 int64 values per rank that checks every rank holds the same types
and configurations and that the sums cannot overflow (a mismatch raises the same ``ValueError``
on every rank, naming the member, the field and each rank's value, before any count is
exchanged), then an in-place ``Allreduce(SUM)`` of the int64 counts (and one of the float64
sums, if any) through the buffer interface: no pickling, and for a single confusion matrix no
copy.

Run under ``mpirun -n 4 python evaluate.py``::

    from mpi4py import MPI
    from metricstream.mpi import allreduce

    acc = ConfusionAccumulator(num_classes=10)
    for y_true, y_pred in my_shard(MPI.COMM_WORLD.rank):
        acc.update(y_true, y_pred)
    allreduce(acc)            # every rank now holds the global counts
"""

from __future__ import annotations

import importlib
from typing import Any, TypeVar

import numpy as np

from . import _sync
from .base import Accumulator, AccumulatorGroup

__all__ = ["allreduce"]

INSTALL_HINT = 'pip install "metricstream[mpi]"'


# Bound, not constrained: the sum of a ScoreAccumulator is a ScoreAccumulator to mypy.
T = TypeVar("T", bound=Accumulator | AccumulatorGroup)


def allreduce(acc: T, comm: Any = None, *, inplace: bool = True) -> T:
    """Sum ``acc`` over every rank of ``comm`` (default ``MPI.COMM_WORLD``).

    Must be called by every rank of ``comm``. ``inplace=True`` (default) sums into ``acc`` and
    returns it; ``inplace=False`` returns a new accumulator and leaves ``acc`` untouched.

    Raises:
        ImportError: mpi4py (or the MPI library it loads) is missing; the message says how to
            install it.
        TypeError: ``acc`` is not an accumulator or a group (raised on every rank).
        ValueError: the ranks' accumulators are configured differently (on every rank).
    """
    mpi = _import_mpi()
    if comm is None:
        comm = mpi.COMM_WORLD

    def gather(vector: np.ndarray) -> np.ndarray:
        every = np.empty(comm.Get_size() * len(vector), dtype=vector.dtype)
        comm.Allgather(vector, every)
        return every

    def reduce_sum(buffer: np.ndarray) -> np.ndarray:
        comm.Allreduce(mpi.IN_PLACE, buffer, op=mpi.SUM)
        return buffer

    def reduce_max(buffer: np.ndarray) -> np.ndarray:
        comm.Allreduce(mpi.IN_PLACE, buffer, op=mpi.MAX)
        return buffer

    return _sync.synchronize(
        acc,
        gather=gather,
        reduce_sum=reduce_sum,
        reduce_max=reduce_max,
        engine="allreduce",
        inplace=inplace,
    )


def _import_mpi() -> Any:
    try:
        return importlib.import_module("mpi4py.MPI")
    except (ImportError, OSError, RuntimeError) as error:
        # mpi4py's binary wheels load the MPI library at import time; either may be missing.
        raise ImportError(
            f"metricstream.mpi needs mpi4py and an MPI library ({error}); {INSTALL_HINT} and "
            f"install MPI (for example `apt-get install openmpi-bin`)."
        ) from error
