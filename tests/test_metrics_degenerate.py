"""The degenerate-class policy, as a table: what each per-class metric returns for

* an *absent* class (never true, never predicted: ``AP = PP = 0``),
* a class *predicted but never true* (``AP = 0 < PP``),
* a class *true but never predicted* (``PP = 0 < AP``),

for every ``zero_division``. ``"zd"`` marks an undefined (0/0) value, replaced by
``zero_division``; numbers are exact. docs/metrics.md shows this table.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from metricstream import ConfusionAccumulator, UndefinedMetricWarning
from metricstream import metrics as ms

# classes: 0 ordinary, 1 absent, 2 predicted but never true, 3 true but never predicted
MATRIX = np.array(
    [
        [5, 0, 2, 0],
        [0, 0, 0, 0],
        [0, 0, 0, 0],
        [1, 0, 1, 0],
    ]
)
ABSENT, PREDICTED_ONLY, TRUE_ONLY = 1, 2, 3
N = MATRIX.sum()

# metric -> (absent, predicted but never true, true but never predicted)
TABLE = {
    "precision": ("zd", 0.0, "zd"),
    "recall": ("zd", "zd", 0.0),
    "f1": ("zd", 0.0, 0.0),
    "dice": ("zd", 0.0, 0.0),
    "jaccard": ("zd", 0.0, 0.0),
    "specificity": (1.0, 6 / 9, 1.0),
    "negative_predictive_value": (1.0, 1.0, 7 / 9),
    "false_positive_rate": (0.0, 3 / 9, 0.0),
    "false_negative_rate": ("zd", "zd", 1.0),
    "false_discovery_rate": ("zd", 1.0, "zd"),
    "false_omission_rate": (0.0, 0.0, 2 / 9),
    "informedness": ("zd", "zd", 0.0),
    "markedness": ("zd", 0.0, "zd"),
    "ovr_matthews_corrcoef": ("zd", "zd", "zd"),
    "positive_likelihood_ratio": ("zd", "zd", "zd"),
    "negative_likelihood_ratio": ("zd", "zd", 1.0),
    "diagnostic_odds_ratio": ("zd", "zd", "zd"),
    "prevalence": (0.0, 0.0, 2 / 9),
    "ovr_accuracy": (1.0, 6 / 9, 7 / 9),
}
ZERO_DIVISIONS = [0, 1, np.nan]


def _expected(entry, zero_division):
    return zero_division if entry == "zd" else entry


def _same(a, b) -> bool:
    if isinstance(b, float) and math.isnan(b):
        return math.isnan(a)
    return a == pytest.approx(b, rel=1e-15, abs=0)


@pytest.mark.parametrize("zd", ZERO_DIVISIONS, ids=["0", "1", "nan"])
@pytest.mark.parametrize("name", list(TABLE))
def test_degenerate_classes(name, zd):
    values = getattr(ms, name)(MATRIX, zero_division=zd)
    for column, cls in enumerate((ABSENT, PREDICTED_ONLY, TRUE_ONLY)):
        assert _same(values[cls], _expected(TABLE[name][column], zd)), (name, cls, values)
    assert np.isfinite(values[0]) or name.endswith("ratio")  # the ordinary class is defined
    # the accumulator returns the same
    acc = ConfusionAccumulator.from_matrix(MATRIX)
    np.testing.assert_array_equal(getattr(acc, name)(zero_division=zd), values)


@pytest.mark.parametrize("name", list(TABLE))
def test_warn_means_zero_and_a_warning(name):
    undefined = "zd" in TABLE[name]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        values = getattr(ms, name)(MATRIX, zero_division="warn")
    warned = [w for w in record if w.category is UndefinedMetricWarning]
    assert bool(warned) == undefined
    if warned:
        assert "Use `zero_division` parameter" in str(warned[0].message)
    np.testing.assert_array_equal(values, getattr(ms, name)(MATRIX, zero_division=0))


AVERAGED = [
    name
    for name in TABLE
    if name
    not in (
        "positive_likelihood_ratio",
        "negative_likelihood_ratio",
        "diagnostic_odds_ratio",
        "prevalence",
    )
]


@pytest.mark.parametrize("zd", ZERO_DIVISIONS, ids=["0", "1", "nan"])
@pytest.mark.parametrize("name", AVERAGED)
def test_averages_are_never_poisoned(name, zd):
    function = getattr(ms, name)
    per_class = function(MATRIX, zero_division=zd)
    kwargs = {} if name == "ovr_accuracy" else {"ignore_absent": False}
    macro = function(MATRIX, average="macro", zero_division=zd, **kwargs)
    defined = per_class[~np.isnan(per_class)]
    assert macro == pytest.approx(np.mean(defined))  # NaN entries left out, never propagated
    assert not math.isnan(macro)
    if name == "ovr_accuracy":
        return
    # the segmentation convention: the absent class is left out of the mean, whatever zd
    present = [0, PREDICTED_ONLY, TRUE_ONLY]
    seg = function(MATRIX, average="macro", zero_division=zd, ignore_absent=True)
    assert seg == pytest.approx(np.nanmean(per_class[present])) or (
        math.isnan(seg) and np.isnan(per_class[present]).all()
    )
    assert seg == pytest.approx(
        function(MATRIX, labels=present, average="macro", zero_division=zd)
    ) or math.isnan(seg)


def test_ignore_absent_gives_miou_and_mean_dice():
    assert ms.jaccard(MATRIX, average="macro", ignore_absent=True) == ms.miou(MATRIX)
    assert ms.dice(MATRIX, average="macro", ignore_absent=True) == pytest.approx(
        np.mean(ms.dice(MATRIX, labels=[0, 2, 3]))
    )
    # per-class output still lists the absent class (with its zero_division value)
    assert ms.jaccard(MATRIX, zero_division=1, ignore_absent=True)[ABSENT] == 1.0
    # absent classes add N to the micro TN sum unless left out
    assert ms.specificity(MATRIX, average="micro", ignore_absent=True) == pytest.approx(
        ms.specificity(MATRIX, labels=[0, 2, 3], average="micro")
    )


def test_average_over_nothing_is_zero_division_not_nan():
    empty = np.zeros((3, 3), dtype=np.int64)
    with pytest.warns(UndefinedMetricWarning, match="no selected class is present"):
        assert ms.jaccard(empty, average="macro", ignore_absent=True) == 0.0
    assert ms.recall(empty, average="macro", ignore_absent=True, zero_division=1) == 1.0
    assert math.isnan(
        ms.specificity(empty, average="weighted", ignore_absent=True, zero_division=np.nan)
    )


# scalar metrics on degenerate matrices: no samples, and a single class used by both sides
SCALARS = {
    "accuracy": ("zd", 1.0),
    "balanced_accuracy": ("zd", 1.0),
    "hamming_loss": ("zd", 0.0),
    "zero_one_loss": ("zd", 0.0),
    "cohen_kappa": ("zd", "zd"),
    "scott_pi": ("zd", "zd"),
    "cohen_kappa_standard_error": ("zd", "zd"),
    "miou": ("zd", 1.0),
    "fwiou": ("zd", 1.0),
    "mutual_information": ("zd", 0.0),
    "normalized_mutual_information": ("zd", 1.0),
    "adjusted_rand_index": ("zd", 1.0),
}


@pytest.mark.parametrize("zd", ZERO_DIVISIONS, ids=["0", "1", "nan"])
@pytest.mark.parametrize("name", list(SCALARS) + ["matthews_corrcoef"])
def test_degenerate_matrices(name, zd):
    function = getattr(ms, name)
    empty = np.zeros((3, 3), dtype=np.int64)
    one_class = np.diag([0, 4, 0])
    expected = SCALARS.get(name, ("zd", "zd"))
    assert _same(function(empty, zero_division=zd), _expected(expected[0], zd))
    assert _same(function(one_class, zero_division=zd), _expected(expected[1], zd))


def test_matthews_default_is_silent_zero_as_sklearn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ms.matthews_corrcoef(np.diag([0, 4, 0])) == 0.0


def test_no_metric_returns_a_string():
    acc = ConfusionAccumulator.from_matrix(MATRIX)
    for name in list(TABLE) + list(SCALARS):
        value = getattr(acc, name)(zero_division=0)
        assert isinstance(value, (float, np.ndarray))
        assert np.asarray(value).dtype == np.float64


def test_balanced_accuracy_warns_only_under_warn():
    with pytest.warns(UndefinedMetricWarning, match="y_pred contains classes not in y_true"):
        ms.balanced_accuracy(MATRIX)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ms.balanced_accuracy(MATRIX, zero_division=0)


def test_likelihood_ratio_limits_are_infinite():
    # a perfect classifier: FPR = 0 < TPR, FNR = 0 < TNR, FP FN = 0 < TP TN
    perfect = np.diag([3, 4])
    np.testing.assert_array_equal(ms.positive_likelihood_ratio(perfect), [np.inf, np.inf])
    np.testing.assert_array_equal(ms.negative_likelihood_ratio(perfect), [0.0, 0.0])
    np.testing.assert_array_equal(ms.diagnostic_odds_ratio(perfect), [np.inf, np.inf])
