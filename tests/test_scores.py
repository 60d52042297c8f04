"""ScoreAccumulator against scikit-learn: curves, areas, calibration, top-k, errors, state."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from sklearn import metrics as skm

from metricstream.exceptions import UndefinedMetricWarning
from metricstream.scores import ScoreAccumulator

from .marks import slow_beyond

EXACT = dict(rel=1e-12, abs=1e-12)
# Each score dtype, weight kind and threshold/logit setting compiles its own kernel (2-3 s
# cold): the default run counts float32 scores, float64 ones run with the slow tests.
SCORE_DTYPES = slow_beyond([np.float32, np.float64], 1, ids=lambda d: np.dtype(d).name)


def rows_of_probabilities(values: np.ndarray) -> np.ndarray:
    """Rows that sum to one from any values in [0, 1], keeping their ties, zeros (-0.0
    included) and order within the first ``C - 1`` classes: those scaled by ``1 / (C - 1)``,
    the last class the rest."""
    values = np.asarray(values, dtype=np.float64)
    rows = values.copy()
    rows[:, :-1] = values[:, :-1] / (values.shape[1] - 1)
    rows[:, -1] = np.maximum(1.0 - rows[:, :-1].sum(axis=1), 0.0)
    return rows


def bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 values toward zero to bfloat16 (still float32 arrays)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def multiclass_data(seed: int, n: int = 1500, classes: int = 5, absent: tuple[int, ...] = ()):
    rng = np.random.default_rng(seed)
    present = [c for c in range(classes) if c not in absent]
    y = rng.choice(present, size=n)
    logits = rng.normal(size=(n, classes)) + 2.0 * np.eye(classes)[y]
    return y, logits, softmax(logits).astype(np.float32)


def feed(acc: ScoreAccumulator, y, scores, weights=None, seed: int = 0) -> ScoreAccumulator:
    """Update in random batch sizes (including empty batches)."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, len(y), size=6))
    edges = [0, *cuts.tolist(), len(y)]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        acc.update(y[lo:hi], scores[lo:hi], None if weights is None else weights[lo:hi])
    return acc


# ------------------------------------------------------------------------------ binary
@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "weights"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_binary_equals_sklearn_on_16_bit_scores(seed, weighted):
    rng = np.random.default_rng(seed)
    n = 2000
    y = rng.integers(0, 2, n)
    scores = bf16(np.clip(rng.random(n) * 0.7 + 0.3 * y, 0, 1))
    weights = rng.random(n) * 3 if weighted else rng.integers(0, 4, n)
    acc = feed(ScoreAccumulator("binary", weighted=weighted), y, scores, weights, seed)
    assert acc.exact().all()
    assert acc.auroc() == pytest.approx(
        skm.roc_auc_score(y, scores, sample_weight=weights), **EXACT
    )
    assert acc.average_precision() == pytest.approx(
        skm.average_precision_score(y, scores, sample_weight=weights), **EXACT
    )
    for mine, ref in zip(
        acc.roc_curve(), skm.roc_curve(y, scores, sample_weight=weights), strict=True
    ):
        np.testing.assert_allclose(mine, ref, rtol=1e-12, atol=1e-12)
    for drop in (False, True):
        mine = acc.precision_recall_curve(drop_intermediate=drop)
        ref = skm.precision_recall_curve(y, scores, sample_weight=weights, drop_intermediate=drop)
        for a, b in zip(mine, ref, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    bound = acc.auroc(with_bound=True)
    assert bound.lower == bound.value == bound.upper
    assert acc.brier_score() == pytest.approx(
        skm.brier_score_loss(y, scores.astype(np.float64), sample_weight=weights), rel=1e-9
    )
    assert acc.log_loss() == pytest.approx(
        skm.log_loss(y, scores.astype(np.float64), sample_weight=weights), rel=1e-6
    )


@pytest.mark.parametrize("dtype", SCORE_DTYPES)
def test_binary_inexact_scores_and_n_by_1_layout(dtype):
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 500)
    scores = rng.random(500).astype(dtype)
    acc = ScoreAccumulator("binary").update(y, scores[:, None])
    assert not acc.exact()[0]
    result = acc.auroc(with_bound=True)
    exact = skm.roc_auc_score(y, scores)
    assert result.lower <= exact <= result.upper
    assert abs(result.value - exact) < 1e-4
    # The exact float64 sums of the given values (no score is within eps of 0 or 1 here).
    wide = scores.astype(np.float64)
    assert acc.log_loss() == pytest.approx(skm.log_loss(y, wide), rel=1e-12)
    assert acc.brier_score() == pytest.approx(skm.brier_score_loss(y, wide), rel=1e-12)


def test_exact_zero_and_one_probabilities_have_own_bins():
    y = np.array([0, 1, 0, 1, 1, 0])
    scores = np.array([0.0, 0.0, 1.0, 1.0, 1e-30, 1 - 2**-24], dtype=np.float32)
    acc = ScoreAccumulator("binary").update(y, scores)
    assert acc.auroc() == pytest.approx(skm.roc_auc_score(y, scores), **EXACT)
    values = acc.bin_values()
    assert values[0] == 0.0 and values[-1] == 1.0
    assert np.all(np.diff(values[~np.isnan(values)]) > 0)


def test_logits_any_range():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 800)
    logits = bf16((rng.normal(size=800) * 4 + 3 * y).astype(np.float32))
    acc = ScoreAccumulator("binary", logits=True).update(y, logits)
    assert acc.exact().all()
    assert acc.auroc() == pytest.approx(skm.roc_auc_score(y, logits), **EXACT)
    assert acc.average_precision() == pytest.approx(skm.average_precision_score(y, logits), **EXACT)
    probabilities = 1 / (1 + np.exp(-logits.astype(np.float64)))
    assert acc.log_loss() == pytest.approx(skm.log_loss(y, probabilities), rel=1e-9)
    assert acc.brier_score() == pytest.approx(skm.brier_score_loss(y, probabilities), rel=1e-9)


# ------------------------------------------------------------------------------ multiclass
@pytest.mark.parametrize("average", ["macro", "weighted", "micro"])
@pytest.mark.parametrize("seed", [0, 1])
def test_multiclass_ovr_equals_sklearn(seed, average):
    y, _, probabilities = multiclass_data(seed)
    scores = bf16(probabilities)
    acc = feed(ScoreAccumulator("multiclass", 5), y, scores, seed=seed)
    onehot = np.eye(5)[y]
    assert acc.auroc(average) == pytest.approx(
        skm.roc_auc_score(onehot, scores, average=average), **EXACT
    )
    assert acc.average_precision(average) == pytest.approx(
        skm.average_precision_score(onehot, scores, average=average), **EXACT
    )
    per_class = acc.auroc(None)
    np.testing.assert_allclose(
        per_class, skm.roc_auc_score(onehot, scores, average=None), rtol=1e-12
    )


@pytest.mark.parametrize("dtype", SCORE_DTYPES)
def test_multiclass_matches_roc_auc_score_multi_class_ovr(dtype):
    y, _, probabilities = multiclass_data(4, classes=4)
    probabilities = probabilities.astype(dtype)
    acc = ScoreAccumulator("multiclass", 4).update(y, probabilities)
    for average in ("macro", "weighted"):
        exact = skm.roc_auc_score(y, probabilities, multi_class="ovr", average=average)
        bound = acc.auroc(average, with_bound=True)
        assert bound.lower <= exact <= bound.upper
        assert abs(bound.value - exact) < 1e-5


def test_multiclass_curves_per_class_and_micro():
    y, _, probabilities = multiclass_data(2)
    scores = bf16(probabilities)
    acc = ScoreAccumulator("multiclass", 5).update(y, scores)
    onehot = np.eye(5)[y]
    for label in range(5):
        reference = skm.roc_curve(onehot[:, label], scores[:, label])
        for a, b in zip(acc.roc_curve(label), reference, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    reference = skm.roc_curve(onehot.ravel(), scores.ravel())
    for a, b in zip(acc.roc_curve(micro=True), reference, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_absent_class_auroc_is_nan_with_warning_and_left_out_of_average():
    y, _, probabilities = multiclass_data(1, absent=(2,))
    scores = bf16(probabilities)
    acc = ScoreAccumulator("multiclass", 5).update(y, scores)
    with pytest.warns(UndefinedMetricWarning, match="without positive"):
        per_class = acc.auroc(None)
    assert np.isnan(per_class[2])
    present = [0, 1, 3, 4]
    onehot = np.eye(5)[y]
    expected = skm.roc_auc_score(onehot[:, present], scores[:, present], average="macro")
    with pytest.warns(UndefinedMetricWarning):
        assert acc.auroc("macro") == pytest.approx(expected, **EXACT)
    # average precision: 0.0 for the class without positives, as scikit-learn
    with pytest.warns(UndefinedMetricWarning):
        ap = acc.average_precision(None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = skm.average_precision_score(onehot, scores, average=None)
    np.testing.assert_allclose(ap, reference, rtol=1e-12)


def test_all_positive_binary_roc_curve_follows_sklearn_nan_convention():
    acc = ScoreAccumulator("binary").update([1, 1, 1], [0.25, 0.5, 0.75])
    with pytest.warns(UndefinedMetricWarning, match="No negative samples"):
        fpr, tpr, _ = acc.roc_curve()
    assert np.isnan(fpr).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = skm.roc_curve([1, 1, 1], [0.25, 0.5, 0.75])
    np.testing.assert_allclose(tpr, reference[1])
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(acc.auroc())
    assert acc.average_precision() == 1.0


def test_empty_accumulator_views_warn():
    acc = ScoreAccumulator("multiclass", 3)
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(acc.auroc())
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(acc.calibration_error())
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(acc.brier_score())
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(acc.top_k_accuracy(1))


@pytest.mark.filterwarnings("ignore:The y_prob values do not sum to one")
@pytest.mark.parametrize("dtype", SCORE_DTYPES)
def test_multiclass_losses_equal_sklearn(dtype):
    y, logits, probabilities = multiclass_data(7)
    probabilities = probabilities.astype(dtype)
    logits = logits.astype(dtype)
    weights = np.random.default_rng(0).integers(1, 5, len(y))
    acc = feed(ScoreAccumulator("multiclass", 5), y, probabilities, weights)
    # The exact float64 sums of the given values (no probability is within eps of 0 or 1).
    wide = probabilities.astype(np.float64)
    assert acc.log_loss() == pytest.approx(skm.log_loss(y, wide, sample_weight=weights), rel=1e-12)
    assert acc.brier_score() == pytest.approx(
        skm.brier_score_loss(y, wide, sample_weight=weights), rel=1e-12
    )
    from_logits = feed(ScoreAccumulator("multiclass", 5, logits=True), y, logits, weights)
    exact = softmax(logits.astype(np.float64))
    assert from_logits.log_loss() == pytest.approx(
        skm.log_loss(y, exact, sample_weight=weights), rel=1e-9
    )
    assert from_logits.brier_score() == pytest.approx(
        skm.brier_score_loss(y, exact, sample_weight=weights), rel=1e-9
    )
    # the ranking of logits is the ranking of their softmax: top-k agree
    np.testing.assert_allclose(from_logits.top_k_accuracy(), acc.top_k_accuracy())


# ------------------------------------------------------------------------------ top-k
def test_top_k_every_k_with_sklearn_tie_rule():
    rng = np.random.default_rng(11)
    n, classes = 3000, 6
    y = rng.integers(0, classes, n)
    # Scores on a coarse grid: many ties, including with the true class.
    scores = rows_of_probabilities(rng.integers(0, 4, size=(n, classes)) / 4.0).astype(np.float32)
    weights = rng.random(n)
    acc = feed(ScoreAccumulator("multiclass", classes, weighted=True), y, scores, weights)
    every_k = acc.top_k_accuracy()
    for k in range(1, classes):
        expected = skm.top_k_accuracy_score(
            y, scores, k=k, labels=range(classes), sample_weight=weights
        )
        assert every_k[k - 1] == pytest.approx(expected, rel=1e-12)
        assert acc.top_k_accuracy(k) == pytest.approx(expected, rel=1e-12)
    # optimistic rule: the true class beats every class tied with it
    greater = (scores > scores[np.arange(n), y][:, None]).sum(axis=1)
    for k in range(1, classes):
        expected = np.average(greater < k, weights=weights)
        assert acc.top_k_accuracy(k, ties="optimistic") == pytest.approx(expected, rel=1e-12)
    recall = acc.top_k_recall(2)
    for label in range(classes):
        rows = y == label
        hits = skm.top_k_accuracy_score(
            y[rows], scores[rows], k=2, labels=range(classes), sample_weight=weights[rows]
        )
        assert recall[label] == pytest.approx(hits, rel=1e-12)
    with pytest.warns(UndefinedMetricWarning, match="greater than or equal"):
        assert acc.top_k_accuracy(classes) == pytest.approx(1.0)


# ------------------------------------------------------------------------------ calibration
def reference_calibration(confidence, correct, weights, n_bins, fine=25200):
    index = np.minimum((confidence.astype(np.float64) * fine).astype(np.int64), fine - 1)
    coarse = index // (fine // n_bins)
    total = weights.sum()
    ece, mce = 0.0, 0.0
    for b in range(n_bins):
        rows = coarse == b
        if not rows.any() or weights[rows].sum() == 0:
            continue
        w = weights[rows].sum()
        gap = abs(
            np.average(correct[rows], weights=weights[rows])
            - np.average(confidence[rows], weights=weights[rows])
        )
        ece += w / total * gap
        mce = max(mce, gap)
    return ece, mce


@pytest.mark.parametrize("n_bins", [10, 15, 100])
def test_calibration_error_multiclass_top_label(n_bins):
    y, _, probabilities = multiclass_data(9)
    weights = np.random.default_rng(1).random(len(y))
    acc = feed(ScoreAccumulator("multiclass", 5, weighted=True), y, probabilities, weights)
    confidence = probabilities.max(axis=1)
    correct = (probabilities.argmax(axis=1) == y).astype(float)
    ece, mce = reference_calibration(confidence, correct, weights, n_bins)
    assert acc.calibration_error(n_bins) == pytest.approx(ece, rel=1e-9)
    assert acc.max_calibration_error(n_bins) == pytest.approx(mce, rel=1e-9)
    diagram = acc.reliability_diagram(n_bins)
    assert diagram.counts.sum() == pytest.approx(weights.sum())
    assert len(diagram.edges) == n_bins + 1


def test_confidence_one_lands_in_last_bin_and_zero_in_first():
    acc = ScoreAccumulator("binary").update([1, 0, 1], [1.0, 0.0, 0.95])
    diagram = acc.reliability_diagram(10)
    assert diagram.counts.tolist() == [1, 0, 0, 0, 0, 0, 0, 0, 0, 2]
    assert diagram.accuracy[-1] == 1.0
    with pytest.raises(ValueError, match="does not divide"):
        acc.calibration_error(n_bins=11)


# ------------------------------------------------------------------------------ bounds
@pytest.mark.parametrize("seed", range(4))
def test_bounds_always_contain_the_exact_value(seed):
    rng = np.random.default_rng(seed)
    n = 3000
    y = rng.integers(0, 2, n)
    # Dense float64 scores in a narrow range: many distinct values per bin.
    scores = 0.5 + 0.01 * rng.random(n) + 0.002 * y
    acc = ScoreAccumulator("binary", bins=256).update(y, scores)
    checks = [
        (acc.auroc(with_bound=True), skm.roc_auc_score(y, scores)),
        (acc.average_precision(with_bound=True), skm.average_precision_score(y, scores)),
    ]
    for bound, exact in checks:
        assert bound.lower <= exact + 1e-12 and exact <= bound.upper + 1e-12
        assert bound.upper > bound.lower
    precision, recall, _ = skm.precision_recall_curve(y, scores)
    for target in (0.3, 0.8):
        _, bound = acc.precision_at_recall(target, with_bound=True)
        exact = precision[recall >= target].max()
        assert bound.lower <= exact + 1e-12 and exact <= bound.upper + 1e-12


# ------------------------------------------------------------------------------ thresholds
def brute_force_points(y, scores):
    thresholds = np.r_[np.inf, np.unique(scores)[::-1]]
    pred = scores[None, :] >= thresholds[:, None]
    tp = (pred & (y == 1)).sum(axis=1).astype(float)
    fp = (pred & (y == 0)).sum(axis=1).astype(float)
    return thresholds, tp, fp


def test_operating_points_equal_brute_force():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 600)
    scores = bf16(rng.random(600) * 0.6 + 0.4 * y)
    acc = ScoreAccumulator("binary").update(y, scores)
    thresholds, tp, fp = brute_force_points(y, scores)
    positives, negatives = y.sum(), (1 - y).sum()
    recall = tp / positives
    with np.errstate(invalid="ignore"):
        precision = np.where(tp + fp > 0, tp / (tp + fp), 0.0)
    specificity = 1 - fp / negatives
    point = acc.precision_at_recall(0.9)
    assert point.value == pytest.approx(precision[recall >= 0.9].max())
    assert (
        point.threshold
        in thresholds[(recall >= 0.9) & (precision == precision[recall >= 0.9].max())]
    )
    point = acc.recall_at_precision(0.8)
    assert point.value == pytest.approx(recall[(precision >= 0.8) & (tp + fp > 0)].max())
    point = acc.sensitivity_at_specificity(0.95)
    assert point.value == pytest.approx(recall[specificity >= 0.95].max())
    point = acc.specificity_at_sensitivity(0.95)
    assert point.value == pytest.approx(specificity[recall >= 0.95].max())
    f1 = 2 * tp / (positives + tp + fp)
    point = acc.best_threshold("f1")
    assert point.value == pytest.approx(f1.max())
    assert point.threshold == thresholds[np.argmax(f1)]
    point = acc.best_threshold("youden")
    assert point.value == pytest.approx((recall - fp / negatives).max())
    # the operating point's confusion matrix, at that threshold
    matrix = acc.confusion_at(point.threshold).confusion_matrix()
    np.testing.assert_array_equal(matrix, skm.confusion_matrix(y, scores >= point.threshold))


def test_confusion_at_thresholds_and_multilabel_matrix():
    y, _, probabilities = multiclass_data(3)
    scores = bf16(probabilities)
    acc = ScoreAccumulator("multiclass", 5).update(y, scores)
    onehot = np.eye(5, dtype=int)[y]
    for threshold in (0.0, 0.25, 0.5, 0.75, 1.0):
        expected = skm.multilabel_confusion_matrix(onehot, scores >= threshold)
        np.testing.assert_array_equal(acc.multilabel_confusion_matrix(threshold), expected)
        conf = acc.confusion_at(threshold, label=2)
        np.testing.assert_array_equal(conf.confusion_matrix(), expected[2])


def test_spread_average_precision_is_closer_on_continuous_scores_and_inside_the_bound():
    rng = np.random.default_rng(31)
    n = 100_000
    y = rng.integers(0, 2, n)
    scores = (1 / (1 + np.exp(-(rng.normal(size=n) + 1.5 * y)))).astype(np.float32)
    acc = ScoreAccumulator("binary").update(y, scores)
    exact = skm.average_precision_score(y, scores)
    tied = acc.average_precision(with_bound=True, within_bins="tied")
    spread = acc.average_precision(with_bound=True, within_bins="spread")
    auto = acc.average_precision(with_bound=True)  # continuous scores: spread
    assert (spread.lower, spread.upper) == (tied.lower, tied.upper) == (auto.lower, auto.upper)
    assert tied.lower <= spread.value <= tied.upper
    assert abs(spread.value - exact) < 2e-6 < 1e-5 < abs(tied.value - exact)
    assert abs(auto.value - exact) < 2e-6
    # Exact classes (every bfloat16 score is a bin value) keep the exact value.
    exact_acc = ScoreAccumulator("binary").update(y, bf16(scores))
    assert exact_acc.average_precision(within_bins="spread") == exact_acc.average_precision()
    # Probabilities 0 and 1 keep their own (single-valued) bins: ties there stay ties.
    ends = np.array([0.0, 0.0, 1.0, 1.0, 0.3, 0.6], dtype=np.float32)
    truth = np.array([0, 1, 1, 0, 1, 0])
    ends_acc = ScoreAccumulator("binary").update(truth, ends)
    assert ends_acc.average_precision(within_bins="spread") == pytest.approx(
        skm.average_precision_score(truth, ends), **EXACT
    )
    with pytest.raises(ValueError, match="within_bins"):
        acc.average_precision(within_bins="linear")  # type: ignore[arg-type]


def test_auto_average_precision_counts_repeated_values_as_ties():
    # Scores rounded to 2 decimals: each occupied bin holds one repeated value, far from the
    # next; "spread" would move them apart, "auto" keeps scikit-learn's tie rule.
    rng = np.random.default_rng(32)
    y = rng.integers(0, 2, 20_000)
    scores = np.round(np.clip(rng.normal(0.4 + 0.2 * y, 0.2), 0, 1), 2).astype(np.float32)
    acc = ScoreAccumulator("binary").update(y, scores)
    exact = skm.average_precision_score(y, scores)
    assert not acc.exact()[0]  # 0.01 is no bin value: the class is not exact
    assert acc.average_precision() == pytest.approx(exact, abs=1e-12)
    assert abs(acc.average_precision(within_bins="spread") - exact) > 1e-3
    # The rule reads the histogram only: any batch split or merge order gives the same value.
    halves = [ScoreAccumulator("binary").update(y[i::2], scores[i::2]) for i in (0, 1)]
    assert (halves[1] + halves[0]).average_precision() == acc.average_precision()


def test_spread_average_precision_multiclass_per_class_and_micro():
    y, _, probabilities = multiclass_data(12, n=3000)
    acc = ScoreAccumulator("multiclass", 5).update(y, probabilities)
    onehot = np.eye(5)[y]
    for average in (None, "macro", "micro"):
        bound = acc.average_precision(average, with_bound=True, within_bins="spread")
        exact = skm.average_precision_score(onehot, probabilities, average=average)
        assert np.all(bound.lower <= exact) and np.all(exact <= bound.upper)
        assert np.all(bound.lower <= bound.value) and np.all(bound.value <= bound.upper)
        np.testing.assert_allclose(bound.value, exact, atol=1e-3)


@pytest.mark.slow  # float64 scores: thresholds with float32 ones run by default (below)
def test_explicit_thresholds_quantise_like_torchmetrics():
    rng = np.random.default_rng(8)
    y = rng.integers(0, 2, 1000)
    scores = rng.random(1000)
    grid = np.linspace(0, 1, 11)
    acc = ScoreAccumulator("binary", thresholds=grid).update(y, scores)
    assert acc.num_bins == 12
    floored = grid[np.searchsorted(grid, scores, side="right") - 1]
    assert acc.auroc() == pytest.approx(skm.roc_auc_score(y, floored), **EXACT)
    quantised = ScoreAccumulator("binary", thresholds=grid).update(y, floored)
    assert quantised.exact().all()


# ------------------------------------------------------------------------------ multilabel
def test_multilabel_equals_sklearn_and_ignores_index():
    rng = np.random.default_rng(12)
    n, labels = 900, 4
    targets = rng.integers(0, 2, size=(n, labels))
    scores = bf16(np.clip(rng.random((n, labels)) * 0.7 + 0.3 * targets, 0, 1))
    acc = feed(ScoreAccumulator("multilabel", labels), targets, scores)
    for average in ("macro", "micro", "weighted", None):
        np.testing.assert_allclose(
            acc.auroc(average), skm.roc_auc_score(targets, scores, average=average), rtol=1e-12
        )
        np.testing.assert_allclose(
            acc.average_precision(average),
            skm.average_precision_score(targets, scores, average=average),
            rtol=1e-12,
        )
    masked = targets.copy()
    masked[::3, 1] = -1
    ignoring = ScoreAccumulator("multilabel", labels, ignore_index=-1).update(masked, scores)
    keep = masked[:, 1] != -1
    assert ignoring.auroc(None)[1] == pytest.approx(
        skm.roc_auc_score(targets[keep, 1], scores[keep, 1]), **EXACT
    )


def test_segmentation_layout_equals_flat_rows():
    rng = np.random.default_rng(13)
    classes = 3
    logits = rng.normal(size=(2, classes, 5, 7)).astype(np.float32)
    labels = rng.integers(0, classes, size=(2, 5, 7))
    labels[0, 0, :3] = 255
    acc = ScoreAccumulator("multiclass", classes, logits=True, ignore_index=255)
    acc.update(labels, logits)
    flat_scores = np.moveaxis(logits, 1, -1).reshape(-1, classes)
    flat_labels = labels.reshape(-1)
    keep = flat_labels != 255
    flat = ScoreAccumulator("multiclass", classes, logits=True).update(
        flat_labels[keep], flat_scores[keep]
    )
    assert state_bytes(acc) == state_bytes(flat)
    last = ScoreAccumulator(
        "multiclass", classes, logits=True, ignore_index=255, class_axis=-1
    ).update(labels, np.moveaxis(logits, 1, -1))
    assert state_bytes(last) == state_bytes(acc)


# ------------------------------------------------------------------------------ bad input
def state_bytes(acc: ScoreAccumulator) -> dict[str, bytes]:
    return {name: array.tobytes() for name, array in acc.state_arrays().items()}


@pytest.mark.parametrize("rows", [50, 20000], ids=["one-chunk", "chunks"])
def test_bad_input_raises_and_leaves_state_bit_identical(rows):
    y, _, probabilities = multiclass_data(0, n=rows)
    acc = ScoreAccumulator("multiclass", 5).update(y[:10], probabilities[:10])
    before = state_bytes(acc)
    bad = probabilities.copy()
    bad[rows - 5, 3] = 1.5
    with pytest.raises(ValueError, match=rf"holds 1.5 at position \({rows - 5}, 3\).*\[0, 1\]"):
        acc.update(y, bad)
    assert state_bytes(acc) == before
    bad[rows - 5, 3] = np.nan
    with pytest.raises(ValueError, match="holds nan"):
        acc.update(y, bad)
    labels = y.copy()
    labels[rows - 2] = 5
    with pytest.raises(ValueError, match=f"`y_true` holds label 5 at position {rows - 2}"):
        acc.update(labels, probabilities)
    assert state_bytes(acc) == before
    with pytest.raises(ValueError, match="whole numbers"):
        acc.update(y, probabilities, np.full(rows, 0.5))
    with pytest.raises(ValueError, match="num_classes"):
        acc.update(y, probabilities[:, :4])
    assert state_bytes(acc) == before


@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "weighted"])
@pytest.mark.parametrize(
    ("value", "rule"),
    [
        (np.nan, "finite and non-negative"),
        (np.inf, "finite and non-negative"),
        (-np.inf, "finite and non-negative"),
        (-1.0, "finite and non-negative"),
        (-1e-300, "finite and non-negative"),
        (2.5, "whole numbers"),
    ],
)
@pytest.mark.parametrize("task", ["multiclass", "binary", "multilabel"])
def test_bad_weights_are_named_with_their_first_position_and_change_nothing(
    task, value, rule, weighted
):
    rng = np.random.default_rng(3)
    # Samples of shape (4, 6); classes or labels on axis 1 (the default class axis).
    if task == "multiclass":
        y = rng.integers(0, 3, (4, 6))
        scores = rng.dirichlet(np.ones(3), (4, 6)).astype(np.float32).transpose(0, 2, 1)
        acc = ScoreAccumulator("multiclass", 3, weighted=weighted)
    elif task == "binary":
        y = rng.integers(0, 2, (4, 6))
        scores = rng.random((4, 6)).astype(np.float32)
        acc = ScoreAccumulator("binary", weighted=weighted)
    else:
        y = rng.integers(0, 2, (4, 3, 6))
        scores = rng.random((4, 3, 6)).astype(np.float32)
        acc = ScoreAccumulator("multilabel", 3, weighted=weighted)
    acc.update(y, scores, np.ones((4, 6)))
    before = state_bytes(acc)
    weights = np.full((4, 6), 2.0)
    weights[2, 4] = value
    weights[3, 1] = -5.0  # a later bad weight: the first one is reported
    if weighted and rule == "whole numbers":  # fractional weights are what weighted is for
        acc.update(y, scores, np.where(weights >= 0, weights, 1.0))
        assert state_bytes(acc) != before
        return
    match = rf"`weights` holds {value!r} at position \(2, 4\), but weights must be {rule}"
    with pytest.raises(ValueError, match=match):
        acc.update(y, scores, weights)
    assert state_bytes(acc) == before
    # The same samples as a flat batch of 24: the position is the flat index.
    flat_y = y.reshape(24) if y.ndim == 2 else y.transpose(0, 2, 1).reshape(24, 3)
    flat_scores = (
        scores.reshape(24) if scores.ndim == 2 else scores.transpose(0, 2, 1).reshape(24, 3)
    )
    with pytest.raises(ValueError, match=r"at position 16, but"):
        acc.update(flat_y, flat_scores, weights.reshape(-1))
    assert state_bytes(acc) == before


def test_weights_of_any_numeric_type_count_as_their_float64_values():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 4, 300)
    scores = rng.dirichlet(np.ones(4), 300).astype(np.float32)
    weights = rng.integers(0, 5, 300)
    reference = ScoreAccumulator("multiclass", 4).update(y, scores, weights.astype(np.float64))
    for kind in (np.int8, np.uint16, np.int64, np.float32, bool):
        acc = ScoreAccumulator("multiclass", 4).update(y, scores, weights.astype(kind))
        if kind is bool:
            reference_bool = ScoreAccumulator("multiclass", 4).update(
                y, scores, (weights > 0).astype(np.float64)
            )
            assert state_bytes(acc) == state_bytes(reference_bool)
        else:
            assert state_bytes(acc) == state_bytes(reference)
    # Weights of zero count nothing: the state equals one counted without those rows.
    keep = weights > 0
    weighted = ScoreAccumulator("multiclass", 4, weighted=True)
    weighted.update(y, scores, weights.astype(np.float64))
    unweighted_rows = ScoreAccumulator("multiclass", 4, weighted=True)
    unweighted_rows.update(y[keep], scores[keep], weights[keep].astype(np.float64))
    np.testing.assert_array_equal(
        weighted.state_arrays()["curves"], unweighted_rows.state_arrays()["curves"]
    )


def test_bad_configuration():
    with pytest.raises(ValueError, match="`task`"):
        ScoreAccumulator("ranking")
    with pytest.raises(ValueError, match="`num_classes`"):
        ScoreAccumulator("multiclass", 1)
    with pytest.raises(ValueError, match="power of two"):
        ScoreAccumulator("binary", bins=1000)
    with pytest.raises(ValueError, match="strictly increasing"):
        ScoreAccumulator("binary", thresholds=[0.5, 0.2])
    with pytest.raises(TypeError, match="`logits`"):
        ScoreAccumulator("binary", logits="yes")


def test_logit_rows_and_targets_are_checked():
    acc = ScoreAccumulator("multiclass", 2, logits=True)
    with pytest.raises(ValueError, match="all -inf"):
        acc.update([0, 1], np.array([[0.0, 1.0], [-np.inf, -np.inf]], dtype=np.float32))
    binary = ScoreAccumulator("binary")
    with pytest.raises(ValueError, match="targets must be 0 or 1"):
        binary.update([0, 2], np.array([0.5, 0.5], dtype=np.float32))


# ------------------------------------------------------------------------------ memory, state
def test_default_memory_shrinks_at_many_classes():
    assert ScoreAccumulator("multiclass", 10).num_bins == 41347
    # multiclass logits are keyed by their softmax probability; multilabel logits by the logit
    assert ScoreAccumulator("multiclass", 10, logits=True).num_bins == 41347
    assert ScoreAccumulator("multilabel", 10, logits=True).num_bins == 60160
    big = ScoreAccumulator("multiclass", 1000)
    assert big.num_classes * big.num_bins <= 1 << 22
    state = big.state_arrays()
    assert state["curves"].nbytes <= 64 * 2**20


def test_pickle_and_bytes_round_trip():
    y, _, probabilities = multiclass_data(6)
    acc = ScoreAccumulator("multiclass", 5, weighted=True).update(
        y, probabilities, np.ones(len(y)) * 0.5
    )
    assert pickle.loads(pickle.dumps(acc)) == acc
    restored = ScoreAccumulator.from_bytes(acc.to_bytes())
    assert restored == acc
    assert restored.auroc() == acc.auroc()
    copied = acc.copy()
    assert copied == acc and copied is not acc


def test_merge_equals_single_pass():
    y, _, probabilities = multiclass_data(10)
    whole = ScoreAccumulator("multiclass", 5).update(y, probabilities)
    left = ScoreAccumulator("multiclass", 5).update(y[:700], probabilities[:700])
    right = ScoreAccumulator("multiclass", 5).update(y[700:], probabilities[700:])
    merged = left + right
    mine, theirs = merged.state_arrays(), whole.state_arrays()
    for name in ("curves", "inexact", "ranks", "calibration"):
        np.testing.assert_array_equal(mine[name], theirs[name])
    np.testing.assert_allclose(mine["losses"], theirs["losses"], rtol=1e-12)
    assert merged.auroc() == whole.auroc()
    with pytest.raises(ValueError, match="bins"):
        merged.merge(ScoreAccumulator("multiclass", 5, bins=1024))


def test_explicit_thresholds_equal_torchmetrics_binned():
    torch = pytest.importorskip("torch")
    classification = pytest.importorskip("torchmetrics.classification")
    rng = np.random.default_rng(21)
    y = rng.integers(0, 2, 5000)
    scores = (rng.random(5000) * 0.7 + 0.3 * y).astype(np.float32)
    grid = np.linspace(0, 1, 100)
    acc = ScoreAccumulator("binary", thresholds=grid).update(y, scores)
    thresholds = torch.tensor(grid, dtype=torch.float32)
    auroc = classification.BinaryAUROC(thresholds=thresholds)
    ap = classification.BinaryAveragePrecision(thresholds=thresholds)
    for metric in (auroc, ap):
        metric.update(torch.from_numpy(scores), torch.from_numpy(y))
    # torchmetrics computes in float32
    assert acc.auroc() == pytest.approx(float(auroc.compute()), abs=1e-6)
    assert acc.average_precision() == pytest.approx(float(ap.compute()), abs=1e-6)


def test_in_a_group_with_a_confusion_accumulator():
    from metricstream import AccumulatorGroup, ConfusionAccumulator

    y, _, probabilities = multiclass_data(22, classes=4)
    group = AccumulatorGroup(
        {"matrix": ConfusionAccumulator(4), "scores": ScoreAccumulator("multiclass", 4)}
    )
    group.update(y, probabilities)
    assert group["scores"].top_k_accuracy(1) == pytest.approx(group["matrix"].accuracy())
    bad = probabilities.copy()
    bad[3, 0] = -0.5
    before = state_bytes(group["scores"])
    with pytest.raises(ValueError):
        group.update(y, bad)
    assert state_bytes(group["scores"]) == before


@pytest.mark.parametrize(
    "config",
    [
        dict(logits=True),
        # float64 scores (the thresholds' values) with thresholds and logits: slow
        pytest.param(
            dict(thresholds=np.linspace(-3, 3, 25), logits=True),
            id="thresholds",
            marks=pytest.mark.slow,
        ),
        dict(),
    ],
    ids=["logits", "thresholds", "probabilities"],
)
def test_confusion_at_every_bin_value_equals_sklearn(config):
    rng = np.random.default_rng(23)
    y = rng.integers(0, 2, 400)
    raw = rng.normal(size=400) + y
    if "logits" not in config:
        raw = 1 / (1 + np.exp(-raw))
    scores = bf16(raw.astype(np.float32))
    if "thresholds" in config:
        grid = config["thresholds"]
        scores = grid[np.clip(np.searchsorted(grid, scores, side="right") - 1, 0, None)]
    acc = ScoreAccumulator("binary", **config).update(y, scores)
    for threshold in np.unique(scores)[::7]:
        expected = skm.confusion_matrix(y, scores >= threshold, labels=[0, 1])
        np.testing.assert_array_equal(acc.confusion_at(threshold).confusion_matrix(), expected)


def test_weighted_large_batch_failure_changes_nothing():
    rng = np.random.default_rng(24)
    n = 9000
    targets = rng.integers(0, 2, size=(n, 3))
    scores = rng.random((n, 3)).astype(np.float32)
    weights = rng.random(n)
    acc = ScoreAccumulator("multilabel", 3, weighted=True).update(
        targets[:50], scores[:50], weights[:50]
    )
    before = state_bytes(acc)
    bad = targets.copy()
    bad[n - 1, 2] = 2
    with pytest.raises(ValueError, match=rf"`y_true` holds 2 at position \({n - 1}, 2\)"):
        acc.update(bad, scores, weights)
    assert state_bytes(acc) == before
    acc.update(targets, scores, weights)
    assert acc.num_samples == pytest.approx(3 * (weights.sum() + weights[:50].sum()))
    bound = acc.auroc(None, with_bound=True)
    for j in range(3):
        exact = skm.roc_auc_score(
            np.r_[targets[:50, j], targets[:, j]],
            np.r_[scores[:50, j], scores[:, j]],
            sample_weight=np.r_[weights[:50], weights],
        )
        assert bound.lower[j] <= exact <= bound.upper[j]


@pytest.mark.parametrize(
    "config",
    [dict(), dict(logits=True), dict(ignore_index=-1), dict(thresholds=np.linspace(0, 1, 11))],
    ids=["probabilities", "logits", "ignore", "thresholds"],
)
@pytest.mark.parametrize("dtype", SCORE_DTYPES)
def test_small_batch_fast_path_equals_general_path(config, dtype):
    """numpy (N,) labels with C-contiguous (N, C) scores take one kernel call; lists,
    non-contiguous scores and int32 labels take the general path: same state, bit for bit,
    and the same errors."""
    y, logits, probabilities = multiclass_data(3, n=700)
    scores = (logits if config.get("logits") else probabilities).astype(dtype)
    if "ignore_index" in config:
        y = y.copy()
        y[::7] = -1
    fast = ScoreAccumulator("multiclass", 5, **config)
    general = ScoreAccumulator("multiclass", 5, **config)
    for lo in range(0, 700, 256):
        fast.update(y[lo : lo + 256], scores[lo : lo + 256])
        general.update(y[lo : lo + 256].tolist(), np.asfortranarray(scores[lo : lo + 256]))
    assert state_bytes(fast) == state_bytes(general)
    bad = scores[:256].copy()
    bad[200, 2] = np.nan
    before = state_bytes(fast)
    messages = []
    for acc, batch in ((fast, bad), (general, np.asfortranarray(bad))):
        with pytest.raises(ValueError) as error:
            acc.update(y[:256], batch)
        messages.append(str(error.value))
    assert messages[0] == messages[1] and "position (200, 2)" in messages[0]
    assert state_bytes(fast) == before
    labels = y[:256].copy()
    labels[100] = 9
    with pytest.raises(ValueError, match="label 9 at position 100"):
        fast.update(labels, scores[:256])
    assert state_bytes(fast) == before
    # A copy and a pickled round trip count into their own arrays, not the original's.
    twin = pickle.loads(pickle.dumps(fast))
    twin.update(y[:256], scores[:256])
    copy = fast.copy().update(y[:256], scores[:256])
    assert state_bytes(fast) == before
    assert state_bytes(twin) == state_bytes(copy) != before


@pytest.mark.parametrize(
    "config",
    [dict(), dict(logits=True), dict(ignore_index=-1)],
    ids=["probabilities", "logits", "ignore"],
)
@pytest.mark.parametrize("dtype", SCORE_DTYPES)
def test_binary_fast_path_equals_general_path(config, dtype):
    """numpy (N,) targets and scores take one kernel call; lists and strided arrays take the
    general path: same state, bit for bit, and the same errors, state unchanged."""
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 900)
    logits = rng.normal(size=900) + 1.5 * y
    scores = (logits if config.get("logits") else 1 / (1 + np.exp(-logits))).astype(dtype)
    if "ignore_index" in config:
        y[::9] = -1
    fast = ScoreAccumulator("binary", **config)
    general = ScoreAccumulator("binary", **config)
    for lo in range(0, 900, 256):
        fast.update(y[lo : lo + 256], scores[lo : lo + 256])
        general.update(y[lo : lo + 256].tolist(), np.repeat(scores[lo : lo + 256], 2)[::2])
    assert state_bytes(fast) == state_bytes(general)
    before = state_bytes(fast)
    bad = scores[:256].copy()
    bad[17] = np.nan
    messages = []
    for acc, batch in ((fast, bad), (general, np.repeat(bad, 2)[::2])):
        with pytest.raises(ValueError) as error:
            acc.update(y[:256], batch)
        messages.append(str(error.value))
    assert messages[0] == messages[1] and "position 17" in messages[0]
    targets = y[:256].copy()
    targets[30] = 2
    with pytest.raises(ValueError, match="holds 2 at position 30, but targets must be 0 or 1"):
        fast.update(targets, scores[:256])
    assert state_bytes(fast) == before


def test_scores_of_ignored_rows_are_not_read():
    """A row whose label is `ignore_index` is skipped whatever its scores hold (NaN here),
    in the small-batch and the large-batch paths alike."""
    y, _, probabilities = multiclass_data(13, n=9000)
    y = y.copy()
    y[::11] = -1
    bad = probabilities.copy()
    bad[::11, 1] = np.nan
    for rows in (200, 9000):
        with_nan = ScoreAccumulator("multiclass", 5, ignore_index=-1).update(y[:rows], bad[:rows])
        kept = y[:rows] != -1
        clean = ScoreAccumulator("multiclass", 5).update(y[:rows][kept], probabilities[:rows][kept])
        for name in ("curves", "inexact", "ranks", "calibration"):
            np.testing.assert_array_equal(
                with_nan.state_arrays()[name], clean.state_arrays()[name], err_msg=name
            )


def _row_kernel_cases(classes: int, n: int, dtype) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(classes)
    dirichlet = rng.dirichlet(np.full(classes, 0.1), n)
    zeros = np.where(rng.random((n, classes)) < 0.3, -0.0, rng.random((n, classes)) ** 8)
    uniform = rng.random((n, classes))
    ties = rows_of_probabilities(rng.integers(0, 4, (n, classes)) / 3)
    ties[::7] = np.eye(classes)[rng.integers(0, classes, len(ties[::7]))]
    return {
        "uniform": (uniform / uniform.sum(axis=1, keepdims=True)).astype(dtype),
        "ties, exact 0 and 1": ties.astype(dtype),
        "confident": dirichlet.astype(dtype),
        "-0.0 and tiny": rows_of_probabilities(zeros).astype(dtype),
        "bfloat16": bf16(dirichlet).astype(dtype),
    }


@pytest.mark.parametrize("classes", [2, 10, 16])
@pytest.mark.parametrize("dtype", SCORE_DTYPES)
def test_row_kernel_equals_block_kernel(classes, dtype):
    """Unweighted probabilities of at most 16 classes are counted row by row (one vector a
    row); with weights the same rows go through the block kernel: the same counts bit for bit
    and the same float sums to rounding, on ties, exact 0 and 1, -0.0, ignored rows (whose
    scores are NaN) and batches of several blocks."""
    n = 700
    y = np.random.default_rng(1).integers(0, classes, n)
    y[::9] = -100
    for name, scores in _row_kernel_cases(classes, n, dtype).items():
        scores[::9] = np.nan
        rows = feed(ScoreAccumulator("multiclass", classes, ignore_index=-100), y, scores)
        block = feed(
            ScoreAccumulator("multiclass", classes, ignore_index=-100), y, scores, np.ones(n)
        )
        mine, theirs = rows.state_arrays(), block.state_arrays()
        for array in ("curves", "inexact", "ranks", "calibration"):
            np.testing.assert_array_equal(mine[array], theirs[array], err_msg=f"{name}: {array}")
        for array in ("confidence", "losses"):
            np.testing.assert_allclose(mine[array], theirs[array], rtol=1e-12, err_msg=name)


@pytest.mark.parametrize("classes", [65, 72, 203])
def test_wide_rows_copied_in_tiles_count_as_any_layout(classes):
    """Rows of more than 64 float32 probabilities are copied class by class in 8 x 8 tiles
    (the rows and classes past the last whole tile one by one): the state equals that of the
    same scores Fortran-ordered (copied element by element) or as every other row of a larger
    array, bit for bit, and its counts those of the scores as float64 (whose log loss clips
    at float64's eps), with ignored rows holding NaN and batches of several blocks whose
    sizes are not multiples of 8."""
    n = 700
    rng = np.random.default_rng(classes)
    y = rng.integers(0, classes, n)
    y[::9] = -100
    scores = rng.dirichlet(np.full(classes, 0.3), n).astype(np.float32)
    scores[::9] = np.nan
    spaced = np.zeros((2 * n, classes), np.float32)
    spaced[::2] = scores

    def state(values: np.ndarray) -> dict[str, bytes]:
        acc = ScoreAccumulator("multiclass", classes, ignore_index=-100)
        return state_bytes(feed(acc, y, values, seed=classes))

    expected = state(np.asfortranarray(scores))
    assert state(scores) == expected
    assert state(spaced[::2]) == expected
    wide = state(scores.astype(np.float64))
    for name in ("curves", "inexact", "ranks", "calibration", "confidence"):
        assert wide[name] == expected[name], name


@pytest.mark.slow  # misaligned arrays compile kernel specialisations of their own
def test_wide_rows_copied_in_tiles_from_misaligned_memory():
    """The 8 x 8 tiles of wide float32 rows read memory that is not 4-byte aligned as well."""
    y, _, probabilities = multiclass_data(23, n=300, classes=70)
    probabilities = probabilities.astype(np.float32)
    expected = state_bytes(ScoreAccumulator("multiclass", 70).update(y, probabilities))
    buffer = np.zeros(probabilities.nbytes + 1, np.uint8)
    buffer[1:] = probabilities.view(np.uint8).reshape(-1)
    shifted = np.frombuffer(buffer.data, np.float32, offset=1).reshape(300, 70)
    assert not shifted.flags.aligned
    assert state_bytes(ScoreAccumulator("multiclass", 70).update(y, shifted)) == expected


def test_row_kernel_reads_any_layout():
    """Strided, Fortran-ordered and read-only arrays count as their contiguous copies."""
    y, _, probabilities = multiclass_data(21, n=300, classes=10)
    expected = state_bytes(ScoreAccumulator("multiclass", 10).update(y, probabilities))
    wide = np.repeat(probabilities, 2, axis=1)
    frozen = probabilities.copy()
    frozen.flags.writeable = False
    frozen_labels = y.copy()
    frozen_labels.flags.writeable = False
    for labels, scores in (
        (np.repeat(y, 2)[::2], wide[:, ::2]),
        (y, np.asfortranarray(probabilities)),
        (frozen_labels, frozen),
    ):
        acc = ScoreAccumulator("multiclass", 10).update(labels, scores)
        assert state_bytes(acc) == expected


@pytest.mark.slow  # misaligned arrays compile kernel specialisations of their own
def test_row_kernel_leaves_misaligned_arrays_to_the_general_path():
    y, _, probabilities = multiclass_data(22, n=300, classes=10)
    expected = ScoreAccumulator("multiclass", 10).update(y, probabilities).state_arrays()
    buffer = np.zeros(probabilities.nbytes + 1, np.uint8)
    buffer[1:] = probabilities.view(np.uint8).reshape(-1)
    shifted = np.frombuffer(buffer.data, np.float32, offset=1).reshape(300, 10)
    assert not shifted.flags.aligned
    mine = ScoreAccumulator("multiclass", 10).update(y, shifted).state_arrays()
    for name, array in expected.items():
        np.testing.assert_allclose(mine[name], array, rtol=1e-12, err_msg=name)
