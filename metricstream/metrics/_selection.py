"""Selecting classes (``labels``, ``ignore_absent``) and reducing per-class scores (``average``).

Shared by every set-wise metric so that all of them treat degenerate classes alike:

* ``labels`` picks classes by index, in output order (scikit-learn's ``labels``);
* ``ignore_absent=True`` (the segmentation convention, mmsegmentation's ``nanmean``) leaves
  classes absent from both truth and prediction (``AP_i = PP_i = 0``) out of every average —
  "macro", "weighted" and "micro" alike — without a warning; per-class output
  (``average=None``) still lists them, with their ``zero_division`` value;
* ``average="micro"`` sums the counts of the selected classes before dividing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._averaging import Average, average_scores, check_average
from ._zero_division import ZeroDivision, undefined_scalar
from .counts import Labels, MatrixLike, as_counts, label_indices


@dataclass(frozen=True)
class Selection:
    """Per-class counts of the selected classes (length 1 after micro summation)."""

    tp: np.ndarray
    fp: np.ndarray
    fn: np.ndarray
    tn: np.ndarray
    ap: np.ndarray
    pp: np.ndarray
    support: np.ndarray  # AP_i of the selected classes, the weights of "weighted"


def select(
    matrix: MatrixLike,
    *,
    labels: Labels = None,
    average: Average = None,
    ignore_absent: bool = False,
) -> Selection:
    """Counts of the classes chosen by ``labels``/``ignore_absent``, micro-summed if asked."""
    check_average(average)
    if not isinstance(ignore_absent, (bool, np.bool_)):
        raise TypeError(f"`ignore_absent` must be True or False, got {ignore_absent!r}.")
    counts = as_counts(matrix)
    indices = label_indices(labels, counts.num_classes)
    tp, ap, pp = counts.true_positives, counts.actual_positives, counts.predicted_positives
    if indices is not None:
        tp, ap, pp = tp[indices], ap[indices], pp[indices]
    if ignore_absent and average is not None:
        present = (ap + pp) != 0
        tp, ap, pp = tp[present], ap[present], pp[present]
    support = ap
    if average == "micro":
        tp, ap, pp = tp.sum(keepdims=True), ap.sum(keepdims=True), pp.sum(keepdims=True)
        fp, fn = pp - tp, ap - tp
        # the sum over the selected classes of TN_i = N - AP_i - PP_i + TP_i
        tn = counts.total * len(support) - ap - pp + tp
    else:
        fp, fn = pp - tp, ap - tp
        tn = counts.total - ap - pp + tp
    return Selection(tp=tp, fp=fp, fn=fn, tn=tn, ap=ap, pp=pp, support=support)


def reduce_scores(
    scores: np.ndarray,
    average: Average,
    support: np.ndarray,
    zero_division: ZeroDivision,
    *,
    metric: str,
) -> float | np.ndarray:
    """Per-class ``scores`` reduced by ``average`` (see :func:`average_scores`).

    An average over no class at all (every selected class left out by ``ignore_absent``) is
    undefined and gives ``zero_division``, never a silent NaN.
    """
    if average is None:
        return scores
    if average == "micro":
        return float(scores[0])
    if scores.size == 0:
        return undefined_scalar(zero_division, f"{metric} is ill-defined and being set to 0.0 "
                                "because no selected class is present.", stacklevel=5)
    return average_scores(scores, average, support)
