"""Bad input gets a clear error that names the problem, and the accumulator loses nothing."""

from __future__ import annotations

import re

import numpy as np
import pytest

from metricstream import ConfusionAccumulator

LARGE = 1 << 20  # above the size at which batches are split across threads


def seeded(weighted=False, num_classes=5, ignore_index=None):
    """An accumulator that already holds state, so 'unchanged' is a real check."""
    acc = ConfusionAccumulator(num_classes, weighted=weighted, ignore_index=ignore_index)
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, num_classes, 500)
    y_pred = rng.integers(0, num_classes, 500)
    weights = rng.random(500) * 3 if weighted else None
    return acc.update(y_true, y_pred, weights)


def assert_fails_cleanly(acc, error, match, *args):
    before = acc.matrix.copy()
    samples = acc.num_samples
    with pytest.raises(error, match=match):
        acc.update(*args)
    np.testing.assert_array_equal(acc.matrix, before)
    assert acc.num_samples == samples


# (id, y_true, y_pred, weights, error, message pattern)
BAD_UPDATES = [
    (
        "shape-mismatch",
        np.zeros(4, int),
        np.zeros(5, int),
        None,
        ValueError,
        r"`y_true` has shape \(4,\) and `y_pred` has shape \(5,\)",
    ),
    (
        "true-too-large",
        [0, 1, 7, 2],
        [0, 1, 2, 3],
        None,
        ValueError,
        r"`y_true` holds label 7 at position 2, but `num_classes` is 5",
    ),
    (
        "pred-too-large",
        [0, 1, 2, 3],
        [0, 1, 2, 5],
        None,
        ValueError,
        r"`y_pred` holds label 5 at position 3, but `num_classes` is 5; labels must be integers "
        r"in \[0, 5\)",
    ),
    (
        "true-negative",
        [0, -1, 2],
        [0, 1, 2],
        None,
        ValueError,
        r"`y_true` holds label -1 at position 1, but negative labels are not allowed",
    ),
    (
        "pred-negative-int8",
        np.array([0, 1], np.int8),
        np.array([0, -3], np.int8),
        None,
        ValueError,
        r"`y_pred` holds label -3 at position 1, but negative",
    ),
    (
        "true-nan",
        [0.0, np.nan],
        [0.0, 1.0],
        None,
        ValueError,
        r"`y_true` holds label nan at position 1, but NaN is not a label",
    ),
    (
        "pred-fractional",
        [0.0, 1.0],
        [0.0, 1.5],
        None,
        ValueError,
        r"`y_pred` holds label 1.5 at position 1, but it is not a whole number",
    ),
    (
        "pred-inf",
        [0.0, 1.0],
        [0.0, np.inf],
        None,
        ValueError,
        r"`y_pred` holds label inf at position 1",
    ),
    (
        "mask-position",
        np.zeros((2, 3, 4), int),
        np.full((2, 3, 4), 9),
        None,
        ValueError,
        r"`y_pred` holds label 9 at position \(0, 0, 0\)",
    ),
    (
        "weights-shape",
        [0, 1],
        [0, 1],
        [1, 1, 1],
        ValueError,
        r"`weights` has shape \(3,\), but `y_true` has shape \(2,\)",
    ),
    (
        "weights-negative",
        [0, 1, 2],
        [0, 1, 2],
        [1.0, -2.0, 1.0],
        ValueError,
        r"`weights` holds -2.0 at position 1, but weights must be finite and non-negative",
    ),
    (
        "weights-nan",
        [0, 1, 2],
        [0, 1, 2],
        [1.0, 1.0, np.nan],
        ValueError,
        r"`weights` holds nan at position 2",
    ),
    (
        "weights-inf",
        [0, 1, 2],
        [0, 1, 2],
        [np.inf, 1.0, 1.0],
        ValueError,
        r"`weights` holds inf at position 0",
    ),
    (
        "strings",
        ["cat", "dog"],
        [0, 1],
        None,
        TypeError,
        r"`y_true` must hold integers or floats, got dtype <U3 \(first value: np.str_\('cat'\)|"
        r"`y_true` must hold integers or floats, got dtype <U3",
    ),
    (
        "objects",
        np.array([0, None], dtype=object),
        [0, 1],
        None,
        TypeError,
        r"`y_true` must hold integers or floats, got dtype object",
    ),
    (
        "complex",
        [0, 1],
        np.array([0, 1], dtype=complex),
        None,
        TypeError,
        r"`y_pred` must hold integers or floats, got dtype complex128",
    ),
    ("ragged", [[0, 1], [2]], [0, 1], None, ValueError, r"`y_true` is not a rectangular array"),
    ("string-weights", [0, 1], [0, 1], ["a", "b"], TypeError, r"`weights` must hold"),
    (
        "scores-wrong-classes",
        [0, 1],
        np.zeros((2, 4)),
        None,
        ValueError,
        r"`y_pred` \(scores\) has 4 classes on axis 1, but `num_classes` is 5",
    ),
    (
        "scores-wrong-shape",
        [0, 1],
        np.zeros((3, 5)),
        None,
        ValueError,
        r"`y_pred` looks like scores of shape \(3, 5\) with classes on axis 1, which leaves "
        r"shape \(3,\), but `y_true` has shape \(2,\)",
    ),
    (
        "scores-nan",
        [0, 1],
        np.array([[0.1, 0.2, 0.3, 0.4, 0.5], [0, 0, np.nan, 0, 0]]),
        None,
        ValueError,
        r"`y_pred` \(scores\) holds NaN at position \(1, 2\)",
    ),
    (
        "scores-true-out-of-range",
        [0, 6],
        np.zeros((2, 5)),
        None,
        ValueError,
        r"`y_true` holds label 6 at position 1",
    ),
    (
        "scores-bad-weight",
        [0, 1],
        np.zeros((2, 5), np.float32),
        [1.0, -1.0],
        ValueError,
        r"`weights` holds -1.0 at position 1",
    ),
]


# Each (label dtype, weight dtype, matrix dtype) is a kernel specialisation of its own (2-3 s to
# compile on a cold cache), so the cases above share the float64 and int64 ones the rest of the
# suite compiles anyway. Into a float64 (weighted) matrix, by default only the float-weight cases;
# narrow integer labels in CI only; every case in CI.
_WEIGHTED_BY_DEFAULT = {"weights-nan", "weights-inf"}
_CI_ONLY = {"pred-negative-int8"}


@pytest.mark.parametrize(
    ("weighted", "y_true", "y_pred", "weights", "error", "match"),
    [
        pytest.param(
            weighted,
            *case[1:],
            id=f"{case[0]}-{'float64' if weighted else 'int64'}",
            marks=[pytest.mark.slow]
            if case[0] in _CI_ONLY or (weighted and case[0] not in _WEIGHTED_BY_DEFAULT)
            else [],
        )
        for case in BAD_UPDATES
        for weighted in (False, True)
    ],
)
def test_bad_update_raises_and_keeps_state(weighted, y_true, y_pred, weights, error, match):
    assert_fails_cleanly(seeded(weighted), error, match, y_true, y_pred, weights)


def test_fractional_weight_is_not_truncated_by_an_integer_accumulator():
    assert_fails_cleanly(
        seeded(False),
        ValueError,
        r"`weights` holds fractional value 0.5 at position 1, but this accumulator counts "
        r"integers and will not truncate it; create it with `weighted=True`",
        [0, 1, 2],
        [0, 1, 2],
        [1.0, 0.5, 2.0],
    )


def test_integer_valued_weights_are_exact_in_an_integer_accumulator():
    acc = ConfusionAccumulator(3).update([0, 1, 2], [0, 1, 1], [2.0, 3.0, 4.0])
    assert acc.matrix.dtype == np.int64
    np.testing.assert_array_equal(acc.matrix, [[2, 0, 0], [0, 3, 0], [0, 4, 0]])


def test_ignore_index_is_only_skipped_in_the_truth():
    acc = seeded(ignore_index=255)
    assert_fails_cleanly(
        acc,
        ValueError,
        r"`y_pred` holds label 255 at position 1, but `num_classes` is 5",
        np.array([0, 1], np.uint8),
        np.array([0, 255], np.uint8),
    )
    assert_fails_cleanly(
        acc,
        ValueError,
        re.escape(
            "`y_true` holds label 7 at position 0, but `num_classes` is 5; "
            "labels must be integers in [0, 5) or equal `ignore_index` "
            "(255)."
        ),
        [7],
        [0],
    )


@pytest.mark.parametrize("weighted", [False, True], ids=["int64", "float64"])
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_large_batch_failure_keeps_state(weighted, where):
    """Large batches are counted by several threads; a bad label in any chunk rolls all back."""
    acc = seeded(weighted)
    rng = np.random.default_rng(1)
    y_true = rng.integers(0, 5, LARGE)
    y_pred = rng.integers(0, 5, LARGE)
    position = {"start": 3, "middle": LARGE // 2 + 1, "end": LARGE - 1}[where]
    y_pred[position] = 99
    y_pred[-1] = 98 if where != "end" else 99  # a later error must not be the one reported
    assert_fails_cleanly(
        acc,
        ValueError,
        rf"`y_pred` holds label 99 at position {position},",
        y_true,
        y_pred,
        rng.random(LARGE) if weighted else None,
    )


@pytest.mark.parametrize(
    "weighted",
    [False, pytest.param(True, marks=pytest.mark.slow)],  # float64 matrix: one more kernel
    ids=["int64", "float64"],
)
def test_large_scores_failure_keeps_state(weighted):
    acc = seeded(weighted)
    rng = np.random.default_rng(2)
    y_true = rng.integers(0, 5, size=(4, 300, 300))
    scores = rng.random((4, 5, 300, 300)).astype(np.float32)
    scores[3, 2, 299, 10] = np.nan
    assert_fails_cleanly(
        acc,
        ValueError,
        r"`y_pred` \(scores\) holds NaN at position \(3, 2, 299, 10\)",
        y_true,
        scores,
        None,
    )


@pytest.mark.parametrize("num_classes", [2, 40], ids=["K2-backup", "K40-dry-run"])
def test_weighted_small_batch_failure_paths_keep_state(num_classes):
    # A float matrix is restored from a backup when K*K <= N, else validated in a dry run first.
    acc = seeded(True, num_classes=num_classes)
    y = np.arange(100) % num_classes
    weights = np.ones(100)
    weights[60] = -1
    assert_fails_cleanly(acc, ValueError, r"`weights` holds -1.0 at position 60", y, y, weights)


# ---------------------------------------------------------------------------- merge
@pytest.mark.parametrize(
    ("other", "match"),
    [
        (ConfusionAccumulator(4), r"different `num_classes`: 5 here, 4 in the other"),
        (ConfusionAccumulator(5, class_names=list("abcde")), r"different `class_names`"),
        (ConfusionAccumulator(5, ignore_index=255), r"different `ignore_index`: None here, 255"),
        (ConfusionAccumulator(5, weighted=True), r"different `weighted`: False here, True"),
    ],
    ids=["num_classes", "class_names", "ignore_index", "weighted"],
)
def test_incompatible_merge_raises_and_keeps_state(other, match):
    acc = seeded()
    before = acc.matrix.copy()
    with pytest.raises(ValueError, match=match):
        acc.merge(other)
    with pytest.raises(ValueError, match=match):
        acc + other
    np.testing.assert_array_equal(acc.matrix, before)


def test_merge_with_wrong_type():
    acc = seeded()
    with pytest.raises(
        TypeError,
        match="can only merge a ConfusionAccumulator into a ConfusionAccumulator, got ndarray",
    ):
        acc.merge(np.zeros((5, 5)))
    with pytest.raises(TypeError):
        acc + 1


# ---------------------------------------------------------------------------- configuration
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_classes": 0}, ValueError, r"`num_classes` must be at least 1, got 0"),
        ({"num_classes": 2.0}, TypeError, r"`num_classes` must be an int, got float"),
        ({"num_classes": True}, TypeError, r"`num_classes` must be an int"),
        (
            {"num_classes": 2, "class_names": ["a"]},
            ValueError,
            r"has 1 names, but `num_classes` is 2",
        ),
        ({"num_classes": 2, "class_names": ["a", "a"]}, ValueError, r"'a' more than once"),
        ({"num_classes": 2, "class_names": ["a", 1]}, TypeError, r"holds 1 at position 1"),
        ({"num_classes": 2, "class_names": "ab"}, TypeError, r"got a single string"),
        ({"num_classes": 2, "ignore_index": 1.5}, TypeError, r"`ignore_index` must be an int"),
        ({"num_classes": 2, "weighted": "yes"}, TypeError, r"`weighted` must be True or False"),
    ],
)
def test_bad_configuration(kwargs, error, match):
    with pytest.raises(error, match=match):
        ConfusionAccumulator(**kwargs)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda a: a.precision(average="binary"),
            ValueError,
            r"Target is multiclass \(5 classes\) but average='binary'",
        ),
        (lambda a: a.precision(average="bogus"), ValueError, r"`average` must be None, 'binary'"),
        (lambda a: a.recall(zero_division="nan"), ValueError, r"`zero_division` must be 'warn'"),
        (lambda a: a.f1(labels=[0, 9]), ValueError, r"`labels` holds 9 at position 1"),
        (lambda a: a.f1(labels=["zebra"]), ValueError, r"unknown class name 'zebra'"),
        (lambda a: a.f1(labels=[0.5]), TypeError, r"`labels` holds 0.5 at position 0"),
        (lambda a: a.fbeta(-1.0), ValueError, r"`beta` must be non-negative"),
        (lambda a: a.confusion_matrix("rows"), ValueError, r"`normalize` must be None"),
        (lambda a: a.cohen_kappa(weights="cubic"), ValueError, r"`weights` must be None, 'linear'"),
        (lambda a: a.cohen_kappa(weights=np.ones((2, 2))), ValueError, r"5×5 disagreement matrix"),
    ],
)
def test_bad_view_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call(seeded())
