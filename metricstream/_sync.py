"""The engine-independent half of summing an accumulator across processes.

A sync is two collectives, whatever the engine (torch.distributed, MPI):

1. a *configuration check*: an all-gather of 7 int64 values per rank that encode the fields that
   must agree for a merge (``num_classes``, ``weighted``, ``ignore_index``, a hash of
   ``class_names``, the buffer length and the sync protocol version). Every rank then holds every
   rank's values, derives the *same* error message from them (naming the field and which rank
   has which value) and raises before the data collective, so a misconfigured job fails on all
   ranks instead of hanging (or summing matrices of different sizes). An all-gather rather than
   a MAX all-reduce: with 2 ranks it is one exchange instead of two, and it can name the ranks.
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
    "sync protocol",
    "num_classes",
    "weighted",
    "ignore_index is None",
    "ignore_index",
    "class_names",
    "buffer length",
)
NUM_FIELDS = len(_FIELDS)


def fingerprint(acc: ConfusionAccumulator) -> np.ndarray:
    """This rank's 7 int64 configuration values, to be all-gathered."""
    names = acc.class_names
    if names is None:
        names_hash = 0
    else:
        digest = hashlib.blake2b(json.dumps(list(names)).encode("utf-8"), digest_size=8).digest()
        names_hash = int.from_bytes(digest, "little") >> 1  # 63 bits: a non-negative int64
    ignore = acc.ignore_index
    return np.array(
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


def check_gathered(gathered: np.ndarray, engine: str) -> None:
    """Raise the same ``ValueError`` on every rank if the ranks' fingerprints differ.

    ``gathered`` holds every rank's :func:`fingerprint`, in rank order (any shape that reshapes
    to ``(world_size, 7)``).
    """
    table = np.asarray(gathered, dtype=np.int64).reshape(-1, NUM_FIELDS)
    world_size = len(table)
    if (table == table[0]).all():
        return
    column = {name: table[:, i] for i, name in enumerate(_FIELDS)}
    if len(set(column["sync protocol"].tolist())) > 1:
        detail = ("the ranks run metricstream versions with different sync protocols: "
                  + _by_rank(column["sync protocol"].tolist()))
    elif len(set(column["num_classes"].tolist())) > 1:
        detail = "`num_classes` is " + _by_rank(column["num_classes"].tolist())
    elif len(set(column["weighted"].tolist())) > 1:
        detail = "`weighted` is " + _by_rank([bool(v) for v in column["weighted"].tolist()])
    elif len({(a, b) for a, b in zip(column["ignore_index is None"].tolist(),
                                      column["ignore_index"].tolist(), strict=True)}) > 1:
        values = [None if none else value for none, value in
                  zip(column["ignore_index is None"].tolist(), column["ignore_index"].tolist(),
                      strict=True)]
        detail = "`ignore_index` is " + _by_rank(values)
    else:
        hashes = column["class_names"].tolist()
        labels = {h: f"list {i + 1}" for i, h in enumerate(dict.fromkeys(hashes))}
        detail = ("`class_names` differ between ranks (" + _by_rank([labels[h] for h in hashes])
                  + ")")
    raise ValueError(
        f"cannot {engine} accumulators configured differently across the {world_size} ranks: "
        f"{detail}. Every rank must create its accumulator with the same `num_classes`, "
        f"`class_names`, `ignore_index` and `weighted`; nothing was summed."
    )


def _by_rank(values: list) -> str:
    """``[7, 8, 7]`` -> ``"7 on ranks 0, 2 and 8 on rank 1"`` (values in order of first rank)."""
    groups: dict = {}
    for rank, value in enumerate(values):
        groups.setdefault(value, []).append(rank)
    parts = []
    for value, ranks in groups.items():
        shown = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
        parts.append(f"{value} on rank{'s' if len(ranks) > 1 else ''} {shown}")
    return " and ".join(parts) if len(parts) == 2 else "; ".join(parts)


def synchronize(
    acc: ConfusionAccumulator,
    *,
    gather: Callable[[np.ndarray], np.ndarray],
    reduce_sum: Callable[[np.ndarray], np.ndarray],
    engine: str,
    inplace: bool,
) -> ConfusionAccumulator:
    """Run the two collectives and return the summed accumulator.

    ``gather`` all-gathers an int64 vector and returns every rank's copy, in rank order;
    ``reduce_sum`` SUM-reduces a C-contiguous buffer and returns the result, writing into the
    given buffer when it can (the CPU engines do, so an in-place sync copies nothing). With
    ``inplace=True`` the accumulator's lock is held through the collective, so an ``update`` from
    another thread waits rather than being lost; with ``inplace=False`` the local counts are
    copied once and left untouched.
    """
    check_gathered(gather(fingerprint(acc)), engine)
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
