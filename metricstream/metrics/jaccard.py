"""Overlap metrics: Jaccard index / IoU, Dice, the segmentation mIoU and frequency-weighted IoU."""

from __future__ import annotations

import numpy as np

from ._averaging import BinaryAverage
from ._selection import LabelCounts, reduce_scores, select
from ._zero_division import ZeroDivision, divide, undefined_scalar, zero_division_value
from .counts import Labels, MatrixLike, as_counts
from .precision_recall import fbeta


def jaccard(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """Jaccard index (IoU) ``TP_i / (AP_i + PP_i - TP_i) = TP_i / (TP_i + FP_i + FN_i)``.

    The intersection of "truly i" and "predicted i" over their union. 0/0 (class neither true
    nor predicted) gives ``zero_division``; averages as :func:`~metricstream.metrics.precision`
    (scikit-learn's ``jaccard_score``; ``zero_division=np.nan`` entries are left out of averages).

    ``jaccard(average="macro")`` averages over *all* selected classes, giving absent classes the
    ``zero_division`` value; with ``ignore_absent=True`` (and :func:`miou`) classes absent from
    both truth and prediction are left out of the mean, as segmentation benchmarks do.
    ``average="binary"`` gives the float of class ``pos_label`` (at most two classes);
    ``labels=[i]`` a one-element array with ``average=None`` and the float of class ``i`` with
    any average (see :func:`~metricstream.metrics.precision`).

    Example:
        >>> jaccard([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.2667, 0.1818, 0.5   ])
        >>> jaccard([[5, 1], [2, 3]], average="binary")  # 3 / (3 + 1 + 2)
        0.5
    """
    zero_division_value(zero_division)
    sel = select(
        matrix, labels=labels, average=average, ignore_absent=ignore_absent, pos_label=pos_label
    )
    union = sel.ap + sel.pp - sel.tp
    scores = divide(sel.tp, union, zero_division, metric="Jaccard", missing="true or predicted")
    return reduce_scores(scores, average, sel.support, zero_division, metric="Jaccard")


def dice(
    matrix: MatrixLike | LabelCounts,
    *,
    average: BinaryAverage = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> float | np.ndarray:
    """Dice coefficient (Sørensen–Dice) ``2 TP_i / (AP_i + PP_i)``, identical to per-class F1.

    ``Dice_i = 2 IoU_i / (1 + IoU_i)``. 0/0 (class neither true nor predicted) gives
    ``zero_division``. The segmentation "mean Dice" is ``dice(average="macro",
    ignore_absent=True)``. Arguments (``average="binary"``, ``pos_label``) as :func:`jaccard`; see
    :func:`~metricstream.metrics.f1`.

    Example:
        >>> dice([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.4211, 0.3077, 0.6667])
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
        return undefined_scalar(
            zero_division, "mIoU is ill-defined and being set to 0.0 because there are no samples."
        )
    return float(np.mean(counts.true_positives[present] / union[present]))


def fwiou(matrix: MatrixLike, *, zero_division: ZeroDivision = "warn") -> float:
    """Frequency-weighted IoU: ``FWIoU = sum_i (AP_i / N) IoU_i``.

    Each class's IoU weighted by its share of the true samples (the "fwavacc" of FCN and
    mmsegmentation). Classes never true have weight 0, so absent classes never matter and no
    class-level 0/0 arises: every class with ``AP_i > 0`` has a defined IoU. Equal to
    ``jaccard(average="weighted")``. 0/0 (no samples) gives ``zero_division``.

    Example:
        >>> round(fwiou([[4, 1, 1], [6, 2, 2], [3, 0, 6]]), 4)
        0.3167
    """
    counts = as_counts(matrix)
    zero_division_value(zero_division)
    if counts.total == 0:
        return undefined_scalar(
            zero_division, "FWIoU is ill-defined and being set to 0.0 because there are no samples."
        )
    true = counts.actual_positives != 0
    tp, ap = counts.true_positives[true], counts.actual_positives[true]
    union = ap + counts.predicted_positives[true] - tp
    return float(np.sum(ap / np.float64(counts.total) * (tp / union)))
