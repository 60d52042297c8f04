"""The conformance kit: every invariant the base documents, on every registered accumulator kind.

``metricstream.base.Accumulator`` promises (its docstring and ``docs/developer.md``): any split
of a stream into batches gives one update's state; merging is exact, associative, commutative and
an empty merge changes nothing; ``update``/``merge``/``reset`` return ``self``, ``a + b``,
``+=`` and ``sum`` work; copies are independent; ``==`` and ``repr`` follow the configuration; a
failed update or merge raises ``ValueError``/``TypeError`` and leaves the state bit-identical;
concurrent updates lose nothing and every view comes from one state that existed; counts never
wrap; every round trip (bytes, file, pickle, state dict through ``torch.save``) gives the same
accumulator; ``from_bytes`` of anything raises only ``ValueError``; groups keep all of it across
members; syncs across ranks equal one process. This module checks each sentence on each kind of
``tests/conformance/registry.py``: adding a family to the kit is registering it there.

Oracles: the same accumulator fed everything in one call (splits, merges, groups, ranks), the
states a sequential run passes through (threads), and the documented exception types. Known
failures of today's code are listed in ``KNOWN_FAILURES`` (strict xfails: fixing one makes its
test pass, and then its line must go).
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

if __package__ in (None, ""):  # run as a script (--worker): make `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metricstream import Accumulator, AccumulatorGroup, ConfusionAccumulator  # noqa: E402
from metricstream.base import accumulator_type  # noqa: E402
from tests.conformance import registry  # noqa: E402
from tests.conformance.registry import Batch, Kind, group_of, kind  # noqa: E402

NAMES = registry.names()

# ---------------------------------------------------------------------------- known failures
# (check, kind) -> what is wrong. Each is a strict xfail: when the code is fixed the test passes,
# pytest reports XPASS(strict) as a failure, and the entry is deleted. Every family passes every
# check today; a new family's failures go here (with `_known`) until they are fixed.
KNOWN_FAILURES: dict[tuple[str, str], str] = {}


def _known(check: str, names: list[str], reason: str) -> None:
    for name in names:
        KNOWN_FAILURES[(check, name)] = reason


SCORES = ["scores-binary", "scores-binary-weighted", "scores-multiclass"]
SCORES += ["scores-multiclass-logits", "scores-multilabel"]
CONFUSION = ["confusion-labels", "confusion-logits", "confusion-weighted", "confusion-ignore-index"]


def cases(check: str, *, slow: bool = False, only: Callable[[str], bool] | None = None) -> list:
    """One ``pytest.param`` per registered kind, with its known failure (if any) as a mark."""
    params = []
    for name in NAMES:
        if only is not None and not only(name):
            continue
        marks: list[Any] = [pytest.mark.slow] if slow else []
        reason = KNOWN_FAILURES.get((check, name))
        if reason is not None:
            marks.append(pytest.mark.xfail(strict=True, reason=reason, raises=AssertionError))
        params.append(pytest.param(name, id=name, marks=marks))
    return params


# ---------------------------------------------------------------------------- batches
def _length(batch: Batch) -> int:
    return int(np.shape(batch[0][0])[0])


def _cut(value: Any, n: int, start: int, stop: int) -> Any:
    if isinstance(value, np.ndarray) and value.ndim and value.shape[0] == n:
        return np.ascontiguousarray(value[start:stop])
    return value


def split(batch: Batch, bounds: list[int]) -> list[Batch]:
    """The batch cut at ``bounds`` (sorted, from 0 to its length) along the first axis."""
    args, kwargs = batch
    n = _length(batch)
    return [
        (
            tuple(_cut(a, n, start, stop) for a in args),
            {key: _cut(v, n, start, stop) for key, v in kwargs.items()},
        )
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True)
    ]


def nonempty(spec: Kind, rng: np.random.Generator, maker: Callable | None = None) -> Batch:
    """A batch that changes the state of an empty accumulator (``ignore_index`` may drop all)."""
    maker = maker or spec.make_batch
    for _ in range(1000):
        batch = maker(rng)
        if _length(batch) and not same_bits(spec.make().update(*batch[0], **batch[1]), spec.make()):
            return batch
    raise AssertionError("the registry's batch maker never changes the state")


def feed(acc: Any, batches: list[Batch]) -> Any:
    for args, kwargs in batches:
        acc.update(*args, **kwargs)
    return acc


# ---------------------------------------------------------------------------- state comparisons
def bits(acc: Accumulator) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    return {
        name: (array.dtype.str, array.shape, array.tobytes())
        for name, array in acc.state_arrays().items()
    }


def same_bits(a: Accumulator, b: Accumulator) -> bool:
    return type(a) is type(b) and a.config() == b.config() and bits(a) == bits(b)


def assert_same_state(
    got: Accumulator, expected: Accumulator, spec: Kind, *, exact_only: bool = True
) -> None:
    """Configurations equal; int64 arrays equal; float64 arrays equal to ``spec.float_rtol``."""
    assert type(got) is type(expected)
    assert got.config() == expected.config()
    mine, theirs = got.state_arrays(), expected.state_arrays()
    assert mine.keys() == theirs.keys()
    names = spec.exact_arrays if (exact_only and spec.exact_arrays) else list(mine)
    for name in names:
        a, b = mine[name], theirs[name]
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=spec.float_rtol, atol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


def assert_loadable(acc: Accumulator) -> None:
    """No state that load refuses: the bytes of ``acc`` load back as ``acc``."""
    try:
        restored = type(acc).from_bytes(acc.to_bytes())
    except ValueError as error:
        raise AssertionError(
            f"an accepted update left a state that load refuses: {error}"
        ) from None
    assert same_bits(restored, acc)


def _same_value(a: Any, b: Any, rtol: float) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_value(x, y, rtol) for x, y in zip(a, b, strict=True))
    if isinstance(a, (np.ndarray, float, int, np.number)) and isinstance(
        b, (np.ndarray, float, int, np.number)
    ):
        x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        return x.shape == y.shape and bool(np.allclose(x, y, rtol=rtol, atol=0, equal_nan=True))
    return a == b


def observe(spec: Kind, acc: Any) -> dict[str, Any]:
    """Every registered view: ``("value", v)`` or ``("raises", exception type name)``."""
    seen: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, view in spec.views.items():
            try:
                seen[name] = ("value", view(acc))
            except (ValueError, TypeError, ArithmeticError) as error:
                seen[name] = ("raises", type(error).__name__)
    return seen


def same_views(a: dict[str, Any], b: dict[str, Any], rtol: float) -> bool:
    return a.keys() == b.keys() and all(_same_value(a[k], b[k], rtol) for k in a)


# ============================================================================ configuration
def test_every_kind_gives_the_kit_what_it_needs():
    assert len(NAMES) >= 15
    for name in NAMES:
        spec = kind(name)
        assert spec.invalid, f"{name}: register at least one invalid batch"
        assert spec.incompatible, f"{name}: register at least one incompatible configuration"
        assert spec.views, f"{name}: register views"
        nonempty(spec, np.random.default_rng(0))


@pytest.mark.parametrize("name", cases("configuration"))
def test_config_is_json_and_builds_an_empty_twin(name):
    spec = kind(name)
    acc = spec.make()
    config = acc.config()
    assert json.loads(json.dumps(config)) == config
    assert same_bits(type(acc)(**config), acc)
    updated = acc.update(*nonempty(spec, np.random.default_rng(1))[0])
    twin = type(acc)(**updated.config())
    assert same_bits(twin, spec.make()) and twin == spec.make()
    for shown in (repr(acc), repr(updated)):
        assert shown.startswith(f"{type(acc).__name__}(") and shown.endswith(")")


# ============================================================================ splits and merges
def _examples(slow: bool) -> settings:
    return settings(
        max_examples=60 if slow else 4,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def check_split(name: str, seed: int, cuts: list[int]) -> None:
    spec = kind(name)
    rng = np.random.default_rng(seed)
    batch = spec.make_batch(rng)
    n = _length(batch)
    bounds = [0, *sorted(min(c, n) for c in cuts), n]
    whole = spec.make().update(*batch[0], **batch[1])
    parts = spec.make()
    for args, kwargs in split(batch, bounds):
        assert parts.update(*args, **kwargs) is parts
        assert_loadable(parts)
    assert_same_state(parts, whole, spec)


SPLIT = {"seed": st.integers(0, 2**32 - 1), "cuts": st.lists(st.integers(0, 45), max_size=5)}


@pytest.mark.parametrize("name", cases("split"))
def test_any_split_gives_one_updates_state(name):
    @_examples(slow=False)
    @given(**SPLIT)
    @example(seed=0, cuts=[0, 0, 3, 3, 45])  # empty pieces at both ends and inside
    def run(seed, cuts):
        check_split(name, seed, cuts)

    run()


@pytest.mark.parametrize("name", cases("split_many", slow=True))
def test_any_split_gives_one_updates_state_many(name):
    @_examples(slow=True)
    @given(**SPLIT)
    def run(seed, cuts):
        check_split(name, seed, cuts)

    run()


def _reduce(accs: list[Accumulator], tree: bool) -> Accumulator:
    if tree:  # pairwise, as an all-reduce tree would
        while len(accs) > 1:
            pairs = [accs[i] + accs[i + 1] for i in range(0, len(accs) - 1, 2)]
            accs = pairs + ([accs[-1]] if len(accs) % 2 else [])
        return accs[0]
    total = accs[0].copy()
    for acc in accs[1:]:
        assert total.merge(acc) is total
        assert_loadable(total)
    return total


def check_merges(name: str, seed: int, shards: int, tree: bool) -> None:
    spec = kind(name)
    rng = np.random.default_rng(seed)
    batches = [spec.make_batch(rng) for _ in range(shards)]
    one = feed(spec.make(), batches)
    accs = [feed(spec.make(), [b]) for b in batches]
    accs.insert(int(rng.integers(0, len(accs) + 1)), spec.make())  # an empty shard anywhere
    order = [accs[i] for i in rng.permutation(len(accs))]
    assert_same_state(_reduce(order, tree), one, spec)
    # commutative and an empty merge is the identity: bit for bit
    a, b = accs[0], accs[-1]
    assert same_bits(a + b, b + a)
    assert same_bits(a + spec.make(), a) and same_bits(spec.make() + a, a)
    # associative (to rounding for float sums)
    if len(accs) >= 3:
        x, y, z = accs[:3]
        assert_same_state((x + y) + z, x + (y + z), spec, exact_only=False)
    # merging with itself doubles
    doubled = a.copy()
    doubled.merge(doubled)
    assert same_bits(doubled, a + a.copy())


MERGES = {"seed": st.integers(0, 2**32 - 1), "shards": st.integers(1, 5), "tree": st.booleans()}


@pytest.mark.parametrize("name", cases("merge_orders"))
def test_any_merge_order_gives_one_updates_state(name):
    @_examples(slow=False)
    @given(**MERGES)
    def run(seed, shards, tree):
        check_merges(name, seed, shards, tree)

    run()


@pytest.mark.parametrize("name", cases("merge_orders_many", slow=True))
def test_any_merge_order_gives_one_updates_state_many(name):
    @_examples(slow=True)
    @given(**MERGES)
    def run(seed, shards, tree):
        check_merges(name, seed, shards, tree)

    run()


# ============================================================================ the operators
@pytest.mark.parametrize("name", cases("operators"))
def test_operators_return_what_the_base_promises(name):
    spec = kind(name)
    rng = np.random.default_rng(2)
    b1, b2, b3 = (nonempty(spec, rng) for _ in range(3))
    a = spec.make()
    assert a.update(*b1[0], **b1[1]) is a
    b = feed(spec.make(), [b2])
    c = feed(spec.make(), [b3])
    a_bits, b_bits = bits(a), bits(b)
    total = a + b
    assert total is not a and total is not b and type(total) is type(a)
    assert bits(a) == a_bits and bits(b) == b_bits  # operands untouched
    merged = a.copy()
    assert merged.merge(b) is merged and same_bits(merged, total)
    alias = a
    alias += b
    assert alias is a and same_bits(a, total)
    assert same_bits(sum([total, c]), total + c)
    assert same_bits(0 + c, c) and (0 + c) is not c
    assert a.reset() is a and same_bits(a, spec.make())
    with pytest.raises(TypeError):
        a + 1  # noqa: B018
    with pytest.raises(TypeError):
        a.merge(ConfusionAccumulator(2) if type(a) is not ConfusionAccumulator else _Other())


class _Other(Accumulator):
    """Another type, to be refused by merges and loads."""

    def __init__(self) -> None:
        super().__init__({"counts": ((1,), np.int64)})

    def config(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize("name", cases("copies"))
def test_copies_are_independent_and_equal(name):
    spec = kind(name)
    rng = np.random.default_rng(3)
    first, second = nonempty(spec, rng), nonempty(spec, rng)
    for duplicator in (lambda a: a.copy(), copy.copy, copy.deepcopy):
        acc = feed(spec.make(), [first])
        duplicate = duplicator(acc)
        assert duplicate is not acc and duplicate == acc and same_bits(duplicate, acc)
        before = bits(acc)
        duplicate.update(*second[0], **second[1])
        assert bits(acc) == before and duplicate != acc
        duplicate_bits = bits(duplicate)
        acc.update(*second[0], **second[1])
        assert bits(duplicate) == duplicate_bits
    assert acc != spec.make()
    assert acc != object() and not (acc == 1)
    for other in spec.incompatible:
        assert spec.make() != other()


# ============================================================================ atomic failure
@pytest.mark.parametrize("name", cases("invalid_batches"))
def test_invalid_batches_raise_and_change_nothing(name):
    spec = kind(name)
    rng = np.random.default_rng(4)
    acc = feed(spec.make(), [nonempty(spec, rng)])
    failures = []
    for label, invalid in spec.invalid.items():
        before = bits(acc)
        args, kwargs = invalid.make(rng)
        try:
            acc.update(*args, **kwargs)
        except (ValueError, TypeError) as error:
            if invalid.argument is not None and invalid.argument not in str(error):
                failures.append(f"{label}: the message does not name `{invalid.argument}`: {error}")
        except Exception as error:  # noqa: BLE001 - the wrong type is the finding
            failures.append(f"{label}: raised {type(error).__name__}: {error}")
        else:
            failures.append(f"{label}: accepted")
        if bits(acc) != before:
            failures.append(f"{label}: the state changed")
            acc = feed(spec.make(), [nonempty(spec, rng)])
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", cases("incompatible_merges"))
def test_incompatible_merges_raise_and_change_nothing(name):
    spec = kind(name)
    acc = feed(spec.make(), [nonempty(spec, np.random.default_rng(5))])
    before = bits(acc)
    for other in spec.incompatible:
        with pytest.raises(ValueError, match=r"different `\w+`: .* here, .* in the other"):
            acc.merge(other())
        with pytest.raises(ValueError):
            acc + other()  # noqa: B018
        assert bits(acc) == before
    with pytest.raises(TypeError):
        acc.merge(_Other())
    assert bits(acc) == before


@pytest.mark.parametrize("name", cases("extreme_batches"))
def test_hostile_but_valid_batches_never_leave_a_state_load_refuses(name):
    """Each extreme batch, twice, then a merge with itself: refused atomically or loadable."""
    spec = kind(name)
    if not spec.extreme:
        pytest.skip(f"{name} registers no extreme batches")
    failures = []
    for label, make in spec.extreme.items():
        acc = feed(spec.make(), [nonempty(spec, np.random.default_rng(6))])
        args, kwargs = make(np.random.default_rng(7))

        def count(acc: Any, args: Any = args, kwargs: Any = kwargs) -> Any:
            return acc.update(*args, **kwargs)

        steps: list[tuple[str, Callable[[Any], Any]]] = [
            ("update", count),
            ("update again", count),
            ("merge with itself", lambda acc: acc.merge(acc.copy())),
        ]
        for step, run in steps:
            before = bits(acc)
            try:
                run(acc)
            except ValueError:
                if bits(acc) != before:
                    failures.append(f"{label}, {step}: refused but the state changed")
                continue
            except Exception as error:  # noqa: BLE001
                failures.append(f"{label}, {step}: raised {type(error).__name__}: {error}")
                continue
            try:
                type(acc).from_bytes(acc.to_bytes())
            except ValueError as error:
                failures.append(f"{label}, {step}: accepted, but load refuses the state: {error}")
                break
    assert not failures, "\n".join(failures)


def _int_cells(spec: Kind, batch: Batch) -> Iterator[tuple[str, tuple[int, ...], int]]:
    """(array, cell, delta): the int64 cell each array's count of ``batch`` raises the most."""
    counted = spec.make().update(*batch[0], **batch[1]).state_arrays()
    for name, array in counted.items():
        if array.dtype.kind != "i" or (spec.exact_arrays and name not in spec.exact_arrays):
            continue
        if array.any():
            cell = tuple(int(i) for i in np.unravel_index(int(np.argmax(array)), array.shape))
            yield name, cell, int(array[cell])


def _holding(spec: Kind, array_name: str, cell: tuple[int, ...], value: int) -> Any:
    """An accumulator restored with ``value`` in one cell (zeros elsewhere), or None if the
    restore refuses it."""
    state = spec.make().state_dict()
    arrays = {key: np.zeros(v["shape"], dtype=v["dtype"]) for key, v in state["arrays"].items()}
    arrays[array_name][cell] = value
    try:
        return type(spec.make()).from_state_dict({**state, "arrays": arrays})
    except ValueError:
        return None


def _largest_restorable(spec: Kind, array_name: str, cell: tuple[int, ...]) -> int | None:
    """The largest count one cell can hold in a state that loads (restores may bound totals
    below 2**63)."""
    if _holding(spec, array_name, cell, 1) is None:
        return None
    low, high = 1, 2**63 - 1
    while low < high:
        middle = (low + high + 1) // 2
        if _holding(spec, array_name, cell, middle) is not None:
            low = middle
        else:
            high = middle - 1
    return low


@pytest.mark.parametrize("name", cases("counts_never_wrap"))
def test_no_update_or_merge_takes_a_count_beyond_what_load_accepts(name):
    """A cell one batch short of the largest count a state may hold: counting the batch again,
    or merging it, raises and changes nothing (it would wrap, or make a state load refuses)."""
    spec = kind(name)
    batch = nonempty(spec, np.random.default_rng(8))
    one = spec.make().update(*batch[0], **batch[1])
    checked, failures = 0, []
    for array_name, cell, delta in _int_cells(spec, batch):
        largest = _largest_restorable(spec, array_name, cell)
        if largest is None or largest < delta:
            continue
        checked += 1
        where = f"{array_name}{list(cell)} = {largest - delta + 1:,}"
        for how, add in (
            ("update", lambda acc: acc.update(*batch[0], **batch[1])),
            ("merge", lambda acc: acc.merge(one)),
        ):
            acc = _holding(spec, array_name, cell, largest - delta + 1)
            before = bits(acc)
            try:
                add(acc)
            except ValueError:
                if bits(acc) != before:
                    failures.append(f"{where}, {how}: refused, but the state changed")
                continue
            now = int(acc.state_arrays()[array_name][cell])
            try:
                type(acc).from_bytes(acc.to_bytes())
            except ValueError as error:
                failures.append(
                    f"{where}, {how} + {delta}: accepted, the cell now holds {now:,}, and load "
                    f"refuses the state: {error}"
                )
    if not checked:
        pytest.skip(f"{name} has no int64 count a restore accepts alone")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", cases("restored_totals"))
def test_a_restored_state_whose_int64_total_passes_2_63_is_refused(name):
    """Merge refuses to create such a state (its total no longer fits int64): so must load."""
    spec = kind(name)
    state = spec.make().state_dict()
    checked, failures = 0, []
    for array_name, entry in state["arrays"].items():
        if np.dtype(entry["dtype"]).kind != "i" or int(np.prod(entry["shape"])) < 2:
            continue
        arrays = {key: np.zeros(v["shape"], dtype=v["dtype"]) for key, v in state["arrays"].items()}
        flat = arrays[array_name].reshape(-1)
        flat[0] = flat[-1] = 2**62  # each cell fits; the total is 2**63
        crafted = {**state, "arrays": arrays}
        checked += 1
        cls = type(spec.make())
        for how, load in (
            ("from_state_dict", lambda: cls.from_state_dict(crafted)),  # noqa: B023
            ("from_bytes", lambda: cls.from_bytes(_encode(state, arrays))),  # noqa: B023
        ):
            try:
                load()
            except ValueError:
                continue
            failures.append(f"{how} accepted {array_name} summing to 2**63")
    if not checked:
        pytest.skip(f"{name} has no int64 array of two cells or more")
    assert not failures, "\n".join(failures)


def _encode(state: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    from metricstream import serialization

    return serialization.encode(state["type"], state["format"], state["config"], arrays)


# ============================================================================ threads
def _run_threads(targets: list[Callable[[], None]], watch: Callable[[], None]) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(targets) + 1)

    def wrapped(target: Callable[[], None]) -> None:
        try:
            barrier.wait()
            target()
        except BaseException as error:  # noqa: BLE001 - re-raised below
            errors.append(error)

    threads = [threading.Thread(target=wrapped, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    barrier.wait()
    while any(thread.is_alive() for thread in threads):
        watch()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@pytest.mark.parametrize("name", cases("threads"))
def test_concurrent_updates_lose_nothing_and_views_come_from_one_state(name):
    spec = kind(name)
    rng = np.random.default_rng(9)
    args, kwargs = nonempty(spec, rng)
    bad_args, bad_kwargs = next(iter(spec.invalid.values())).make(rng)
    threads, repeats = 4, 6
    sequential = spec.make()
    expected = [observe(spec, sequential)]
    for _ in range(threads * repeats):
        sequential.update(*args, **kwargs)
        expected.append(observe(spec, sequential))
    acc = spec.make()
    seen: list[dict[str, Any]] = []
    refused: list[int] = []

    def good() -> None:
        for _ in range(repeats):
            acc.update(*args, **kwargs)

    def bad() -> None:
        for _ in range(repeats):
            try:
                acc.update(*bad_args, **bad_kwargs)
            except (ValueError, TypeError):
                refused.append(1)

    def watch() -> None:
        seen.append(observe(spec, acc))
        time.sleep(0.001)  # let the updaters take the GIL between two rounds of views

    _run_threads([good] * threads + [bad], watch)
    assert_same_state(acc, sequential, spec)
    assert len(refused) == repeats
    assert same_views(observe(spec, acc), expected[-1], spec.float_rtol)  # the cache is current
    for views in seen:
        for view, value in views.items():
            assert any(_same_value(value, state[view], spec.float_rtol) for state in expected), (
                f"{view} = {value!r} is the view of no state the updates passed through"
            )


class _Interleave:
    """Make one update land inside a view, at one of the windows of a check-then-act cache:
    right after the view took its snapshot (``_snapshot``), right before it stores a computed
    value in the view cache (``_views``), or right after a derived value was built from a
    snapshot, before it is cached (``_derived``)."""

    POINTS = ("snapshot", "store", "derived")

    def __init__(self, acc: Any, update: Callable[[], None], point: str) -> None:
        self.acc, self.update, self.point, self.fired = acc, update, point, False
        interleave = self
        if point == "snapshot":
            original = acc._snapshot

            def snapshot() -> Any:
                taken = original()
                interleave.fire()
                return taken

            acc._snapshot = snapshot
        elif point == "store":

            class Cache(dict):
                def __setitem__(self, key: Any, value: Any) -> None:
                    interleave.fire()
                    super().__setitem__(key, value)

            acc._views = Cache(acc._views)
        elif hasattr(acc, "_derived"):
            derived = acc._derived

            def derive(key: Any, build: Callable[[Any], Any]) -> Any:
                def built(snapshot: Any) -> Any:
                    value = build(snapshot)
                    interleave.fire()
                    return value

                return derived(key, built)

            acc._derived = derive

    def fire(self) -> None:
        if not self.fired:
            self.fired = True
            self.update()

    def remove(self) -> None:
        for name in ("_snapshot", "_derived"):
            self.acc.__dict__.pop(name, None)
        if type(self.acc._views) is not dict:
            self.acc._views = dict(self.acc._views)


@pytest.mark.parametrize("name", cases("stale_views"))
def test_a_view_never_serves_a_state_older_than_the_last_update(name):
    spec = kind(name)
    args, kwargs = nonempty(spec, np.random.default_rng(10))
    fired, stale = 0, []
    for view_name, view in spec.views.items():
        for point in _Interleave.POINTS:
            acc = spec.make().update(*args, **kwargs)
            hooks = _Interleave(acc, lambda acc=acc: acc.update(*args, **kwargs), point)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    view(acc)
                finally:
                    hooks.remove()
            fired += hooks.fired
            now, fresh = observe(spec, acc)[view_name], observe(spec, acc.copy())[view_name]
            if hooks.fired and not _same_value(now, fresh, spec.float_rtol):
                stale.append(f"{view_name} (update landing at {point}): {now!r}, not {fresh!r}")
    if not fired:  # not an AssertionError: a strict xfail must not swallow it
        raise RuntimeError(
            "no view reached an interleaving point (_snapshot, _views, _derived): update "
            "_Interleave to the base's view caches"
        )
    assert not stale, "\n".join(stale)


@pytest.mark.parametrize("name", cases("view_cache_size"))
def test_repeated_views_do_not_grow_the_view_cache(name):
    """The view cache holds one entry per distinct view of a state, however often it is asked
    (a view whose cache key is new on every call grows it until the next update)."""
    spec = kind(name)
    acc = feed(spec.make(), [nonempty(spec, np.random.default_rng(11))])
    if not isinstance(getattr(acc, "_views", None), dict):  # not an AssertionError: see above
        raise RuntimeError("the view cache is no longer `_views`: update this test to it")
    observe(spec, acc)
    once = len(acc._views)
    for _ in range(20):
        observe(spec, acc)
    assert len(acc._views) == once, (
        f"20 more rounds of the same views, with no update, grew the cache from {once} to "
        f"{len(acc._views)} entries"
    )


# ============================================================================ round trips
def _plain(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str, bytes))


@pytest.mark.parametrize("name", cases("round_trips"))
def test_every_round_trip_gives_the_same_accumulator(name, tmp_path):
    spec = kind(name)
    cls = type(spec.make())
    for i, acc in enumerate(
        (spec.make(), feed(spec.make(), [nonempty(spec, np.random.default_rng(12))]))
    ):
        state = acc.state_dict()
        assert _plain(state) and state["type"] == cls.__name__
        for restored in (
            cls.from_bytes(acc.to_bytes()),
            cls.from_bytes(bytearray(acc.to_bytes())),
            cls.from_bytes(memoryview(acc.to_bytes())),
            cls.load(acc.save(tmp_path / f"{i}.msacc")),
            cls.from_state_dict(state),
            cls.from_state_dict(pickle.loads(pickle.dumps(state))),
            pickle.loads(pickle.dumps(acc)),
            copy.deepcopy(acc),
        ):
            assert type(restored) is cls and restored == acc and same_bits(restored, acc)
            assert same_views(observe(spec, restored), observe(spec, acc), 0.0)
        assert cls.from_state_dict(state).state_dict() == state
    foreign = _Other() if cls is not _Other else ConfusionAccumulator(2)
    with pytest.raises(
        ValueError, match=rf"holds an? {type(foreign).__name__}, not an? {cls.__name__}"
    ):
        cls.from_bytes(foreign.to_bytes())
    with pytest.raises(ValueError, match=rf"holds an? {cls.__name__}, not an? _Other"):
        _Other.from_bytes(acc.to_bytes())


@pytest.mark.parametrize("name", cases("torch_checkpoint"))
def test_state_dict_through_torch_save_and_default_load(name, tmp_path):
    torch = pytest.importorskip("torch", reason='needs PyTorch: pip install "metricstream[torch]"')
    spec = kind(name)
    acc = feed(spec.make(), [nonempty(spec, np.random.default_rng(13))])
    group = filled_group(name, np.random.default_rng(13))
    path = tmp_path / "checkpoint.pt"
    torch.save({"metric": acc.state_dict(), "group": group.state_dict(), "epoch": 3}, path)
    loaded = torch.load(path)  # weights_only=True: the default
    assert type(acc).from_state_dict(loaded["metric"]) == acc
    assert AccumulatorGroup.from_state_dict(loaded["group"]) == group


# ============================================================================ groups
class ConformanceTripwire(Accumulator):
    """A group member that accepts every batch when preparing it and refuses it when counting:
    the members counted before it must be undone."""

    def __init__(self) -> None:
        super().__init__({"calls": ((1,), np.int64)})

    def config(self) -> dict[str, Any]:
        return {}

    def _prepare(self, y_true: Any, y_pred: Any = None, weights: Any = None) -> None:
        return None

    def _count(self, arrays: dict[str, np.ndarray], batch: None) -> None:
        raise ValueError("the tripwire refuses every batch")


def _group_batch(spec: Kind, rng: np.random.Generator) -> Batch:
    return nonempty(spec, rng, spec.batch_for_group)


def _shadowed(acc: Accumulator) -> None:
    # Types are registered by class name: another class of the same name (a docs example run in
    # this process, say) takes the name, and groups restore that class instead.
    if accumulator_type(type(acc).__name__) is not type(acc):
        pytest.xfail(f"another class named {type(acc).__name__} was defined in this process")


@pytest.mark.parametrize("name", cases("groups"))
def test_a_group_holding_the_kind_keeps_the_protocol(name, tmp_path):
    spec = kind(name)
    rng = np.random.default_rng(14)
    batches = [_group_batch(spec, rng) for _ in range(3)]
    group = group_of(name)
    _shadowed(group["member"])
    alone = [spec.make(), group["partner"].copy()]
    for args, kwargs in batches:
        try:
            assert group.update(*args, **kwargs) is group
        except TypeError as error:
            if not kwargs:
                raise
            raise AssertionError(f"a group cannot pass {sorted(kwargs)}: {error}") from None
        alone[0].update(*args, **kwargs)
        alone[1].update(*args)  # keywords go to the members that take them
    assert_same_state(group["member"], alone[0], spec)
    assert same_bits(group["partner"], alone[1])
    for restored in (
        AccumulatorGroup.from_bytes(group.to_bytes()),
        AccumulatorGroup.load(group.save(tmp_path / "group.msacc")),
        AccumulatorGroup.from_state_dict(group.state_dict()),
        pickle.loads(pickle.dumps(group)),
        copy.deepcopy(group),
    ):
        assert restored == group
    shards = [feed(group_of(name), [b]) for b in batches]
    assert_same_state(sum(shards)["member"], group["member"], spec)
    # atomic: a batch the kind refuses changes no member, whichever member refuses it
    before = {key: bits(member) for key, member in group.items()}
    label, invalid = next(iter(spec.invalid.items()))
    args, kwargs = invalid.make(rng)
    with pytest.raises((ValueError, TypeError)):
        group.update(*args, **kwargs)
    assert {key: bits(member) for key, member in group.items()} == before, label
    wired = AccumulatorGroup(
        member=group["member"], partner=group["partner"], trip=ConformanceTripwire()
    )
    with pytest.raises(ValueError, match="tripwire"):
        wired.update(*batches[0][0], **batches[0][1])
    assert {key: bits(wired[key]) for key in before} == before, "a member counted was not undone"


def _update_group(group: AccumulatorGroup, batch: Batch) -> None:
    args, kwargs = batch
    group.update(*args, **kwargs)


def filled_group(name: str, rng: np.random.Generator) -> AccumulatorGroup:
    group = group_of(name)
    _update_group(group, _group_batch(kind(name), rng))
    return group


_SAVES = itertools.count()
CHECKPOINTS: list[tuple[str, Callable[[AccumulatorGroup, Path], Any], Callable[[Any], Any]]] = [
    ("to_bytes", lambda g, tmp: g.to_bytes(), AccumulatorGroup.from_bytes),
    ("state_dict", lambda g, tmp: g.state_dict(), AccumulatorGroup.from_state_dict),
    ("save", lambda g, tmp: g.save(tmp / f"group-{next(_SAVES)}.msacc"), AccumulatorGroup.load),
]


@pytest.mark.parametrize("name", cases("group_checkpoints"))
def test_a_group_checkpoint_is_one_state_while_updates_land(name, tmp_path):
    """A checkpoint of a group that another thread updates holds every member before an
    update, or every member after it: forced where a checkpoint reads member after member,
    then with two updating threads."""
    spec = kind(name)
    batch = _group_batch(spec, np.random.default_rng(15))
    before = filled_group(name, np.random.default_rng(15))
    _shadowed(before["member"])
    states = [before.copy()]
    for _ in range(20):
        states.append(states[-1].copy())
        _update_group(states[-1], batch)
    for how, checkpoint, restore in CHECKPOINTS:
        group = before.copy()
        first = group["member"]
        reads = first.state_arrays
        landed: list[threading.Thread] = []

        def read_then_let_an_update_in(reads=reads, group=group, landed=landed):
            taken = reads()
            if not landed:
                landed.append(threading.Thread(target=_update_group, args=(group, batch)))
                landed[0].start()
                # A checkpoint holding the members' locks makes the update wait: then go on at
                # once; otherwise let it land before the next member is read.
                if not any(member._lock.locked() for member in group.values()):
                    landed[0].join(timeout=10)
            return taken

        first.state_arrays = read_then_let_an_update_in
        try:
            saved = checkpoint(group, tmp_path)
        finally:
            del first.state_arrays
            for thread in landed:
                thread.join()
        if landed:  # the checkpoint read the members one by one: an update came in between
            assert _same_group(group, states[1], spec)
            restored = restore(saved)
            assert any(_same_group(restored, state, spec) for state in states[:2]), (
                f"{how}: the checkpoint holds members of different updates"
            )
        # the same with real threads
        group = before.copy()
        saved_list: list[Any] = []

        def feed_group(group=group) -> None:
            for _ in range(10):
                _update_group(group, batch)

        def take(checkpoint=checkpoint, group=group, saved_list=saved_list) -> None:
            saved_list.append(checkpoint(group, tmp_path))

        _run_threads([feed_group] * 2, take)
        for saved in saved_list[:20]:
            restored = restore(saved)
            assert any(_same_group(restored, state, spec) for state in states), (
                f"{how}: a checkpoint taken during updates holds members of different updates"
            )


def _same_group(a: AccumulatorGroup, b: AccumulatorGroup, spec: Kind) -> bool:
    try:
        assert_same_state(a["member"], b["member"], spec)
    except AssertionError:
        return False
    return same_bits(a["partner"], b["partner"])


# ============================================================================ hostile blobs
PREFIX = struct.Struct("<8sIIQ")


def _parts(blob: bytes) -> tuple[bytes, dict[str, Any], bytes]:
    magic, version, header_size, payload_size = PREFIX.unpack_from(blob)
    assert version == 2
    header = json.loads(blob[PREFIX.size : PREFIX.size + header_size])
    payload = blob[PREFIX.size + header_size : PREFIX.size + header_size + payload_size]
    return magic, header, payload


def _assemble(magic: bytes, header_bytes: bytes, payload: bytes) -> bytes:
    body = PREFIX.pack(magic, 2, len(header_bytes), len(payload)) + header_bytes + payload
    return body + struct.pack("<I", zlib.crc32(body))


def _rechecksum(data: bytearray) -> bytes:
    """Fix the payload length and the checksum, so that the parser sees the mutation."""
    if len(data) >= PREFIX.size + 4:
        _, version, header_size, _ = PREFIX.unpack_from(data)
        if version == 2 and PREFIX.size + header_size + 4 <= len(data):
            struct.pack_into("<Q", data, 16, len(data) - PREFIX.size - header_size - 4)
    body = bytes(data[:-4])
    return body + struct.pack("<I", zlib.crc32(body))


HOSTILE_VALUES: list[Any] = [
    None, True, -1, 0, 2**64, 2**63, 1e308, float("inf"), float("nan"), 1.5, "x", [], [1, 2],
    {}, {"a": 1}, [[1]], "<i8", [2**40, 2**40],
]  # fmt: skip
HOSTILE_FEW: list[Any] = [None, -1, 2**64, 1e308, "x", [1, 2], {}]


def _header_paths(header: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    yield ("type",)
    yield ("format",)
    yield ("config",)
    for key in header["config"]:
        yield ("config", key)
    for i, entry in enumerate(header["arrays"]):
        yield ("arrays", i, 1)
        yield ("arrays", i, 2)
        for j in range(len(entry[2])):
            yield ("arrays", i, 2, j)


def _substituted(header: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(header)
    target = changed
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return changed


def _load_outcome(reader: Any, data: bytes) -> str | None:
    """None when ``reader.from_bytes`` behaved; otherwise what went wrong."""
    start = time.monotonic()
    try:
        restored = reader.from_bytes(data)
    except ValueError:
        outcome = None
    except Exception as error:  # noqa: BLE001 - the wrong type is the finding
        outcome = f"{type(error).__name__}: {error}"[:200]
    else:
        try:
            again = type(restored).from_bytes(restored.to_bytes())
            outcome = None if again == restored else "loaded a state that does not round-trip"
        except Exception as error:  # noqa: BLE001
            outcome = f"loaded a state that does not reload: {type(error).__name__}: {error}"
    if time.monotonic() - start > 5:
        outcome = f"took {time.monotonic() - start:.1f} s"
    return outcome


def check_header_values(name: str, values: list[Any]) -> None:
    spec = kind(name)
    acc = feed(spec.make(), [nonempty(spec, np.random.default_rng(16))])
    magic, header, payload = _parts(acc.to_bytes())
    failures: dict[str, str] = {}
    for path in _header_paths(header):
        for value in values:
            crafted = _substituted(header, path, value)
            data = _assemble(magic, json.dumps(crafted).encode(), payload)
            outcome = _load_outcome(type(acc), data)
            if outcome is not None:
                failures.setdefault(outcome.split(":")[0], f"{list(path)} = {value!r}: {outcome}")
    assert not failures, "\n".join(failures.values())


@pytest.mark.parametrize("name", cases("header_values"))
def test_hostile_header_values_raise_value_error(name):
    """A blob with a valid checksum and any value anywhere in its header: ValueError only."""
    check_header_values(name, HOSTILE_FEW)


@pytest.mark.parametrize("name", cases("header_values_many", slow=True))
def test_hostile_header_values_raise_value_error_many(name):
    check_header_values(name, HOSTILE_VALUES)


def _mutate(rng: np.random.Generator, blob: bytes) -> bytearray:
    data = bytearray(blob)
    for _ in range(int(rng.integers(1, 4))):
        what = int(rng.integers(0, 5))
        at = int(rng.integers(0, max(1, len(data))))
        if what == 0 and data:  # flip bits of a byte
            data[at % len(data)] ^= int(rng.integers(1, 256))
        elif what == 1:  # truncate
            del data[at:]
        elif what == 2 and len(data) > 1:  # delete a few bytes
            del data[at : at + int(rng.integers(1, 9))]
        elif what == 3:  # insert a few bytes
            data[at:at] = rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
        else:  # an interesting integer
            value = [0, 1, 2**31, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 1][int(rng.integers(0, 7))]
            data[at : at + 8] = value.to_bytes(8, "little")
    return data


def check_fuzzed_blobs(name: str, count: int) -> None:
    spec = kind(name)
    rng = np.random.default_rng(17)
    acc = feed(spec.make(), [nonempty(spec, rng)])
    group = filled_group(name, rng)
    blobs: list[tuple[Any, bytes]] = [
        (type(acc), acc.to_bytes()),
        (AccumulatorGroup, group.to_bytes()),
    ]
    failures: dict[str, str] = {}
    for i in range(count):
        reader, blob = blobs[i % 2]
        mutated = _mutate(rng, blob)
        for data in (bytes(mutated), _rechecksum(mutated)):
            outcome = _load_outcome(reader, data)
            if outcome is not None:
                failures.setdefault(outcome.split(":")[0], f"{reader.__name__}: {outcome}")
    assert not failures, "\n".join(failures.values())


@pytest.mark.parametrize("name", cases("fuzzed_blobs"))
def test_fuzzed_blobs_raise_value_error(name):
    """Random byte flips, truncations, insertions of ``to_bytes`` output (half re-checksummed)."""
    check_fuzzed_blobs(name, 20)


@pytest.mark.parametrize("name", cases("fuzzed_blobs_many", slow=True))
def test_fuzzed_blobs_raise_value_error_many(name):
    check_fuzzed_blobs(name, 400)


# ============================================================================ before any update
# views given an explicit zero_division (to keep warnings out of the other checks)
EXPLICIT_ZERO_DIVISION = {"f1_macro", "f1_micro", "f1_samples"}
STATE_VIEWS = {"num_samples", "num_images", "num_pixels", "matrix", "counts", "total", "replicates"}


def _empty_rule(spec: Kind) -> set[str]:
    """How the metric views of an empty accumulator answer: value, NaN, 0.0 or an exception,
    and whether they warn."""
    acc = spec.make()
    rules = set()
    for name, view in spec.views.items():
        if name in STATE_VIEWS or name in EXPLICIT_ZERO_DIVISION:
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                value = view(acc)
            except Exception as error:  # noqa: BLE001
                rule = f"raises {type(error).__name__}"
            else:
                scalar = value[0] if isinstance(value, tuple) else value
                rule = "NaN" if isinstance(scalar, float) and math.isnan(scalar) else repr(scalar)
        warned = sorted({w.category.__name__ for w in caught})
        rules.add(rule + (f" + {', '.join(warned)}" if warned else ""))
    return rules


# The documented rule (docs/state.md): a metric of an accumulator that has counted nothing is
# 0/0, answered by the metric's `zero_division` where it has one (default "warn": 0.0 and an
# UndefinedMetricWarning, as scikit-learn) and NaN with the warning otherwise; never an exception,
# never a silent value.
EMPTY_VIEW_ANSWERS = {"0.0 + UndefinedMetricWarning", "NaN + UndefinedMetricWarning"}


@pytest.mark.parametrize("name", cases("empty_rule"))
def test_views_before_any_update_follow_one_rule(name):
    rules = _empty_rule(kind(name))
    assert rules <= EMPTY_VIEW_ANSWERS, f"{name}: {sorted(rules)}"


@pytest.mark.parametrize("name", cases("empty_views"))
def test_views_before_any_update_raise_nothing_unexpected(name):
    spec = kind(name)
    acc = spec.make()
    for view_name, outcome in observe(spec, acc).items():
        if view_name in STATE_VIEWS and view_name != "replicates":
            assert outcome[0] == "value" and not np.any(outcome[1]), view_name
    assert same_views(observe(spec, acc), observe(spec, spec.make()), 0.0)


# ============================================================================ two gloo ranks
WORLD = 2
SYNC_BATCHES = 6


def _sync_batches(spec: Kind) -> list[Batch]:
    rng = np.random.default_rng(18)
    return [spec.make_batch(rng) for _ in range(SYNC_BATCHES)]


def _group_sync_batches(spec: Kind) -> list[Batch] | None:
    rng = np.random.default_rng(19)
    batches = [spec.batch_for_group(rng) for _ in range(SYNC_BATCHES)]
    return None if any(kwargs for _, kwargs in batches) else batches


def sync_worker(rank: int, port: int, out: str) -> None:
    """One rank: every kind's shard, summed with all_reduce; the results written as blobs."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from metricstream.distributed import all_reduce

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=60),
    )
    results: dict[str, Any] = {}
    for name in NAMES:
        result: dict[str, Any] = {}
        try:
            spec = kind(name)
            acc = feed(spec.make(), _sync_batches(spec)[rank::WORLD])
            assert all_reduce(acc) is acc
            result["single"] = acc.to_bytes().hex()
            copied = all_reduce(feed(spec.make(), _sync_batches(spec)[rank::WORLD]), inplace=False)
            result["copy"] = copied.to_bytes().hex()
            batches = _group_sync_batches(spec)
            if batches is not None:
                group = feed(group_of(name), batches[rank::WORLD])
                all_reduce(group)
                result["group"] = group.to_bytes().hex()
        except Exception as error:  # noqa: BLE001 - reported by the test of this kind
            result["error"] = f"{type(error).__name__}: {error}"
        results[name] = result
    Path(out, f"rank{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def synced(tmp_path_factory) -> list[dict[str, Any]]:
    pytest.importorskip("torch", reason='needs PyTorch: pip install "metricstream[torch]"')
    out = tmp_path_factory.mktemp("conformance-gloo")
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    for _attempt in range(3):  # a free port can be taken between probing and binding
        port = _free_port()
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", str(rank), str(port), str(out)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for rank in range(WORLD)
        ]
        outputs = []
        for proc in procs:
            try:
                outputs.append(proc.communicate(timeout=300)[0])
            except subprocess.TimeoutExpired:
                for other in procs:
                    other.kill()
                outputs.append(proc.communicate()[0] + "\n[killed after 300 s]")
        codes = [proc.returncode for proc in procs]
        if not any(codes) or "address already in use" not in "".join(outputs).lower():
            break
    assert not any(codes), "\n\n".join(
        f"rank {r}: {text[-3000:]}" for r, text in enumerate(outputs)
    )
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(WORLD)]


@pytest.mark.parametrize("name", cases("sync", slow=True))
def test_two_gloo_ranks_sum_to_one_process(synced, name):
    spec = kind(name)
    cls = type(spec.make())
    expected = feed(spec.make(), _sync_batches(spec))
    for rank in synced:
        result = rank[name]
        assert "error" not in result, result.get("error")
        for key in ("single", "copy"):
            assert_same_state(cls.from_bytes(bytes.fromhex(result[key])), expected, spec)
    assert synced[0][name]["single"] == synced[1][name]["single"]  # bit-identical on every rank
    batches = _group_sync_batches(spec)
    if batches is not None:
        whole = feed(group_of(name), batches)
        for rank in synced:
            group = AccumulatorGroup.from_bytes(bytes.fromhex(rank[name]["group"]))
            assert_same_state(group["member"], whole["member"], spec)
            assert_same_state(group["partner"], whole["partner"], spec, exact_only=False)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        sync_worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"usage: {sys.argv[0]} --worker RANK PORT OUT_DIR (started by pytest)")
