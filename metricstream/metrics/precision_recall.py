"""Precision, recall, F-beta and F1, per class and averaged (scikit-learn's definitions).

For class ``i`` (see :mod:`metricstream.metrics.counts` for the notation):

* ``precision_i = TP_i / PP_i``
* ``recall_i = TP_i / AP_i``
* ``F_beta_i = (1 + beta²) TP_i / (beta² AP_i + PP_i)`` — computed from counts, not from P and R,
  so it is defined whenever the class was true or predicted at least once.

Averages: ``micro`` sums TP, PP and AP over the selected classes first (over all classes,
micro P = R = F = accuracy); ``macro`` is the plain mean of the per-class values; ``weighted``
weights them by ``AP_i``. 0/0 follows ``zero_division`` (see ``_zero_division``).
``ignore_absent=True`` leaves classes absent from both truth and prediction out of the
averages (the segmentation convention; see ``_selection``).

Reference: scikit-learn, ``sklearn.metrics.precision_recall_fscore_support``.
"""

from __future__ import annotations

import numpy as np

from ._averaging import BinaryAverage
from ._selection import LabelCounts, reduce_scores, select
from ._zero_division import ZeroDivision, divide, zero_division_value
from .counts import Labels, MatrixLike, as_counts, label_indices


def _selected(
    matrix: MatrixLike | LabelCounts,
    labels: Labels,
    average: BinaryAverage,
    ignore_absent: bool = False,
    pos_label: int = 1,
):
    sel = select(
        matrix, labels=labels, average=average, ignore_absent=ignore_absent, pos_label=pos_label
    )
    return sel.tp, sel.pp, sel.ap


def _finish(
    scores: np.ndarray,
    average: BinaryAverage,
    support: np.ndarray,
    zero_division: ZeroDivision = "warn",
    metric: str = "Score",
) -> float | np.ndarray:
    return reduce_scores(scores, average, support, zero_division, metric=metric)


def precision(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """Precision ``TP_i / PP_i``: of the samples predicted as class ``i``, the share truly ``i``.

    0/0 (class never predicted) gives ``zero_division``.

    Args:
        matrix: K×K confusion matrix (rows true, columns predicted) or ``ClassCounts``.
        average: None (per class), "binary" (the float of class ``pos_label``; at most two
            classes, else ValueError), "micro", "macro" or "weighted" (by support ``AP_i``).
        labels: class indices to include, in output order (default: all). A one-element
            selection ``labels=[i]`` gives a one-element array with ``average=None`` (as
            scikit-learn) and the float score of class ``i`` with any average; for a float of
            one class use ``average="binary", pos_label=i`` (two classes) or
            ``labels=[i], average="macro"``. Ignored with ``average="binary"``.
        zero_division: "warn" (0.0 and a warning), 0, 1 or np.nan (left out of averages).
        ignore_absent: leave classes absent from both truth and prediction out of averages
            (the segmentation convention, mmsegmentation's ``nanmean``).
        pos_label: the positive class of ``average="binary"`` (default 1). Given with another
            average and not 1, it is ignored with a ``UserWarning`` (as scikit-learn).

    Example:
        >>> precision([[4, 1, 1], [6, 2, 2], [3, 0, 6]], average="micro")
        0.48
        >>> precision([[5, 1], [2, 3]], average="binary")  # TP 3 of PP 4
        0.75
        >>> precision([[5, 1], [2, 3]], average="binary", pos_label=0)
        0.7142857142857143
        >>> precision([[5, 1], [2, 3]], labels=[1])
        array([0.75])
    """
    zero_division_value(zero_division)
    tp, pp, ap = _selected(matrix, labels, average, ignore_absent, pos_label)
    scores = divide(tp, pp, zero_division, metric="Precision", missing="predicted")
    return _finish(scores, average, ap, zero_division, "Precision")


def recall(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """Recall (sensitivity, TPR) ``TP_i / AP_i``: of the samples of class ``i``, the share found.

    0/0 (class absent from the truth) gives ``zero_division``. Weighted recall over all classes
    equals accuracy. Arguments (``average="binary"`` with ``pos_label``, one-element
    ``labels``) as :func:`precision`.

    Example:
        >>> recall([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.6667, 0.2   , 0.6667])
        >>> recall([[5, 1], [2, 3]], average="binary")  # TP 3 of AP 5
        0.6
    """
    zero_division_value(zero_division)
    tp, pp, ap = _selected(matrix, labels, average, ignore_absent, pos_label)
    scores = divide(tp, ap, zero_division, metric="Recall", missing="true")
    return _finish(scores, average, ap, zero_division, "Recall")


def fbeta(
    matrix: MatrixLike | LabelCounts,
    beta: float,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """F-beta ``(1 + beta²) TP_i / (beta² AP_i + PP_i)``, the weighted harmonic mean of P and R.

    ``beta < 1`` favours precision, ``beta > 1`` recall; ``beta = 0`` is precision and
    ``beta = inf`` is recall, with their 0/0 rule (class never predicted, resp. never true) but
    without a warning, as scikit-learn's ``fbeta_score``. Otherwise 0/0 (class neither true nor
    predicted) gives ``zero_division``. Arguments (``average="binary"`` with ``pos_label``,
    one-element ``labels``) as :func:`precision`.

    Example:
        >>> round(fbeta([[4, 1, 1], [6, 2, 2], [3, 0, 6]], 2.0, average="macro"), 4)
        0.4799
        >>> round(fbeta([[5, 1], [2, 3]], 0.5, average="binary"), 4)
        0.7143
    """
    if isinstance(beta, bool) or not isinstance(beta, (int, float, np.integer, np.floating)):
        raise TypeError(f"`beta` must be a number, got {type(beta).__name__}.")
    if not beta >= 0:
        raise ValueError(f"`beta` must be non-negative, got {beta!r}.")
    if np.isposinf(beta) or beta == 0:
        # scikit-learn's fbeta_score only warns about the F-score, and with beta 0 or inf the
        # F-score is precision or recall itself: their 0/0 takes the value silently.
        silent = (
            0.0 if isinstance(zero_division, str) and zero_division == "warn" else (zero_division)
        )
        zero_division_value(zero_division)
        limit = recall if np.isposinf(beta) else precision
        return limit(
            matrix,
            average=average,
            labels=labels,
            zero_division=silent,
            ignore_absent=ignore_absent,
            pos_label=pos_label,
        )
    zero_division_value(zero_division)
    tp, pp, ap = _selected(matrix, labels, average, ignore_absent, pos_label)
    beta2 = float(beta) ** 2
    numerator = (1 + beta2) * tp.astype(np.float64)
    denominator = beta2 * ap.astype(np.float64) + pp.astype(np.float64)
    scores = divide(
        numerator, denominator, zero_division, metric="F-score", missing="true nor predicted"
    )
    return _finish(scores, average, ap, zero_division, "F-score")


def f1(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """F1 ``2 TP_i / (AP_i + PP_i)`` (the Dice coefficient); :func:`fbeta` with ``beta = 1``.

    0/0 (class neither true nor predicted) gives ``zero_division``. Arguments
    (``average="binary"`` with ``pos_label``, one-element ``labels``) as :func:`precision`.

    Example:
        >>> f1([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.4211, 0.3077, 0.6667])
        >>> round(f1([[5, 1], [2, 3]], average="binary"), 4)
        0.6667
    """
    return fbeta(
        matrix,
        1.0,
        average=average,
        labels=labels,
        zero_division=zero_division,
        ignore_absent=ignore_absent,
        pos_label=pos_label,
    )


def precision_recall_fscore_support(
    matrix: MatrixLike,
    *,
    beta: float = 1.0,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    pos_label: int = 1,
) -> tuple:
    """``(precision, recall, fbeta, support)`` in one call, as scikit-learn's function.

    Formulas and 0/0 rules of :func:`precision`, :func:`recall` and :func:`fbeta` (with beta 0
    or inf, the F-score repeats no warning). ``support`` (``AP_i``) is returned per class when
    ``average`` is None, else None. ``average="binary"`` with ``pos_label`` and one-element
    ``labels`` as :func:`precision`.

    Example:
        >>> precision_recall_fscore_support([[5, 1], [2, 3]], average="binary")
        (0.75, 0.6, 0.6666666666666666, None)
    """
    zero_division_value(zero_division)
    common: dict = dict(
        average=average, labels=labels, zero_division=zero_division, pos_label=pos_label
    )
    result = (
        precision(matrix, **common),
        recall(matrix, **common),
        fbeta(matrix, beta, **common),
    )
    if average is not None:
        return result + (None,)
    counts = as_counts(matrix)
    indices = label_indices(labels, counts.num_classes)
    support = counts.actual_positives if indices is None else counts.actual_positives[indices]
    return result + (support.copy(),)
