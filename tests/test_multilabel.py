"""MultilabelAccumulator against scikit-learn: every average (samples included), every
zero_division, weights, empty label rows, all-zero columns, L = 1; reports character for
character; input forms; masking; atomic failures; split/merge invariance."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import sklearn.metrics as skm
from hypothesis import strategies as st

from metricstream.exceptions import UndefinedMetricWarning
from metricstream.metrics import multilabel as ml
from metricstream.multilabel import LabelSets, MultilabelAccumulator, read_multilabel_csv

from .marks import rotated_grid, slow_beyond

ZERO_DIVISIONS = ["warn", 0, 1, np.nan]
AVERAGES = [None, "micro", "macro", "weighted", "samples"]
TOL = dict(rtol=1e-12, atol=1e-12)
BETAS = (0.5, 1.0, 2.0)


def quietly(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


def close(ours, theirs):
    np.testing.assert_allclose(
        np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float), equal_nan=True, **TOL
    )


def _case(seed, n, num_labels, density=0.4, weights=None, empty_rows=0, zero_columns=0):
    rng = np.random.default_rng(seed)
    y_true = (rng.random((n, num_labels)) < density).astype(np.int64)
    y_pred = (rng.random((n, num_labels)) < density).astype(np.int64)
    # some predictions copy the truth so that every metric sees hits
    copy = rng.random(n) < 0.3
    y_pred[copy] = y_true[copy]
    y_true[:empty_rows] = 0
    y_pred[1 : 1 + empty_rows] = 0
    if zero_columns:
        y_true[:, -zero_columns:] = 0
        y_pred[:, -1] = 0
    w = None
    if weights == "int":
        w = rng.integers(0, 4, n).astype(np.int64)
        w[0] = 1
    elif weights == "float":
        w = rng.random(n) * 3
    return y_true, y_pred, w


# The first six run by default and cover every kind of case (empty rows, all-zero columns,
# L = 1, one sample, whole and fractional weights); the slow run (CI) adds the rest.
CASES = {
    "empty-rows": _case(3, 40, 5, empty_rows=6),
    "zero-columns": _case(4, 40, 6, zero_columns=2),
    "one-label": _case(5, 30, 1),
    "one-sample": _case(6, 1, 5),
    "int-weights": _case(7, 50, 6, weights="int", empty_rows=4),
    "float-weights": _case(8, 50, 6, weights="float", empty_rows=4, zero_columns=1),
    "small": _case(0, 12, 4),
    "dense": _case(1, 60, 7, density=0.7),
    "sparse": _case(2, 60, 7, density=0.08),
    "float-weights-sparse": _case(9, 50, 6, density=0.1, weights="float"),
}


def _accumulate(y_true, y_pred, w, *, splits=(0.3, 0.7), **config):
    weighted = w is not None and w.dtype.kind == "f"
    acc = MultilabelAccumulator(y_true.shape[1], weighted=weighted, betas=BETAS, **config)
    bounds = [0] + [int(s * len(y_true)) for s in splits] + [len(y_true)]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        acc.update(y_true[lo:hi], y_pred[lo:hi], None if w is None else w[lo:hi])
    return acc


class _Padded:
    """scikit-learn reads an (N, 1) indicator as a binary target, not as one label: for L = 1
    it is given an all-zero second label and ``labels=[0]`` (which changes no number)."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        function = getattr(self._module, name)

        def padded(y_true, y_pred, *args, **kwargs):
            pad = np.zeros((len(y_true), 1), dtype=np.asarray(y_true).dtype)
            y_true, y_pred = np.hstack([y_true, pad]), np.hstack([y_pred, pad])
            if name == "hamming_loss":
                return 2 * function(y_true, y_pred, *args, **kwargs)
            if name not in ("accuracy_score", "zero_one_loss"):
                kwargs.setdefault("labels", [0])
            return function(y_true, y_pred, *args, **kwargs)

        return padded


DEFAULT_CASES = 6  # the first six streams run by default (every kind of stream among them)


@pytest.fixture(scope="module", params=slow_beyond(list(CASES), DEFAULT_CASES, ids=str))
def case(request):
    y_true, y_pred, w = CASES[request.param]
    ref = _Padded(skm) if y_true.shape[1] == 1 else skm
    return y_true, y_pred, w, _accumulate(y_true, y_pred, w), ref


SCORES = [
    ("precision", lambda a, **k: a.precision(**k), "precision_score", {}),
    ("recall", lambda a, **k: a.recall(**k), "recall_score", {}),
    ("f1", lambda a, **k: a.f1(**k), "f1_score", {}),
    ("f0.5", lambda a, **k: a.fbeta(0.5, **k), "fbeta_score", {"beta": 0.5}),
    ("f2", lambda a, **k: a.fbeta(2.0, **k), "fbeta_score", {"beta": 2.0}),
    ("f0", lambda a, **k: a.fbeta(0.0, **k), "fbeta_score", {"beta": 0.0}),
    ("finf", lambda a, **k: a.fbeta(np.inf, **k), "fbeta_score", {"beta": np.inf}),
    ("jaccard", lambda a, **k: a.jaccard(**k), "jaccard_score", {}),
]


@pytest.mark.parametrize(
    ("case", "average", "zero_division"),
    rotated_grid(CASES, DEFAULT_CASES, AVERAGES, ZERO_DIVISIONS),
    indirect=["case"],
)
def test_scores_match_sklearn(case, average, zero_division):
    y_true, y_pred, w, acc, ref = case
    for name, ours, theirs, options in SCORES:
        if name == "jaccard" and zero_division is np.nan:
            continue  # scikit-learn's jaccard_score has no zero_division=nan
        expected = quietly(
            getattr(ref, theirs),
            y_true,
            y_pred,
            average=average,
            sample_weight=w,
            zero_division=zero_division,
            **options,
        )
        value = quietly(ours, acc, average=average, zero_division=zero_division)
        if average is not None:
            assert isinstance(value, float), name
        close(value, expected)


@pytest.mark.parametrize(
    ("case", "average", "zero_division"),
    rotated_grid(CASES, DEFAULT_CASES, AVERAGES, ZERO_DIVISIONS),
    indirect=["case"],
)
def test_prfs_matches_sklearn(case, average, zero_division):
    y_true, y_pred, w, acc, skm = case
    for beta in (1.0, 2.0):
        ours = quietly(
            acc.precision_recall_fscore_support, beta, average, zero_division=zero_division
        )
        theirs = quietly(
            skm.precision_recall_fscore_support,
            y_true,
            y_pred,
            beta=beta,
            average=average,
            sample_weight=w,
            zero_division=zero_division,
        )
        for a, b in zip(ours[:3], theirs[:3], strict=True):
            close(a, b)
        if average is None:
            close(ours[3], theirs[3])
        else:
            assert ours[3] is None and theirs[3] is None


def test_example_based_and_matrix_views_match_sklearn(case):
    y_true, y_pred, w, acc, skm = case
    close(acc.subset_accuracy(), skm.accuracy_score(y_true, y_pred, sample_weight=w))
    close(
        acc.subset_accuracy(normalize=False),
        skm.accuracy_score(y_true, y_pred, normalize=False, sample_weight=w),
    )
    close(acc.zero_one_loss(), skm.zero_one_loss(y_true, y_pred, sample_weight=w))
    close(
        acc.zero_one_loss(normalize=False),
        skm.zero_one_loss(y_true, y_pred, normalize=False, sample_weight=w),
    )
    close(acc.hamming_loss(), skm.hamming_loss(y_true, y_pred, sample_weight=w))
    matrices = skm.multilabel_confusion_matrix(y_true, y_pred, sample_weight=w)
    close(acc.multilabel_confusion_matrix(), matrices)
    close(acc.multilabel_confusion_matrix(labels=[0]), matrices[:1])
    weights = np.ones(len(y_true)) if w is None else w
    close(
        acc.label_cardinality(),
        np.average(y_true.sum(axis=1), weights=weights)
        if weights.sum()
        else y_true.sum(axis=1).mean(),
    )
    histogram = np.bincount(y_pred.sum(axis=1), weights=weights, minlength=y_true.shape[1] + 1)
    close(acc.cardinality_histogram(predicted=True), histogram)


@pytest.mark.parametrize("zero_division", ZERO_DIVISIONS, ids=str)
def test_per_label_rates(case, zero_division):
    y_true, y_pred, w, acc, _ = case
    # specificity and NPV of label j are recall and precision of "not j"
    specificity = quietly(acc.specificity, zero_division=zero_division)
    npv = quietly(acc.negative_predictive_value, zero_division=zero_division)
    fnr = quietly(acc.false_negative_rate, zero_division=np.nan)
    recall = quietly(acc.recall, zero_division=np.nan)
    for j in range(y_true.shape[1]):
        negatives = (1 - y_true[:, j], 1 - y_pred[:, j])
        close(
            specificity[j],
            quietly(skm.recall_score, *negatives, sample_weight=w, zero_division=zero_division),
        )
        close(
            npv[j],
            quietly(skm.precision_score, *negatives, sample_weight=w, zero_division=zero_division),
        )
    defined = ~np.isnan(recall)
    close(fnr[defined], 1 - recall[defined])
    macro = quietly(acc.specificity, "macro", zero_division=zero_division)
    assert isinstance(macro, float)
    with pytest.raises(ValueError, match="average='samples' is not defined for specificity"):
        acc.specificity("samples")
    close(
        acc.prevalence(),
        acc.multilabel_confusion_matrix()[:, 1, :].sum(axis=1)
        / acc.multilabel_confusion_matrix()[0].sum(),
    )


@pytest.mark.parametrize("zero_division", ZERO_DIVISIONS, ids=str)
@pytest.mark.parametrize("digits", [2, 4])
def test_report_text_char_for_char(case, zero_division, digits):
    y_true, y_pred, w, acc, skm = case
    expected = quietly(
        skm.classification_report,
        y_true,
        y_pred,
        sample_weight=w,
        digits=digits,
        zero_division=zero_division,
    )
    text = quietly(acc.classification_report, digits=digits, zero_division=zero_division)
    if w is None or w.dtype.kind != "f":
        assert text == expected
    else:
        # Fractional weights: supports are float sums printed in full, whose last digit
        # depends on the summation order (a stream cannot follow scikit-learn's).
        assert len(text) == pytest.approx(len(expected), abs=2 * len(y_true[0]) + 8)
        for ours, theirs in zip(text.split(), expected.split(), strict=True):
            try:
                assert float(ours) == pytest.approx(float(theirs), rel=1e-12, nan_ok=True)
            except ValueError:
                assert ours == theirs
    names = [f"tag-{j}" for j in range(y_true.shape[1])]
    expected = quietly(
        skm.classification_report,
        y_true,
        y_pred,
        sample_weight=w,
        target_names=names,
        output_dict=True,
        zero_division=zero_division,
    )
    ours = quietly(
        acc.classification_report, target_names=names, output_dict=True, zero_division=zero_division
    )
    assert list(ours) == list(expected)
    for key in expected:
        for column in expected[key]:
            close(ours[key][column], expected[key][column])


def test_report_supports_are_integers_until_weights_are_given():
    y_true, y_pred, _ = CASES["dense"]
    acc = MultilabelAccumulator(7, weighted=True).update(y_true, y_pred)
    assert acc.classification_report(zero_division=0) == skm.classification_report(
        y_true, y_pred, zero_division=0
    )
    acc.update(y_true[:0], y_pred[:0], np.zeros(0))
    ones = np.ones(len(y_true))
    acc.update(y_true, y_pred, ones)
    both = np.vstack([y_true, y_true]), np.vstack([y_pred, y_pred])
    assert acc.classification_report(zero_division=0) == skm.classification_report(
        *both, sample_weight=np.ones(2 * len(y_true)), zero_division=0
    )


def test_report_uses_label_names():
    y_true, y_pred, _ = CASES["small"]
    acc = MultilabelAccumulator(4, ["a", "bb", "ccc", "a long name here"])
    acc.update(y_true, y_pred)
    expected = skm.classification_report(
        y_true, y_pred, zero_division=0, target_names=["a", "bb", "ccc", "a long name here"]
    )
    assert acc.classification_report(zero_division=0) == expected
    with pytest.raises(
        ValueError, match="Number of classes, 4, does not match size of target_names, 2"
    ):
        acc.classification_report(target_names=["x", "y"])


@pytest.mark.parametrize(
    "metric, sk_metric",
    [
        ("precision", skm.precision_score),
        ("recall", skm.recall_score),
        ("f1", skm.f1_score),
        ("jaccard", skm.jaccard_score),
    ],
)
@pytest.mark.parametrize("num_samples", [1, 3])
def test_samples_warnings_as_sklearn(metric, sk_metric, num_samples):
    y_true = np.array([[0, 0, 0], [1, 0, 1], [0, 1, 0]])[:num_samples]
    y_pred = np.array([[0, 0, 0], [0, 0, 1], [0, 1, 0]])[:num_samples]
    acc = MultilabelAccumulator(3).update(y_true, y_pred)
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        expected = sk_metric(y_true, y_pred, average="samples")
    with pytest.warns(UndefinedMetricWarning) as ours:
        value = getattr(acc, metric)("samples")
    assert value == expected
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        getattr(acc, metric)("samples", zero_division=0)


def test_fbeta_limits_silent_and_unconfigured_beta():
    y_true, y_pred, _ = CASES["empty-rows"]
    acc = MultilabelAccumulator(5).update(y_true, y_pred)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for beta in (0.0, np.inf):
            for average in AVERAGES:
                close(
                    acc.fbeta(beta, average),
                    skm.fbeta_score(y_true, y_pred, beta=beta, average=average, zero_division=0),
                )
    with pytest.raises(
        ValueError,
        match=r"configured on the accumulator \(\[1.0\]\), not for "
        r"beta=2.0; configure MultilabelAccumulator\(..., betas=",
    ):
        acc.fbeta(2.0, "samples")
    close(
        acc.fbeta(2.0, "macro", zero_division=0),
        skm.fbeta_score(y_true, y_pred, beta=2.0, average="macro", zero_division=0),
    )


def test_samples_average_fallbacks_of_nanaverage():
    # Every sample with a defined precision has weight 0: scikit-learn falls back to the
    # unweighted mean of the defined ones.
    y_true = np.array([[1, 0], [1, 1], [0, 1]])
    y_pred = np.array([[1, 1], [0, 0], [0, 1]])
    w = np.array([0.0, 2.0, 0.0])
    acc = MultilabelAccumulator(2, weighted=True).update(y_true, y_pred, w)
    for zero_division in ZERO_DIVISIONS:
        for metric, sk_metric in [
            ("precision", skm.precision_score),
            ("recall", skm.recall_score),
            ("f1", skm.f1_score),
        ]:
            close(
                quietly(getattr(acc, metric), "samples", zero_division=zero_division),
                quietly(
                    sk_metric,
                    y_true,
                    y_pred,
                    average="samples",
                    sample_weight=w,
                    zero_division=zero_division,
                ),
            )


def test_labels_selection():
    y_true, y_pred, _ = CASES["dense"]
    acc = MultilabelAccumulator(7).update(y_true, y_pred)
    for average in (None, "micro", "macro", "weighted"):
        close(
            acc.precision(average, labels=[4, 1]),
            skm.precision_score(y_true, y_pred, average=average, labels=[4, 1]),
        )
    one = acc.recall(labels=[3])
    assert isinstance(one, np.ndarray) and one.shape == (1,)
    assert acc.recall("macro", labels=[3]) == one[0]
    close(
        acc.f1("samples", labels=list(range(6, -1, -1))),
        skm.f1_score(y_true, y_pred, average="samples"),
    )
    with pytest.raises(
        ValueError,
        match="selects a subset of the labels, but average='samples' is counted over all 7 labels",
    ):
        acc.f1("samples", labels=[0, 1])
    with pytest.raises(ValueError, match="Target is multilabel-indicator but average='binary'"):
        acc.precision("binary")
    with pytest.raises(
        ValueError,
        match="`average` must be None, 'micro', 'macro', 'weighted' or 'samples', got 'mean'",
    ):
        acc.recall("mean")


# ---------------------------------------------------------------------------- input forms
def test_scores_are_thresholded_in_the_kernel():
    rng = np.random.default_rng(11)
    y_true = rng.integers(0, 2, (80, 9))
    probabilities = rng.random((80, 9))
    probabilities[0, 0] = 0.5  # exactly the threshold: positive (score >= threshold)
    logits = rng.normal(size=(80, 9))
    logits[1, 1] = 0.0
    # int64 references: the kernel of int64 indicators, compiled anyway
    ref_p = MultilabelAccumulator(9).update(y_true, (probabilities >= 0.5).astype(np.int64))
    ref_l = MultilabelAccumulator(9, logits=True).update(y_true, (logits >= 0).astype(np.int64))
    assert MultilabelAccumulator(9).update(y_true, probabilities) == ref_p
    assert MultilabelAccumulator(9).update(y_true, probabilities.astype(np.float32)) == ref_p
    assert MultilabelAccumulator(9, logits=True).update(y_true, logits) == ref_l
    assert MultilabelAccumulator(9, logits=True).update(
        y_true, logits.astype(np.float16)
    ) == MultilabelAccumulator(9, logits=True).update(
        y_true, (logits.astype(np.float16) >= 0).astype(np.int64)
    )


@pytest.mark.parametrize("threshold", [0.3, 0.1 + 1e-12, 2.0**-130, 0.75])
def test_float32_scores_decide_as_in_float64(threshold):
    rng = np.random.default_rng(13)
    scores = rng.random(size=(200, 4)).astype(np.float32)
    near = np.float32(threshold)
    scores[:5, 0] = [
        near,
        np.nextafter(near, np.float32(-1)),
        np.nextafter(near, np.float32(2)),
        0.0,
        -0.0,
    ]
    y_true = rng.integers(0, 2, (200, 4))
    acc = MultilabelAccumulator(4, threshold=threshold).update(y_true, scores)
    exact = (scores.astype(np.float64) >= threshold).astype(np.int64)
    assert acc == MultilabelAccumulator(4, threshold=threshold).update(y_true, exact)


# Each pair of dtypes compiles its own kernel (many seconds of a cold run), so each dtype is
# tested on both sides at once: truth and predictions of that dtype, against int64. One dtype
# per kind runs by default; the slow run (CI) adds the other widths and signs.
INDICATOR_DTYPES = [bool, np.int64, np.float64, np.uint8, np.int8, np.int16, np.uint16, np.int32]


@pytest.mark.parametrize("dtype", slow_beyond(INDICATOR_DTYPES, 3, ids=lambda d: np.dtype(d).name))
def test_indicator_dtypes(dtype):
    y_true, y_pred, _ = CASES["dense"]
    reference = MultilabelAccumulator(7).update(y_true, y_pred)
    acc = MultilabelAccumulator(7).update(y_true.astype(dtype), y_pred.astype(dtype))
    assert acc == reference


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    y_true, _, _ = CASES["dense"]
    logits = np.random.default_rng(3).normal(size=y_true.shape).astype(np.float32)
    acc = MultilabelAccumulator(7, logits=True).update(
        torch.from_numpy(y_true), torch.from_numpy(logits)
    )
    assert acc == MultilabelAccumulator(7, logits=True).update(
        y_true, (logits >= 0).astype(np.int64)
    )
    acc = MultilabelAccumulator(7).update(
        torch.from_numpy(y_true).bool(), torch.sigmoid(torch.from_numpy(logits))
    )
    assert acc.num_samples == len(y_true)


@pytest.mark.parametrize("name", ["small", "sparse", "empty-rows", "int-weights", "float-weights"])
def test_label_sets_equal_dense(name):
    y_true, y_pred, w = CASES[name]
    weighted = w is not None and w.dtype.kind == "f"
    dense = MultilabelAccumulator(
        y_true.shape[1], weighted=weighted, betas=BETAS, cooccurrence=True
    ).update(y_true, y_pred, w)
    lists_true = [list(np.flatnonzero(row))[::-1] for row in y_true]  # any order
    lists_pred = [list(np.flatnonzero(row)) for row in y_pred]
    sets = MultilabelAccumulator(
        y_true.shape[1], weighted=weighted, betas=BETAS, cooccurrence=True
    ).update_sets(lists_true, lists_pred, w)
    assert sets == dense
    true_csr = LabelSets.from_lists(lists_true)
    pred_csr = LabelSets.from_csr(
        LabelSets.from_lists(lists_pred).indptr, LabelSets.from_lists(lists_pred).indices
    )
    acc = MultilabelAccumulator(
        y_true.shape[1], weighted=weighted, betas=BETAS, cooccurrence=True
    ).update(true_csr, pred_csr, w)
    assert acc == dense


def test_scipy_sparse_and_large_label_space():
    sparse = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(5)
    num_labels = 100_000
    lists_true = [
        list(rng.choice(num_labels, rng.integers(0, 6), replace=False)) for _ in range(300)
    ]
    lists_pred = [
        list(rng.choice(num_labels, rng.integers(0, 6), replace=False)) if i % 3 else lists_true[i]
        for i in range(300)
    ]
    acc = MultilabelAccumulator(num_labels).update_sets(lists_true, lists_pred)
    exact = sum(set(t) == set(p) for t, p in zip(lists_true, lists_pred, strict=True))
    assert acc.subset_accuracy() == exact / 300

    def to_csr(lists):
        indptr = np.concatenate([[0], np.cumsum([len(x) for x in lists])])
        indices = np.concatenate([np.asarray(x, dtype=np.int64) for x in lists])
        return sparse.csr_matrix(
            (np.ones(len(indices)), indices, indptr), shape=(len(lists), num_labels)
        )

    t, p = to_csr(lists_true), to_csr(lists_pred)
    assert MultilabelAccumulator(num_labels).update(t, p) == acc
    small = [sorted(x) for x in lists_true[:40]]
    used = sorted({j for x in small + [sorted(x) for x in lists_pred[:40]] for j in x})
    index = {j: k for k, j in enumerate(used)}
    dense_t = np.zeros((40, len(used)), int)
    dense_p = np.zeros((40, len(used)), int)
    for i in range(40):
        dense_t[i, [index[j] for j in lists_true[i]]] = 1
        dense_p[i, [index[j] for j in lists_pred[i]]] = 1
    part = MultilabelAccumulator(num_labels).update(t[:40], p[:40])
    close(
        part.f1("samples", zero_division=1),
        skm.f1_score(dense_t, dense_p, average="samples", zero_division=1),
    )
    close(part.precision("micro"), skm.precision_score(dense_t, dense_p, average="micro"))
    with pytest.raises(TypeError, match="sparse csc matrix; convert it with .tocsr"):
        MultilabelAccumulator(num_labels).update(t.tocsc(), p.tocsc())


@pytest.mark.parametrize("num_labels", [255, 256, 700])
def test_wide_rows_match_sklearn(num_labels):
    # rows of more than 255 labels: row sums of several 64-entry chunks per row
    y_true, y_pred, _ = _case(12, 40, num_labels, density=0.5)
    scores = np.where(y_pred == 1, 0.8, 0.1).astype(np.float32)
    acc = MultilabelAccumulator(num_labels, threshold=0.5).update(y_true[:25], y_pred[:25])
    acc.update(y_true[25:].astype(bool), scores[25:])
    for average in AVERAGES:
        close(
            acc.f1(average, zero_division=0),
            skm.f1_score(y_true, y_pred, average=average, zero_division=0),
        )
    close(acc.subset_accuracy(), skm.accuracy_score(y_true, y_pred))
    before = _state(acc)
    bad = y_true.copy()
    bad[30, num_labels - 1] = 3
    with pytest.raises(ValueError, match=rf"`y_true` holds 3 at row 30, label {num_labels - 1}"):
        acc.update(bad, y_pred)
    _assert_unchanged(acc, before)


def test_cooccurrence_and_cardinality():
    y_true, y_pred, w = CASES["float-weights"]
    acc = MultilabelAccumulator(6, weighted=True, cooccurrence=True).update(y_true, y_pred, w)
    close(acc.cooccurrence(), (y_true * w[:, None]).T @ y_true)
    close(acc.cardinality_histogram(), np.bincount(y_true.sum(axis=1), weights=w, minlength=7))
    with pytest.raises(ValueError, match="cooccurrence=True"):
        MultilabelAccumulator(6).cooccurrence()


def test_masking_leaves_unknown_entries_out():
    rng = np.random.default_rng(8)
    y_true = rng.integers(0, 2, (60, 5)).astype(np.int8)
    y_pred = rng.integers(0, 2, (60, 5))
    unknown = rng.random((60, 5)) < 0.2
    unknown[7] = True  # a sample with every label unknown
    masked = np.where(unknown, -1, y_true).astype(np.int8)
    acc = MultilabelAccumulator(5, ignore_index=-1).update(masked, y_pred)
    # label-wise: each label over its known samples
    matrices = acc.multilabel_confusion_matrix()
    for j in range(5):
        known = ~unknown[:, j]
        close(matrices[j], skm.confusion_matrix(y_true[known, j], y_pred[known, j], labels=[0, 1]))
    # example-based: each sample over its known labels; the all-unknown sample is left out
    judged = [i for i in range(60) if (~unknown[i]).any()]
    per_sample_f1 = []
    exact = []
    for i in judged:
        known = ~unknown[i]
        t, p = y_true[i, known], y_pred[i, known]
        denominator = t.sum() + p.sum()
        per_sample_f1.append(2 * (t & p).sum() / denominator if denominator else 1.0)
        exact.append((t == p).all())
    close(acc.f1("samples", zero_division=1), np.mean(per_sample_f1))
    close(acc.subset_accuracy(), np.mean(exact))
    close(acc.hamming_loss(), (y_true != y_pred)[~unknown].mean())
    assert acc.num_samples == 60
    # uint8 truth with 255 as the mask value
    masked_u8 = np.where(unknown, 255, y_true).astype(np.uint8)
    assert MultilabelAccumulator(5, ignore_index=255).update(masked_u8, y_pred).f1(
        "samples", zero_division=1
    ) == acc.f1("samples", zero_division=1)
    # without the mask value in the batch's dtype range, nothing is masked
    plain = MultilabelAccumulator(5, ignore_index=-1).update(y_true.astype(np.uint8), y_pred)
    close(plain.f1("macro"), skm.f1_score(y_true, y_pred, average="macro"))


# ---------------------------------------------------------------------------- failures
def _state(acc):
    return {name: array.copy() for name, array in acc.state_arrays().items()}


def _assert_unchanged(acc, before):
    after = acc.state_arrays()
    assert all(np.array_equal(before[name], after[name]) for name in before)


BAD_DENSE = [
    (
        "truth 2",
        lambda t, p: (np.where(np.arange(t.size).reshape(t.shape) == t.size - 2, 2, t), p),
        ValueError,
        r"`y_true` holds 2 at row 29, label 3, but a label indicator holds 0 or 1. Nothing",
    ),
    (
        "truth -1",
        lambda t, p: (np.where(np.arange(t.size).reshape(t.shape) == 7, -1, t), p),
        ValueError,
        r"`y_true` holds -1 at row 1, label 2",
    ),
    (
        "pred 3",
        lambda t, p: (t, np.where(np.arange(p.size).reshape(p.shape) == 149, 3, p)),
        ValueError,
        r"`y_pred` holds 3 at row 29, label 4, but a label indicator holds 0 or 1",
    ),
    (
        "NaN score",
        lambda t, p: (t, np.where(np.arange(p.size).reshape(p.shape) == 100, np.nan, p * 0.9)),
        ValueError,
        r"`y_pred` holds NaN at row 20, label 0; scores must be numbers",
    ),
    (
        "float truth",
        lambda t, p: (t * 0.5, p),
        ValueError,
        r"`y_true` holds 0.5 at row \d+, label \d+; a label indicator holds only 0 and 1",
    ),
    (
        "shape",
        lambda t, p: (t[:, :4], p),
        ValueError,
        r"`y_true` must be an \(N, 5\) label indicator matrix \(`num_labels` is 5\), got shape "
        r"\(30, 4\)",
    ),
    (
        "samples",
        lambda t, p: (t, p[:-1]),
        ValueError,
        r"`y_true` has 30 samples but `y_pred` has 29",
    ),
    ("text", lambda t, p: (t.astype(str), p), TypeError, r"y_true"),
]


@pytest.mark.parametrize(
    "make, error, match", [b[1:] for b in BAD_DENSE], ids=[b[0] for b in BAD_DENSE]
)
@pytest.mark.parametrize("weighted", [False, True])
def test_bad_dense_input_changes_nothing(make, error, match, weighted):
    rng = np.random.default_rng(2)
    y_true, y_pred = rng.integers(0, 2, (30, 5)), rng.integers(0, 2, (30, 5))
    acc = MultilabelAccumulator(5, weighted=weighted, cooccurrence=True)
    acc.update(y_true, y_pred, np.full(30, 2.0) if weighted else None)
    before = _state(acc)
    bad_true, bad_pred = make(y_true, y_pred)
    with pytest.raises(error, match=match):
        acc.update(bad_true, bad_pred)
    _assert_unchanged(acc, before)


@pytest.mark.parametrize(
    "weights, match",
    [
        (
            np.r_[np.ones(29), -1.0],
            r"`weights` holds -1.0 at position 29; weights must be whole "
            r"non-negative numbers",
        ),
        (np.r_[np.ones(29), 0.5], r"`weights` holds 0.5 at position 29"),
        (np.r_[np.ones(29), np.nan], r"`weights` holds nan at position 29"),
        (np.ones(3), r"`weights` must have shape \(30,\)"),
    ],
)
def test_bad_weights_change_nothing(weights, match):
    rng = np.random.default_rng(2)
    y_true, y_pred = rng.integers(0, 2, (30, 5)), rng.integers(0, 2, (30, 5))
    acc = MultilabelAccumulator(5).update(y_true, y_pred)
    before = _state(acc)
    with pytest.raises(ValueError, match=match):
        acc.update(y_true, y_pred, weights)
    _assert_unchanged(acc, before)


@pytest.mark.parametrize(
    "true, pred, match",
    [
        ([[0, 1], [2, 2]], [[0], [1]], r"`y_true` lists label 2 twice in sample 1"),
        ([[0, 1], [2]], [[0], [1, 3, 1]], r"`y_pred` lists label 1 twice in sample 1"),
        (
            [[0, 1], [7]],
            [[0], [1]],
            r"`y_true` lists label 7 in sample 1, but label indices must "
            r"be in \[0, 5\)",
        ),
        ([[0, 1], [-1]], [[0], [1]], r"`y_true` lists label -1 in sample 1"),
        ([[0, 1]], [[0], [1]], r"`y_true` has 1 samples but `y_pred` has 2"),
    ],
)
@pytest.mark.parametrize("weighted", [False, True])
def test_bad_label_sets_change_nothing(true, pred, match, weighted):
    acc = MultilabelAccumulator(5, weighted=weighted, cooccurrence=True)
    acc.update_sets([[0, 1], [], [4]], [[0], [1], [4, 2]])
    before = _state(acc)
    with pytest.raises(ValueError, match=match):
        acc.update_sets(true, pred)
    _assert_unchanged(acc, before)
    acc.update_sets([[3]], [[3]])  # the scratch marks were cleared
    assert acc.subset_accuracy() == 0.25


def test_mixed_forms_and_ragged_lists_are_refused():
    acc = MultilabelAccumulator(3)
    with pytest.raises(TypeError, match="both be label sets"):
        acc.update(LabelSets.from_lists([[0]]), [[1, 0, 0]])
    with pytest.raises(TypeError, match="one list of label indices per sample; sample 1 is 2"):
        acc.update_sets([[0], 2], [[0], [1]])
    with pytest.raises(ValueError, match="must start at 0 and end at len"):
        LabelSets.from_csr([0, 2], [1])
    with pytest.raises(ValueError, match="`indptr` decreases after position 1: 2 > 1"):
        LabelSets.from_csr([0, 2, 1, 3], [1, 2, 0])


_INT64_MAX = 2**63 - 1


def _total(array):
    return sum(int(v) for v in array.reshape(-1))


def _near_the_limit(acc, name, cell, spare):
    """``acc`` with ``state[name][cell]`` raised so that the array's total is 2**63 - 1 less
    ``spare``."""
    with acc.exclusive_state() as arrays:
        array = arrays[name]
        array[cell] += _INT64_MAX - spare - _total(array)
    return acc


@pytest.mark.parametrize(
    "route",
    ["matrices", "lists", "label sets", "whole weights", "masked", "co-occurrence"],
)
def test_an_update_never_takes_an_int64_total_past_what_load_accepts(route):
    # The bound of an update is load's: every int64 state array's exact total at most
    # 2**63 - 1; a batch that fits exactly is counted, one more is refused atomically.
    y_true = np.array([[1, 0, 1, 0], [0, 1, 1, 1], [1, 1, 0, 0]])
    y_pred = np.array([[1, 1, 0, 0], [0, 1, 1, 0], [1, 1, 0, 1]])
    options, args = {}, (y_true, y_pred)
    if route == "lists":
        args = (y_true.tolist(), y_pred.tolist())
    elif route == "label sets":
        args = tuple(LabelSets.from_lists([np.flatnonzero(r) for r in a]) for a in args)
    elif route == "whole weights":
        args = (y_true, y_pred, np.array([3, 0, 5]))
    elif route == "masked":
        options = {"ignore_index": -1}
        args = (np.where(np.eye(3, 4, dtype=bool), -1, y_true), y_pred)
    elif route == "co-occurrence":
        options = {"cooccurrence": True}
    adds = MultilabelAccumulator(4, **options).update(*args).state_arrays()
    for name, added in adds.items():
        for spare in (_total(added) - 1, _total(added)):
            acc = MultilabelAccumulator(4, **options).update(*args)
            _near_the_limit(acc, name, (0,) * added.ndim, spare)
            before = _state(acc)
            if spare < _total(added):
                with pytest.raises(ValueError, match=rf"state '{name}' past 2\*\*63 - 1"):
                    acc.update(*args)
                _assert_unchanged(acc, before)
                continue
            acc.update(*args)
            assert _total(acc.state_arrays()[name]) == _INT64_MAX
            assert MultilabelAccumulator.from_bytes(acc.to_bytes()) == acc
            with pytest.raises(ValueError, match=r"past 2\*\*63 - 1"):
                acc.update(*args)  # now nothing fits


def test_a_restored_state_near_the_limit_bounds_the_fast_path():
    # A hostile state: one count near 2**63 - 1 and no samples. The one-call path of update
    # bounds every total (not the number of samples), also after a merge, a reset and a sync.
    y_true, y_pred = np.array([[1, 0, 1]]), np.array([[1, 1, 0]])
    state = MultilabelAccumulator(3).state_dict()
    arrays = {k: np.zeros(v["shape"], dtype=v["dtype"]) for k, v in state["arrays"].items()}
    arrays["labels"][2, 1] = _INT64_MAX - 1
    acc = MultilabelAccumulator.from_state_dict({**state, "arrays": arrays})
    before = _state(acc)
    with pytest.raises(ValueError, match=r"state 'labels' past 2\*\*63 - 1"):
        acc.update(y_true, y_pred)  # PP of label 1 would pass it
    _assert_unchanged(acc, before)
    acc.update(np.zeros((1, 3), dtype=np.int64), np.array([[1, 0, 0]]))  # labels + 1: fits
    assert _total(acc.state_arrays()["labels"]) == _INT64_MAX
    fresh = MultilabelAccumulator(3)
    for _ in range(5):
        fresh.update(y_true, y_pred)  # 9 more in the total of per_sample each
    big = _near_the_limit(MultilabelAccumulator(3), "per_sample", (0,), 60)
    big.update(y_true, y_pred)  # 51 to spare
    big.merge(fresh)  # 6 to spare: the room the last update left is no longer there
    before = _state(big)
    with pytest.raises(ValueError, match=r"state 'per_sample' past 2\*\*63 - 1"):
        big.update(y_true, y_pred)
    _assert_unchanged(big, before)
    big.reset().update(y_true, y_pred)
    assert big == MultilabelAccumulator(3).update(y_true, y_pred)


@pytest.mark.parametrize(
    "config, error, match",
    [
        (dict(num_labels=0), ValueError, "`num_labels` must be at least 1, got 0"),
        (dict(num_labels=2.0), TypeError, "`num_labels` must be an integer"),
        (dict(num_labels=2, threshold=np.nan), TypeError, "`threshold` must be a finite number"),
        (dict(num_labels=2, ignore_index=1), ValueError, "`ignore_index` must not be 0 or 1"),
        (
            dict(num_labels=2, betas=[np.sqrt(2) + 0.001]),
            ValueError,
            r"whose square is not a ratio a/b of integers",
        ),
        (dict(num_labels=2, betas=[0.0]), ValueError, "positive finite numbers"),
        (dict(num_labels=2, label_names=["a", "a"]), ValueError, "2 unique names"),
        (dict(num_labels=2, weighted=1), TypeError, "`weighted` must be True or False"),
    ],
)
def test_bad_configuration(config, error, match):
    with pytest.raises(error, match=match):
        MultilabelAccumulator(**config)


# ---------------------------------------------------------------------------- state
def test_views_from_sklearn_confusion_matrices():
    y_true, y_pred, _ = CASES["dense"]
    counts = ml.MultilabelCounts.from_confusion_matrices(
        skm.multilabel_confusion_matrix(y_true, y_pred)
    )
    close(ml.f1(counts, "macro"), skm.f1_score(y_true, y_pred, average="macro"))
    close(ml.hamming_loss(counts), skm.hamming_loss(y_true, y_pred))
    with pytest.raises(ValueError, match="needs per-sample statistics"):
        ml.f1(counts, "samples")


def test_csv_reader(tmp_path):
    path = tmp_path / "tags.csv"
    path.write_text("id,y_true,y_pred,w\n1,cat|dog,cat,1\n2,,dog,2\n3,bird,bird|cat,1\n")
    acc = read_multilabel_csv(path, weight_column="w")
    assert acc.config()["label_names"] == ["bird", "cat", "dog"]
    y_true = np.array([[0, 1, 1], [0, 0, 0], [1, 0, 0]])
    y_pred = np.array([[0, 1, 0], [0, 0, 1], [1, 1, 0]])
    close(
        acc.f1("samples", zero_division=0),
        skm.f1_score(y_true, y_pred, average="samples", sample_weight=[1, 2, 1], zero_division=0),
    )
    with pytest.raises(ValueError, match="the file has no column 'truth'"):
        read_multilabel_csv(path, true_column="truth")
    path.write_text("y_true,y_pred,w\n1,1,1\n0,0,heavy\n")
    with pytest.raises(ValueError, match="line 3: weight 'heavy' is not a number"):
        read_multilabel_csv(path, weight_column="w")


def test_csv_reader_counts_in_chunks(tmp_path, monkeypatch):
    import metricstream.multilabel.accumulator as module

    monkeypatch.setattr(module, "_CSV_CHUNK_ROWS", 7)
    y_true, y_pred, _ = CASES["sparse"]
    lines = ["y_true,y_pred"] + [
        "|".join(map(str, np.flatnonzero(t))) + "," + "|".join(map(str, np.flatnonzero(p)))
        for t, p in zip(y_true, y_pred, strict=True)
    ]
    path = tmp_path / "tags.csv"
    path.write_text("\n".join(lines) + "\n")
    acc = read_multilabel_csv(path, num_labels=7)
    assert acc == MultilabelAccumulator(7).update(y_true, y_pred)
    with open(path, newline="") as handle:
        assert read_multilabel_csv(handle, num_labels=7) == acc


def test_npz_reader(tmp_path):
    from metricstream.multilabel import read_multilabel_npz

    y_true, y_pred, w = CASES["float-weights"]
    path = tmp_path / "batch.npz"
    scores = np.where(y_pred == 1, 0.75, 0.25)
    np.savez(path, y_true=y_true, y_pred=scores, weights=w, label_names=list("abcdef"))
    acc = read_multilabel_npz(path)
    assert acc.weighted and acc.config()["label_names"] == list("abcdef")
    close(
        acc.f1("samples", zero_division=0),
        skm.f1_score(y_true, y_pred, average="samples", sample_weight=w, zero_division=0),
    )
    np.savez(path, y_true=y_true)
    with pytest.raises(ValueError, match="the .npz file has no member 'y_pred'"):
        read_multilabel_npz(path)


# ---------------------------------------------------------------------------- properties
@st.composite
def _streams(draw):
    num_labels = draw(st.integers(1, 6))
    n = draw(st.integers(0, 25))
    bits = st.lists(st.integers(0, 1), min_size=num_labels, max_size=num_labels)
    y_true = np.array(draw(st.lists(bits, min_size=n, max_size=n)), dtype=np.int64)
    y_pred = np.array(draw(st.lists(bits, min_size=n, max_size=n)), dtype=np.int64)
    weights = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    return num_labels, y_true.reshape(n, num_labels), y_pred.reshape(n, num_labels), weights, cuts
