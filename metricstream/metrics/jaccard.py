"""Jaccard index / intersection over union (IoU), and the segmentation mean IoU (mIoU)."""

from __future__ import annotations

import numpy as np

from ._averaging import Average, average_scores, check_average
from ._zero_division import ZeroDivision, divide, undefined_scalar, zero_division_value
from .counts import Labels, MatrixLike, as_counts, label_indices


def jaccard(
    matrix: MatrixLike,
    *,
    average: Average = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
) -> float | np.ndarray:
    """Jaccard index (IoU) ``TP_i / (AP_i + PP_i - TP_i) = TP_i / (TP_i + FP_i + FN_i)``.

    The intersection of "truly i" and "predicted i" over their union. 0/0 (class neither true
    nor predicted) gives ``zero_division``; averages as :func:`~metricstream.metrics.precision`
    (scikit-learn's ``jaccard_score``; ``zero_division=np.nan`` entries are left out of averages).

    ``jaccard(average="macro")`` averages over *all* selected classes, giving absent classes the
    ``zero_division`` value; :func:`miou` instead leaves classes absent from both truth and
    prediction out of the mean, as segmentation benchmarks do.

    Example:
        >>> jaccard([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.2667, 0.1818, 0.5   ])
    """
    check_average(average)
    counts = as_counts(matrix)
    indices = label_indices(labels, counts.num_classes)
    tp, pp, ap = counts.true_positives, counts.predicted_positives, counts.actual_positives
    if indices is not None:
        tp, pp, ap = tp[indices], pp[indices], ap[indices]
    union = ap + pp - tp
    if average == "micro":
        scores = divide(tp.sum(keepdims=True), union.sum(keepdims=True), zero_division,
                        metric="Jaccard", missing="true or predicted")
        return float(scores[0])
    scores = divide(tp, union, zero_division, metric="Jaccard", missing="true or predicted")
    return average_scores(scores, average, ap)


def miou(matrix: MatrixLike, *, zero_division: ZeroDivision = "warn") -> float:
    """Mean intersection over union as used in semantic segmentation.

    ``mIoU = mean_{i in P} TP_i / (AP_i + PP_i - TP_i)`` where ``P`` holds the classes that occur
    in the truth or the prediction (``AP_i + PP_i > 0``); classes absent from both are left out
    instead of counting as 0 or 1 (mmsegmentation's and torchvision's ``nanmean``). This differs
    from ``jaccard(average="macro")``, which scores every class and gives absent ones the
    ``zero_division`` value. 0/0 (no samples at all) gives ``zero_division``.

    Example:
        >>> round(miou([[4, 1, 0], [6, 2, 0], [0, 0, 0]]), 4)
        0.2929
    """
    counts = as_counts(matrix)
    zero_division_value(zero_division)
    union = counts.actual_positives + counts.predicted_positives - counts.true_positives
    present = union != 0
    if not present.any():
        return undefined_scalar(zero_division, "mIoU is ill-defined and being set to 0.0 because "
                                "there are no samples.")
    return float(np.mean(counts.true_positives[present] / union[present]))
