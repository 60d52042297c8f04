"""The accumulator's own contract: return values, views, caching, copies, constructors."""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest

from metricstream import ConfusionAccumulator, UndefinedMetricWarning, metrics


def test_mutators_return_self_and_add_returns_new():
    a = ConfusionAccumulator(3)
    assert a.update([0], [1]) is a
    b = ConfusionAccumulator(3).update([2], [2])
    assert a.merge(b) is a
    c = a + b
    assert c is not a and c is not b
    assert c.num_samples == 3 and a.num_samples == 2 and b.num_samples == 1
    a += b
    assert a.num_samples == 3
    assert a.reset() is a and a.num_samples == 0


def test_merge_with_itself_doubles():
    a = ConfusionAccumulator(2).update([0, 1], [0, 0])
    a.merge(a)
    np.testing.assert_array_equal(a.matrix, [[2, 0], [2, 0]])


def test_matrix_is_a_read_only_snapshot():
    a = ConfusionAccumulator(2)
    view = a.matrix
    with pytest.raises(ValueError):
        view[0, 0] = 5
    a.update([1], [1])
    assert view[1, 1] == 0  # a snapshot: one consistent state, not the live matrix
    assert a.matrix[1, 1] == 1


def test_views_are_cached_until_the_state_changes():
    a = ConfusionAccumulator(3).update([0, 1, 2], [0, 1, 1])
    counts = a.class_counts()
    assert a.class_counts() is counts
    first = a.precision(zero_division=0)
    first[:] = -1  # callers get copies: the cache cannot be corrupted
    assert (a.precision(zero_division=0) >= 0).all()
    assert a.accuracy() == pytest.approx(2 / 3)
    a.update([2], [2])
    assert a.class_counts() is not counts
    assert a.accuracy() == 0.75
    a.reset()
    assert a.accuracy(zero_division=0) == 0.0


def test_running_value_and_single_batch_value():
    acc = ConfusionAccumulator(2)
    assert acc.update([0, 1], [0, 1]).accuracy() == 1.0
    batch = ConfusionAccumulator.from_batch([0, 1], [1, 1], num_classes=2)
    assert batch.accuracy() == 0.5
    assert acc.num_samples == 2 and acc.accuracy() == 1.0
    assert acc.update([0, 1], [1, 1]).accuracy() == 0.75


def test_warns_each_time_an_undefined_metric_is_read():
    acc = ConfusionAccumulator(3).update([0, 1], [0, 1])
    for _ in range(2):
        with pytest.warns(UndefinedMetricWarning, match="Precision is ill-defined"):
            acc.precision()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert acc.precision(zero_division=1)[2] == 1.0
        assert np.isnan(acc.precision(zero_division=np.nan)[2])
        assert acc.precision(average="macro", zero_division=np.nan) == 1.0  # NaN left out


def test_copy_pickle_and_equality():
    acc = ConfusionAccumulator(
        3, class_names=["a", "b", "c"], ignore_index=9, weighted=True, class_axis=-1
    ).update([0, 9, 2], [0, 1, 1], [0.5, 1, 2])
    for clone in (acc.copy(), copy.copy(acc), copy.deepcopy(acc), pickle.loads(pickle.dumps(acc))):
        assert clone == acc and clone is not acc
        assert clone.class_names == ("a", "b", "c") and clone.class_axis == -1
        clone.update([1], [1])
        assert clone != acc


def test_pickle_rejects_unknown_formats():
    acc = ConfusionAccumulator(2)
    state = acc.__getstate__()
    state["format"] = 99
    with pytest.raises(ValueError, match="format 99"):
        ConfusionAccumulator.__new__(ConfusionAccumulator).__setstate__(state)


def test_from_matrix():
    acc = ConfusionAccumulator.from_matrix([[3, 1], [0, 2]], class_names=["neg", "pos"])
    assert acc.num_samples == 6 and not acc.weighted
    assert acc.recall(labels=["pos"], average="micro") == 1.0
    weighted = ConfusionAccumulator.from_matrix(np.array([[0.5, 1.0], [0.0, 2.0]]))
    assert weighted.weighted
    with pytest.raises(ValueError, match="counts must be non-negative"):
        ConfusionAccumulator.from_matrix([[1, -1], [0, 0]])
    with pytest.raises(ValueError, match="square"):
        ConfusionAccumulator.from_matrix([[1, 2, 3]])
    with pytest.raises(ValueError, match="fractional counts"):
        ConfusionAccumulator.from_matrix([[0.5, 1.0], [0.0, 2.0]], weighted=False)


def test_functions_accept_a_plain_matrix():
    matrix = np.array([[5, 1], [2, 2]])
    acc = ConfusionAccumulator.from_matrix(matrix)
    assert metrics.f1(matrix, average="macro") == acc.f1(average="macro")
    assert metrics.cohen_kappa(matrix) == acc.cohen_kappa()
    np.testing.assert_array_equal(
        metrics.normalize_confusion_matrix(matrix, "all"), acc.confusion_matrix("all")
    )
    with pytest.raises(TypeError, match="`matrix` must hold numbers"):
        metrics.accuracy([["a", "b"], ["c", "d"]])


def test_sum_of_shards_and_repr():
    shards = [ConfusionAccumulator(2).update([i % 2], [0]) for i in range(5)]
    total = sum(shards)
    assert total.num_samples == 5
    assert repr(total) == "ConfusionAccumulator(num_classes=2, num_samples=5)"
    assert "weighted=True" in repr(ConfusionAccumulator(2, weighted=True))


def test_degenerate_scalars():
    empty = ConfusionAccumulator(3)
    with pytest.warns(UndefinedMetricWarning):
        assert empty.accuracy() == 0.0
    assert empty.matthews_corrcoef() == 0.0
    assert np.isnan(empty.cohen_kappa(zero_division=np.nan))
    assert np.isnan(empty.miou(zero_division=np.nan))
    assert np.isnan(empty.balanced_accuracy(zero_division=np.nan))
    one_class = ConfusionAccumulator(3).update([1, 1], [1, 1])
    assert one_class.cohen_kappa(zero_division=1) == 1.0
    assert one_class.balanced_accuracy() == 1.0
    assert one_class.balanced_accuracy(adjusted=True, zero_division=0) == 0.0
    with pytest.warns(UndefinedMetricWarning, match="y_pred contains classes not in y_true"):
        ConfusionAccumulator(3).update([1, 1], [1, 2]).balanced_accuracy()


def test_ignore_absent_is_passed_through():
    # Class 2 never occurs: ignore_absent leaves it out of the macro mean, as mIoU does.
    acc = ConfusionAccumulator(3).update([0, 0, 1, 1], [0, 1, 1, 1])
    assert acc.jaccard(average="macro", ignore_absent=True) == acc.miou()
    for method in (acc.precision, acc.recall, acc.f1, acc.jaccard):
        assert method(average="macro", ignore_absent=True) == method(average="macro", labels=[0, 1])
    assert acc.fbeta(2.0, average="macro", ignore_absent=True) == acc.fbeta(
        2.0, average="macro", labels=[0, 1]
    )
