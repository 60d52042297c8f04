"""The engine-independent half of combining accumulators (or a group of them) across processes.

A sync is one configuration check plus one collective per kind of state buffer, whatever the
engine (torch.distributed, MPI) and whatever the number of accumulators in a group:

1. **check**: an all-gather of 6 int64 values per rank — the sync protocol version, a 63-bit
   digest of every member's name, type, format, configuration, array shapes and reductions
   and of the kind of device the collectives run on, the lengths of the int64 and float64 sum
   buffers, and the largest int64 total and float64 value (for the overflow check). Every rank
   then holds every rank's values and takes the same decision:

   * all equal: go on;
   * different: every rank runs the same two extra all-gathers (the descriptions' lengths, then
     the descriptions) and raises the same ``ValueError`` naming the member, the field and which
     rank has which value — no rank is left waiting in a collective the others skipped;
   * a rank that could not describe its state (a wrong object, say, or bad values recorded on
     its device) takes part with an error marker, so the others raise too instead of hanging;
   * sums that could pass 2**63 - 1 (int64) or overflow float64: every rank raises.
2. **combine**: the state arrays are packed into one buffer per kind — the int64 arrays that
   add, the float64 arrays that add, and the arrays an accumulator declares ``"max"`` in its
   ``state_reductions`` (int64 or float64, packed as int64 keys that order like the values) —
   and each buffer is all-reduced once: SUM, SUM, MAX. An accumulator with a single array is
   summed in place, with no copy on CPU.

So an accumulator syncs in one check and at most two data collectives (a confusion matrix:
one SUM; a regression state: a SUM of its int64 sums and a MAX of its maxima); only a group
that holds int64 sums, float64 sums and maxima together needs three.

:func:`synchronize` packs host (numpy) arrays; :func:`synchronize_tensors` packs torch tensors,
adding each accumulator's device-resident counts (see :mod:`metricstream.device`) to its host
arrays on the device, so that device state reaches the host once, as the result.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, NamedTuple, NoReturn

import numpy as np

from .base import Accumulator, AccumulatorGroup, exact_total

# Bump when the packed layout or the description changes, so that ranks running different
# metricstream versions refuse to sum rather than sum garbage.
SYNC_PROTOCOL = 3
NUM_FIELDS = 6
_ERROR_MARK = -1
_INT64_MAX = 2**63 - 1
# A negative float64's bits XOR this: int64 keys that order like the values (an involution).
_FLIP = 0x7FFF_FFFF_FFFF_FFFF
_PARTS = (("int", "sum"), ("float", "sum"), ("max", "max"))

Syncable = Accumulator | AccumulatorGroup
Gather = Callable[[np.ndarray], np.ndarray]


class _Entry(NamedTuple):
    """One state array of the sync: where it is and how it combines."""

    key: str  # "array" of a single accumulator, "member/array" in a group
    member: Accumulator
    name: str
    array: np.ndarray  # the live host array
    part: str  # "int" or "float" (summed), or "max"


def synchronize(
    target: Any,
    *,
    gather: Gather,
    reduce_sum: Callable[[np.ndarray], np.ndarray],
    engine: str,
    inplace: bool,
    reduce_max: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Any:
    """Check, then combine ``target`` (an accumulator or a group) over every rank.

    ``gather`` all-gathers an int64 vector of the same length on every rank and returns every
    rank's copy concatenated in rank order; ``reduce_sum`` (``reduce_max``) SUM- (MAX-)reduces
    a C-contiguous int64 or float64 (int64) buffer and returns the result, writing into the
    given buffer when it can (the CPU engines do). Without ``reduce_max`` the maxima travel
    through ``gather``. With ``inplace=True`` the locks are held through the collectives, so an
    ``update`` from another thread waits rather than being lost; with ``inplace=False`` a copy
    is combined and ``target`` is left untouched.
    """
    if not isinstance(target, (Accumulator, AccumulatorGroup)):
        _refuse(gather, engine, _not_syncable(target))
    try:
        work = target if inplace else target.copy()
    except Exception as error:
        # E.g. no memory for the copy on this rank: still join the check, so that the other
        # ranks raise too instead of waiting in it.
        _refuse(gather, engine, error)
    with _exclusive(work) as arrays:
        try:
            description = _describe(work, arrays, "cpu")
            entries = _entries(work, arrays)
            ints = [e.array for e in entries if e.part == "int"]
            floats = [e.array for e in entries if e.part == "float"]
            maxima = [e.array for e in entries if e.part == "max"]
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
            _refuse(gather, engine, error)
        table = np.asarray(gather(vector), dtype=np.int64).reshape(-1, NUM_FIELDS)
        _decide(table, description, gather, engine, None)
        for group in (ints, floats):
            if group:
                _sum_into(group, reduce_sum)
        if maxima:
            _max_into(maxima, reduce_max, gather)
    return work


@contextmanager
def _exclusive(target: Syncable) -> Iterator[dict[str, np.ndarray]]:
    with target.exclusive_state() as arrays:
        yield arrays


# ---------------------------------------------------------------------------- device tensors
def synchronize_tensors(
    target: Any,
    *,
    torch: Any,
    device: Any,
    rank: int,
    gather: Callable[[Any], Any],
    all_reduce: Callable[[Any, str], None],
    engine: str,
    inplace: bool,
) -> Any:
    """:func:`synchronize` with torch tensors on ``device``, the device the collectives use.

    Each array is packed from where it lives: the accumulator's device-resident counts, read on
    their device, plus its host array (copied over only when it holds anything). The check's
    values are computed there too: a count that would wrap, a sum that would become infinite or
    a bad value recorded on the device marks this rank as failing, and after the check this rank
    raises its own error (the read that reports it, as any read would) while the others raise
    that it could not take part. The host reads the check's table (6 values per rank) and, after
    the collectives, the combined buffers, once, to write the result into the host arrays; the
    device counts are then zero.

    ``gather(tensor)`` all-gathers a 1-d int64 tensor on ``device`` and returns the ranks'
    tensors concatenated in rank order; ``all_reduce(tensor, op)`` reduces in place, ``op``
    ``"sum"`` or ``"max"``; ``rank`` is this process's place in that order.
    """

    def host_gather(vector: np.ndarray) -> np.ndarray:  # the error paths: small and rare
        tensor = torch.from_numpy(np.array(vector, dtype=np.int64)).to(device)
        return np.asarray(gather(tensor).cpu().numpy())

    if not isinstance(target, (Accumulator, AccumulatorGroup)):
        _refuse(host_gather, engine, _not_syncable(target))
    members = target.members() if isinstance(target, AccumulatorGroup) else {"": target}
    with ExitStack() as held:
        for member in sorted(members.values(), key=id):
            held.enter_context(member._lock)
        try:
            for member in members.values():
                state = getattr(member, "_device", None)
                if state is not None and not _mirrors(torch, state, member):
                    # Device sums kept in another form than the host's (a family's own flush
                    # converts them): read them to the host, as any read would, then pack.
                    member._flush_device()
            arrays = _live_arrays(target)
            description = _describe(target, arrays, _kind_of(device))
            entries = _entries(target, arrays)
            buffers, vector = _pack(torch, device, description, entries)
        except Exception as error:
            held.close()
            _refuse(host_gather, engine, error)
        if not inplace:
            held.close()  # the buffers are copies: updates may go on while they travel
        table = np.asarray(gather(vector).cpu().numpy(), dtype=np.int64).reshape(-1, NUM_FIELDS)
        local_error = None
        if table[rank, 1] == _ERROR_MARK:
            local_error = _local_failure(members, locked=inplace)
        _decide(table, description, host_gather, engine, local_error)
        for part, op in _PARTS:
            if part in buffers:
                all_reduce(buffers[part], op)
        result = _to_host(torch, buffers)
        if inplace:
            destination = target
            for state in _device_states(entries).values():
                for tensor in state.tensors.values():
                    tensor.zero_()
                state.dirty = False
        else:
            destination = _empty_twin(target)
        _write_back(destination, entries, result)
    return destination


def _kind_of(device: Any) -> str:
    """The kind of device the collectives run on ("cpu", "cuda", ...), compared across ranks."""
    return str(device.type)


def _live_arrays(target: Syncable) -> dict[str, np.ndarray]:
    """The live host arrays in the order ``exclusive_state`` yields them, without reading the
    device counts (the caller holds the locks)."""
    if isinstance(target, Accumulator):
        return dict(target._arrays)
    members = target.members()
    order = {name: index for index, name in enumerate(members)}
    arrays = {
        f"{name}/{key}": array
        for name, member in members.items()
        for key, array in member._arrays.items()
    }
    return {key: arrays[key] for key in sorted(arrays, key=lambda k: (order[_owner(k)], k))}


def _mirrors(torch: Any, state: Any, member: Accumulator) -> bool:
    """Whether ``state`` holds one flat tensor per host array (plus a spare cell) that the
    base's flush adds to it: then the sync adds them on the device itself."""
    from .device._state import DeviceState

    if type(state).flush_into is not DeviceState.flush_into:
        return False
    tensors = getattr(state, "tensors", {})
    if set(tensors) != set(member._arrays):
        return False
    return all(
        tensors[name].numel() == array.size + 1
        and (tensors[name].dtype == torch.int64) == (array.dtype.kind == "i")
        for name, array in member._arrays.items()
    )


def _device_states(entries: list[_Entry]) -> dict[int, Any]:
    """The device states holding counts not yet on the host, by accumulator."""
    found = {}
    for entry in entries:
        state = getattr(entry.member, "_device", None)
        if state is not None and (state.dirty or getattr(state, "replayable", False)):
            found[id(entry.member)] = state
    return found


def _pack(
    torch: Any, device: Any, description: list[Any], entries: list[_Entry]
) -> tuple[dict[str, Any], Any]:
    """The buffers (new tensors on ``device``) and the check's vector, computed on the device."""
    states = _device_states(entries)
    places = {str(state.device): state.device for state in states.values()}
    # Pack where the device counts are, so that they are read there and moved at most once
    # (packed); host-only states are packed on the host and moved once.
    if len(places) == 1:
        packing = next(iter(places.values()))
    else:
        packing = device if places else torch.device("cpu")
    pieces: dict[str, list[Any]] = {part: [] for part, _ in _PARTS}
    totals, peaks, failed = [], [], []
    hosts = _host_parts(torch, packing, entries, states)
    for entry in entries:
        state = states.get(id(entry.member))
        if state is None:
            value = hosts[entry.key]
        else:
            value = state.tensors[entry.name][:-1].to(packing)  # the spare cell dropped
            if entry.key in hosts:
                value = value + hosts[entry.key]  # as the flush would add them
            if entry.part == "int":
                failed.append((value < 0).any())  # non-negative counts: < 0 is a wrap
            elif entry.part == "float":
                failed.append(~torch.isfinite(value).all())
        if entry.part == "int":
            totals.append(_saturated_total(torch, value))
        elif entry.part == "float" and value.numel():
            peaks.append(value.max())
        pieces[entry.part].append(_keys_tensor(torch, value) if entry.part == "max" else value)
    # torch.cat copies: no buffer shares memory with a live array or a device counter.
    buffers = {part: torch.cat(p).to(device) for part, p in pieces.items() if p}
    failed.extend(state.record[0] > 0 for state in states.values())

    def scalar(value: Any, dtype: Any = torch.int64) -> Any:
        return torch.full((), value, dtype=dtype, device=packing)

    bad = torch.stack(failed).any() if failed else scalar(False, torch.bool)
    int_max = torch.stack(totals).max() if totals else scalar(0)
    float_max = torch.stack(peaks).max() if peaks else scalar(0.0, torch.float64)
    vector = torch.stack(
        [
            scalar(SYNC_PROTOCOL),
            torch.where(bad, scalar(_ERROR_MARK), scalar(_digest(description))),
            scalar(sum(e.array.size for e in entries if e.part == "int")),
            scalar(sum(e.array.size for e in entries if e.part == "float")),
            int_max,
            float_max.reshape(1).view(torch.int64).reshape(()),
        ]
    )
    return buffers, vector.to(device)


def _host_parts(
    torch: Any, packing: Any, entries: list[_Entry], states: dict[int, Any]
) -> dict[str, Any]:
    """The host values the buffers need, as tensors on ``packing``: every array of an
    accumulator without device counts, and the host part of one with them where it holds
    anything (read on the host). Off the CPU they travel together, in one copy from pinned
    memory that the host does not wait for."""
    needed = [e for e in entries if id(e.member) not in states or e.array.any()]
    if not needed:
        return {}
    if packing.type == "cpu":  # views: shares the live arrays' memory, the buffers copy
        return {e.key: torch.from_numpy(e.array.reshape(-1)) for e in needed}
    flat = [np.ascontiguousarray(e.array).reshape(-1).view(np.int64) for e in needed]
    blob = torch.from_numpy(np.concatenate(flat))
    try:
        blob = blob.pin_memory().to(packing, non_blocking=True)
    except RuntimeError:  # a device without pinned host memory: a plain copy
        blob = blob.to(packing)
    parts, offset = {}, 0
    for entry in needed:
        chunk = blob[offset : offset + entry.array.size]
        parts[entry.key] = chunk.view(torch.float64) if entry.array.dtype.kind == "f" else chunk
        offset += entry.array.size
    return parts


def _saturated_total(torch: Any, value: Any) -> Any:
    """:func:`exact_total` of a non-negative int64 tensor on its device, capped at 2**63 - 1
    (summed as 32-bit halves, neither of which can wrap)."""
    high = (value >> 32).sum()
    low = (value & 0xFFFF_FFFF).sum()
    fits = high <= (_INT64_MAX - low) >> 32
    return torch.where(fits, high * 2**32 + low, torch.full_like(low, _INT64_MAX))


def _keys_tensor(torch: Any, value: Any) -> Any:
    """int64 keys that order like ``value``'s values (the values of int64, float64 bits)."""
    if not value.is_floating_point():
        return value
    bits = value.view(torch.int64)
    return torch.where(bits < 0, bits ^ _FLIP, bits)


def _local_failure(members: dict[str, Accumulator], *, locked: bool) -> Exception:
    """This rank's own error after it marked the check as failing: the read that reports it
    (the device's bad values, or counts that would wrap), as any read of the state raises."""
    for member in members.values():
        if getattr(member, "_device", None) is None:
            continue
        try:
            if locked:
                member._flush_device()
            else:
                with member._lock:
                    member._flush_device()
        except ValueError as error:
            return error
    return ValueError("this rank's state could not be combined (its counts would overflow).")


def _to_host(torch: Any, buffers: dict[str, Any]) -> dict[str, np.ndarray]:
    """The reduced buffers on the host: one device-to-host copy for all of them."""
    parts = [part for part, _ in _PARTS if part in buffers]
    if not parts:
        return {}
    if all(buffers[part].device.type == "cpu" for part in parts):
        return {part: buffers[part].numpy() for part in parts}
    flat = torch.cat([buffers[part].view(torch.int64) for part in parts]).cpu().numpy()
    result, offset = {}, 0
    for part in parts:
        size = buffers[part].numel()
        chunk = flat[offset : offset + size]
        result[part] = chunk.view(np.float64) if part == "float" else chunk
        offset += size
    return result


def _empty_twin(target: Syncable) -> Syncable:
    if isinstance(target, Accumulator):
        return type(target)(**target.config())
    twins = {name: type(m)(**m.config()) for name, m in target.members().items()}
    return type(target)(twins)


def _write_back(destination: Syncable, entries: list[_Entry], result: dict[str, Any]) -> None:
    members = (
        destination.members() if isinstance(destination, AccumulatorGroup) else {"": destination}
    )
    offsets = dict.fromkeys(result, 0)
    for entry in entries:
        live = members[_owner(entry.key) if "/" in entry.key else ""]._arrays[entry.name]
        start = offsets[entry.part]
        chunk = result[entry.part][start : start + live.size]
        offsets[entry.part] = start + live.size
        if entry.part == "max":
            chunk = _from_keys(chunk, live.dtype)
        live[...] = chunk.reshape(live.shape)
    for member in members.values():
        member._changed()


# ---------------------------------------------------------------------------- shared pieces
def _owner(key: str) -> str:
    return key.split("/", 1)[0]


def _entries(target: Syncable, arrays: dict[str, np.ndarray]) -> list[_Entry]:
    """The arrays in packing order, each with its accumulator and how it combines."""
    members = target.members() if isinstance(target, AccumulatorGroup) else None
    entries = []
    for key, array in arrays.items():
        if members is None:
            assert isinstance(target, Accumulator)
            member, name = target, key
        else:
            member, name = members[_owner(key)], key.split("/", 1)[1]
        if member.state_reductions.get(name, "sum") == "max":
            part = "max"
        else:
            part = "int" if array.dtype.kind == "i" else "float"
        entries.append(_Entry(key, member, name, array, part))
    return entries


def _keys(array: np.ndarray) -> np.ndarray:
    """int64 keys that order like the values (an int64 array's values; float64 bits mapped)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.dtype.kind == "i":
        return flat.astype(np.int64, copy=True)
    bits = flat.view(np.int64)
    return np.where(bits < 0, bits ^ _FLIP, bits)


def _from_keys(keys: np.ndarray, dtype: np.dtype) -> np.ndarray:
    keys = np.asarray(keys, dtype=np.int64)
    if dtype.kind == "i":
        return keys
    return np.where(keys < 0, keys ^ _FLIP, keys).view(np.float64)


def _not_syncable(target: Any) -> TypeError:
    return TypeError(
        f"`acc` must be an accumulator or an AccumulatorGroup, got {type(target).__name__}."
    )


def _refuse(gather: Gather, engine: str, error: Exception) -> NoReturn:
    """Join the check with an error marker (so that the other ranks raise too), then raise."""
    vector = np.array([SYNC_PROTOCOL, _ERROR_MARK, 0, 0, 0, 0], dtype=np.int64)
    table = np.asarray(gather(vector), dtype=np.int64).reshape(-1, NUM_FIELDS)
    _decide(table, None, gather, engine, error)
    raise AssertionError("unreachable")  # pragma: no cover


def _describe(target: Syncable, arrays: dict[str, np.ndarray], device_kind: str) -> list[Any]:
    """``[device kind, [[member name, type, format, config, arrays], ...]]`` (JSON-able)."""
    members = target.members() if isinstance(target, AccumulatorGroup) else {"": target}
    shapes: dict[str, list[Any]] = {}
    for key, array in arrays.items():
        owner, _, name = key.rpartition("/")
        reduction = members[owner].state_reductions.get(name, "sum")
        shapes.setdefault(owner, []).append([name, array.dtype.str, list(array.shape), reduction])
    return [
        device_kind,
        [
            [
                name,
                type(member).__name__,
                member.state_format,
                member.config(),
                shapes.get(name, []),
            ]
            for name, member in members.items()
        ],
    ]


def _digest(description: list[Any]) -> int:
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # 63 bits: a non-negative int64


def _decide(
    table: np.ndarray,
    description: list[Any] | None,
    gather: Gather,
    engine: str,
    local_error: Exception | None,
) -> None:
    """Every rank's check values in ``table`` (one row per rank): raise as every rank will."""
    table = np.asarray(table, dtype=np.int64).reshape(-1, NUM_FIELDS)
    world_size = len(table)
    if local_error is not None:
        raise local_error
    failed = [rank for rank in range(world_size) if table[rank, 1] == _ERROR_MARK]
    if failed:
        raise ValueError(
            f"cannot {engine}: rank(s) {_ranks(failed)} could not take part (see the error "
            f"raised there: not given an accumulator, a state that cannot be described, or "
            f"bad values counted on its device); nothing was summed."
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


def _difference(description: list[Any], gather: Gather, world_size: int) -> str:
    """Exchange every rank's description (two more all-gathers) and say what differs."""
    # Keys in each configuration's own order, so the first field reported is its first one.
    text = json.dumps(description).encode("utf-8")
    lengths = np.asarray(gather(np.array([len(text)], dtype=np.int64))).reshape(-1)
    width = (int(lengths.max()) + 7) // 8
    padded = np.zeros(width * 8, dtype=np.uint8)
    padded[: len(text)] = np.frombuffer(text, dtype=np.uint8)
    every = np.asarray(gather(padded.view(np.int64))).reshape(world_size, width)
    described = [
        json.loads(every[rank].view(np.uint8)[: int(lengths[rank])].tobytes().decode("utf-8"))
        for rank in range(world_size)
    ]
    kinds = [d[0] for d in described]
    if len(set(kinds)) > 1:
        return (
            "the collectives would run on different kinds of device: "
            + _by_rank(kinds)
            + " (pass the same `device=` on every rank, or none)"
        )
    descriptions = [d[1] for d in described]
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


def _max_into(
    arrays: list[np.ndarray],
    reduce_max: Callable[[np.ndarray], np.ndarray] | None,
    gather: Gather,
) -> None:
    """MAX-reduce ``arrays`` (int64 or float64) as one buffer of int64 keys; write them back."""
    keys = np.concatenate([_keys(array) for array in arrays])
    if reduce_max is not None:
        result = np.asarray(reduce_max(keys), dtype=np.int64).reshape(-1)
    else:  # an engine without a MAX: every rank's keys, and the maximum taken here
        result = np.asarray(gather(keys), dtype=np.int64).reshape(-1, keys.size).max(axis=0)
    offset = 0
    for array in arrays:
        chunk = _from_keys(result[offset : offset + array.size], array.dtype)
        array[...] = chunk.reshape(array.shape)
        offset += array.size
