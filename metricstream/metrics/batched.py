"""The common metrics of a stack of B confusion matrices at once, for bootstrap replicates.

Every function takes a :class:`BatchedCounts` (the per-class counts of B matrices: what the
bootstrap's replicate kernel produces, without ever holding B dense K×K matrices) or a
``(B, K, K)`` stack, and returns one value per matrix: shape ``(B,)``, or ``(B, K)`` for
per-class output (``average=None``). Entry ``b`` equals the scalar function of
:mod:`metricstream.metrics` applied to matrix ``b`` with the same arguments (tested on random
stacks with absent classes and empty matrices), except that ``zero_division="warn"`` gives
0.0 *silently*: B replicates would otherwise warn B times.

Functions (same formulas and 0/0 rules as their scalar namesakes): :func:`accuracy`,
:func:`balanced_accuracy`, :func:`precision`, :func:`recall`, :func:`fbeta`, :func:`f1`,
:func:`dice`, :func:`jaccard`, :func:`miou`, :func:`fwiou`, :func:`matthews_corrcoef`,
:func:`cohen_kappa` (unweighted), :func:`hamming_loss`. ``BATCHED`` maps each name to its
function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._averaging import Average, check_average
from ._zero_division import ZeroDivision, zero_division_value
from .counts import Labels, label_indices

__all__ = [
    "BATCHED",
    "BatchedCounts",
    "accuracy",
    "balanced_accuracy",
    "cohen_kappa",
    "dice",
    "f1",
    "fbeta",
    "fwiou",
    "hamming_loss",
    "jaccard",
    "matthews_corrcoef",
    "miou",
    "precision",
    "recall",
]


@dataclass(frozen=True)
class BatchedCounts:
    """Per-class counts of B confusion matrices: ``(B, K)`` arrays and ``(B,)`` totals.

    ``tp[b, i] = C_b[i, i]``, ``ap[b, i] = sum_j C_b[i, j]`` (support),
    ``pp[b, i] = sum_j C_b[j, i]`` (predicted), ``total[b] = sum_ij C_b[i, j]``.
    """

    tp: np.ndarray
    ap: np.ndarray
    pp: np.ndarray
    total: np.ndarray

    @classmethod
    def from_stack(cls, stack: Any) -> BatchedCounts:
        """Reduce a ``(B, K, K)`` stack of matrices (rows true, columns predicted)."""
        array = np.asarray(stack)
        if array.ndim != 3 or array.shape[1] != array.shape[2] or array.shape[1] == 0:
            raise ValueError(
                f"`stack` must be a (B, K, K) array of confusion matrices, got shape {array.shape}."
            )
        if array.dtype.kind not in "biuf":
            raise TypeError(f"`stack` must hold numbers, got dtype {array.dtype}.")
        ap = array.sum(axis=2)
        return cls(
            tp=np.diagonal(array, axis1=1, axis2=2).copy(),
            ap=ap,
            pp=array.sum(axis=1),
            total=ap.sum(axis=1),
        )

    @property
    def num_matrices(self) -> int:
        return int(self.tp.shape[0])

    @property
    def num_classes(self) -> int:
        return int(self.tp.shape[1])


StackLike = BatchedCounts | np.ndarray


def as_batched(stack: StackLike) -> BatchedCounts:
    """Return ``stack`` as :class:`BatchedCounts` (a no-op for ``BatchedCounts``)."""
    if isinstance(stack, BatchedCounts):
        return stack
    return BatchedCounts.from_stack(stack)


def _zd(zero_division: ZeroDivision) -> float:
    return zero_division_value(zero_division)  # "warn" -> 0.0, silently here


def _ratio(numerator: np.ndarray, denominator: np.ndarray, zd: float) -> np.ndarray:
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    undefined = denominator == 0
    result = numerator / np.where(undefined, 1.0, denominator)
    if undefined.any():
        result = np.where(undefined, zd, result)
    return result


def _mean_rows(
    scores: np.ndarray, include: np.ndarray, weights: np.ndarray | None, zd: float
) -> np.ndarray:
    """Row-wise (weighted) mean of ``scores`` over ``include``, skipping NaN entries.

    A row with nothing included is ``zd`` (an average over no class); a row whose included
    entries are all NaN is NaN; a weighted row whose defined weights sum to 0 falls back to the
    plain mean (scikit-learn's rule).
    """
    defined = include & ~np.isnan(scores)
    values = np.where(defined, scores, 0.0)
    count = defined.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        plain = values.sum(axis=1) / count
        if weights is not None:
            w = np.where(defined, weights, 0.0).astype(np.float64)
            wsum = w.sum(axis=1)
            weighted = (values * w).sum(axis=1) / np.where(wsum == 0, 1.0, wsum)
            plain = np.where(wsum != 0, weighted, plain)
    result = np.where(count == 0, np.nan, plain)
    return np.where(include.any(axis=1), result, zd)


def _select(counts: BatchedCounts, labels: Labels):
    indices = label_indices(labels, counts.num_classes)
    tp, ap, pp = counts.tp, counts.ap, counts.pp
    if indices is not None:
        tp, ap, pp = tp[:, indices], ap[:, indices], pp[:, indices]
    return tp, ap, pp


def _set_metric(
    stack: StackLike,
    numerator: Callable,
    denominator: Callable,
    average: Average,
    labels: Labels,
    zero_division: ZeroDivision,
    ignore_absent: bool,
) -> np.ndarray:
    """A per-class ratio ``numerator(tp, ap, pp) / denominator(tp, ap, pp)``, averaged."""
    check_average(average)
    if not isinstance(ignore_absent, (bool, np.bool_)):
        raise TypeError(f"`ignore_absent` must be True or False, got {ignore_absent!r}.")
    zd = _zd(zero_division)
    counts = as_batched(stack)
    tp, ap, pp = _select(counts, labels)
    tp, ap, pp = (x.astype(np.float64) for x in (tp, ap, pp))
    if average is None:
        return _ratio(numerator(tp, ap, pp), denominator(tp, ap, pp), zd)
    include = np.ones(tp.shape, dtype=bool)
    if ignore_absent:
        include = (ap + pp) != 0
    if average == "micro":
        masked = [np.where(include, x, 0.0).sum(axis=1) for x in (tp, ap, pp)]
        micro = _ratio(numerator(*masked), denominator(*masked), zd)
        if ignore_absent:
            micro = np.where(include.any(axis=1), micro, zd)
        return micro
    scores = _ratio(numerator(tp, ap, pp), denominator(tp, ap, pp), zd)
    return _mean_rows(scores, include, ap if average == "weighted" else None, zd)


def precision(
    stack: StackLike,
    *,
    average: Average = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
) -> np.ndarray:
    """Precision ``TP_i / PP_i`` of each matrix (see :func:`metricstream.metrics.precision`)."""
    return _set_metric(
        stack,
        lambda tp, ap, pp: tp,
        lambda tp, ap, pp: pp,
        average,
        labels,
        zero_division,
        ignore_absent,
    )


def recall(
    stack: StackLike,
    *,
    average: Average = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
) -> np.ndarray:
    """Recall ``TP_i / AP_i`` of each matrix (see :func:`metricstream.metrics.recall`)."""
    return _set_metric(
        stack,
        lambda tp, ap, pp: tp,
        lambda tp, ap, pp: ap,
        average,
        labels,
        zero_division,
        ignore_absent,
    )


def fbeta(
    stack: StackLike,
    beta: float,
    *,
    average: Average = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
) -> np.ndarray:
    """F-beta ``(1 + β²) TP_i / (β² AP_i + PP_i)`` of each matrix (see
    :func:`metricstream.metrics.fbeta`; ``β = 0`` is precision, ``β = inf`` recall)."""
    if isinstance(beta, bool) or not isinstance(beta, (int, float, np.integer, np.floating)):
        raise TypeError(f"`beta` must be a number, got {type(beta).__name__}.")
    if not beta >= 0:
        raise ValueError(f"`beta` must be non-negative, got {beta!r}.")
    if np.isposinf(beta):
        return recall(
            stack,
            average=average,
            labels=labels,
            zero_division=zero_division,
            ignore_absent=ignore_absent,
        )
    if beta == 0:
        return precision(
            stack,
            average=average,
            labels=labels,
            zero_division=zero_division,
            ignore_absent=ignore_absent,
        )
    beta2 = float(beta) ** 2
    return _set_metric(
        stack,
        lambda tp, ap, pp: (1 + beta2) * tp,
        lambda tp, ap, pp: beta2 * ap + pp,
        average,
        labels,
        zero_division,
        ignore_absent,
    )


def f1(
    stack: StackLike,
    *,
    average: Average = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
) -> np.ndarray:
    """F1 ``2 TP_i / (AP_i + PP_i)`` of each matrix (see :func:`metricstream.metrics.f1`)."""
    return fbeta(
        stack,
        1.0,
        average=average,
        labels=labels,
        zero_division=zero_division,
        ignore_absent=ignore_absent,
    )


dice = f1


def jaccard(
    stack: StackLike,
    *,
    average: Average = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
) -> np.ndarray:
    """IoU ``TP_i / (AP_i + PP_i - TP_i)`` of each matrix (see
    :func:`metricstream.metrics.jaccard`)."""
    return _set_metric(
        stack,
        lambda tp, ap, pp: tp,
        lambda tp, ap, pp: ap + pp - tp,
        average,
        labels,
        zero_division,
        ignore_absent,
    )


def accuracy(stack: StackLike, *, zero_division: ZeroDivision = "warn") -> np.ndarray:
    """Accuracy ``sum_i TP_i / N`` of each matrix; no samples gives ``zero_division``."""
    counts = as_batched(stack)
    return _ratio(counts.tp.sum(axis=1), counts.total, _zd(zero_division))


def hamming_loss(stack: StackLike, *, zero_division: ZeroDivision = "warn") -> np.ndarray:
    """Hamming loss ``1 - accuracy`` of each matrix; no samples gives ``zero_division``."""
    counts = as_batched(stack)
    return _ratio(counts.total - counts.tp.sum(axis=1), counts.total, _zd(zero_division))


def balanced_accuracy(
    stack: StackLike, *, adjusted: bool = False, zero_division: ZeroDivision = "warn"
) -> np.ndarray:
    """Mean recall over the classes present in each matrix's truth (see
    :func:`metricstream.metrics.balanced_accuracy`); ``adjusted`` maps chance to 0."""
    if not isinstance(adjusted, (bool, np.bool_)):
        raise TypeError(f"`adjusted` must be True or False, got {adjusted!r}.")
    zd = _zd(zero_division)
    counts = as_batched(stack)
    present = counts.ap != 0
    num_present = present.sum(axis=1)
    per_class = np.where(present, counts.tp / np.where(present, counts.ap, 1), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        score = per_class.sum(axis=1) / num_present
        if adjusted:
            chance = 1.0 / num_present
            score = (score - chance) / (1 - chance)
            score = np.where(num_present == 1, zd, score)
    return np.where(num_present == 0, zd, score)


def miou(stack: StackLike, *, zero_division: ZeroDivision = "warn") -> np.ndarray:
    """mIoU: mean IoU over the classes present in truth or prediction of each matrix (see
    :func:`metricstream.metrics.miou`); no samples gives ``zero_division``."""
    zd = _zd(zero_division)
    counts = as_batched(stack)
    union = (counts.ap + counts.pp - counts.tp).astype(np.float64)
    present = union != 0
    iou = np.where(present, counts.tp / np.where(present, union, 1.0), 0.0)
    count = present.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        score = iou.sum(axis=1) / count
    return np.where(count == 0, zd, score)


def fwiou(stack: StackLike, *, zero_division: ZeroDivision = "warn") -> np.ndarray:
    """Frequency-weighted IoU ``sum_i (AP_i / N) IoU_i`` of each matrix (see
    :func:`metricstream.metrics.fwiou`); no samples gives ``zero_division``."""
    zd = _zd(zero_division)
    counts = as_batched(stack)
    union = (counts.ap + counts.pp - counts.tp).astype(np.float64)
    true = counts.ap != 0
    total = counts.total.astype(np.float64)
    share = counts.ap / np.where(total == 0, 1.0, total)[:, None]
    iou = np.where(true, counts.tp / np.where(true, union, 1.0), 0.0)
    return np.where(total == 0, zd, (share * iou).sum(axis=1))


def matthews_corrcoef(stack: StackLike, *, zero_division: float = 0.0) -> np.ndarray:
    """Multiclass MCC (Gorodkin's R_K) of each matrix (see
    :func:`metricstream.metrics.matthews_corrcoef`); 0/0 gives ``zero_division`` (0.0)."""
    zd = 0.0 if zero_division == "warn" else _zd(zero_division)
    counts = as_batched(stack)
    t = counts.ap.astype(np.float64)
    p = counts.pp.astype(np.float64)
    n = p.sum(axis=1)
    correct = counts.tp.sum(axis=1, dtype=np.float64)
    cov_tp = correct * n - np.einsum("bi,bi->b", t, p)
    cov_pp = n**2 - np.einsum("bi,bi->b", p, p)
    cov_tt = n**2 - np.einsum("bi,bi->b", t, t)
    product = cov_pp * cov_tt
    return np.where(product == 0, zd, cov_tp / np.sqrt(np.where(product == 0, 1.0, product)))


def cohen_kappa(
    stack: StackLike, *, weights: None = None, zero_division: ZeroDivision = "warn"
) -> np.ndarray:
    """Unweighted Cohen's kappa ``(p_o - p_e) / (1 - p_e)`` of each matrix (see
    :func:`metricstream.metrics.cohen_kappa`); no samples or perfect chance agreement (at
    most one class used) gives ``zero_division``."""
    if weights is not None:
        raise ValueError(
            "`weights` of a batched kappa must be None (unweighted); weighted "
            "kappa is evaluated one matrix at a time."
        )
    zd = _zd(zero_division)
    counts = as_batched(stack)
    total = counts.total.astype(np.float64)
    safe = np.where(total == 0, 1.0, total)
    observed = total - counts.tp.sum(axis=1)
    chance = (
        total
        - np.einsum("bi,bi->b", counts.ap.astype(np.float64), counts.pp.astype(np.float64)) / safe
    )
    single = ((counts.ap != 0) | (counts.pp != 0)).sum(axis=1) <= 1
    undefined = (total == 0) | single | (chance == 0)
    return np.where(undefined, zd, 1 - observed / np.where(undefined, 1.0, chance))


BATCHED: dict[str, Callable[..., np.ndarray]] = {
    "accuracy": accuracy,
    "balanced_accuracy": balanced_accuracy,
    "cohen_kappa": cohen_kappa,
    "dice": dice,
    "f1": f1,
    "fbeta": fbeta,
    "fwiou": fwiou,
    "hamming_loss": hamming_loss,
    "jaccard": jaccard,
    "matthews_corrcoef": matthews_corrcoef,
    "miou": miou,
    "precision": precision,
    "recall": recall,
}
