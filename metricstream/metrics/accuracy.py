"""Accuracy (overall accuracy, OA), balanced accuracy (average accuracy, AA) and the per-class
one-vs-rest accuracy.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..exceptions import UndefinedMetricWarning
from ._averaging import Average, average_scores, check_average
from ._zero_division import ZeroDivision, divide, undefined_scalar, zero_division_value
from .counts import MatrixLike, as_counts


def accuracy(matrix: MatrixLike, *, zero_division: ZeroDivision = "warn") -> float:
    """Accuracy (overall accuracy, OA): ``sum_i TP_i / N``, the share of correct predictions.

    Equal to micro-averaged precision, recall and F-beta. 0/0 (no samples) gives
    ``zero_division``.

    Example:
        >>> accuracy([[4, 1, 1], [6, 2, 2], [3, 0, 6]])
        0.48
    """
    counts = as_counts(matrix)
    zero_division_value(zero_division)
    if counts.total == 0:
        return undefined_scalar(zero_division, "Accuracy is ill-defined and being set to 0.0 "
                                "because there are no samples.")
    return float(counts.true_positives.sum() / counts.total)


def balanced_accuracy(
    matrix: MatrixLike, *, adjusted: bool = False, zero_division: ZeroDivision = "warn"
) -> float:
    """Balanced accuracy (average accuracy, AA): the mean recall over classes present in truth.

    ``BA = mean_{i: AP_i > 0} TP_i / AP_i``. Classes with no true samples are left out (as
    scikit-learn's ``balanced_accuracy_score``, which warns when such a class was predicted).
    With ``adjusted=True`` chance level maps to 0 and perfect to 1:
    ``(BA - 1/k) / (1 - 1/k)`` with ``k`` the number of classes present.

    0/0 (no samples, or ``adjusted`` with a single class present) gives ``zero_division``.

    Example:
        >>> round(balanced_accuracy([[4, 1, 1], [6, 2, 2], [3, 0, 6]]), 4)
        0.5111
    """
    counts = as_counts(matrix)
    zero_division_value(zero_division)
    present = counts.actual_positives != 0
    if (counts.predicted_positives[~present] != 0).any():
        warnings.warn("y_pred contains classes not in y_true", UndefinedMetricWarning,
                      stacklevel=3)
    if not present.any():
        return undefined_scalar(zero_division, "Balanced accuracy is ill-defined and being set "
                                "to 0.0 because there are no samples.")
    per_class = counts.true_positives[present] / counts.actual_positives[present]
    score = np.mean(per_class)
    if adjusted:
        num_present = per_class.shape[0]
        if num_present == 1:
            return undefined_scalar(zero_division, "Adjusted balanced accuracy is ill-defined and "
                                    "being set to 0.0 because only one class is present.")
        chance = 1 / num_present
        score -= chance
        score /= 1 - chance
    return float(score)


def ovr_accuracy(
    matrix: MatrixLike, *, average: Average = None, zero_division: ZeroDivision = "warn"
) -> float | np.ndarray:
    """One-vs-rest accuracy of each class: ``(TP_i + TN_i) / N``.

    This is the binary accuracy of "class i versus the rest" (seed note 004's ``accuracy_i``).
    It is *not* what some libraries call "per-class accuracy", which is recall
    (``TP_i / AP_i``, see :func:`~metricstream.metrics.recall`). Averages: "macro" (= "micro",
    since every class shares the denominator N) and "weighted" by ``AP_i``. 0/0 (no samples)
    gives ``zero_division``.

    Example:
        >>> ovr_accuracy([[4, 1, 1], [6, 2, 2], [3, 0, 6]])
        array([0.56, 0.64, 0.76])
    """
    check_average(average)
    counts = as_counts(matrix)
    correct = counts.true_positives + counts.true_negatives
    total = np.full(counts.num_classes, counts.total)
    scores = divide(correct, total, zero_division, metric="One-vs-rest accuracy",
                    missing="")
    if average == "micro":
        average = "macro"
    return average_scores(scores, average, counts.actual_positives)
