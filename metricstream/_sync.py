"""The engine-independent half of summing an accumulator across processes.

A sync is two collectives, whatever the engine (torch.distributed, MPI):

1. a *configuration check*: one element-wise MAX all-reduce of a small int64 vector
   ``[f, -f]``, where ``f`` encodes the fields that must agree for a merge (``num_classes``,
   ``weighted``, ``ignore_index``, a hash of ``class_names``, the buffer length and the
   protocol version). Afterwards every rank holds ``max(f)`` and ``-min(f)``, and so knows
   whether any rank differs and in which field. Every rank derives the *same* error message from
   the *same* reduced vector and raises before the data collective, so a misconfigured job fails
   on all ranks instead of hanging (or summing matrices of different sizes).
2. one SUM all-reduce of the packed buffer. The accumulator's only counters are its K×K matrix,
   so the packed buffer is the matrix itself: no copies on CPU when synced in place.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .accumulator import ConfusionAccumulator

# Bump when the packed layout or the fingerprint changes, so ranks running different
# metricstream versions refuse to sum rather than sum garbage.
SYNC_PROTOCOL = 1

_FIELDS = (
    "sync protocol version (metricstream version)",
    "num_classes",
    "weighted",
    "ignore_index is None",
    "ignore_index",
    "class_names",
    "buffer length",
)


def fingerprint(acc: ConfusionAccumulator) -> np.ndarray:
    """The int64 vector ``[f, -f]`` whose element-wise MAX over ranks reveals any mismatch."""
    names = acc.class_names
    if names is None:
        names_hash = 0
    else:
        digest = hashlib.blake2b(json.dumps(list(names)).encode("utf-8"), digest_size=8).digest()
        names_hash = int.from_bytes(digest, "little") >> 2  # 62 bits: ±value fits in int64
    ignore = acc.ignore_index
    fields = np.array(
        [
            SYNC_PROTOCOL,
            acc.num_classes,
            int(acc.weighted),
            int(ignore is None),
            0 if ignore is None else ignore,
            names_hash,
            acc.num_classes * acc.num_classes,
        ],
        dtype=np.int64,
    )
    return np.concatenate([fields, -fields])


def check_reduced(reduced: np.ndarray, world_size: int, engine: str) -> None:
    """Raise the same ``ValueError`` on every rank if the reduced fingerprint shows a mismatch."""
    reduced = np.asarray(reduced, dtype=np.int64).reshape(-1)
    count = len(_FIELDS)
    highest, lowest = reduced[:count], -reduced[count:]
    differing = [i for i in range(count) if highest[i] != lowest[i]]
    if not differing:
        return
    i = differing[0]
    field = _FIELDS[i]
    if field == "class_names":
        detail = "`class_names` differ between ranks"
    elif field == "ignore_index is None":
        detail = "`ignore_index` is None on some ranks and set on others"
    elif field == "weighted":
        detail = "`weighted` is True on some ranks and False on others"
    elif field.startswith("sync protocol"):
        detail = (f"ranks run metricstream versions with different sync protocols "
                  f"({lowest[i]} to {highest[i]})")
    else:
        detail = f"`{field}` ranges from {lowest[i]} to {highest[i]} across ranks"
    raise ValueError(
        f"cannot {engine} accumulators configured differently across the {world_size} ranks: "
        f"{detail}. Every rank must create its accumulator with the same `num_classes`, "
        f"`class_names`, `ignore_index` and `weighted`; nothing was summed."
    )


def synchronize(
    acc: ConfusionAccumulator,
    *,
    check: Callable[[np.ndarray], np.ndarray],
    reduce_sum: Callable[[np.ndarray], np.ndarray],
    world_size: int,
    engine: str,
    inplace: bool,
) -> ConfusionAccumulator:
    """Run the two collectives and return the summed accumulator.

    ``check`` MAX-reduces an int64 vector across ranks and returns the result; ``reduce_sum``
    SUM-reduces a C-contiguous buffer and returns the result, writing into the given buffer when
    it can (the CPU engines do, so an in-place sync copies nothing). With ``inplace=True`` the
    accumulator's lock is held through the collective, so an ``update`` from another thread waits
    rather than being lost; with ``inplace=False`` the local counts are copied once and left
    untouched.
    """
    check_reduced(check(fingerprint(acc)), world_size, engine)
    if inplace:
        with acc._lock:
            # Summed straight into the matrix: a failing collective (a rank died, a timeout)
            # leaves the counts undefined, but then the process group is unusable anyway; use
            # ``inplace=False`` to keep the local counts whatever happens.
            result = reduce_sum(acc._matrix)
            if result is not acc._matrix:
                acc._matrix[...] = result.reshape(acc._matrix.shape)
            acc._changed()
        return acc
    out = acc.copy()
    result = reduce_sum(out._matrix)
    if result is not out._matrix:
        out._matrix[...] = result.reshape(out._matrix.shape)
    out._changed()
    return out
