"""What a training loop passes to ``update``: logits of every float width, torch tensors (with and
without gradients, bfloat16 included), binary probabilities with a threshold, and the mistakes
people make (swapped arguments, boolean scores, object-dtype weights).

Every fused result is checked against ``np.argmax``/``torch.argmax`` + counting, or against
scikit-learn for thresholds, including ties, signed zeros, infinities and NaN positions.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix

from metricstream import ConfusionAccumulator
from metricstream._inputs import as_array, prepare_batch
from metricstream.confusion import _dispatch

try:
    import torch
except ImportError:  # the torch tests skip, and say why; the others still run
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

RNG = np.random.default_rng(20)


def counted(
    y_true, y_pred, num_classes, weights=None, ignore_index=None, threshold=None, integral=True
):
    out = np.zeros((num_classes, num_classes), dtype=np.int64 if integral else np.float64)
    batch = prepare_batch(y_true, y_pred, weights, num_classes, 1, threshold=threshold)
    _dispatch.count_batch(out, batch, ignore_index)
    return out


def expected_from_predictions(y_true, predicted, num_classes, weights=None, ignore_index=None):
    y_true = np.asarray(y_true).astype(np.int64)
    keep = np.ones(y_true.shape, bool) if ignore_index is None else y_true != ignore_index
    w = None if weights is None else np.asarray(weights)[keep]
    return np.bincount(
        num_classes * y_true[keep] + np.asarray(predicted)[keep],
        weights=w,
        minlength=num_classes**2,
    ).reshape(num_classes, num_classes)


def tricky_scores(size, num_classes, dtype):
    """Scores with ties, signed zeros and infinities (as floats of ``dtype``)."""
    scores = RNG.normal(size=(size, num_classes)).round(1)
    scores[RNG.random(scores.shape) < 0.1] = 0.0
    scores[RNG.random(scores.shape) < 0.05] = -0.0
    scores[RNG.random(scores.shape) < 0.02] = np.inf
    scores[RNG.random(scores.shape) < 0.02] = -np.inf
    if size:
        scores[0] = -0.0  # every score equal: first position wins
        scores[-1, :] = -np.inf
    return scores.astype(dtype)


# ---------------------------------------------------------------------------- (N, C) logits
# Weighted float64 and float16 rows are kernel specialisations of their own (2-3 s of compiling
# each on a cold cache); their unweighted reductions are checked by the default run below.
@pytest.mark.parametrize(
    "dtype",
    [
        np.float32,
        pytest.param(np.float64, marks=pytest.mark.slow),
        pytest.param(np.float16, marks=pytest.mark.slow),
    ],
    ids=lambda d: d.__name__,
)
@pytest.mark.parametrize("num_classes", [1, 2, 3, 15, 16, 17, 40, 127, 128, 300])
@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 300])
def test_row_logits_equal_argmax(dtype, num_classes, size):
    scores = tricky_scores(size, num_classes, dtype)
    y_true = RNG.integers(0, num_classes, size)
    weights = RNG.integers(0, 4, size).astype(np.float64)  # whole numbers, as float64
    expected = expected_from_predictions(y_true, np.argmax(scores, axis=1), num_classes, weights)
    np.testing.assert_array_equal(counted(y_true, scores, num_classes, weights), expected)


@pytest.mark.parametrize(
    ("dtype", "num_classes"),
    [
        pytest.param(
            d,
            c,
            id=f"{c}-{d.__name__}",
            # 40,000 float16 rows of 10 or 16 scores take the threaded path, whose int32 private
            # matrices make a specialisation of its own: CI only.
            marks=[pytest.mark.slow] if d is np.float16 and c > 3 else [],
        )
        for d in (np.float32, np.float16)
        for c in (3, 10, 16)
    ],
)
def test_long_row_logits_equal_argmax(dtype, num_classes):
    # Past the in-cache size each tile of rows is copied before it is reduced.
    size = 40_000
    scores = tricky_scores(size, num_classes, dtype)
    y_true = RNG.integers(0, num_classes, size)
    expected = expected_from_predictions(y_true, np.argmax(scores, axis=1), num_classes)
    np.testing.assert_array_equal(counted(y_true, scores, num_classes), expected)
    scores[size - 700, 1] = np.nan
    out = np.zeros((num_classes, num_classes), np.int64)
    with pytest.raises(ValueError, match=rf"holds NaN at position \({size - 700}, 1\)"):
        _dispatch.count_batch(out, prepare_batch(y_true, scores, None, num_classes, 1), None)
    assert not out.any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("num_classes", [2, 10, 20, 200])
def test_first_nan_score_is_reported_after_earlier_label_errors(dtype, num_classes):
    size = 150
    scores = RNG.normal(size=(size, num_classes)).astype(dtype)
    scores[97, num_classes // 2] = np.nan
    scores[120, 0] = np.nan
    y_true = RNG.integers(0, num_classes, size)
    out = np.zeros((num_classes, num_classes), np.int64)
    batch = prepare_batch(y_true, scores, None, num_classes, 1)
    with pytest.raises(ValueError, match=rf"holds NaN at position \(97, {num_classes // 2}\)"):
        _dispatch.count_batch(out, batch, None)
    assert not out.any()
    y_true[90] = num_classes  # a bad label before the NaN row is reported first
    batch = prepare_batch(y_true, scores, None, num_classes, 1)
    with pytest.raises(ValueError, match=r"`y_true` holds label .* at position 90"):
        _dispatch.count_batch(out, batch, None)
    assert not out.any()


def test_float16_scores_are_read_without_a_float32_copy():
    scores = RNG.normal(size=(1000, 10)).astype(np.float16)
    batch = prepare_batch(np.zeros(1000, int), scores, None, 10, 1)
    assert np.shares_memory(batch.y_pred, scores)


# ---------------------------------------------------------------------------- torch


@needs_torch
@pytest.mark.parametrize("num_classes", [2, 10, 17, 200])
def test_bfloat16_logits_equal_torch_argmax(num_classes):
    scores = torch.from_numpy(tricky_scores(300, num_classes, np.float32)).to(torch.bfloat16)
    y_true = torch.from_numpy(RNG.integers(0, num_classes, 300))
    predicted = torch.argmax(scores.float(), dim=1).numpy()  # exact: bf16 -> f32 is exact
    acc = ConfusionAccumulator(num_classes).update(y_true, scores)
    np.testing.assert_array_equal(
        acc.matrix, expected_from_predictions(y_true, predicted, num_classes)
    )


@needs_torch
def test_bfloat16_scores_are_read_without_a_copy_and_nan_is_found():
    scores = torch.randn(100, 4).to(torch.bfloat16)
    batch = prepare_batch(torch.zeros(100, dtype=torch.int64), scores, None, 4, 1)
    assert batch.y_pred.dtype == np.int16
    assert batch.y_pred.ctypes.data == scores.data_ptr()
    scores[33, 2] = float("nan")
    acc = ConfusionAccumulator(4)
    with pytest.raises(ValueError, match=r"holds NaN at position \(33, 2\)"):
        acc.update(torch.zeros(100, dtype=torch.int64), scores)
    assert acc.num_samples == 0


@needs_torch
def test_bfloat16_and_float16_labels_and_segmentation_scores():
    labels = torch.tensor([0, 1, 2, 2, 1], dtype=torch.bfloat16)
    acc = ConfusionAccumulator(3).update(labels, labels.to(torch.float16))
    np.testing.assert_array_equal(acc.matrix, np.diag([1, 2, 2]))
    masks = torch.randint(0, 3, (2, 5, 6))
    logits = torch.randn(2, 3, 5, 6).to(torch.bfloat16)
    acc = ConfusionAccumulator(3).update(masks, logits)
    expected = expected_from_predictions(
        masks.numpy().ravel(), torch.argmax(logits.float(), 1).numpy().ravel(), 3
    )
    np.testing.assert_array_equal(acc.matrix, expected)


@needs_torch
def test_tensors_that_track_gradients_are_read_without_a_copy():
    logits = torch.randn(64, 5, requires_grad=True)
    array = as_array(logits, "y_pred")
    assert array.ctypes.data == logits.data_ptr()
    acc = ConfusionAccumulator(5).update(torch.arange(64) % 5, logits)
    expected = expected_from_predictions(np.arange(64) % 5, logits.detach().argmax(1).numpy(), 5)
    np.testing.assert_array_equal(acc.matrix, expected)


@needs_torch
# int32 labels with float32 rows: a kernel specialisation of its own (CI only)
@pytest.mark.parametrize("label_dtype", ["int64", pytest.param("int32", marks=pytest.mark.slow)])
def test_non_contiguous_and_integer_tensors(label_dtype):
    logits = torch.randn(10, 40)[:, ::4]  # (10, 10), strided
    y_true = torch.arange(20, dtype=getattr(torch, label_dtype))[::2] % 10
    acc = ConfusionAccumulator(10).update(y_true, logits)
    expected = expected_from_predictions(y_true.numpy(), logits.argmax(1).numpy(), 10)
    np.testing.assert_array_equal(acc.matrix, expected)


# ---------------------------------------------------------------------------- thresholds
def threshold_inputs(dtype, size=500):
    probabilities = RNG.random(size)
    probabilities[:20] = 0.5  # exactly at the threshold: class 1
    probabilities[20:30] = np.nextafter(0.5, 0)
    return RNG.integers(0, 2, size), probabilities.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("threshold", [0.5, 0.1, 0.0, 1.0, 0.7071])
@pytest.mark.parametrize("column", [False, True], ids=["(N,)", "(N, 1)"])
def test_threshold_equals_scikit_learn(dtype, threshold, column):
    y_true, scores = threshold_inputs(dtype)
    predicted = (scores.astype(np.float64) >= threshold).astype(int)
    expected = confusion_matrix(y_true, predicted, labels=[0, 1])
    y_pred = scores[:, None] if column else scores
    np.testing.assert_array_equal(counted(y_true, y_pred, 2, threshold=threshold), expected)


@needs_torch
@pytest.mark.parametrize("threshold", [0.5, 0.1, -0.0, 3.3e38, -1e-40, float("inf")])
def test_bfloat16_threshold_compares_exact_values(threshold):
    scores = torch.from_numpy(np.r_[RNG.normal(size=400), 0.0, -0.0, np.inf, -np.inf, 0.1, 0.5]).to(
        torch.bfloat16
    )
    y_true = RNG.integers(0, 2, scores.shape[0])
    predicted = (scores.float().numpy().astype(np.float64) >= threshold).astype(int)
    expected = confusion_matrix(y_true, predicted, labels=[0, 1])
    np.testing.assert_array_equal(counted(y_true, scores, 2, threshold=threshold), expected)


def test_threshold_with_weights_ignore_index_and_logits():
    y_true = np.array([0, 1, 1, 255, 0, 1])
    logits = np.array([-1.0, 2.0, -0.5, 9.0, 0.0, 0.25], np.float32)
    weights = np.array([1.0, 2.0, 0.5, 7.0, 4.0, 1.5])
    got = counted(y_true, logits, 2, weights, ignore_index=255, threshold=0.0, integral=False)
    expected = confusion_matrix(
        y_true[y_true != 255],
        (logits >= 0)[y_true != 255].astype(int),
        sample_weight=weights[y_true != 255],
    )
    np.testing.assert_array_equal(got, expected)


def test_threshold_rejects_nan_scores_and_keeps_labels_as_labels():
    y_true, scores = threshold_inputs(np.float32, 300)
    scores[271] = np.nan
    out = np.zeros((2, 2), np.int64)
    with pytest.raises(ValueError, match=r"`y_pred` \(scores\) holds NaN at position 271"):
        _dispatch.count_batch(out, prepare_batch(y_true, scores, None, 2, 1, threshold=0.5), None)
    assert not out.any()
    # Integer predictions are labels even with a threshold.
    np.testing.assert_array_equal(
        counted([0, 1, 1], np.array([1, 1, 0]), 2, threshold=0.5), [[0, 1], [1, 1]]
    )
    # (N, 2) scores with a threshold still take the argmax.
    np.testing.assert_array_equal(
        counted([0, 1], np.array([[0.9, 0.1], [0.2, 0.8]]), 2, threshold=0.5), [[1, 0], [0, 1]]
    )


@pytest.mark.parametrize("ignore_index", [None, 1])
def test_binary_small_path_equals_the_general_path_and_fails_cleanly(ignore_index):
    """Binary scores of a few hundred rows take one compiled call; anything else (half
    precision, (N, 1), strided, weighted, bad values) takes the general path, same counts."""
    y_true, scores = threshold_inputs(np.float32, 300)
    y_true = y_true.astype(np.int64)
    cases = [
        (y_true, scores),  # the small path
        (y_true, scores.astype(np.float64)),  # the small path, float64 scores
        (y_true, scores[:, None]),  # (N, 1): general path
        (y_true[::2], scores[::2]),  # strided: general path
        (y_true, scores.astype(np.float16)),  # half precision: general path
    ]
    if torch is not None:
        cases += [
            (torch.from_numpy(y_true), torch.from_numpy(scores)),  # through Tensor.numpy()
            (torch.from_numpy(y_true), torch.from_numpy(scores).requires_grad_()),  # detach()
            (torch.from_numpy(y_true), torch.from_numpy(-scores)._neg_view()),  # general path
        ]
    for labels, predicted in cases:
        acc = ConfusionAccumulator(2, ignore_index=ignore_index, threshold=0.5)
        acc.update(labels, predicted)
        acc.update(labels, predicted)  # the second call reuses the remembered entry
        labels = np.asarray(labels)
        keep = labels != ignore_index
        flat = np.asarray(
            predicted.detach().resolve_neg() if hasattr(predicted, "detach") else predicted
        )
        flat = flat.reshape(len(labels)).astype(np.float64)
        expected = 2 * confusion_matrix(
            labels[keep], (flat[keep] >= 0.5).astype(int), labels=[0, 1]
        )
        np.testing.assert_array_equal(acc.matrix, expected)
    acc = ConfusionAccumulator(2, ignore_index=ignore_index, threshold=0.5).update(y_true, scores)
    before = acc.matrix.copy()
    bad_scores = scores.copy()
    bad_scores[201] = np.nan
    with pytest.raises(ValueError, match=r"`y_pred` \(scores\) holds NaN at position 201"):
        acc.update(y_true, bad_scores)
    bad_labels = y_true.copy()
    bad_labels[250] = 7
    with pytest.raises(ValueError, match=r"`y_true` holds label 7 at position 250"):
        acc.update(bad_labels, scores)
    np.testing.assert_array_equal(acc.matrix, before)
    # Near 2^63 the small path steps aside and the general path's exact check speaks.
    full = ConfusionAccumulator(2, threshold=0.5)
    full.update(np.array([0]), np.array([0.1]), np.array([2**62]))
    full.update(np.array([0]), np.array([0.1]), np.array([2**62 - 128]))
    with pytest.raises(ValueError, match="overflow"):
        full.update(y_true, scores)
    assert full.matrix[0, 0] == 2**63 - 128


@pytest.mark.parametrize("column", [False, True], ids=["(N,) small path", "(N, 1) general"])
def test_threshold_counts_blocks_by_sums_and_undoes_counted_blocks(column):
    # Unweighted binary blocks are counted from sums (pairs, true labels, predictions and
    # their products); ignored pairs add nothing, and an error in a later block undoes the
    # blocks already counted.
    y_true, scores = threshold_inputs(np.float32, 1100)
    y_true[RNG.random(1100) < 0.2] = -1
    scores[40:50] = -0.0
    shape = (-1, 1) if column else (-1,)
    acc = ConfusionAccumulator(2, ignore_index=-1, threshold=0.5)
    acc.update(y_true, scores.reshape(shape))
    keep = y_true != -1
    expected = confusion_matrix(y_true[keep], (scores[keep] >= 0.5).astype(int), labels=[0, 1])
    np.testing.assert_array_equal(acc.matrix, expected)
    bad_labels = y_true.copy()
    bad_labels[900] = 2  # in the fourth block of 256
    with pytest.raises(ValueError, match=r"`y_true` holds label 2 at position 900"):
        acc.update(bad_labels, scores.reshape(shape))
    bad_scores = scores.copy()
    bad_scores[1050] = np.nan
    with pytest.raises(ValueError, match=r"holds NaN at position \(?1050"):
        acc.update(y_true, bad_scores.reshape(shape))
    np.testing.assert_array_equal(acc.matrix, expected)


def test_threshold_argument_errors():
    with pytest.raises(ValueError, match="`threshold` is NaN"):
        prepare_batch([0], np.array([0.3]), None, 2, 1, threshold=float("nan"))
    with pytest.raises(ValueError, match="`threshold` applies to binary tasks.*`num_classes` is 3"):
        prepare_batch([0], np.array([0.3]), None, 3, 1, threshold=0.5)
    with pytest.raises(TypeError, match="`threshold` must be a real number"):
        prepare_batch([0], np.array([0.3]), None, 2, 1, threshold="0.5")


@needs_torch
def test_torch_probabilities_with_a_threshold():
    y_true = torch.tensor([0, 1, 1, 0])
    probabilities = torch.tensor([0.2, 0.6, 0.4, 0.5], requires_grad=True)
    np.testing.assert_array_equal(
        counted(y_true, probabilities, 2, threshold=0.5), [[1, 1], [1, 1]]
    )
    np.testing.assert_array_equal(
        counted(y_true, probabilities.to(torch.float16), 2, threshold=0.5), [[1, 1], [1, 1]]
    )


# ---------------------------------------------------------------------------- mistakes
def test_swapped_arguments_are_named():
    logits = np.random.default_rng(0).normal(size=(8, 4))
    labels = np.arange(8) % 4
    with pytest.raises(
        ValueError,
        match=r"looks like scores.*swapped.*update\(y_true, y_pred\)"
        r".*torchmetrics",
    ):
        ConfusionAccumulator(4).update(logits, labels)


def test_probabilities_passed_as_y_true_are_named():
    probabilities = np.array([0.1, 0.8, 0.35])
    with pytest.raises(
        ValueError,
        match=r"`y_true` holds label 0.1 at position 0.*If `y_true` "
        r"holds scores, the arguments are swapped",
    ):
        # float labels beside: the (float64, float64) kernel the suite compiles anyway
        ConfusionAccumulator(2).update(probabilities, np.array([0.0, 1.0, 0.0]))


def test_probabilities_without_a_threshold_point_to_threshold():
    with pytest.raises(ValueError, match=r"`y_pred` holds label 0.8 .* give a `threshold`"):
        ConfusionAccumulator(2).update(np.array([0.0, 1.0]), np.array([0.0, 0.8]))


@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 4)])
def test_boolean_scores_are_rejected(shape):
    scores = np.zeros(shape, dtype=bool)
    labels = np.zeros(shape[:1] + shape[2:], dtype=int)
    acc = ConfusionAccumulator(3)
    with pytest.raises(TypeError, match="`y_pred` scores must be numbers, got a boolean array"):
        acc.update(labels, scores)
    assert acc.num_samples == 0


def test_boolean_labels_are_still_labels():
    acc = ConfusionAccumulator(2).update(np.array([True, False]), np.array([True, True]))
    np.testing.assert_array_equal(acc.matrix, [[0, 1], [0, 1]])


def test_numeric_object_weights_are_accepted_as_scikit_learn_does():
    weights = np.array([1, 2.5, 3], dtype=object)
    acc = ConfusionAccumulator(2, weighted=True).update([0, 1, 1], [0, 1, 0], weights)
    np.testing.assert_array_equal(
        acc.matrix, confusion_matrix([0, 1, 1], [0, 1, 0], sample_weight=[1, 2.5, 3])
    )
    exact = ConfusionAccumulator(2).update([0, 1], [0, 0], np.array([2**62, 1], dtype=object))
    assert int(exact.matrix[0, 0]) == 2**62


def test_non_numeric_object_weights_are_named_as_weights():
    with pytest.raises(
        TypeError,
        match=r"`weights` must hold numbers, got dtype object with "
        r"first value 'heavy'",
    ):
        ConfusionAccumulator(2).update([0, 1], [0, 1], np.array(["heavy", "light"], object))


# ---------------------------------------------------------------------------- small-batch path
def _declined(y_true, y_pred, total=0.0):
    """Whether ``count_small`` leaves these inputs to the general path (and ``out`` untouched)."""
    out = np.zeros((3, 3), np.int64)
    result = _dispatch.count_small(out, y_true, y_pred, _dispatch.small_flags(None), 0, total)
    if result is None:
        assert not out.any()
        return True
    return False


def test_small_path_takes_only_arrays_its_compiled_kernels_read_safely(monkeypatch):
    from metricstream._core import warmup

    # Kernels compile at the call here: a kernel still compiling in the background would
    # leave these batches to the general path for now.
    monkeypatch.setattr(warmup, "_enabled", False)
    labels = np.array([0, 1, 2, 2])
    scores = np.eye(3, dtype=np.float32)[[0, 2, 1, 2]]
    assert not _declined(labels, labels) and not _declined(labels, scores)
    assert not _declined(labels, scores.astype(np.float16))  # read as bits, no float32 copy
    read_only = labels.copy()
    read_only.flags.writeable = False
    unaligned = np.zeros(4 * 8 + 1, np.uint8)[1:].view(np.int64)
    assert not unaligned.flags.aligned
    for y_true, y_pred in [
        (read_only, labels),
        (labels, read_only),
        (unaligned, labels),
        ((np.arange(8) % 3)[::2], labels),  # strided
        (labels.astype(">i8"), labels),  # non-native byte order
        (labels.astype(bool), labels),
        (labels.astype(np.float64), labels),
        (labels, labels.astype(np.float32)),
        (labels, labels.astype(np.float16)),
        (labels.astype(np.float16), labels),
        (labels, np.asfortranarray(np.eye(3, dtype=np.float32)[[0, 2, 1]].T).T[:4]),
        (labels.reshape(2, 2), labels.reshape(2, 2)),
        (labels, labels[:3]),  # lengths differ
        (labels, np.zeros((4, 2), np.float32)),  # not K classes
        (labels.tolist(), labels),
        (labels, np.array([0, 1, 3, 0])),  # rejected by the kernel: worded by the general path
        (labels, scores * np.float32(np.nan)),
    ]:
        assert _declined(y_true, y_pred), (y_true, y_pred)
    out = np.zeros((200, 200), np.int64)  # wide rows: many vectors of scores per row
    flags = _dispatch.small_flags(None)
    nan_row = np.zeros((4, 200), np.float32)
    nan_row[1, 2] = np.nan
    for y_true, y_pred in [(labels, nan_row), (labels + 200, np.zeros((4, 200), np.float32))]:
        assert _dispatch.count_small(out, y_true, y_pred, flags, 0, 0.0) is None
        assert not out.any()
    assert _declined(labels, labels, total=2.0**63 - 2)  # near overflow: the exact path
    many = np.zeros(_dispatch.PARALLEL_MIN_LABELS, np.int64)
    assert _declined(many, many)


@pytest.mark.parametrize("num_classes", [4, 150])  # 150: many vectors of scores per row
def test_small_path_counts_equal_the_general_path(num_classes):
    rng = np.random.default_rng(21)
    for ignore_index in (None, 2, -1):
        y_true = rng.integers(0, num_classes, 300)
        if ignore_index is not None:
            y_true[::7] = ignore_index
        y_pred = rng.integers(0, num_classes, 300)
        scores = rng.normal(size=(300, num_classes)).astype(np.float32)
        for prediction in (y_pred, scores, y_pred.astype(np.uint8), scores.astype(np.float16)):
            fast = ConfusionAccumulator(num_classes, ignore_index=ignore_index)
            fast.update(y_true, prediction).update(y_true[:5], prediction[:5])
            expected = counted(y_true, prediction, num_classes, ignore_index=ignore_index)
            expected += counted(y_true[:5], prediction[:5], num_classes, ignore_index=ignore_index)
            np.testing.assert_array_equal(fast.matrix, expected)
    before = fast.matrix.copy()
    scores[200, num_classes // 2] = np.nan
    with pytest.raises(ValueError, match=rf"holds NaN at position \(200, {num_classes // 2}\)"):
        fast.update(y_true, scores)
    y_true[100] = num_classes
    with pytest.raises(ValueError, match="`y_true` holds label .* at position 100"):
        fast.update(y_true, scores)
    np.testing.assert_array_equal(fast.matrix, before)


@pytest.mark.parametrize("change", ["merge", "reset", "from_matrix"])
def test_updates_after_other_changes_still_see_overflow(change):
    # The bound of the total kept between updates must not outlive a merge, reset or load.
    # Merging refuses totals within 2**20 of 2**63; from_matrix takes any int64 count.
    room = 10 if change == "from_matrix" else 2**21
    near = ConfusionAccumulator.from_matrix(np.array([[2**63 - room, 0], [0, 0]]))
    acc = ConfusionAccumulator(2).update(np.zeros(3, np.int64), np.zeros(3, np.int64))
    if change == "merge":
        acc.merge(near)
    elif change == "reset":
        acc.reset().merge(near)
    else:
        acc = near
    before = acc.matrix.copy()
    zeros = np.zeros(room, np.int64)
    with pytest.raises(ValueError, match="would overflow the counts"):
        acc.update(zeros, zeros)
    with pytest.raises(ValueError, match="would overflow the counts"):
        acc.update(zeros, np.zeros((room, 2), np.float32))
    np.testing.assert_array_equal(acc.matrix, before)
    acc.update(np.ones(2, np.int64), np.zeros(2, np.int64))  # what fits is counted exactly
    assert acc.matrix[1, 0] == 2 and acc.matrix[0, 0] == before[0, 0]


def _tensor_declined(y_true, y_pred):
    out = np.zeros((3, 3), np.int64)
    flags = _dispatch.small_flags(None)
    if _dispatch.count_small(out, y_true, y_pred, flags, 0, 0.0) is None:
        assert not out.any()
        return True
    return False


@needs_torch
def test_small_path_reads_plain_cpu_tensors_in_place_and_declines_the_rest(monkeypatch):
    from metricstream._core import warmup

    monkeypatch.setattr(warmup, "_enabled", False)  # kernels compile at the call here
    labels = torch.tensor([0, 1, 2, 2])
    scores = torch.eye(3)[[0, 2, 1, 2]]
    assert not _tensor_declined(labels, labels) and not _tensor_declined(labels, scores)
    assert not _tensor_declined(labels, scores.clone().requires_grad_(True))
    assert not _tensor_declined(labels, scores.to(torch.bfloat16))  # read as bits
    assert not _tensor_declined(labels, scores.half())
    negative = torch.complex(scores, scores).conj().imag  # values -scores, through a negative bit
    assert negative.is_neg()
    for y_true, y_pred in [
        (labels, labels.numpy()),  # mixed: the general path
        (labels.numpy(), labels),
        ((torch.arange(8) % 3)[::2], labels),  # strided
        (labels, scores.T.contiguous().T),  # not C-contiguous
        (labels, negative),
        (labels, labels.half()),  # half-precision labels: converted by the general path
        (labels.half(), labels),
        (labels.float(), labels),
        (labels.bool(), labels),
        (labels.reshape(2, 2), labels.reshape(2, 2)),
        (labels, torch.nn.Parameter(scores)),  # a subclass
        (labels, torch.tensor([0, 1, 3, 0])),  # rejected by the kernel: worded by the general path
        (labels, torch.zeros(4, 3, device="meta")),
    ]:
        assert _tensor_declined(y_true, y_pred), (y_true, y_pred)


@needs_torch
@pytest.mark.parametrize("ignore_index", [None, 1])
# int32/uint8 label tensors and float64 score tensors are kernel specialisations of their own
# (3-4 s each on a cold cache): CI only
@pytest.mark.parametrize("every_dtype", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_tensor_updates_equal_numpy_updates(ignore_index, every_dtype):
    rng = np.random.default_rng(22)
    y_true = rng.integers(0, 3, 200)
    y_pred = rng.integers(0, 3, 200)
    scores = rng.normal(size=(200, 3))
    negative = torch.complex(torch.zeros(200, 3), torch.from_numpy(-scores).float()).conj().imag
    cases = [
        (torch.from_numpy(y_true), torch.from_numpy(y_pred), y_pred),
        (torch.from_numpy(y_true), torch.from_numpy(scores).float().requires_grad_(), scores),
        (torch.from_numpy(y_true), negative, scores.astype(np.float32)),
        (torch.from_numpy(y_true), torch.from_numpy(scores).half(), scores.astype(np.float16)),
    ]
    if every_dtype:
        cases += [
            (torch.from_numpy(y_true).int(), torch.from_numpy(y_pred).to(torch.uint8), y_pred),
            (torch.from_numpy(y_true), torch.from_numpy(scores), scores),
        ]
    scores = scores if every_dtype else scores.astype(np.float32)
    for tensor_true, tensor_pred, numpy_pred in cases:
        acc = ConfusionAccumulator(3, ignore_index=ignore_index).update(tensor_true, tensor_pred)
        expected = ConfusionAccumulator(3, ignore_index=ignore_index).update(y_true, numpy_pred)
        np.testing.assert_array_equal(acc.matrix, expected.matrix)
    bf16 = torch.from_numpy(scores).to(torch.bfloat16)
    acc = ConfusionAccumulator(3, ignore_index=ignore_index).update(torch.from_numpy(y_true), bf16)
    expected = ConfusionAccumulator(3, ignore_index=ignore_index)
    expected.update(y_true, torch.argmax(bf16.float(), 1).numpy())
    np.testing.assert_array_equal(acc.matrix, expected.matrix)
    bf16[120, 1] = float("nan")
    with pytest.raises(ValueError, match=r"holds NaN at position \(120, 1\)"):
        acc.update(torch.from_numpy(y_true), bf16)
    np.testing.assert_array_equal(acc.matrix, expected.matrix)
    acc = ConfusionAccumulator(3).update(torch.from_numpy(y_true), torch.from_numpy(scores))
    before = acc.matrix.copy()
    bad = torch.from_numpy(y_true.copy())
    bad[150] = 3
    with pytest.raises(ValueError, match="`y_true` holds label 3 at position 150"):
        acc.update(bad, torch.from_numpy(scores))
    np.testing.assert_array_equal(acc.matrix, before)


@needs_torch
def test_nested_tensors_are_not_read_through_their_data_pointer():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # nested tensors are a prototype
        nested = torch.nested.nested_tensor([torch.arange(3), torch.arange(2)])
    assert _tensor_declined(nested, nested)


@needs_torch
def test_tensors_of_other_layouts_are_not_read_through_their_data_pointer():
    # The small path does not ask for the layout: these are not contiguous, or have no storage.
    labels = torch.tensor([0, 1, 2, 2])
    scores = torch.eye(3)[[0, 2, 1, 2]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # sparse compressed layouts are in beta
        others = [scores.to_sparse(), scores.to_sparse_csr(), scores.to_mkldnn()]
    for other in others:
        assert _tensor_declined(labels, other), other.layout
    assert _tensor_declined(labels.to_sparse(), labels)
    acc = ConfusionAccumulator(3).update(labels, scores)
    before = acc.matrix.copy()
    with pytest.raises(TypeError, match="`y_pred` must be an array-like of numbers"):
        acc.update(labels, others[0])  # the general path says what it cannot read
    np.testing.assert_array_equal(acc.matrix, before)
