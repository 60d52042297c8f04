"""metricstream.distributed and the sync engine: summing accumulators and groups across ranks.

Two layers of tests:

* in process: ``_sync.synchronize`` driven by a fake world of N ranks (threads exchanging through
  a barrier, :class:`tests.sync_fixtures.FakeWorld`), for 2 to 10 ranks, every mismatch, wrong
  objects, the overflow pre-check and concurrent updates; each rank's collectives are counted;
* real processes (slow): 2 gloo ranks (this file run as a script, ``--worker``) that rendezvous
  over 127.0.0.1, each counting its shard of one dataset; every scenario's result is compared
  with one process counting all the data, and each rank logs every ``torch.distributed``
  collective it issues (name, element count, reduce op), so the tests pin "one check plus one
  ``all_reduce`` per state dtype". A second, short session (30 s process-group timeout) runs the
  hostile scenarios: a rank passing a non-accumulator, overflowing sums, mismatched groups.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

if __package__ in (None, ""):  # run as a script (--worker): make `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metricstream import Accumulator, AccumulatorGroup, ConfusionAccumulator  # noqa: E402
from tests.sync_fixtures import (  # noqa: E402
    GROUP_FLOAT_SIZE,
    GROUP_INT_SIZE,
    NAMES,
    VOID,
    FakeWorld,
    K,
    LabelHistogram,
    WeightTotals,
    feed,
    group_data,
    make_group,
    states,
)

WORLD = 2
BIG_K = 1000
TIMEOUT = 300  # seconds for the whole 2-rank session, far above the ~10 s it needs
CHECK = 6 * WORLD  # the check all-gathers 6 int64 values per rank

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "gather",
    "scatter",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "send",
    "recv",
)

MISMATCHES = {
    # name: (rank-1 configuration change, expected message fragment)
    "num_classes": (
        {"num_classes": K + 1, "class_names": [*NAMES, "extra"]},
        r"`num_classes` is 7 on rank 0 and 8 on rank 1\.",
    ),
    "class_names": (
        {"class_names": NAMES[::-1]},
        r"`class_names\[0\]` is 'class-0' on rank 0 and 'class-6' on rank 1\.",
    ),
    "ignore_index-None": (
        {"ignore_index": None},
        r"`ignore_index` is 255 on rank 0 and None on rank 1\.",
    ),
    "ignore_index-value": (
        {"ignore_index": 254},
        r"`ignore_index` is 255 on rank 0 and 254 on rank 1\.",
    ),
    "weighted": ({"weighted": True}, r"`weighted` is False on rank 0 and True on rank 1\."),
    "class_axis": ({"class_axis": -1}, r"`class_axis` is 1 on rank 0 and -1 on rank 1\."),
}

GROUP_MISMATCHES = {
    # name: (rank 1's group, expected message fragment)
    "member-config": (
        lambda: make_group(weighted=ConfusionAccumulator(K, ignore_index=254, weighted=True)),
        r"member 'weighted': `ignore_index` is 255 on rank 0 and 254 on rank 1\.",
    ),
    "member-type": (
        lambda: make_group(labels=WeightTotals(K)),
        r"member 'labels': the accumulator type is LabelHistogram on rank 0 and "
        r"WeightTotals on rank 1\.",
    ),
    "member-names": (
        lambda: AccumulatorGroup(
            {
                ("renamed" if name == "wide" else name): member
                for name, member in make_group().items()
            }
        ),
        r"the ranks hold different accumulators: a group of \['counts', "
        r"'weighted', 'wide', .* on rank 0 and a group of \['counts', 'weighted', "
        r"'renamed', .* on rank 1\.",
    ),
    "group-vs-single": (
        lambda: ConfusionAccumulator(K, NAMES, VOID),
        r"a group of \['counts', .*\] on rank 0 and a single "
        r"ConfusionAccumulator on rank 1\.",
    ),
}


def dataset(n: int = 6000, seed: int = 0) -> dict[str, np.ndarray]:
    """The global data every rank shards (rank r takes every WORLD-th sample from r)."""
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, K, size=n)
    y_true[rng.random(n) < 0.05] = VOID  # ignored samples
    logits = rng.normal(size=(n, K)) + 1.5 * np.eye(K)[np.minimum(y_true, K - 1)]
    return {
        "y_true": y_true,
        "y_pred": logits.argmax(axis=1),
        "logits": logits,
        "weights": rng.random(n) * 3,
        "big_true": rng.integers(0, BIG_K, size=200_000),
        "big_pred": rng.integers(0, BIG_K, size=200_000),
    }


def config(**changes) -> dict:
    base = {"num_classes": K, "class_names": NAMES, "ignore_index": VOID}
    base.update(changes)
    return base


# ============================================================================ in process
def _group_world(size: int, **kwargs) -> tuple[FakeWorld, list[AccumulatorGroup], AccumulatorGroup]:
    data = group_data()
    groups = [feed(make_group(), data, slice(rank, None, size)) for rank in range(size)]
    return FakeWorld(size, **kwargs), groups, feed(make_group(), data, slice(None))


def _assert_same_state(got, expected) -> None:
    mine, theirs = states(got), states(expected)
    assert mine.keys() == theirs.keys()
    for key in mine:
        # Whole-number weights: the float sums are exact in any order, so compare exactly.
        np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)


@pytest.mark.parametrize("size", [2, 3, 4, 7])
@pytest.mark.parametrize("inplace", [True, False], ids=["inplace", "copy"])
def test_group_sync_equals_one_process_counting_everything(size, inplace):
    world, groups, expected = _group_world(size)
    before = [states(group) for group in groups]
    results = world.run(groups, inplace=inplace)
    for rank, result in enumerate(results):
        assert isinstance(result, AccumulatorGroup), result
        assert result == expected
        _assert_same_state(result, expected)
        assert (result is groups[rank]) is inplace
        if not inplace:
            assert states(groups[rank]) == before[rank]  # the local state was left as it was
            assert all(result[name] is not groups[rank][name] for name in result)
        # One check, then one SUM per state dtype, whatever the number of members.
        assert world.calls[rank] == [
            ("gather", 6, "<i8"),
            ("sum", GROUP_INT_SIZE, "<i8"),
            ("sum", GROUP_FLOAT_SIZE, "<f8"),
        ]


def test_group_sync_when_the_engine_returns_a_new_buffer():
    world, groups, expected = _group_world(2, copy_result=True)
    for result in world.run(groups):
        assert result == expected


@pytest.mark.parametrize("copy_result", [False, True], ids=["in-place", "new-buffer"])
def test_single_accumulator_is_summed_without_packing(copy_result):
    data = dataset()
    shards = [{key: data[key][r::3].copy() for key in ("y_true", "y_pred")} for r in range(3)]
    accs = [ConfusionAccumulator(**config()).update(s["y_true"], s["y_pred"]) for s in shards]
    expected = ConfusionAccumulator(**config()).update(data["y_true"], data["y_pred"])
    world = FakeWorld(3, copy_result=copy_result)
    for rank, result in enumerate(world.run(accs)):
        assert result is accs[rank] and result == expected
        assert world.calls[rank] == [("gather", 6, "<i8"), ("sum", K * K, "<i8")]


def test_float_only_and_empty_group():
    accs = [
        ConfusionAccumulator(3, weighted=True).update([0, 1], [1, 1], [0.5, 0.25]) for _ in range(2)
    ]
    world = FakeWorld(2)
    for result in world.run(accs):
        assert result.matrix[0, 1] == 1.0 and result.matrix[1, 1] == 0.5
        assert result.num_samples == 1.5
    assert world.calls[0] == [("gather", 6, "<i8"), ("sum", 9, "<f8")]
    world = FakeWorld(2)
    assert all(r == AccumulatorGroup() for r in world.run([AccumulatorGroup(), AccumulatorGroup()]))
    assert world.calls == [[("gather", 6, "<i8")]] * 2  # nothing to sum


def test_uneven_shards_and_a_rank_that_saw_nothing():
    data = group_data()
    groups = [feed(make_group(), data, slice(None)), make_group()]
    expected = feed(make_group(), data, slice(None))
    for result in FakeWorld(2).run(groups):
        assert result == expected


def _mismatch_messages(targets) -> list[str]:
    world = FakeWorld(len(targets))
    before = [states(t) for t in targets]
    results = world.run(targets)
    assert all(isinstance(r, ValueError) for r in results), results
    for rank, target in enumerate(targets):
        assert states(target) == before[rank]  # nothing was summed
        assert all(call[0] == "gather" for call in world.calls[rank])  # no data collective
    messages = [str(r) for r in results]
    assert len(set(messages)) == 1, messages  # the same error on every rank
    return messages


@pytest.mark.parametrize("name", MISMATCHES)
def test_mismatched_accumulators_raise_the_same_error_on_every_rank(name):
    change, fragment = MISMATCHES[name]
    message = _mismatch_messages(
        [ConfusionAccumulator(**config()), ConfusionAccumulator(**config(**change))]
    )[0]
    assert "cannot all_reduce accumulators configured differently across the 2 ranks" in message
    assert re.search(fragment, message), message


@pytest.mark.parametrize("name", GROUP_MISMATCHES)
def test_mismatched_groups_name_the_member_the_field_and_each_ranks_value(name):
    other, fragment = GROUP_MISMATCHES[name]
    message = _mismatch_messages([make_group(), other()])[0]
    assert re.search(fragment, message), message
    assert message.endswith("nothing was summed.")


@pytest.mark.parametrize(
    "accs, message",
    [
        (
            [
                ConfusionAccumulator(7),
                ConfusionAccumulator(8),
                ConfusionAccumulator(7),
                ConfusionAccumulator(7),
            ],
            "`num_classes` is 7 on ranks 0, 2, 3 and 8 on rank 1.",
        ),
        (
            [ConfusionAccumulator(3), ConfusionAccumulator(4), ConfusionAccumulator(5)],
            "`num_classes` is 3 on rank 0; 4 on rank 1; 5 on rank 2.",
        ),
        (
            [ConfusionAccumulator(2, ignore_index=-1), ConfusionAccumulator(2)],
            "`ignore_index` is -1 on rank 0 and None on rank 1.",
        ),
        (
            [ConfusionAccumulator(2, class_names=["a", "b"]), ConfusionAccumulator(2)],
            "`class_names` is ['a', 'b'] on rank 0 and None on rank 1.",
        ),
        (
            [ConfusionAccumulator(2, threshold=0.5), ConfusionAccumulator(2, threshold=0.25)],
            "`threshold` is 0.5 on rank 0 and 0.25 on rank 1.",
        ),
        (
            [ConfusionAccumulator(3)] * 9 + [ConfusionAccumulator(4)],
            "`num_classes` is 3 on ranks 0, 1, 2, 3, 4, 5, 6, 7, ... and 4 on rank 9.",
        ),
    ],
    ids=["four-ranks", "three-values", "ignore-index", "names-vs-none", "threshold", "ten-ranks"],
)
def test_mismatch_messages_name_the_ranks(accs, message):
    accs = [acc.copy() for acc in accs]  # one object per rank
    text = _mismatch_messages(accs)[0]
    assert f"configured differently across the {len(accs)} ranks: {message}" in text


def test_protocol_mismatch_is_reported_first():
    world = FakeWorld(2)

    def older_on_rank_1(rank, vector):
        if rank == 1:
            vector[0] -= 1
        return vector

    world.tamper = older_on_rank_1
    results = world.run([ConfusionAccumulator(3), ConfusionAccumulator(4)])
    from metricstream._sync import SYNC_PROTOCOL

    for result in results:
        assert isinstance(result, ValueError)
        assert (
            f"different sync protocols: {SYNC_PROTOCOL} on rank 0 and {SYNC_PROTOCOL - 1} on rank 1"
        ) in str(result)


@pytest.mark.parametrize(
    "bad",
    [np.zeros((3, 3), dtype=np.int64), {"matrix": [[1]]}, None],
    ids=["ndarray", "dict", "None"],
)
def test_a_rank_passing_a_non_accumulator_makes_every_rank_raise(bad):
    acc = ConfusionAccumulator(3).update([0, 1], [0, 1])
    before = acc.state_arrays()
    world = FakeWorld(3, timeout=20)
    results = world.run([acc, bad, acc.copy()])
    assert isinstance(results[1], TypeError)
    assert re.search(
        r"`acc` must be an accumulator or an AccumulatorGroup, got " + type(bad).__name__,
        str(results[1]),
    )
    for rank in (0, 2):
        assert isinstance(results[rank], ValueError), results[rank]
        assert "rank(s) 1 could not take part" in str(results[rank])
    assert all(calls == [("gather", 6, "<i8")] for calls in world.calls)
    np.testing.assert_array_equal(acc.state_arrays()["matrix"], before["matrix"])


def test_a_state_that_cannot_be_described_still_joins_the_check():
    class Unjsonable(LabelHistogram):
        def config(self):
            return {"size": self._size, "ignore_index": object()}

    world = FakeWorld(2, timeout=20)
    results = world.run([LabelHistogram(3), Unjsonable(3)])
    assert isinstance(results[1], TypeError) and "JSON" in str(results[1])
    assert isinstance(results[0], ValueError) and "rank(s) 1 could not take part" in str(results[0])


def test_a_copy_that_fails_on_one_rank_still_joins_the_check():
    class NoRoom(LabelHistogram):
        def copy(self):
            raise MemoryError("no room for the copy")

    world = FakeWorld(2, timeout=20)
    results = world.run([LabelHistogram(3), NoRoom(3)], inplace=False)
    assert isinstance(results[1], MemoryError)
    assert isinstance(results[0], ValueError) and "rank(s) 1 could not take part" in str(results[0])
    assert world.calls == [[("gather", 6, "<i8")]] * 2


@pytest.mark.parametrize("inplace", [True, False], ids=["inplace", "copy"])
def test_int64_overflow_is_refused_on_every_rank_before_summing(inplace):
    half = ConfusionAccumulator.from_matrix(np.array([[2**62, 0], [0, 1]]))
    groups = [AccumulatorGroup(c=half.copy(), h=LabelHistogram(2)) for _ in range(2)]
    world = FakeWorld(2)
    results = world.run(groups, inplace=inplace)
    for result in results:
        assert isinstance(result, ValueError)
        assert re.search(
            r"cannot all_reduce: the summed int64 counts could pass 2\*\*63 - 1 \(the "
            r"ranks' largest totals add up to 92233720368547758\d\d\); nothing was "
            r"summed\.",
            str(result),
        )
    for group in groups:
        assert group["c"] == half
    assert world.calls == [[("gather", 6, "<i8")]] * 2
    # Just below the limit is fine (the limit of merge: totals below 2**63 - 2**20, which keeps
    # their float64 rounding inside int64).
    below = ConfusionAccumulator.from_matrix(np.array([[2**62 - 2**21, 0], [0, 0]]))
    fine = FakeWorld(2).run([below.copy(), ConfusionAccumulator.from_matrix([[2**62, 0], [0, 0]])])
    assert fine[0].matrix[0, 0] == 2**63 - 2**21 == fine[1].matrix[0, 0]


def test_float64_overflow_is_refused_on_every_rank():
    huge = ConfusionAccumulator.from_matrix(np.array([[1e308, 0.0], [0.0, 0.5]]))
    accs = [huge.copy(), huge.copy()]
    results = FakeWorld(2).run(accs)
    for result in results:
        assert isinstance(result, ValueError)
        assert "the summed float64 weights would overflow to infinity" in str(result)
    assert accs[0] == huge


def test_updates_from_another_thread_during_an_inplace_sync_are_not_lost():
    """The lock is held through the collectives: an update waits instead of being overwritten.

    Rank 1 holds an empty accumulator each time, so every sync leaves rank 0's counts as they
    were; an update landing between the read and the write-back would be lost.
    """
    acc = ConfusionAccumulator(3)
    stop = threading.Event()
    updates = [0]

    def updater():
        while not stop.is_set():
            acc.update([0, 1, 2], [0, 1, 2])
            updates[0] += 1

    thread = threading.Thread(target=updater)
    thread.start()
    try:
        for _ in range(30):
            results = FakeWorld(2).run([acc, ConfusionAccumulator(3)])
            assert results[0] is acc
    finally:
        stop.set()
        thread.join()
    assert updates[0] > 0
    np.testing.assert_array_equal(acc.matrix, np.eye(3, dtype=np.int64) * updates[0])


def test_group_updates_during_an_inplace_group_sync_are_not_lost():
    group = make_group()
    data = group_data(n=300)
    stop = threading.Event()
    updates = [0]

    def updater():
        while not stop.is_set():
            group.update(data["y_true"], data["y_pred"], data["weights"])
            updates[0] += 1

    thread = threading.Thread(target=updater)
    thread.start()
    try:
        for _ in range(10):
            assert FakeWorld(2).run([group, make_group()])[0] is group
    finally:
        stop.set()
        thread.join()
    expected = make_group()
    for _ in range(updates[0]):
        expected.update(data["y_true"], data["y_pred"], data["weights"])
    assert group == expected


@settings(max_examples=25, deadline=None)
@given(
    size=st.integers(1, 4),
    cuts=st.lists(st.integers(0, 400), max_size=6),
    seed=st.integers(0, 2**16),
)
def test_any_split_across_any_number_of_ranks_equals_one_process(size, cuts, seed):
    data = group_data(n=400, seed=seed)
    bounds = [0, *sorted(cuts), 400]
    groups = [make_group() for _ in range(size)]
    for i, (start, stop) in enumerate(zip(bounds, bounds[1:], strict=False)):
        feed(groups[i % size], data, slice(start, stop), batch=97)
    expected = feed(make_group(), data, slice(None))
    for result in FakeWorld(size).run(groups):
        assert result == expected


# ---------------------------------------------------------------------------- reductions
class Extremes(Accumulator):
    """The largest value seen per slot (float64, negatives included) and the largest batch
    size (int64), both combined by maximum, beside a count that adds."""

    state_reductions = {"largest": "max", "widest": "max"}

    def __init__(self, size: int = 3) -> None:
        self._size = size
        super().__init__(
            {
                "largest": ((size,), np.float64),
                "widest": ((1,), np.int64),
                "rows": ((1,), np.int64),
            }
        )
        self._arrays["largest"][...] = -np.inf  # the maximum of nothing

    def config(self) -> dict:
        return {"size": self._size}

    def _prepare(self, values) -> np.ndarray:
        return np.asarray(values, dtype=np.float64).reshape(-1, self._size)

    def _count(self, arrays, batch) -> None:
        if len(batch):
            np.maximum(arrays["largest"], batch.max(axis=0), out=arrays["largest"])
        arrays["widest"][0] = max(int(arrays["widest"][0]), len(batch))
        arrays["rows"][0] += len(batch)


def _extremes(seed: int) -> list[Extremes]:
    rng = np.random.default_rng(seed)
    shards = []
    for rank in range(3):
        acc = Extremes()
        for _ in range(rank + 1):
            acc.update(-np.abs(rng.normal(size=(int(rng.integers(1, 9)), 3))) * 10**rank)
        shards.append(acc)
    shards[1]._arrays["largest"][0] = -0.0  # the largest of column 0 on rank 1
    return shards


def _expected_extremes(shards: list[Extremes]) -> dict[str, np.ndarray]:
    arrays = [s.state_arrays() for s in shards]
    return {
        "largest": np.maximum.reduce([a["largest"] for a in arrays]),
        "widest": np.maximum.reduce([a["widest"] for a in arrays]),
        "rows": sum(a["rows"] for a in arrays),
    }


def _assert_arrays(got: Accumulator, expected: dict[str, np.ndarray]) -> None:
    state = got.state_arrays()
    for name, array in expected.items():
        assert state[name].tobytes() == np.asarray(array).tobytes(), name


@pytest.mark.parametrize("seed", range(4))
def test_max_arrays_take_the_largest_value_in_merge_group_merge_and_sync(seed):
    shards = _extremes(seed)
    expected = _expected_extremes(shards)
    _assert_arrays(sum(shards), expected)  # merge
    groups = [AccumulatorGroup(x=s.copy(), c=ConfusionAccumulator(2)) for s in shards]
    _assert_arrays(sum(groups)["x"], expected)  # a group's merge
    world = FakeWorld(3)
    for rank, result in enumerate(world.run([s.copy() for s in shards])):
        _assert_arrays(result, expected)
        # The SUM of the int64 count, then the maxima as int64 keys: an engine without a MAX
        # (this fake world) exchanges them with the check's all-gather.
        assert world.calls[rank] == [("gather", 6, "<i8"), ("sum", 1, "<i8"), ("gather", 4, "<i8")]


def test_max_arrays_use_the_engines_max_when_it_has_one():
    from metricstream import _sync

    shards = _extremes(7)
    world = FakeWorld(3)
    maxima: list[list] = [[] for _ in range(3)]

    def run(rank: int) -> Any:
        def reduce_max(buffer: np.ndarray) -> np.ndarray:
            maxima[rank].append(buffer.copy())
            every = world._exchange(rank, buffer.copy())
            buffer[...] = np.maximum.reduce(every)
            return buffer

        return _sync.synchronize(
            shards[rank],
            gather=world.gather(rank),
            reduce_sum=world.reduce_sum(rank),
            reduce_max=reduce_max,
            engine="all_reduce",
            inplace=False,
        )

    expected = _expected_extremes(shards)
    results: list[Any] = [None] * 3
    threads = [
        threading.Thread(target=lambda r=r: results.__setitem__(r, run(r))) for r in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for rank, result in enumerate(results):
        _assert_arrays(result, expected)
        assert world.calls[rank] == [("gather", 6, "<i8"), ("sum", 1, "<i8")]
        assert len(maxima[rank]) == 1 and maxima[rank][0].dtype == np.int64


def test_regression_maximum_error_is_the_largest_of_the_ranks():
    from metricstream import RegressionAccumulator

    rng = np.random.default_rng(3)
    shards = [
        RegressionAccumulator(2).update(rng.normal(size=(50, 2)), rng.normal(size=(50, 2)) * s)
        for s in (1, 4, 2)
    ]
    expected = shards[0].copy().merge(shards[1]).merge(shards[2])
    world = FakeWorld(3)
    results = world.run([s.copy() for s in shards])
    arrays = shards[0].state_arrays()
    for rank, result in enumerate(results):
        assert result == expected
        np.testing.assert_array_equal(
            result.max_error(multioutput="raw_values"),
            np.maximum.reduce([s.max_error(multioutput="raw_values") for s in shards]),
        )
        assert world.calls[rank] == [
            ("gather", 6, "<i8"),
            ("sum", arrays["moments"].size + arrays["num_samples"].size, "<i8"),
            ("gather", arrays["max_error"].size + arrays["max_parts"].size, "<i8"),
        ]
    group = AccumulatorGroup(r=shards[0].copy()).merge(AccumulatorGroup(r=shards[1].copy()))
    assert group["r"] == shards[0].copy().merge(shards[1])


def test_ranks_combining_an_array_differently_are_refused():
    summed = Extremes()
    summed.state_reductions = {"largest": "max"}  # type: ignore[misc]  # "widest" summed here
    message = _mismatch_messages([Extremes(), summed])[0]
    assert re.search(
        r"the state arrays differ \(.*\[\"widest\", \"<i8\", \[1\], \"max\"\].* on rank 0 and "
        r".*\[\"widest\", \"<i8\", \[1\], \"sum\"\].* on rank 1\)",
        message,
    ), message


def test_state_reductions_are_checked_where_they_are_declared():
    with pytest.raises(TypeError, match=r"Bad.state_reductions: \{'largest': 'min'\}; each "):

        class Bad(Extremes):
            state_reductions = {"largest": "min"}

    class Unknown(Extremes):
        state_reductions = {"largest": "max", "smallest": "max"}

    with pytest.raises(TypeError, match=r"names \['smallest'\], which are not state arrays"):
        Unknown()


# ---------------------------------------------------------------------------- without ranks
def test_requires_an_initialized_process_group():
    pytest.importorskip("torch")
    from metricstream.distributed import all_reduce

    with pytest.raises(ValueError, match=r"torch.distributed is not initialized; call"):
        all_reduce(ConfusionAccumulator(3))


@pytest.mark.parametrize(
    "backend, expected",
    [("gloo", "cpu"), ("mpi", "cpu"), ("cpu:gloo,cuda:nccl", "cpu"), ("nccl", "cuda:0")],
)
def test_device_follows_the_backend(monkeypatch, backend, expected):
    torch = pytest.importorskip("torch")
    from metricstream import distributed

    class FakeDist:
        @staticmethod
        def get_backend(group):
            return backend

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert distributed._choose_device(torch, FakeDist, None, None) == torch.device(expected)
    assert distributed._choose_device(torch, FakeDist, None, "cpu") == torch.device("cpu")


def test_unknown_backend_asks_for_a_device():
    torch = pytest.importorskip("torch")
    from metricstream import distributed

    class FakeDist:
        @staticmethod
        def get_backend(group):
            return "xccl"

    with pytest.raises(ValueError, match=r"pass `device=`"):
        distributed._choose_device(torch, FakeDist, None, None)


# ============================================================================ real ranks (gloo)
def _install_counter(dist, log: list) -> None:
    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is None:
            continue

        def wrapper(*args, _original=original, _name=name, **kwargs):
            tensor = args[0] if args and hasattr(args[0], "numel") else kwargs.get("tensor")
            op = kwargs.get("op", args[1] if len(args) > 1 and _name == "all_reduce" else None)
            log.append(
                [
                    _name,
                    None if tensor is None else int(tensor.numel()),
                    None if op is None else str(op).split(".")[-1],
                ]
            )
            return _original(*args, **kwargs)

        setattr(dist, name, wrapper)


def _init(rank: int, port: int, seconds: int) -> tuple:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=seconds),
    )
    log: list = []
    _install_counter(dist, log)
    return dist, log


def worker(rank: int, port: int, out: str) -> None:
    from metricstream.distributed import all_reduce

    dist, log = _init(rank, port, 120)
    data = dataset()
    shard = slice(rank, None, WORLD)
    results: dict = {}

    def record(name, acc, **extra):
        results[name] = {
            "state": states(acc),
            "calls": list(log),
            "config": acc.state_dict().get("config"),
            **extra,
        }
        del log[:]

    # Labels, copy: the local accumulator stays as it was.
    acc = ConfusionAccumulator(**config()).update(data["y_true"][shard], data["y_pred"][shard])
    local = acc.matrix.copy()
    del log[:]
    synced = all_reduce(acc, inplace=False)
    record(
        "copy",
        synced,
        local_untouched=bool(np.array_equal(acc.matrix, local)),
        distinct=synced is not acc,
    )

    # In place: ``acc`` itself now holds the global counts.
    returned = all_reduce(acc)
    record("inplace", acc, returned_self=returned is acc)

    # Weighted counts from logits (fused argmax), float64.
    acc = ConfusionAccumulator(**config(), weighted=True)
    acc.update(data["y_true"][shard], data["logits"][shard], weights=data["weights"][shard])
    del log[:]
    record("weighted_logits", all_reduce(acc))

    # K = 1000.
    acc = ConfusionAccumulator(BIG_K).update(data["big_true"][shard], data["big_pred"][shard])
    del log[:]
    record("big", all_reduce(acc))

    # Uneven shards: rank 1 saw nothing.
    acc = ConfusionAccumulator(**config())
    if rank == 0:
        acc.update(data["y_true"], data["y_pred"])
    del log[:]
    record("uneven", all_reduce(acc))

    # An explicit process group.
    group = dist.new_group(list(range(WORLD)))
    acc = ConfusionAccumulator(**config()).update(data["y_true"][shard], data["y_pred"][shard])
    del log[:]
    record("subgroup", all_reduce(acc, group=group))

    # A group of six accumulators (int64 and float64 states), in place and as a copy.
    gdata = group_data()
    local_group = feed(make_group(), gdata, shard)
    local_state = states(local_group)
    del log[:]
    synced_group = all_reduce(local_group, inplace=False)
    record(
        "group_copy",
        synced_group,
        local_untouched=states(local_group) == local_state,
        distinct=synced_group is not local_group,
    )
    returned = all_reduce(local_group)
    record("group_inplace", local_group, returned_self=returned is local_group)

    # Mismatched configurations: every rank raises, then the group still works.
    errors = {}
    for name, (change, _) in MISMATCHES.items():
        acc = ConfusionAccumulator(**config(**(change if rank == 1 else {})))
        acc.update(data["y_true"][shard][:10] % K, data["y_pred"][shard][:10])
        before = acc.matrix.copy()
        del log[:]
        try:
            all_reduce(acc)
        except ValueError as error:
            errors[name] = {
                "message": str(error),
                "calls": list(log),
                "unchanged": bool(np.array_equal(acc.matrix, before)),
            }
        else:
            errors[name] = {"message": None, "calls": list(log)}
    results["mismatch"] = errors
    acc = ConfusionAccumulator(**config()).update(data["y_true"][shard], data["y_pred"][shard])
    del log[:]
    record("after_mismatch", all_reduce(acc))

    Path(out, f"rank{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


def hostile_worker(rank: int, port: int, out: str) -> None:
    """Scenarios that hung or wrapped before: every rank must raise, quickly, and go on."""
    from metricstream.distributed import all_reduce

    dist, log = _init(rank, port, 30)  # a hang would end in a gloo timeout error after 30 s
    gdata = group_data()
    shard = slice(rank, None, WORLD)
    results: dict = {}

    def attempt(name, target, **kwargs):
        before = (
            states(target)
            if hasattr(target, "state_arrays") or isinstance(target, AccumulatorGroup)
            else None
        )
        del log[:]
        start = time.monotonic()
        try:
            all_reduce(target, **kwargs)
        except Exception as error:  # noqa: BLE001 - recorded for the test
            outcome = {"error": type(error).__name__, "message": str(error)}
        else:
            outcome = {"error": None, "message": None}
        outcome.update(
            calls=list(log),
            seconds=time.monotonic() - start,
            unchanged=before is None or states(target) == before,
        )
        results[name] = outcome

    good = ConfusionAccumulator(**config()).update(
        gdata["y_true"][shard] % K, gdata["y_pred"][shard]
    )
    attempt("non_accumulator", good if rank == 0 else good.matrix.copy())
    attempt("non_accumulator_group", make_group() if rank == 0 else {"counts": good})
    for name, (other, _) in GROUP_MISMATCHES.items():
        attempt(f"group_{name}", feed(make_group(), gdata, shard) if rank == 0 else other())
    big = np.array([[2**62, 0], [0, 1]])
    attempt(
        "int_overflow",
        AccumulatorGroup(c=ConfusionAccumulator.from_matrix(big), h=LabelHistogram(2)),
    )
    attempt("int_overflow_copy", ConfusionAccumulator.from_matrix(big), inplace=False)
    attempt(
        "float_overflow", ConfusionAccumulator.from_matrix(np.array([[1e308, 0.5], [0.0, 0.0]]))
    )
    # The process group is still in step: a normal group sync works and is right.
    group = feed(make_group(), gdata, shard)
    del log[:]
    all_reduce(group)
    results["after"] = {"state": states(group), "calls": list(log)}
    Path(out, f"rank{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(mode: str, out: Path, timeout: float) -> tuple[list[int], list[str]]:
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, mode, str(rank), str(port), str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(WORLD)
    ]
    deadline = time.monotonic() + timeout
    outputs = []
    for proc in procs:
        try:
            output, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            output, _ = proc.communicate()
            output += f"\n[killed after {timeout} s]"
        outputs.append(output)
    return [proc.returncode for proc in procs], outputs


def _session(tmp_path_factory, mode: str, timeout: float) -> list[dict]:
    pytest.importorskip("torch", reason='needs PyTorch: pip install "metricstream[torch]"')
    out = tmp_path_factory.mktemp("gloo")
    for _attempt in range(3):  # a free port can be taken between probing and binding
        codes, outputs = _launch(mode, out, timeout)
        if not any(codes) or "address already in use" not in "".join(outputs).lower():
            break
    assert not any(codes), "\n\n".join(
        f"rank {rank} exited with {code}:\n{text[-4000:]}"
        for rank, (code, text) in enumerate(zip(codes, outputs, strict=True))
    )
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(WORLD)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    return _session(tmp_path_factory, "--worker", TIMEOUT)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> list[dict]:
    # Far below the 300 s of the main session: every scenario must end on both ranks at once.
    return _session(tmp_path_factory, "--hostile", 150)


def _expected(name: str):
    data = dataset()
    if name == "weighted_logits":
        acc = ConfusionAccumulator(**config(), weighted=True)
        return acc.update(data["y_true"], data["logits"], weights=data["weights"])
    if name == "big":
        return ConfusionAccumulator(BIG_K).update(data["big_true"], data["big_pred"])
    if name.startswith("group"):
        return feed(make_group(), group_data(), slice(None))
    return ConfusionAccumulator(**config()).update(data["y_true"], data["y_pred"])


SCENARIOS = [
    "copy",
    "inplace",
    "weighted_logits",
    "big",
    "uneven",
    "subgroup",
    "after_mismatch",
    "group_copy",
    "group_inplace",
]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_synced_result_equals_one_process_on_all_data(ranks, scenario):
    expected = states(_expected(scenario))
    for rank in ranks:
        synced = rank[scenario]["state"]
        assert synced.keys() == expected.keys()
        for key, values in expected.items():
            if scenario == "weighted_logits":
                # Float sums of two partial sums differ from one sequential sum in the last bits.
                np.testing.assert_allclose(synced[key], values, rtol=1e-12)
            else:  # counts, and float sums of whole-number weights: exact
                np.testing.assert_array_equal(synced[key], values, err_msg=key)
    assert ranks[0][scenario]["state"] == ranks[1][scenario]["state"]  # bit-identical


@pytest.mark.slow
def test_synced_matches_scikit_learn(ranks):
    from sklearn.metrics import confusion_matrix

    data = dataset()
    kept = data["y_true"] != VOID
    expected = confusion_matrix(data["y_true"][kept], data["y_pred"][kept], labels=range(K))
    np.testing.assert_array_equal(ranks[0]["copy"]["state"]["matrix"], expected)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if not s.startswith("group")])
def test_exactly_two_collectives_per_sync(ranks, scenario):
    """One all-gather of the 6-value check (2 ranks: 12 values), one SUM of the K*K counts."""
    k = BIG_K if scenario == "big" else K
    for rank in ranks:
        assert rank[scenario]["calls"] == [
            ["all_gather_single", CHECK, None],
            ["all_reduce", k * k, "SUM"],
        ]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["group_copy", "group_inplace"])
def test_group_of_six_syncs_in_one_check_and_one_sum_per_dtype(ranks, scenario):
    for rank in ranks:
        assert rank[scenario]["calls"] == [
            ["all_gather_single", CHECK, None],
            ["all_reduce", GROUP_INT_SIZE, "SUM"],
            ["all_reduce", GROUP_FLOAT_SIZE, "SUM"],
        ]


@pytest.mark.slow
def test_configuration_travels_with_the_result(ranks):
    for rank in ranks:
        assert rank["copy"]["config"]["class_names"] == NAMES
        assert rank["copy"]["config"]["ignore_index"] == VOID
        assert rank["weighted_logits"]["config"]["weighted"] is True


@pytest.mark.slow
@pytest.mark.parametrize("prefix", ["", "group_"])
def test_copy_leaves_local_state_and_inplace_returns_it(ranks, prefix):
    for rank in ranks:
        assert rank[f"{prefix}copy"]["local_untouched"] is True
        assert rank[f"{prefix}copy"]["distinct"] is True
        assert rank[f"{prefix}inplace"]["returned_self"] is True


@pytest.mark.slow
@pytest.mark.parametrize("name", MISMATCHES)
def test_mismatch_raises_the_same_error_on_every_rank(ranks, name):
    _, fragment = MISMATCHES[name]
    messages = [rank["mismatch"][name]["message"] for rank in ranks]
    assert messages[0] is not None and messages[0] == messages[1]
    assert "cannot all_reduce accumulators configured differently across the 2 ranks" in messages[0]
    assert re.search(fragment, messages[0])
    for rank in ranks:
        calls = rank["mismatch"][name]["calls"]
        # The check, then two all-gathers of the descriptions (lengths, texts); no data moved.
        assert calls[0] == ["all_gather_single", CHECK, None]
        assert [c[0] for c in calls] == ["all_gather_single"] * 3
        assert calls[1][1] == WORLD
        assert rank["mismatch"][name]["unchanged"] is True


@pytest.mark.slow
def test_non_accumulator_on_one_rank_raises_on_both(hostile):
    for name in ("non_accumulator", "non_accumulator_group"):
        zero, one = hostile[0][name], hostile[1][name]
        assert one["error"] == "TypeError"
        assert "`acc` must be an accumulator or an AccumulatorGroup, got" in one["message"]
        assert zero["error"] == "ValueError"
        assert "rank(s) 1 could not take part" in zero["message"]
        for rank in hostile:
            assert rank[name]["calls"] == [["all_gather_single", CHECK, None]]
            assert rank[name]["unchanged"] is True
            assert rank[name]["seconds"] < 30  # did not wait for the process-group timeout


@pytest.mark.slow
@pytest.mark.parametrize("name", GROUP_MISMATCHES)
def test_group_mismatch_names_member_field_and_values_on_every_rank(hostile, name):
    _, fragment = GROUP_MISMATCHES[name]
    outcomes = [rank[f"group_{name}"] for rank in hostile]
    assert outcomes[0]["message"] == outcomes[1]["message"]
    assert all(o["error"] == "ValueError" and o["unchanged"] for o in outcomes)
    assert re.search(fragment, outcomes[0]["message"]), outcomes[0]["message"]
    assert all("all_reduce" not in [c[0] for c in o["calls"]] for o in outcomes)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, fragment",
    [
        ("int_overflow", "the summed int64 counts could pass 2**63 - 1"),
        ("int_overflow_copy", "the summed int64 counts could pass 2**63 - 1"),
        ("float_overflow", "the summed float64 weights would overflow to infinity"),
    ],
)
def test_overflow_is_refused_on_every_rank_before_any_sum(hostile, name, fragment):
    for rank in hostile:
        outcome = rank[name]
        assert outcome["error"] == "ValueError" and fragment in outcome["message"]
        assert outcome["calls"] == [["all_gather_single", CHECK, None]]
        assert outcome["unchanged"] is True


@pytest.mark.slow
def test_ranks_stay_in_step_after_every_refusal(hostile):
    expected = states(feed(make_group(), group_data(), slice(None)))
    for rank in hostile:
        assert rank["after"]["state"] == expected
        assert [c[0] for c in rank["after"]["calls"]] == [
            "all_gather_single",
            "all_reduce",
            "all_reduce",
        ]


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] in ("--worker", "--hostile"):
        run = worker if sys.argv[1] == "--worker" else hostile_worker
        run(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"usage: {sys.argv[0]} --worker|--hostile RANK PORT OUT_DIR (started by pytest)")
