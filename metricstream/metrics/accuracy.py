"""Accuracy (overall accuracy, OA), balanced accuracy (average accuracy, AA), the per-class
one-vs-rest accuracy, and the losses hamming loss and zero-one loss.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..exceptions import UndefinedMetricWarning, caller_stacklevel
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
        return undefined_scalar(
            zero_division,
            "Accuracy is ill-defined and being set to 0.0 because there are no samples.",
        )
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
    # A class predicted but never true has an undefined recall and is left out; say so only
    # under "warn", like every other 0/0 (scikit-learn always warns, with a UserWarning).
    if zero_division == "warn" and (counts.predicted_positives[~present] != 0).any():
        warnings.warn(
            "y_pred contains classes not in y_true",
            UndefinedMetricWarning,
            stacklevel=caller_stacklevel(),
        )
    if not present.any():
        return undefined_scalar(
            zero_division,
            "Balanced accuracy is ill-defined and being set to 0.0 because there are no samples.",
        )
    per_class = counts.true_positives[present] / counts.actual_positives[present]
    score = np.mean(per_class)
    if adjusted:
        num_present = per_class.shape[0]
        if num_present == 1:
            return undefined_scalar(
                zero_division,
                "Adjusted balanced accuracy is ill-defined and "
                "being set to 0.0 because only one class is present.",
            )
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
    scores = divide(
        correct,
        total,
        zero_division,
        metric="One-vs-rest accuracy",
        missing="(because there are no)",
    )
    if average == "micro":
        average = "macro"
    return average_scores(scores, average, counts.actual_positives)


def hamming_loss(matrix: MatrixLike, *, zero_division: ZeroDivision = "warn") -> float:
    """Hamming loss: the share of misclassified samples, ``1 - accuracy = sum_{i != j} C_ij / N``.

    For single-label (multiclass) data scikit-learn's ``hamming_loss`` equals this. 0/0 (no
    samples) gives ``zero_division``.

    Example:
        >>> hamming_loss([[4, 1, 1], [6, 2, 2], [3, 0, 6]])
        0.52
    """
    counts = as_counts(matrix)
    zero_division_value(zero_division)
    if counts.total == 0:
        return undefined_scalar(
            zero_division,
            "Hamming loss is ill-defined and being set to 0.0 because there are no samples.",
        )
    return float((counts.total - counts.true_positives.sum()) / counts.total)


def zero_one_loss(
    matrix: MatrixLike, *, normalize: bool = True, zero_division: ZeroDivision = "warn"
) -> float:
    """Zero-one loss: ``1 - accuracy`` (``normalize=True``) or the number (total weight) of
    misclassified samples ``N - sum_i TP_i`` (``normalize=False``), as scikit-learn's
    ``zero_one_loss``.

    0/0 (no samples, ``normalize=True``) gives ``zero_division``; unnormalized it is 0.

    Example:
        >>> zero_one_loss([[4, 1, 1], [6, 2, 2], [3, 0, 6]], normalize=False)
        13.0
    """
    if not isinstance(normalize, (bool, np.bool_)):
        raise TypeError(f"`normalize` must be True or False, got {normalize!r}.")
    counts = as_counts(matrix)
    if not normalize:
        zero_division_value(zero_division)
        return float(counts.total - counts.true_positives.sum())
    return hamming_loss(counts, zero_division=zero_division)
