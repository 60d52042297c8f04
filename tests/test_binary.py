"""Binary tasks: ``average="binary"`` with ``pos_label``, single-class selections, and F-beta's
limits, against scikit-learn."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import sklearn.metrics as skm

from metricstream import metrics as M
from metricstream.exceptions import UndefinedMetricWarning

from .marks import slow_beyond

ZERO_DIVISIONS = ["warn", 0, 1, np.nan]
TOL = dict(rtol=1e-12, atol=1e-12)


def quietly(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


def _cases():
    # degenerate first (they run by default): one class only, never predicted, never true,
    # nothing correct; then random streams, whole and weighted (most of them slow: CI only)
    cases = []
    for y_true, y_pred in [
        ([0, 0, 0], [0, 0, 0]),
        ([1, 1], [1, 1]),
        ([0, 0, 1], [1, 1, 0]),
        ([1, 1, 1], [0, 0, 0]),
        ([0, 0, 0], [1, 1, 1]),
    ]:
        cases.append((np.array(y_true), np.array(y_pred), None))
    rng = np.random.default_rng(20)
    for n in (1, 2, 7, 50):
        for _ in range(6):
            y_true = rng.integers(0, 2, n)
            y_pred = rng.integers(0, 2, n)
            weights = rng.integers(0, 4, n).astype(float)
            weights[0] = 1.0  # scikit-learn refuses all-zero weights
            cases.append((y_true, y_pred, None))
            cases.append((y_true, y_pred, weights))
    return cases


CASES = _cases()
BINARY_METRICS = [
    (M.precision, skm.precision_score, {}),
    (M.recall, skm.recall_score, {}),
    (M.f1, skm.f1_score, {}),
    (lambda m, **k: M.fbeta(m, 0.5, **k), lambda *a, **k: skm.fbeta_score(*a, beta=0.5, **k), {}),
    (lambda m, **k: M.fbeta(m, 2.0, **k), lambda *a, **k: skm.fbeta_score(*a, beta=2.0, **k), {}),
    (lambda m, **k: M.fbeta(m, 0.0, **k), lambda *a, **k: skm.fbeta_score(*a, beta=0.0, **k), {}),
    (
        lambda m, **k: M.fbeta(m, np.inf, **k),
        lambda *a, **k: skm.fbeta_score(*a, beta=np.inf, **k),
        {},
    ),
    (M.jaccard, skm.jaccard_score, {"nan": False}),
]


def _matrix(y_true, y_pred, weights):
    return skm.confusion_matrix(y_true, y_pred, labels=[0, 1], sample_weight=weights)


def _assert_same(ours, theirs):
    assert isinstance(ours, float)
    np.testing.assert_allclose(ours, theirs, equal_nan=True, **TOL)


@pytest.mark.parametrize("zero_division", ZERO_DIVISIONS, ids=str)
@pytest.mark.parametrize("pos_label", [0, 1])
@pytest.mark.parametrize("index", slow_beyond(range(len(CASES)), 13))
def test_binary_average_matches_sklearn(index, pos_label, zero_division):
    y_true, y_pred, weights = CASES[index]
    matrix = _matrix(y_true, y_pred, weights)
    for ours_fn, theirs_fn, options in BINARY_METRICS:
        if options.get("nan") is False and zero_division is np.nan:
            continue
        theirs = quietly(
            theirs_fn,
            y_true,
            y_pred,
            average="binary",
            pos_label=pos_label,
            zero_division=zero_division,
            sample_weight=weights,
        )
        ours = quietly(
            ours_fn, matrix, average="binary", pos_label=pos_label, zero_division=zero_division
        )
        _assert_same(ours, theirs)


@pytest.mark.parametrize("pos_label", [0, 1])
@pytest.mark.parametrize("index", slow_beyond(range(len(CASES)), 13))
def test_binary_rates_are_the_other_class_seen_from_the_positive_one(index, pos_label):
    y_true, y_pred, weights = CASES[index]
    matrix = _matrix(y_true, y_pred, weights)
    negative = 1 - pos_label
    # specificity of the positive class is the recall of the negative class, NPV its precision
    spec = M.specificity(matrix, average="binary", pos_label=pos_label, zero_division=np.nan)
    npv = M.negative_predictive_value(
        matrix, average="binary", pos_label=pos_label, zero_division=np.nan
    )
    expect_spec = skm.recall_score(
        y_true,
        y_pred,
        average="binary",
        pos_label=negative,
        zero_division=np.nan,
        sample_weight=weights,
    )
    expect_npv = skm.precision_score(
        y_true,
        y_pred,
        average="binary",
        pos_label=negative,
        zero_division=np.nan,
        sample_weight=weights,
    )
    _assert_same(spec, expect_spec)
    _assert_same(npv, expect_npv)
    fnr = M.false_negative_rate(matrix, average="binary", pos_label=pos_label, zero_division=np.nan)
    recall = M.recall(matrix, average="binary", pos_label=pos_label, zero_division=np.nan)
    if not np.isnan(recall):
        assert fnr == pytest.approx(1 - recall, abs=1e-15)
    informedness = M.informedness(
        matrix, average="binary", pos_label=pos_label, zero_division=np.nan
    )
    if not np.isnan(informedness):
        expected = skm.balanced_accuracy_score(y_true, y_pred, adjusted=True, sample_weight=weights)
        np.testing.assert_allclose(informedness, expected, **TOL)


@pytest.mark.parametrize("index", range(0, len(CASES), 3))
def test_prfs_binary_matches_sklearn(index):
    y_true, y_pred, weights = CASES[index]
    matrix = _matrix(y_true, y_pred, weights)
    for beta in (0.0, 0.5, 1.0, np.inf):
        ours = quietly(
            M.precision_recall_fscore_support, matrix, beta=beta, average="binary", pos_label=0
        )
        theirs = quietly(
            skm.precision_recall_fscore_support,
            y_true,
            y_pred,
            beta=beta,
            average="binary",
            pos_label=0,
            sample_weight=weights,
        )
        assert ours[3] is None and theirs[3] is None
        np.testing.assert_allclose(ours[:3], theirs[:3], **TOL)


def test_binary_warning_text_matches_sklearn():
    matrix = [[3, 0], [2, 0]]  # class 1 never predicted
    with pytest.warns(UndefinedMetricWarning) as ours:
        M.precision(matrix, average="binary")
    with pytest.warns(skm._classification.UndefinedMetricWarning) as theirs:
        skm.precision_score([0, 0, 0, 1, 1], [0, 0, 0, 0, 0], average="binary")
    assert str(ours[0].message) == str(theirs[0].message)


def test_binary_rejects_more_than_two_classes_as_sklearn():
    matrix = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    for function in (M.precision, M.recall, M.f1, M.jaccard, M.specificity):
        with pytest.raises(
            ValueError,
            match=r"Target is multiclass \(3 classes\) but "
            r"average='binary'. Please choose another average setting",
        ):
            function(matrix, average="binary")
    with pytest.raises(ValueError, match="Target is multiclass"):
        skm.precision_score([0, 1, 2], [0, 1, 2], average="binary")


@pytest.mark.parametrize(
    "pos_label, error, match",
    [
        (2, ValueError, r"`pos_label` is 2, but class indices must be in \[0, 2\)"),
        (-1, ValueError, r"`pos_label` is -1"),
        (1.0, TypeError, r"`pos_label` must be an integer class index, got float 1.0"),
        (True, TypeError, r"`pos_label` must be an integer class index, got bool"),
        ("1", TypeError, r"`pos_label` must be an integer class index, got str"),
    ],
)
def test_bad_pos_label(pos_label, error, match):
    with pytest.raises(error, match=match):
        M.precision([[1, 0], [0, 1]], average="binary", pos_label=pos_label)


def test_pos_label_without_binary_warns_as_sklearn():
    matrix = [[2, 1], [0, 3]]
    with pytest.warns(
        UserWarning,
        match=r"Note that pos_label \(set to 0\) is ignored when "
        r"average != 'binary' \(got 'macro'\)",
    ):
        ours = M.precision(matrix, average="macro", pos_label=0)
    assert ours == M.precision(matrix, average="macro")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        M.precision(matrix, average="macro", pos_label=1)  # the default: silent


def test_binary_ignores_labels_and_ignore_absent_as_sklearn():
    matrix = [[2, 1], [0, 0]]
    value = M.recall(matrix, average="binary", pos_label=0, labels=[1], ignore_absent=True)
    assert value == M.recall(matrix, average="binary", pos_label=0) == 2 / 3
    expected = skm.recall_score([0, 0, 0], [0, 0, 1], average="binary", pos_label=0, labels=[1])
    assert value == expected


def test_binary_of_a_single_class_matrix():
    assert M.precision([[4]], average="binary", pos_label=0) == 1.0
    with pytest.raises(ValueError, match=r"`pos_label` is 1, but class indices must be in"):
        M.precision([[4]], average="binary")


@pytest.mark.parametrize("zero_division", ZERO_DIVISIONS, ids=str)
def test_one_element_labels_selection_is_documented_behaviour(zero_division):
    matrix = np.array([[4, 1, 1], [6, 2, 2], [3, 0, 0]])
    y_true = np.repeat([0, 0, 0, 1, 1, 1, 2, 2, 2], matrix.ravel())
    y_pred = np.repeat([0, 1, 2, 0, 1, 2, 0, 1, 2], matrix.ravel())
    for i in range(3):
        for ours_fn, theirs_fn in [
            (M.precision, skm.precision_score),
            (M.recall, skm.recall_score),
            (M.f1, skm.f1_score),
        ]:
            per_class = quietly(ours_fn, matrix, labels=[i], zero_division=zero_division)
            assert isinstance(per_class, np.ndarray) and per_class.shape == (1,)
            theirs = quietly(
                theirs_fn, y_true, y_pred, labels=[i], average=None, zero_division=zero_division
            )
            np.testing.assert_allclose(per_class, theirs, equal_nan=True, **TOL)
            for average in ("micro", "macro", "weighted"):
                value = quietly(
                    ours_fn, matrix, labels=[i], average=average, zero_division=zero_division
                )
                assert isinstance(value, float)
                expected = quietly(
                    theirs_fn,
                    y_true,
                    y_pred,
                    labels=[i],
                    average=average,
                    zero_division=zero_division,
                )
                np.testing.assert_allclose(value, expected, equal_nan=True, **TOL)
    # a scalar is a one-element selection too
    np.testing.assert_array_equal(M.recall(matrix, labels=1), M.recall(matrix, labels=[1]))


@pytest.mark.parametrize("beta", [0.0, np.inf])
def test_fbeta_limits_are_silent_as_sklearn(beta):
    # class 2 never predicted (precision 0/0) and class 3 never true (recall 0/0)
    matrix = np.array([[2, 0, 0, 1], [0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    y_true = [0, 0, 0, 1, 2]
    y_pred = [0, 0, 3, 1, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        theirs = skm.fbeta_score(y_true, y_pred, beta=beta, average=None, labels=[0, 1, 2, 3])
        ours = M.fbeta(matrix, beta)
        ours_macro = M.fbeta(matrix, beta, average="macro")
    np.testing.assert_allclose(ours, theirs, **TOL)
    assert ours_macro == pytest.approx(theirs.mean(), abs=1e-15)
    ones = M.fbeta(matrix, beta, zero_division=1)
    assert ones[2 if beta == 0 else 3] == 1.0
    # F-beta with a finite beta still warns where scikit-learn does
    with pytest.warns(UndefinedMetricWarning, match="F-score is ill-defined"):
        M.fbeta([[1, 0], [0, 0]], 2.0)


# ---------------------------------------------------------------------------- end to end
def _binary_stream(seed, n=300):
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, 2, n)
    logits = rng.normal(size=n) + 1.2 * (2 * y_true - 1)
    logits[:3] = 0.0  # exactly on the threshold: positive (score >= threshold)
    probabilities = 1 / (1 + np.exp(-logits))
    probabilities[:3] = 0.5
    weights = rng.integers(0, 3, n)
    weights[0] = 1
    return y_true, logits, probabilities, weights


# (name, scores from (probabilities, logits), threshold (a probability), logits)
END_TO_END = [
    ("sigmoid (N,)", lambda p, x: p, 0.5, False),
    ("sigmoid (N, 1)", lambda p, x: p[:, None], 0.5, False),
    ("sigmoid float32 (N,)", lambda p, x: p.astype(np.float32), 0.5, False),
    ("logits (N,)", lambda p, x: x, 0.5, True),
    ("logits (N, 1)", lambda p, x: x[:, None], 0.5, True),
]


@pytest.mark.parametrize("pos_label", [0, 1])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize(
    "make, threshold, logits",
    [
        # float32 scores are kernels of their own (2-3 s each, cold); the training-loop tests
        # cover them by default, this grid in CI
        pytest.param(*c[1:], id=c[0], marks=[pytest.mark.slow] if "float32" in c[0] else [])
        for c in END_TO_END
    ],
)
def test_binary_scores_end_to_end(make, threshold, logits, weighted, pos_label):
    from metricstream import ConfusionAccumulator

    y_true, raw_logits, probabilities, weights = _binary_stream(3)
    scores = make(probabilities, raw_logits)
    # sigmoid(x) >= 0.5 exactly when x >= 0
    y_hat = (np.asarray(scores).reshape(-1) >= (0.0 if logits else threshold)).astype(int)
    w = weights if weighted else None
    acc = ConfusionAccumulator(2, threshold=threshold, logits=logits)
    for lo, hi in ((0, 100), (100, 101), (101, 300)):
        acc.update(y_true[lo:hi], scores[lo:hi], None if w is None else w[lo:hi])
    pairs = [
        (acc.precision, skm.precision_score, {}),
        (acc.recall, skm.recall_score, {}),
        (acc.f1, skm.f1_score, {}),
        (lambda **k: acc.fbeta(2.0, **k), skm.fbeta_score, {"beta": 2.0}),
        (acc.jaccard, skm.jaccard_score, {}),
    ]
    for ours, theirs, options in pairs:
        expected = theirs(
            y_true, y_hat, average="binary", pos_label=pos_label, sample_weight=w, **options
        )
        value = ours(average="binary", pos_label=pos_label)
        assert isinstance(value, float)
        np.testing.assert_allclose(value, expected, **TOL)
    np.testing.assert_array_equal(
        acc.confusion_matrix(), skm.confusion_matrix(y_true, y_hat, sample_weight=w)
    )
    assert acc.accuracy() == pytest.approx(
        skm.accuracy_score(y_true, y_hat, sample_weight=w), abs=1e-12
    )


def test_binary_scores_need_a_threshold_and_two_classes():
    from metricstream import ConfusionAccumulator

    y_true, _, probabilities, _ = _binary_stream(4, 20)
    with pytest.raises(ValueError, match="y_pred"):  # float truth: the float-label kernel
        ConfusionAccumulator(2).update(y_true.astype(float), probabilities)
    with pytest.raises(ValueError, match="`threshold` is for binary tasks"):
        ConfusionAccumulator(3, threshold=0.5)
    acc = ConfusionAccumulator(2, threshold=0.5).update(y_true, probabilities)
    with pytest.raises(ValueError, match=r"`pos_label` is 2, but class indices must be in"):
        acc.precision(average="binary", pos_label=2)
