"""One-vs-rest rates of each class beyond precision and recall, and the ratios built on them.

For class ``i`` (notation of :mod:`metricstream.metrics.counts`), with ``AN_i = N - AP_i =
FP_i + TN_i`` the samples truly *not* ``i`` and ``PN_i = N - PP_i = FN_i + TN_i`` those
predicted *not* ``i``:

=====================================  =============================  ========================
metric                                 formula                        0/0 when
=====================================  =============================  ========================
specificity (TNR, selectivity)         ``TN_i / AN_i``                every sample is truly i
negative predictive value (NPV)        ``TN_i / PN_i``                every sample predicted i
false positive rate (FPR, fall-out)    ``FP_i / AN_i``                every sample is truly i
false negative rate (FNR, miss rate)   ``FN_i / AP_i``                class never true
false discovery rate (FDR)             ``FP_i / PP_i``                class never predicted
false omission rate (FOR)              ``FN_i / PN_i``                every sample predicted i
informedness (Youden's J, BM)          ``TPR_i + TNR_i - 1``          either ratio is 0/0
markedness (MK)                        ``PPV_i + NPV_i - 1``          either ratio is 0/0
positive likelihood ratio (LR+)        ``TPR_i / FPR_i``              TPR or FPR 0/0, or both 0
negative likelihood ratio (LR−)        ``FNR_i / TNR_i``              FNR or TNR 0/0, or both 0
diagnostic odds ratio (DOR)            ``TP_i TN_i / (FP_i FN_i)``    numerator and denominator 0
prevalence                             ``AP_i / N``                   no samples
=====================================  =============================  ========================

0/0 gives ``zero_division`` ("warn": 0.0 and an :class:`~metricstream.UndefinedMetricWarning`;
0; 1; np.nan, left out of averages). For the three ratios of ratios a positive value over 0 is
``inf`` (a perfect rule-in/rule-out test), not undefined; scikit-learn's
``class_likelihood_ratios`` calls that case undefined instead.

Averages (``average=``) for the rates, informedness and markedness: ``"binary"`` gives the
float of class ``pos_label`` of a two-class matrix (e.g. specificity of the positive class,
which is the recall of the negative class); ``"micro"`` divides the
summed counts of the selected classes (over all K classes micro FNR = 1 − accuracy and
micro FPR = (1 − accuracy)/(K − 1)); ``"macro"`` is the plain mean of the per-class
values; ``"weighted"`` weights them by ``AP_i``. ``ignore_absent=True`` leaves classes absent
from both truth and prediction out of every average (the segmentation convention).
"""

from __future__ import annotations

import numpy as np

from ._averaging import BinaryAverage
from ._selection import LabelCounts, reduce_scores, select
from ._zero_division import (
    ZeroDivision,
    divide,
    replace_undefined,
    undefined_scalar,
    zero_division_value,
)
from .counts import Labels, MatrixLike, as_counts

__all__ = [
    "diagnostic_odds_ratio",
    "false_discovery_rate",
    "false_negative_rate",
    "false_omission_rate",
    "false_positive_rate",
    "informedness",
    "markedness",
    "negative_likelihood_ratio",
    "negative_predictive_value",
    "positive_likelihood_ratio",
    "prevalence",
    "specificity",
]


def _rate(
    matrix,
    numerator,
    denominator,
    *,
    average,
    labels,
    zero_division,
    ignore_absent,
    pos_label,
    metric,
    missing,
):
    zero_division_value(zero_division)
    sel = select(
        matrix, labels=labels, average=average, ignore_absent=ignore_absent, pos_label=pos_label
    )
    scores = divide(
        numerator(sel),
        denominator(sel),
        zero_division,
        metric=metric,
        missing=missing,
        stacklevel=5,
    )
    return reduce_scores(scores, average, sel.support, zero_division, metric=metric)


def specificity(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """Specificity (true negative rate) ``TN_i / (TN_i + FP_i)``: of the samples not of class
    ``i``, the share not predicted ``i``.

    0/0 (every sample truly belongs to class ``i``, or no samples) gives ``zero_division``.

    Args:
        matrix: K×K confusion matrix (rows true, columns predicted) or ``ClassCounts``.
        average: None (per class), "binary" (the float of class ``pos_label``; at most two
            classes), "micro", "macro" or "weighted" (by support ``AP_i``).
        labels: class indices to include, in output order (default: all). ``labels=[i]``
            gives a one-element array with ``average=None`` and the float of class ``i``
            with any average; ignored with ``average="binary"``.
        zero_division: "warn" (0.0 and a warning), 0, 1 or np.nan (left out of averages).
        ignore_absent: leave classes absent from truth and prediction out of averages.
        pos_label: the positive class of ``average="binary"`` (default 1); another value
            with another average is ignored with a ``UserWarning`` (as scikit-learn).

    Example:
        >>> specificity([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.5263, 0.9333, 0.8125])
    """
    return _rate(
        matrix,
        lambda s: s.tn,
        lambda s: s.tn + s.fp,
        average=average,
        labels=labels,
        zero_division=zero_division,
        ignore_absent=ignore_absent,
        pos_label=pos_label,
        metric="Specificity",
        missing="negative",
    )


def negative_predictive_value(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """Negative predictive value ``TN_i / (TN_i + FN_i)``: of the samples predicted as not
    ``i``, the share truly not ``i``.

    0/0 (every sample predicted as class ``i``, or no samples) gives ``zero_division``.
    Arguments as :func:`specificity`.

    Example:
        >>> negative_predictive_value([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.8333, 0.6364, 0.8125])
    """
    return _rate(
        matrix,
        lambda s: s.tn,
        lambda s: s.tn + s.fn,
        average=average,
        labels=labels,
        zero_division=zero_division,
        ignore_absent=ignore_absent,
        pos_label=pos_label,
        metric="Negative predictive value",
        missing="predicted negative",
    )


def false_positive_rate(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """False positive rate (fall-out) ``FP_i / (FP_i + TN_i)`` = 1 − specificity.

    0/0 (every sample truly belongs to class ``i``) gives ``zero_division``. Arguments as
    :func:`specificity`.

    Example:
        >>> false_positive_rate([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.4737, 0.0667, 0.1875])
    """
    return _rate(
        matrix,
        lambda s: s.fp,
        lambda s: s.tn + s.fp,
        average=average,
        labels=labels,
        zero_division=zero_division,
        ignore_absent=ignore_absent,
        pos_label=pos_label,
        metric="False positive rate",
        missing="negative",
    )


def false_negative_rate(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """False negative rate (miss rate) ``FN_i / (TP_i + FN_i) = FN_i / AP_i`` = 1 − recall.

    0/0 (class never true) gives ``zero_division``. Arguments as :func:`specificity`.

    Example:
        >>> false_negative_rate([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.3333, 0.8   , 0.3333])
    """
    return _rate(
        matrix,
        lambda s: s.fn,
        lambda s: s.ap,
        average=average,
        labels=labels,
        zero_division=zero_division,
        ignore_absent=ignore_absent,
        pos_label=pos_label,
        metric="False negative rate",
        missing="true",
    )


def false_discovery_rate(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """False discovery rate ``FP_i / (TP_i + FP_i) = FP_i / PP_i`` = 1 − precision.

    0/0 (class never predicted) gives ``zero_division``. Arguments as :func:`specificity`.

    Example:
        >>> false_discovery_rate([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.6923, 0.3333, 0.3333])
    """
    return _rate(
        matrix,
        lambda s: s.fp,
        lambda s: s.pp,
        average=average,
        labels=labels,
        zero_division=zero_division,
        ignore_absent=ignore_absent,
        pos_label=pos_label,
        metric="False discovery rate",
        missing="predicted",
    )


def false_omission_rate(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """False omission rate ``FN_i / (FN_i + TN_i)`` = 1 − NPV.

    0/0 (every sample predicted as class ``i``) gives ``zero_division``. Arguments as
    :func:`specificity`.

    Example:
        >>> false_omission_rate([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.1667, 0.3636, 0.1875])
    """
    return _rate(
        matrix,
        lambda s: s.fn,
        lambda s: s.fn + s.tn,
        average=average,
        labels=labels,
        zero_division=zero_division,
        ignore_absent=ignore_absent,
        pos_label=pos_label,
        metric="False omission rate",
        missing="predicted negative",
    )


def _sum_of_rates(
    matrix,
    a_num,
    a_den,
    b_num,
    b_den,
    *,
    average,
    labels,
    zero_division,
    ignore_absent,
    pos_label,
    metric,
    missing,
):
    zero_division_value(zero_division)
    sel = select(
        matrix, labels=labels, average=average, ignore_absent=ignore_absent, pos_label=pos_label
    )
    a = divide(a_num(sel), a_den(sel), np.nan, metric=metric, missing=missing)
    b = divide(b_num(sel), b_den(sel), np.nan, metric=metric, missing=missing)
    scores = a + b - 1
    replace_undefined(
        scores, np.isnan(scores), zero_division, metric=metric, missing=missing, stacklevel=5
    )
    return reduce_scores(scores, average, sel.support, zero_division, metric=metric)


def informedness(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """Informedness (Youden's J, bookmaker informedness) ``TPR_i + TNR_i - 1``, in [-1, 1].

    ``TP_i / AP_i + TN_i / (N - AP_i) - 1``. Undefined, hence ``zero_division``, when either
    rate is 0/0 (class never true, or every sample truly of class ``i``). For a binary problem
    this is scikit-learn's ``balanced_accuracy_score(adjusted=True)``. Arguments as
    :func:`specificity`.

    Example:
        >>> informedness([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.193 , 0.1333, 0.4792])
    """
    return _sum_of_rates(
        matrix,
        lambda s: s.tp,
        lambda s: s.ap,
        lambda s: s.tn,
        lambda s: s.tn + s.fp,
        average=average,
        labels=labels,
        zero_division=zero_division,
        ignore_absent=ignore_absent,
        pos_label=pos_label,
        metric="Informedness",
        missing="true or no negative",
    )


def markedness(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """Markedness ``PPV_i + NPV_i - 1``, in [-1, 1].

    ``TP_i / PP_i + TN_i / (N - PP_i) - 1``. Undefined, hence ``zero_division``, when either
    ratio is 0/0 (class never predicted, or every sample predicted as ``i``). The geometric
    mean of informedness and markedness is the one-vs-rest MCC. Arguments as
    :func:`specificity`.

    Example:
        >>> markedness([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.141 , 0.303 , 0.4792])
    """
    return _sum_of_rates(
        matrix,
        lambda s: s.tp,
        lambda s: s.pp,
        lambda s: s.tn,
        lambda s: s.tn + s.fn,
        average=average,
        labels=labels,
        zero_division=zero_division,
        ignore_absent=ignore_absent,
        pos_label=pos_label,
        metric="Markedness",
        missing="predicted or no predicted negative",
    )


def _ratio_of_rates(matrix, a_num, a_den, b_num, b_den, *, labels, zero_division, metric, missing):
    zero_division_value(zero_division)
    sel = select(matrix, labels=labels)
    a = divide(a_num(sel), a_den(sel), np.nan, metric=metric, missing=missing)
    b = divide(b_num(sel), b_den(sel), np.nan, metric=metric, missing=missing)
    undefined = np.isnan(a) | np.isnan(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = divide(
            np.where(undefined, 0.0, a),
            np.where(undefined, 0.0, b),
            np.nan,
            metric=metric,
            missing=missing,
            positive_over_zero=np.inf,
        )
    return replace_undefined(
        scores, np.isnan(scores), zero_division, metric=metric, missing=missing, stacklevel=5
    )


def positive_likelihood_ratio(
    matrix: MatrixLike | LabelCounts,
    *,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
) -> np.ndarray:
    """Positive likelihood ratio ``LR+_i = TPR_i / FPR_i``, per class.

    How much a prediction of ``i`` raises the odds that the sample is ``i``. Undefined, hence
    ``zero_division``, when TPR or FPR is 0/0 or both are 0; ``TPR_i > 0 = FPR_i`` gives
    ``inf``. No average is defined.

    Example:
        >>> positive_likelihood_ratio([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([1.4074, 3.    , 3.5556])
    """
    return _ratio_of_rates(
        matrix,
        lambda s: s.tp,
        lambda s: s.ap,
        lambda s: s.fp,
        lambda s: s.fp + s.tn,
        labels=labels,
        zero_division=zero_division,
        metric="Positive likelihood ratio",
        missing="true, no negative or no false positive",
    )


def negative_likelihood_ratio(
    matrix: MatrixLike | LabelCounts,
    *,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
) -> np.ndarray:
    """Negative likelihood ratio ``LR-_i = FNR_i / TNR_i``, per class.

    How much a prediction of "not ``i``" lowers the odds that the sample is ``i``. Undefined,
    hence ``zero_division``, when FNR or TNR is 0/0 or both are 0; ``FNR_i > 0 = TNR_i`` gives
    ``inf``. No average is defined.

    Example:
        >>> negative_likelihood_ratio([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.6333, 0.8571, 0.4103])
    """
    return _ratio_of_rates(
        matrix,
        lambda s: s.fn,
        lambda s: s.ap,
        lambda s: s.tn,
        lambda s: s.fp + s.tn,
        labels=labels,
        zero_division=zero_division,
        metric="Negative likelihood ratio",
        missing="true, no negative or no true negative",
    )


def diagnostic_odds_ratio(
    matrix: MatrixLike | LabelCounts,
    *,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
) -> np.ndarray:
    """Diagnostic odds ratio ``DOR_i = (TP_i TN_i) / (FP_i FN_i) = LR+_i / LR-_i``, per class.

    Computed from the counts in float64. 0/0 gives ``zero_division``; a positive numerator
    over ``FP_i FN_i = 0`` gives ``inf``. No average is defined.

    Example:
        >>> diagnostic_odds_ratio([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([2.2222, 3.5   , 8.6667])
    """
    zero_division_value(zero_division)
    sel = select(matrix, labels=labels)
    numerator = sel.tp.astype(np.float64) * sel.tn
    denominator = sel.fp.astype(np.float64) * sel.fn
    return divide(
        numerator,
        denominator,
        zero_division,
        metric="Diagnostic odds ratio",
        missing="true positive, true negative, false positive or false negative",
        positive_over_zero=np.inf,
    )


def prevalence(
    matrix: MatrixLike, *, labels: Labels = None, zero_division: ZeroDivision = "warn"
) -> np.ndarray:
    """Prevalence ``AP_i / N``: the share of samples truly of class ``i``, per class.

    0/0 (no samples) gives ``zero_division`` for every class.

    Example:
        >>> prevalence([[4, 1, 1], [6, 2, 2], [3, 0, 6]])
        array([0.24, 0.4 , 0.36])
    """
    zero_division_value(zero_division)
    counts = as_counts(matrix)
    sel = select(counts, labels=labels)
    if counts.total == 0:
        value = undefined_scalar(
            zero_division,
            "Prevalence is ill-defined and being set to 0.0 because there are no samples.",
        )
        return np.full(sel.ap.shape, value)
    return sel.ap / np.float64(counts.total)
