"""The engine-independent half of summing accumulators (or a group of them) across processes.

A sync is one configuration check plus one SUM collective per state dtype, whatever the engine
(torch.distributed, MPI) and whatever the number of accumulators in a group:

1. **check**: an all-gather of 6 int64 values per rank — the sync protocol version, a 63-bit
   digest of every member's name, type, format, configuration and array shapes, the lengths of
   the int64 and float64 buffers, and the largest int64 count and float64 sum (for the overflow
   check). Every rank then holds every rank's values and takes the same decision:

   * all equal: go on;
   * different: every rank runs the same two extra all-gathers (the descriptions' lengths, then
     the descriptions) and raises the same ``ValueError`` naming the member, the field and which
     rank has which value — no rank is left waiting in a collective the others skipped;
   * a rank that could not describe its state (a wrong object, say) takes part with an error
     marker, so the others raise too instead of hanging;
   * sums that could pass 2**63 - 1 (int64) or overflow float64: every rank raises.
2. **sum**: the state arrays are packed by dtype into one buffer each (an accumulator with a
   single array is summed in place, with no copy on CPU) and SUM-all-reduced.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .base import Accumulator, AccumulatorGroup, exact_total

# Bump when the packed layout or the description changes, so that ranks running different
# metricstream versions refuse to sum rather than sum garbage.
SYNC_PROTOCOL = 2
NUM_FIELDS = 6
_ERROR_MARK = -1
_INT64_MAX = 2**63 - 1

Syncable = Accumulator | AccumulatorGroup


def synchronize(
    target: Any,
    *,
    gather: Callable[[np.ndarray], np.ndarray],
    reduce_sum: Callable[[np.ndarray], np.ndarray],
    engine: str,
    inplace: bool,
) -> Any:
    """Check, then sum ``target`` (an accumulator or a group) over every rank; return the sum.

    ``gather`` all-gathers an int64 vector of the same length on every rank and returns every
    rank's copy concatenated in rank order; ``reduce_sum`` SUM-reduces a C-contiguous buffer and
    returns the result, writing into the given buffer when it can (the CPU engines do). With
    ``inplace=True`` the locks are held through the collectives, so an ``update`` from another
    thread waits rather than being lost; with ``inplace=False`` a copy is summed and ``target``
    is left untouched.
    """
    if not isinstance(target, (Accumulator, AccumulatorGroup)):
        local_error: Exception | None = TypeError(
            f"`acc` must be an accumulator or an AccumulatorGroup, got {type(target).__name__}."
        )
        _check(
            np.array([SYNC_PROTOCOL, _ERROR_MARK, 0, 0, 0, 0], dtype=np.int64),
            None,
            gather,
            engine,
            local_error,
        )
        raise AssertionError("unreachable")  # pragma: no cover
    try:
        work = target if inplace else target.copy()
    except Exception as error:
        # E.g. no memory for the copy on this rank: still join the check, so that the other
        # ranks raise too instead of waiting in it.
        _check(
            np.array([SYNC_PROTOCOL, _ERROR_MARK, 0, 0, 0, 0], dtype=np.int64),
            None,
            gather,
            engine,
            error,
        )
        raise AssertionError("unreachable") from error  # pragma: no cover
    with _exclusive(work) as arrays:
        ints = [array for array in arrays.values() if array.dtype.kind == "i"]
        floats = [array for array in arrays.values() if array.dtype.kind == "f"]
        try:
            description = _describe(work, arrays)
            # The largest total of an int64 array (not its largest cell): the ranks' totals must
            # add up below 2**63, as a merge's do, or N of the summed matrix would wrap.
            int_max = min(max((exact_total(a) for a in ints), default=0), _INT64_MAX)
            float_max = max((float(a.max()) for a in floats if a.size), default=0.0)
            vector = np.array(
                [
                    SYNC_PROTOCOL,
                    _digest(description),
                    sum(a.size for a in ints),
                    sum(a.size for a in floats),
                    int_max,
                    np.array(float_max, dtype=np.float64).view(np.int64),
                ],
                dtype=np.int64,
            )
        except Exception as error:
            # E.g. a configuration that is not JSON-able: still join the check, so that the
            # other ranks raise too instead of waiting in it forever.
            _check(
                np.array([SYNC_PROTOCOL, _ERROR_MARK, 0, 0, 0, 0], dtype=np.int64),
                None,
                gather,
                engine,
                error,
            )
            raise AssertionError("unreachable") from error  # pragma: no cover
        _check(vector, description, gather, engine, None)
        for group in (ints, floats):
            if group:
                _sum_into(group, reduce_sum)
    return work


@contextmanager
def _exclusive(target: Syncable) -> Iterator[dict[str, np.ndarray]]:
    with target.exclusive_state() as arrays:
        yield arrays


def _describe(target: Syncable, arrays: dict[str, np.ndarray]) -> list[Any]:
    members = target.members() if isinstance(target, AccumulatorGroup) else {"": target}
    shapes: dict[str, list[Any]] = {}
    for key, array in arrays.items():
        owner, _, name = key.rpartition("/")
        shapes.setdefault(owner, []).append([name, array.dtype.str, list(array.shape)])
    return [
        [name, type(member).__name__, member.state_format, member.config(), shapes.get(name, [])]
        for name, member in members.items()
    ]


def _digest(description: list[Any]) -> int:
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # 63 bits: a non-negative int64


def _check(
    vector: np.ndarray,
    description: list[Any] | None,
    gather: Callable[[np.ndarray], np.ndarray],
    engine: str,
    local_error: Exception | None,
) -> None:
    table = np.asarray(gather(vector), dtype=np.int64).reshape(-1, NUM_FIELDS)
    world_size = len(table)
    if local_error is not None:
        raise local_error
    failed = [rank for rank in range(world_size) if table[rank, 1] == _ERROR_MARK]
    if failed:
        raise ValueError(
            f"cannot {engine}: rank(s) {_ranks(failed)} could not take part (see the error "
            f"raised there: not given an accumulator, or a state that cannot be described); "
            f"nothing was summed."
        )
    protocols = table[:, 0].tolist()
    if len(set(protocols)) > 1:
        raise ValueError(
            f"cannot {engine}: the ranks run metricstream versions with different sync "
            f"protocols: {_by_rank(protocols)}; nothing was summed."
        )
    if not (table[:, 1:4] == table[0, 1:4]).all():
        assert description is not None
        detail = _difference(description, gather, world_size)
        raise ValueError(
            f"cannot {engine} accumulators configured differently across the {world_size} ranks: "
            f"{detail}. Every rank must create its accumulators with the same configuration; "
            f"nothing was summed."
        )
    if sum(int(v) for v in table[:, 4]) > _INT64_MAX:
        raise ValueError(
            f"cannot {engine}: the summed int64 counts could pass 2**63 - 1 (the ranks' largest "
            f"totals add up to {sum(int(v) for v in table[:, 4])}); nothing was summed."
        )
    float_maxima = table[:, 5].copy().view(np.float64)
    with np.errstate(over="ignore"):  # an overflow is the finding here, not a warning
        float_total = float_maxima.sum()
    if not np.isfinite(float_total):
        raise ValueError(
            f"cannot {engine}: the summed float64 weights would overflow to infinity; nothing "
            f"was summed."
        )


def _difference(
    description: list[Any], gather: Callable[[np.ndarray], np.ndarray], world_size: int
) -> str:
    """Exchange every rank's description (two more all-gathers) and say what differs."""
    # Keys in each configuration's own order, so the first field reported is its first one.
    text = json.dumps(description).encode("utf-8")
    lengths = np.asarray(gather(np.array([len(text)], dtype=np.int64))).reshape(-1)
    width = (int(lengths.max()) + 7) // 8
    padded = np.zeros(width * 8, dtype=np.uint8)
    padded[: len(text)] = np.frombuffer(text, dtype=np.uint8)
    every = np.asarray(gather(padded.view(np.int64))).reshape(world_size, width)
    descriptions = [
        json.loads(every[rank].view(np.uint8)[: int(lengths[rank])].tobytes().decode("utf-8"))
        for rank in range(world_size)
    ]
    names = [[member[0] for member in d] for d in descriptions]
    if any(n != names[0] for n in names):
        # A single accumulator is described as one member named "" (group members have names).
        held = [
            f"a single {d[0][1]}" if n == [""] else f"a group of {n!r}"
            for n, d in zip(names, descriptions, strict=True)
        ]
        return "the ranks hold different accumulators: " + _by_rank(held)
    for index, name in enumerate(names[0]):
        prefix = f"member {name!r}: " if name else ""
        members = [d[index] for d in descriptions]
        types = [m[1] for m in members]
        if len(set(types)) > 1:
            return f"{prefix}the accumulator type is " + _by_rank(types)
        formats = [m[2] for m in members]
        if len(set(formats)) > 1:
            return f"{prefix}the state format is " + _by_rank(formats)
        configs = [m[3] for m in members]
        keys = list(dict.fromkeys(key for config in configs for key in config))
        for key in keys:
            raw = [c.get(key) for c in configs]
            if all(value == raw[0] for value in raw):
                continue
            if all(isinstance(v, list) and len(v) == len(raw[0]) for v in raw):
                # Long lists (class names) that differ: show the first position that does.
                at = next(i for i in range(len(raw[0])) if any(v[i] != raw[0][i] for v in raw))
                return f"{prefix}`{key}[{at}]` is " + _by_rank([_short(v[at]) for v in raw])
            return f"{prefix}`{key}` is " + _by_rank([_short(value) for value in raw])
        shapes = [json.dumps(m[4]) for m in members]
        if len(set(shapes)) > 1:
            return f"{prefix}the state arrays differ (" + _by_rank(shapes) + ")"
    return "their state descriptions differ"


def _short(value: Any) -> str:
    """A configuration value as Python spells it (``True``, ``['a', 'b']``), cut at 80 chars."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")


def _by_rank(values: list) -> str:
    """``[7, 8, 7]`` -> ``"7 on ranks 0, 2 and 8 on rank 1"`` (values in order of first rank)."""
    groups: dict = {}
    for rank, value in enumerate(values):
        groups.setdefault(value, []).append(rank)
    parts = []
    for value, ranks in groups.items():
        parts.append(f"{value} on rank{'s' if len(ranks) > 1 else ''} {_ranks(ranks)}")
    return " and ".join(parts) if len(parts) == 2 else "; ".join(parts)


def _sum_into(arrays: list[np.ndarray], reduce_sum: Callable[[np.ndarray], np.ndarray]) -> None:
    """SUM-reduce ``arrays`` (one dtype) as one buffer and write the sums back into them."""
    if len(arrays) == 1 and arrays[0].flags.c_contiguous:
        (only,) = arrays
        result = reduce_sum(only)
        if result is not only:
            only[...] = np.asarray(result).reshape(only.shape)
        return
    buffer = np.concatenate([array.reshape(-1) for array in arrays])
    result = np.asarray(reduce_sum(buffer)).reshape(-1)
    offset = 0
    for array in arrays:
        array[...] = result[offset : offset + array.size].reshape(array.shape)
        offset += array.size
