"""Selecting classes (``labels``, ``ignore_absent``, ``pos_label``) and reducing per-class scores
(``average``).

Shared by every set-wise metric so that all of them treat degenerate classes alike:

* ``labels`` picks classes by index, in output order (scikit-learn's ``labels``). A one-element
  selection such as ``labels=[i]`` (or ``labels=i``) is still a selection: ``average=None``
  returns a one-element array ``[score_i]`` (as scikit-learn), and every average of one class
  (``"micro"``, ``"macro"``, ``"weighted"``) returns ``score_i`` as a float;
* ``average="binary"`` returns the score of class ``pos_label`` as a float, for matrices of at
  most two classes (scikit-learn's ``average="binary"``); ``labels`` and ``ignore_absent`` are
  then ignored, as in scikit-learn, and a ``pos_label`` other than 1 given with another
  ``average`` is ignored with a ``UserWarning`` (scikit-learn's warning);
* ``ignore_absent=True`` (the segmentation convention, mmsegmentation's ``nanmean``) leaves
  classes absent from both truth and prediction (``AP_i = PP_i = 0``) out of every average —
  "macro", "weighted" and "micro" alike — without a warning; per-class output
  (``average=None``) still lists them, with their ``zero_division`` value;
* ``average="micro"`` sums the counts of the selected classes before dividing.

Besides a K×K confusion matrix, :func:`select` accepts :class:`LabelCounts`: the per-label
counts of L independent binary problems (multilabel classification), each with its own total.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._averaging import BinaryAverage, average_scores, check_average
from ._zero_division import ZeroDivision, undefined_scalar
from .counts import Labels, MatrixLike, as_counts, label_indices


@dataclass(frozen=True)
class LabelCounts:
    """Per-label counts of L independent one-vs-rest problems (a multilabel confusion matrix).

    ``tp``, ``ap`` (actual positives, ``TP + FN``), ``pp`` (predicted positives, ``TP + FP``)
    and ``total`` (samples counted for the label, ``TP + FP + FN + TN``) are arrays of length L,
    int64 or float64 (weighted). Unlike a K×K confusion matrix, the labels do not compete: a
    sample may be positive for several labels, and ``TN_i = total_i - AP_i - PP_i + TP_i``.
    """

    tp: np.ndarray
    ap: np.ndarray
    pp: np.ndarray
    total: np.ndarray

    @property
    def num_labels(self) -> int:
        return int(self.tp.shape[0])


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


def check_pos_label(pos_label: Any, num_classes: int) -> int:
    """Validate ``pos_label`` (a class index of a matrix with at most two classes)."""
    if isinstance(pos_label, (bool, np.bool_)) or not isinstance(pos_label, (int, np.integer)):
        raise TypeError(
            f"`pos_label` must be an integer class index, got {type(pos_label).__name__} "
            f"{pos_label!r}."
        )
    if not 0 <= pos_label < num_classes:
        raise ValueError(
            f"`pos_label` is {pos_label}, but class indices must be in [0, {num_classes})."
        )
    return int(pos_label)


def _binary_index(num_classes: int, pos_label: Any) -> np.ndarray:
    if num_classes > 2:
        raise ValueError(
            f"Target is multiclass ({num_classes} classes) but average='binary'. Please choose "
            "another average setting, one of [None, 'micro', 'macro', 'weighted']."
        )
    return np.array([check_pos_label(pos_label, num_classes)], dtype=np.intp)


def select(
    matrix: MatrixLike | LabelCounts,
    *,
    labels: Labels = None,
    average: BinaryAverage = None,
    ignore_absent: bool = False,
    pos_label: int = 1,
) -> Selection:
    """Counts of the classes chosen by ``labels``/``ignore_absent``/``pos_label``, micro-summed
    if asked."""
    check_average(average, binary=True)
    if not isinstance(ignore_absent, (bool, np.bool_)):
        raise TypeError(f"`ignore_absent` must be True or False, got {ignore_absent!r}.")
    if isinstance(matrix, LabelCounts):
        tp, ap, pp, total = matrix.tp, matrix.ap, matrix.pp, matrix.total
        num_classes = matrix.num_labels
    else:
        counts = as_counts(matrix)
        tp, ap, pp = counts.true_positives, counts.actual_positives, counts.predicted_positives
        total = counts.total
        num_classes = counts.num_classes
    if average == "binary":
        indices: np.ndarray | None = _binary_index(num_classes, pos_label)
    else:
        if isinstance(pos_label, (bool, np.bool_)) or not isinstance(pos_label, (int, np.integer)):
            check_pos_label(pos_label, num_classes)  # raises the TypeError
        if pos_label != 1:
            warnings.warn(
                f"Note that pos_label (set to {pos_label!r}) is ignored when average != 'binary' "
                f"(got {average!r}). You may use labels=[pos_label] to specify a single "
                "positive class.",
                UserWarning,
                stacklevel=4,
            )
        indices = label_indices(labels, num_classes)
    per_class_total = isinstance(total, np.ndarray) and total.ndim == 1
    if indices is not None:
        tp, ap, pp = tp[indices], ap[indices], pp[indices]
        if per_class_total:
            total = total[indices]
    if ignore_absent and average not in (None, "binary"):
        present = (ap + pp) != 0
        tp, ap, pp = tp[present], ap[present], pp[present]
        if per_class_total:
            total = total[present]
    support = ap
    if average == "micro":
        tp, ap, pp = tp.sum(keepdims=True), ap.sum(keepdims=True), pp.sum(keepdims=True)
        fp, fn = pp - tp, ap - tp
        # the sum over the selected classes of TN_i = N_i - AP_i - PP_i + TP_i
        summed = total.sum(keepdims=True) if per_class_total else total * len(support)
        tn = summed - ap - pp + tp
    else:
        fp, fn = pp - tp, ap - tp
        tn = total - ap - pp + tp
    return Selection(tp=tp, fp=fp, fn=fn, tn=tn, ap=ap, pp=pp, support=support)


def reduce_scores(
    scores: np.ndarray,
    average: BinaryAverage,
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
    if average in ("micro", "binary"):
        return float(scores[0])
    if scores.size == 0:
        return undefined_scalar(
            zero_division,
            f"{metric} is ill-defined and being set to 0.0 because no selected class is present.",
            stacklevel=5,
        )
    return average_scores(scores, average, support)
