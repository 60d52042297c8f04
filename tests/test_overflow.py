"""Counts never wrap: int64 cells and their total stay below 2^63, float64 sums stay finite.

A batch that would overflow raises ``ValueError`` saying what overflowed, and the matrix is left
bit-identical. The fast path bounds the batch's weight against the headroom of the current total;
these tests drive both that bound and the exact path behind it (serial and threaded).
"""

from __future__ import annotations

import numpy as np
import pytest

import metricstream
from metricstream import ConfusionAccumulator
from metricstream._inputs import prepare_batch
from metricstream.confusion import _dispatch

INT64_MAX = 2**63 - 1


@pytest.fixture(params=["serial", "threads"])
def path(request, monkeypatch):
    """Once on the serial path, once split into many chunks across threads."""
    if request.param == "threads":
        monkeypatch.setattr(_dispatch, "PARALLEL_MIN_LABELS", 1)
        monkeypatch.setattr(_dispatch, "PARALLEL_MIN_LABELS_PER_CELL", 0)
        monkeypatch.setattr(_dispatch, "CHUNK_LABELS", 3)
        previous = metricstream.get_num_threads()
        metricstream.set_num_threads(3)
        yield request.param
        metricstream.set_num_threads(previous)
    else:
        monkeypatch.setattr(_dispatch, "PARALLEL_MIN_LABELS", 1 << 62)
        yield request.param


def count(out, y_true, y_pred, weights=None, ignore_index=None, total=None, threshold=None):
    batch = prepare_batch(y_true, y_pred, weights, out.shape[0], 1, threshold=threshold)
    return _dispatch.count_batch(out, batch, ignore_index, total)


def assert_rejected_unchanged(out, match, *args, **kwargs):
    before = out.copy()
    with pytest.raises(ValueError, match=match):
        count(out, *args, **kwargs)
    assert out.tobytes() == before.tobytes()


# ---------------------------------------------------------------------------- the reported cases
def test_two_weights_of_2_62_do_not_wrap_to_minus_2_63(path):
    acc = ConfusionAccumulator(2)
    with pytest.raises(ValueError, match=r"overflow.*cell \(true 0, predicted 0\).*2\^63 - 1"):
        acc.update([0, 0], [0, 0], np.array([2**62, 2**62]))
    assert acc.num_samples == 0
    assert not acc.matrix.any()


def test_float_weights_under_the_per_weight_cap_do_not_wrap(path):
    acc = ConfusionAccumulator(2)
    with pytest.raises(ValueError, match="overflow"):
        acc.update([0, 0], [0, 0], np.array([9e18, 9e18]))
    assert not acc.matrix.any()


@pytest.mark.slow  # uint64 weights: a kernel specialisation of their own (CI only)
def test_uint64_weight_2_64_minus_1_is_not_added_as_minus_1(path):
    acc = ConfusionAccumulator(2)
    with pytest.raises(
        ValueError,
        match=r"`weights` holds 18446744073709551615 at position 1.*"
        r"below 2\^63",
    ):
        acc.update([0, 1], [0, 1], np.array([1, 2**64 - 1], dtype=np.uint64))
    assert not acc.matrix.any()


def test_weighted_sums_that_would_become_infinite_are_rejected(path):
    acc = ConfusionAccumulator(2, weighted=True)
    with pytest.raises(ValueError, match=r"cell \(true 1, predicted 0\) would become infinite"):
        acc.update([1, 1], [0, 0], np.array([1e308, 1e308]))
    assert not acc.matrix.any()


# ---------------------------------------------------------------------------- near 2^63
def test_a_cell_near_2_63_takes_what_fits_and_rejects_the_rest(path):
    out = np.array([[INT64_MAX - 2, 0], [0, 0]], dtype=np.int64)
    count(out, [0, 0], [0, 0])  # exactly 2^63 - 1 now
    assert out[0, 0] == INT64_MAX
    assert_rejected_unchanged(
        out,
        r"cell \(true 0, predicted 0\).*starting from "
        f"{INT64_MAX}",
        [0],
        [0],
    )


def test_the_total_of_the_matrix_stays_below_2_63(path):
    out = np.array([[2**62, 0], [0, 2**62 - 2]], dtype=np.int64)
    count(out, [1], [0])  # total 2^63 - 1: still fine
    assert_rejected_unchanged(out, r"total count N would reach 9223372036854775808", [1], [0])


def test_a_caller_supplied_total_is_checked_as_a_bound(path):
    out = np.zeros((2, 2), dtype=np.int64)
    # The caller says the total is near the limit: the exact path recounts and accepts (its
    # own sum is tiny), and returns the exact new total.
    assert count(out, [0, 1], [0, 1], total=float(INT64_MAX)) == 2
    # An ordinary call returns a bound of the new total.
    assert count(out, [0, 1, 1], [0, 1, 0], total=2) >= 5
    np.testing.assert_array_equal(out, [[2, 0], [1, 2]])


# Each input kind with integer weights is a kernel specialisation of its own (2-3 s to compile
# cold): the kinds no other test compiles run in CI only.
@pytest.mark.parametrize(
    "kind",
    [
        "labels",
        "scores",
        pytest.param("scores3d", marks=pytest.mark.slow),
        pytest.param("threshold", marks=pytest.mark.slow),
    ],
)
def test_every_input_kind_is_overflow_checked(kind, path):
    out = np.array([[INT64_MAX - 10, 0], [0, 0]], dtype=np.int64)
    y_true = np.zeros(20, dtype=np.int64)
    kwargs = {}
    if kind == "labels":
        y_pred = np.zeros(20, dtype=np.int64)
    elif kind == "scores":
        y_pred = np.tile(np.array([[1.0, 0.0]], np.float32), (20, 1))
    elif kind == "scores3d":
        y_true = y_true.reshape(2, 10)
        y_pred = np.zeros((2, 2, 10), np.float32)
        y_pred[:, 0] = 1.0
    else:
        y_pred = np.zeros(20, np.float32)
        kwargs["threshold"] = 0.5
    assert_rejected_unchanged(out, "overflow", y_true, y_pred, **kwargs)
    weights = np.full(y_true.shape, 2.0**61)  # float64, exact; integer weights: CI grid below
    assert_rejected_unchanged(out * 0, "overflow", y_true, y_pred, weights, **kwargs)


def test_big_weights_spread_over_many_cells_are_exact_or_rejected(path):
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 3, 40)
    y_pred = rng.integers(0, 3, 40)
    weights = np.full(40, 2**57, dtype=np.int64)  # total 40 * 2^57 = 5 * 2^60 < 2^63
    out = np.zeros((3, 3), dtype=np.int64)
    count(out, y_true, y_pred, weights)
    expected = np.zeros((3, 3), dtype=object)
    for t, p in zip(y_true, y_pred, strict=True):
        expected[t, p] += 2**57
    assert out.astype(object).tolist() == expected.tolist()
    # The same again would take N to 10 * 2^60 > 2^63.
    assert_rejected_unchanged(out, "total count N", y_true, y_pred, weights)


# ---------------------------------------------------------------------------- exact arithmetic
def test_float_weights_are_added_to_int64_cells_exactly():
    # Through float64, 2^60 + 1 plus 1.0 would round to 2^60.
    out = np.array([[2**60 + 1, 0], [0, 0]], dtype=np.int64)
    count(out, [0], [0], np.array([1.0]))
    assert int(out[0, 0]) == 2**60 + 2


@pytest.mark.slow
def test_uint64_weights_below_2_63_are_exact():
    out = np.zeros((2, 2), dtype=np.int64)
    count(out, [0, 0], [1, 1], np.array([2**62 + 1, 3], dtype=np.uint64))
    assert int(out[0, 1]) == 2**62 + 4


@pytest.mark.slow
def test_uint64_weights_of_2_63_or_more_are_rejected_for_int64():
    out = np.zeros((2, 2), dtype=np.int64)
    assert_rejected_unchanged(out, "below 2\\^63", [0], [0], np.array([2**63], np.uint64))


@pytest.mark.slow  # uint64 weights into a float64 matrix: a kernel of its own
def test_uint64_weights_of_2_63_or_more_are_fine_for_float64():
    weighted = np.zeros((2, 2))
    count(weighted, [0], [0], np.array([2**64 - 1], np.uint64))
    assert weighted[0, 0] == float(2**64 - 1)


def test_float64_total_overflow_is_rejected_even_when_every_cell_is_finite(path):
    out = np.array([[1.5e308, 0.0], [0.0, 0.0]])
    assert_rejected_unchanged(
        out, "total weight N would become infinite", [1], [1], np.array([1e308])
    )
    assert_rejected_unchanged(
        out, r"cell \(true 0, predicted 0\) would become infinite", [0], [0], np.array([1e308])
    )


def test_bad_input_is_still_reported_by_name_on_the_exact_path():
    out = np.array([[INT64_MAX - 100, 0], [0, 0]], dtype=np.int64)
    assert_rejected_unchanged(
        out,
        r"`y_true` holds label 7 at position 150",
        np.r_[np.zeros(150, int), 7],
        np.zeros(151, int),
    )


# ---------------------------------------------------------------------------- ignore_index
# uint64 labels: kernel specialisations of their own (CI only).
@pytest.mark.parametrize(
    "path", [pytest.param(p, marks=pytest.mark.slow) for p in ("serial", "threads")], indirect=True
)
def test_uint64_label_2_63_is_not_taken_for_ignore_index_2_63_minus_1(path):
    labels = np.array([2**63, 1], dtype=np.uint64)
    out = np.zeros((3, 3), dtype=np.int64)
    assert_rejected_unchanged(
        out,
        "holds label 9223372036854775808 at position 0",
        labels,
        np.array([0, 1], np.uint64),
        ignore_index=2**63 - 1,
    )
    # The label that does equal it is skipped.
    count(
        out,
        np.array([2**63 - 1, 1], np.uint64),
        np.array([0, 1], np.uint64),
        ignore_index=2**63 - 1,
    )
    np.testing.assert_array_equal(out, np.diag([0, 1, 0]))


# The threaded path compiles float64 labels into int32 private matrices for this test alone.
@pytest.mark.parametrize(
    "path", ["serial", pytest.param("threads", marks=pytest.mark.slow)], indirect=True
)
def test_float_label_2_53_is_not_taken_for_ignore_index_2_53_plus_1(path):
    out = np.zeros((2, 2), dtype=np.int64)
    assert_rejected_unchanged(
        out,
        "holds label 9007199254740992.0 at position 0",
        np.array([2.0**53, 1.0]),
        np.array([0.0, 1.0]),
        ignore_index=2**53 + 1,
    )
    count(out, np.array([2.0**53, 1.0]), np.array([0.0, 1.0]), ignore_index=2**53)
    np.testing.assert_array_equal(out, [[0, 0], [0, 1]])


@pytest.mark.slow  # uint64 labels with scores: two kernels of their own
@pytest.mark.parametrize("kind", ["scores", "threshold"])
def test_ignore_index_is_exact_for_scores_too(kind):
    out = np.zeros((2, 2), dtype=np.int64)
    labels = np.array([2**63, 1], dtype=np.uint64)
    scores = np.array([[0.0, 1.0], [0.0, 1.0]]) if kind == "scores" else np.array([1.0, 1.0])
    threshold = 0.5 if kind == "threshold" else None
    assert_rejected_unchanged(
        out,
        "holds label 9223372036854775808",
        labels,
        scores,
        ignore_index=2**63 - 1,
        threshold=threshold,
    )
