"""What the base gives every family, written once: the view cache (lambdas included, bounded), a
derived cache that cannot go stale, the registry of built-in type names, float sums that never
become a state ``load`` refuses, restored and synced totals that never wrap, group checkpoints
that are one state, and member keyword arguments through a group."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest

from metricstream import (
    Accumulator,
    AccumulatorGroup,
    BootstrapConfusionAccumulator,
    ConfusionAccumulator,
)
from metricstream.base import accumulator_type

from .sync_fixtures import FakeWorld


class Tally(Accumulator):
    """Counts of values in [0, size), and a float64 sum of weights: both dtypes of state."""

    def __init__(self, size: int = 4) -> None:
        self._size = size
        super().__init__({"counts": ((size,), np.int64), "weight": ((1,), np.float64)})

    def config(self) -> dict[str, Any]:
        return {"size": self._size}

    def _prepare(self, y_true: Any, y_pred: Any = None, weights: Any = None) -> Any:
        values = np.asarray(y_true, dtype=np.int64).reshape(-1)
        w = np.ones(values.size) if weights is None else np.asarray(weights, dtype=np.float64)
        return values, w

    def _count(self, arrays: dict[str, np.ndarray], batch: Any) -> None:
        values, w = batch
        arrays["counts"] += np.bincount(values, minlength=self._size)
        with np.errstate(over="ignore"):  # an overflow here is what the base must catch
            arrays["weight"] += w.sum()

    def total(self) -> int:
        return int(self._view(lambda state: int(state["counts"].sum())))

    def scaled(self, factor: int) -> int:
        return int(self._view(lambda state: int(state["counts"].sum()) * factor * self._size))


def test_views_written_as_lambdas_hit_the_cache_and_do_not_grow_it():
    tally = Tally().update([0, 1, 1])
    for _ in range(10_000):
        assert tally.total() == 3
        assert tally.scaled(2) == 24
    assert len(tally._views) == 2  # one entry per distinct view, not one per call
    assert tally.scaled(3) == 36  # a different captured value is a different entry
    tally.update([2])
    assert tally.total() == 4 and tally.scaled(2) == 32  # invalidated by the update


def test_the_view_cache_is_bounded_between_updates():
    tally = Tally().update([0])
    for factor in range(5_000):
        assert tally.scaled(factor) == factor * 4
    assert len(tally._views) <= 256


def test_derived_values_are_tied_to_the_snapshot_they_came_from():
    tally = Tally().update([0, 1])
    calls = []

    def build(state: Any) -> int:
        calls.append(1)
        if len(calls) == 1:
            tally.update([3, 3])  # an update lands while the value is being built
        return int(state["counts"].sum())

    assert tally._derived("total", build) == 2  # built from the snapshot before the update
    assert tally._derived("total", build) == 4  # never the stale 2 for the newer state
    assert tally._derived("total", build) == 4 and len(calls) == 2  # then cached


def test_a_user_class_cannot_take_a_built_in_type_name():
    with pytest.raises(TypeError, match="belongs to metricstream's own .*another name"):

        class ConfusionAccumulator(Accumulator):  # noqa: F811 - the point of the test
            pass

    # the built-in type is still the one states load as
    assert accumulator_type("ConfusionAccumulator").__module__ == (
        "metricstream.confusion.accumulator"
    )


def test_states_of_built_in_types_load_before_their_family_is_imported():
    blob = AccumulatorGroup(scores=ConfusionAccumulator(3).update([0, 1], [0, 2])).to_bytes()
    code = (
        "import sys, metricstream\n"
        "assert 'metricstream.confusion.accumulator' not in sys.modules\n"
        "group = metricstream.AccumulatorGroup.from_bytes(sys.stdin.buffer.read())\n"
        "print(group['scores'].num_samples)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], input=blob, capture_output=True, timeout=300
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "2"


def test_import_metricstream_loads_no_family_and_no_numba():
    code = (
        "import sys, metricstream\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('metricstream'))\n"
        "assert 'numba' not in sys.modules, loaded\n"
        "assert not any(m.split('.')[1] in ('confusion', 'scores', 'multilabel', 'bootstrap')"
        " for m in loaded if '.' in m), loaded\n"
        "assert metricstream.ConfusionAccumulator(2).update([0], [0]).accuracy() == 1.0\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr.decode()


def test_an_update_that_would_make_a_float_sum_infinite_is_refused_and_undone():
    tally = Tally().update([0, 1], weights=[1e308, 1e308 / 2])
    before = tally.state_arrays()
    with pytest.raises(ValueError, match="state 'weight' to infinity or NaN.*nothing was counted"):
        tally.update([2, 3], weights=[1e308, 1e308])
    after = tally.state_arrays()
    assert all(np.array_equal(before[name], after[name]) for name in before)
    assert Tally.from_bytes(tally.to_bytes()) == tally  # the state still loads


def test_a_group_update_that_would_make_a_float_sum_infinite_leaves_every_member():
    group = AccumulatorGroup(tally=Tally(), matrix=ConfusionAccumulator(4, weighted=True))
    group.update([0, 1], [0, 1], [1e308, 1e308 / 2])
    before = AccumulatorGroup.from_bytes(group.to_bytes())
    with pytest.raises(ValueError, match="infinity or NaN"):
        group.update([2, 3], [2, 3], [1e308, 1e308])
    assert group == before


@pytest.mark.parametrize("kind", ["state_dict", "bytes"])
def test_restored_counts_whose_total_passes_int64_are_refused(kind):
    acc = ConfusionAccumulator(2)
    state = acc.state_dict()
    cells = np.array([[2**62, 2**62], [0, 1]], dtype=np.int64)  # each fits; the total does not
    state["arrays"]["matrix"]["data"] = cells.tobytes()
    with pytest.raises(ValueError, match="add up to 2\\*\\*63 or more"):
        if kind == "state_dict":
            ConfusionAccumulator.from_state_dict(state)
        else:
            from metricstream import serialization

            blob = serialization.encode(
                "ConfusionAccumulator", acc.state_format, acc.config(), {"matrix": cells}
            )
            ConfusionAccumulator.from_bytes(blob)


def test_a_sync_whose_summed_total_would_pass_int64_is_refused_on_every_rank():
    ranks = []
    for _ in range(2):
        acc = ConfusionAccumulator(2)
        with acc.exclusive_state() as arrays:  # each rank: cells of 2**61, total 2**62 + 1
            arrays["matrix"][...] = [[2**61, 2**61], [0, 1]]
        ranks.append(acc)
    before = [acc.state_arrays()["matrix"].copy() for acc in ranks]
    results = FakeWorld(2).run(ranks)
    for result in results:
        assert isinstance(result, ValueError), result
        assert "could pass 2**63 - 1" in str(result)
    for acc, matrix in zip(ranks, before, strict=True):
        assert np.array_equal(acc.state_arrays()["matrix"], matrix)  # nothing was summed


def test_group_checkpoints_taken_while_other_threads_update_are_one_state():
    group = AccumulatorGroup(
        a=ConfusionAccumulator(3), b=ConfusionAccumulator(3), c=ConfusionAccumulator(3)
    )
    batch = (np.zeros(100, dtype=np.int64), np.zeros(100, dtype=np.int64))
    stop = threading.Event()

    def updates() -> None:
        while not stop.is_set():
            group.update(*batch)

    workers = [threading.Thread(target=updates) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        for _ in range(200):
            for restored in (
                AccumulatorGroup.from_bytes(group.to_bytes()),
                AccumulatorGroup.from_state_dict(group.state_dict()),
                group.copy(),
            ):
                counts = {restored[name].num_samples for name in "abc"}
                assert len(counts) == 1, counts
    finally:
        stop.set()
        for worker in workers:
            worker.join()


def test_member_keyword_arguments_reach_the_members_that_take_them():
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 3, size=(6, 8))
    y_pred = rng.integers(0, 3, size=(6, 8))
    ids = np.arange(6)
    group = AccumulatorGroup(
        boot=BootstrapConfusionAccumulator(3, n_resamples=20, seed=1),
        plain=ConfusionAccumulator(3),
    )
    group.update(y_true, y_pred, cluster_ids=ids)
    alone = BootstrapConfusionAccumulator(3, n_resamples=20, seed=1)
    alone.update(y_true, y_pred, cluster_ids=ids)
    assert group["boot"] == alone
    assert group["plain"] == ConfusionAccumulator(3).update(y_true, y_pred)
    with pytest.raises(TypeError, match=r"\['cluster_id'\], which no member takes"):
        group.update(y_true, y_pred, cluster_id=ids)


def test_bootstrap_views_never_pair_a_newer_version_with_an_older_matrix(monkeypatch):
    """An update landing while the view's confusion accumulator is being built (forced here)
    must not leave the older matrix cached as the newer state's."""
    acc = BootstrapConfusionAccumulator(2, n_resamples=10, seed=0).update([0, 1], [0, 1])
    original = ConfusionAccumulator.from_matrix.__func__
    landed = []

    def from_matrix(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if not landed:
            landed.append(1)
            acc.update([0, 1], [1, 0])  # the other thread's update, mid-view
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(ConfusionAccumulator, "from_matrix", classmethod(from_matrix))
    assert acc.accuracy() == 1.0  # the view of the state it started from
    assert acc.matrix.tolist() == [[1, 1], [1, 1]]
    assert acc.accuracy() == 0.5  # and of the new state next time, as the matrix says


def test_bootstrap_views_survive_an_update_right_after_the_snapshot():
    acc = BootstrapConfusionAccumulator(2, n_resamples=10, seed=0).update([0, 1], [0, 1])
    taken = []
    snapshot = acc._snapshot

    def snapshot_then_update() -> Any:
        state = snapshot()
        if not taken:
            taken.append(1)
            acc.update([0, 1], [1, 0])  # lands between the snapshot and any later read
        return state

    acc._snapshot = snapshot_then_update  # type: ignore[method-assign]
    acc.accuracy()
    matrix = acc.state_arrays()["matrix"]
    assert acc.accuracy() == np.trace(matrix) / matrix.sum()  # the view agrees with the state


def test_a_view_that_warned_warns_again_on_the_next_call():
    from metricstream.exceptions import UndefinedMetricWarning

    empty = ConfusionAccumulator(3)
    for _ in range(3):
        with pytest.warns(UndefinedMetricWarning):
            empty.accuracy_interval()


def test_group_counts_the_largest_member_last_and_stays_atomic() -> None:
    """A group counts its smallest states first and its largest last, with no undo for the
    last; a batch the last member refuses leaves every member as it was."""
    import metricstream as ms
    from metricstream.base import AccumulatorGroup

    group = AccumulatorGroup(
        {"scores": ms.ScoreAccumulator("multiclass", 3), "confusion": ms.ConfusionAccumulator(3)}
    )
    assert [group._member_list[i] for i in group._count_order][-1] is group["scores"]
    good = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]])
    group.update(np.array([0, 1]), good)
    before = {name: member.state_arrays() for name, member in group.items()}
    rows_not_summing_to_one = np.array([[0.7, 0.2, 0.3], [0.1, 0.8, 0.1]])  # argmax is fine
    with pytest.raises(ValueError):
        group.update(np.array([0, 1]), rows_not_summing_to_one)
    for name, member in group.items():
        after = member.state_arrays()
        assert all(np.array_equal(before[name][k], after[k]) for k in after), name
    assert group["confusion"].matrix.tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 0]]
