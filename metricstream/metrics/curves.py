"""ROC and precision-recall curves, AUROC, average precision and operating points, as plain
functions of score histograms.

Every function takes per-bin counts of one or several classes (one-vs-rest):

* ``positives[..., b]`` and ``negatives[..., b]``: the (weighted) number of positive and
  negative samples whose score falls in bin ``b``; bins are in increasing score order, so every
  threshold between two bins is a point of the curves. Arrays are ``(B,)`` for one class or
  ``(C, B)`` for C classes.
* ``bin_values[b]``: the threshold that bin ``b`` stands for (the score itself when the bins
  hold one value each); a sample counts as predicted positive at bin ``b``'s threshold when its
  bin is ``>= b``.
* ``exact`` (optional, one bool per class): True when every bin of that class holds a single
  score value. Then the histogram *is* the data and every result equals scikit-learn's on the
  raw scores. Otherwise scores sharing a bin are tied in the histogram but perhaps not in the
  data, and the ``*_bounds`` functions give an interval that always contains the value on the
  raw scores (a worst case over every order the scores inside a bin could have).

With ``P = sum_b positives[b]`` and ``N = sum_b negatives[b]``, and ``TP(b)``, ``FP(b)`` the
positives and negatives in bins ``>= b`` (a threshold at bin ``b``):

* ROC AUC ``= sum_b positives[b] * (FP(b + 1) + negatives[b] / 2) / (P * N)``: the probability
  that a positive outscores a negative, ties counting one half (the trapezoidal area under the
  ROC curve, as ``sklearn.metrics.roc_auc_score``);
* average precision ``= sum_b (positives[b] / P) * TP(b) / (TP(b) + FP(b))``, scikit-learn's
  step sum (not the trapezoidal area);
* the curves follow ``sklearn.metrics.roc_curve`` and ``precision_recall_curve``, with their
  end points, ``drop_intermediate`` rules, warnings and NaN conventions.

Undefined values: AUROC without positives or without negatives is NaN with an
:class:`~metricstream.UndefinedMetricWarning` (scikit-learn raises instead); averages leave NaN
classes out. Average precision without positives is 0.0 with a warning, as scikit-learn.
"""

from __future__ import annotations

import warnings
from typing import Literal, NamedTuple

import numpy as np

from ..exceptions import UndefinedMetricWarning

CurveAverage = Literal["macro", "weighted", "micro"] | None
WithinBins = Literal["auto", "tied", "spread"]
Criterion = Literal["f1", "youden"]

_AVERAGES = (None, "macro", "weighted", "micro")
# Added to the half-width of inexact intervals: the value and the exact result are both sums
# rounded in float64, which may differ by a few units in the last place.
_SLACK = 1e-13


class Bounded(NamedTuple):
    """A value computed from histograms and the interval that contains the exact value."""

    value: float | np.ndarray
    lower: float | np.ndarray
    upper: float | np.ndarray


class OperatingPoint(NamedTuple):
    """A metric value at a chosen threshold (predicted positive: ``score >= threshold``)."""

    value: float | np.ndarray
    threshold: float | np.ndarray


# ---------------------------------------------------------------------------------- helpers
def _hist(positives: object, negatives: object) -> tuple[np.ndarray, np.ndarray]:
    pos = np.asarray(positives, dtype=np.float64)
    neg = np.asarray(negatives, dtype=np.float64)
    if pos.shape != neg.shape or pos.ndim not in (1, 2):
        raise ValueError(
            f"`positives` and `negatives` must be histograms of equal shape (B,) or (C, B), "
            f"got {pos.shape} and {neg.shape}."
        )
    return pos, neg


def _exact(exact: object, shape: tuple[int, ...]) -> np.ndarray:
    classes = shape[0] if len(shape) == 2 else 1
    if exact is None:
        return np.zeros(classes, dtype=bool)
    flags = np.asarray(exact, dtype=bool).reshape(-1)
    if flags.size == 1:
        flags = np.repeat(flags, classes)
    if flags.size != classes:
        raise ValueError(f"`exact` must hold one flag per class ({classes}), got {flags.size}.")
    return flags


def _check_average(average: object) -> None:
    if average not in _AVERAGES:
        raise ValueError(
            f"`average` must be None, 'macro', 'weighted' or 'micro', got {average!r}."
        )


def _average(values: np.ndarray, average: CurveAverage, support: np.ndarray) -> float | np.ndarray:
    """Mean of the defined (non-NaN) per-class values, weighted by support for "weighted"."""
    if average is None:
        return values
    defined = ~np.isnan(values)
    if not defined.any():
        return float("nan")
    if average == "weighted":
        weights = support[defined]
        if weights.sum() > 0:
            return float(np.average(values[defined], weights=weights))
    return float(np.mean(values[defined]))


def _scalar(value: float | np.ndarray, squeeze: bool) -> float | np.ndarray:
    if squeeze and isinstance(value, np.ndarray):
        return float(value[0])
    return value


def _descending(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, ...]:
    """Reversed histograms and the inclusive/exclusive cumulative counts from the top."""
    pos_d = pos[..., ::-1]
    neg_d = neg[..., ::-1]
    tps = np.cumsum(pos_d, axis=-1)
    fps = np.cumsum(neg_d, axis=-1)
    return pos_d, neg_d, tps, fps, tps - pos_d, fps - neg_d


def _warn(message: str, stacklevel: int = 3) -> None:
    warnings.warn(message, UndefinedMetricWarning, stacklevel=stacklevel + 1)


# ---------------------------------------------------------------------------------- curves
def clf_counts(
    positives: object, negatives: object, bin_values: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fps, tps, thresholds)`` of one class at each distinct threshold, highest first.

    The counterpart of scikit-learn's ``confusion_matrix_at_thresholds``: one entry per
    non-empty bin, ``tps[k]``/``fps[k]`` the positives/negatives scored at or above
    ``thresholds[k]``.
    """
    pos, neg = _hist(positives, negatives)
    values = np.asarray(bin_values, dtype=np.float64)
    if pos.ndim != 1 or values.shape != pos.shape:
        raise ValueError(
            f"one class expected: `positives`, `negatives` and `bin_values` of shape (B,), "
            f"got {pos.shape} and {values.shape}."
        )
    order = np.flatnonzero((pos + neg) > 0)[::-1]
    return np.cumsum(neg[order]), np.cumsum(pos[order]), values[order]


def roc_curve(
    positives: object, negatives: object, bin_values: object, *, drop_intermediate: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fpr, tpr, thresholds)`` of one class, as ``sklearn.metrics.roc_curve``.

    ``fpr = FP / N`` and ``tpr = TP / P`` at each distinct threshold (highest first), after the
    point ``(0, 0)`` at threshold ``inf``. ``drop_intermediate`` drops points collinear with
    their neighbours (scikit-learn's rule). Without negatives (``N = 0``) ``fpr`` is all NaN,
    without positives ``tpr`` is, each with an ``UndefinedMetricWarning``.
    """
    fps, tps, thresholds = clf_counts(positives, negatives, bin_values)
    if drop_intermediate and fps.shape[0] > 2:
        keep = np.flatnonzero(np.r_[True, np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), True])
        fps, tps, thresholds = fps[keep], tps[keep], thresholds[keep]
    tps = np.r_[0.0, tps]
    fps = np.r_[0.0, fps]
    thresholds = np.r_[np.inf, thresholds]
    if fps[-1] <= 0:
        _warn("No negative samples in y_true, false positive value should be meaningless")
        fpr = np.full(fps.shape, np.nan)
    else:
        fpr = fps / fps[-1]
    if tps[-1] <= 0:
        _warn("No positive samples in y_true, true positive value should be meaningless")
        tpr = np.full(tps.shape, np.nan)
    else:
        tpr = tps / tps[-1]
    return fpr, tpr, thresholds


def precision_recall_curve(
    positives: object, negatives: object, bin_values: object, *, drop_intermediate: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(precision, recall, thresholds)`` of one class, as
    ``sklearn.metrics.precision_recall_curve``.

    ``precision = TP / (TP + FP)`` (0 where nothing is predicted positive) and
    ``recall = TP / P`` at each distinct threshold, lowest threshold first, followed by the
    point ``(precision 1, recall 0)`` that has no threshold. Without positives recall is set to
    1 everywhere, with an ``UndefinedMetricWarning``.
    """
    fps, tps, thresholds = clf_counts(positives, negatives, bin_values)
    if drop_intermediate and fps.shape[0] > 2:
        keep = np.flatnonzero(np.r_[True, np.logical_or(np.diff(tps[:-1]), np.diff(tps[1:])), True])
        fps, tps, thresholds = fps[keep], tps[keep], thresholds[keep]
    predicted = tps + fps
    precision = np.divide(tps, predicted, out=np.zeros_like(tps), where=predicted != 0)
    if tps.size == 0 or tps[-1] == 0:
        _warn("No positive class found in y_true, recall is set to one for all thresholds.")
        recall = np.ones_like(tps)
    else:
        recall = tps / tps[-1]
    return np.r_[precision[::-1], 1.0], np.r_[recall[::-1], 0.0], thresholds[::-1]


# ---------------------------------------------------------------------------------- areas
def _auroc_parts(
    pos: np.ndarray, neg: np.ndarray, exact: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    positives = pos.sum(axis=-1)
    negatives = neg.sum(axis=-1)
    below = np.cumsum(neg, axis=-1) - neg
    area = (pos * (below + 0.5 * neg)).sum(axis=-1)
    pairs = positives * negatives
    # Pairs tied in a bin count 1/2; in the raw data each is 0, 1/2 or 1.
    # (plus a little slack for the rounding of the two sums, so the interval holds in floats)
    tied = np.where(exact, 0.0, (pos * neg).sum(axis=-1) * 0.5)
    with np.errstate(divide="ignore", invalid="ignore"):
        auc = np.where(pairs > 0, area / np.where(pairs > 0, pairs, 1.0), np.nan)
        half = np.where(pairs > 0, tied / np.where(pairs > 0, pairs, 1.0), np.nan)
    half = np.where(exact, half, half + _SLACK)
    return auc, half, positives, negatives


def _warn_auroc(positives: np.ndarray, negatives: np.ndarray) -> None:
    if np.any(positives <= 0):
        _warn("ROC AUC is undefined (NaN) for classes without positive samples.", 4)
    if np.any(negatives <= 0):
        _warn("ROC AUC is undefined (NaN) for classes without negative samples.", 4)


def auroc_bounds(
    positives: object, negatives: object, *, exact: object = None, average: CurveAverage = None
) -> Bounded:
    """Area under the ROC curve with its worst-case interval; see :func:`auroc`.

    The half-width of the interval of a class is ``sum_b positives[b] * negatives[b] /
    (2 P N)`` (each pair tied in a bin may be ordered either way in the raw data), 0 for exact
    classes. Averages average the bounds the same way as the values.
    """
    _check_average(average)
    pos, neg = _hist(positives, negatives)
    flags = _exact(exact, pos.shape)
    squeeze = pos.ndim == 1
    if average == "micro" and pos.ndim == 2:
        pos, neg = pos.sum(axis=0), neg.sum(axis=0)
        flags = np.array([bool(flags.all())])
        average = None
        squeeze = True
    auc, half, p, n = _auroc_parts(pos, neg, flags)
    _warn_auroc(np.atleast_1d(p), np.atleast_1d(n))
    support = np.atleast_1d(p)
    auc, half = np.atleast_1d(auc), np.atleast_1d(half)
    value = _average(auc, average, support)
    lower = _average(auc - half, average, support)
    upper = _average(auc + half, average, support)
    return Bounded(_scalar(value, squeeze), _scalar(lower, squeeze), _scalar(upper, squeeze))


def auroc(
    positives: object, negatives: object, *, average: CurveAverage = None
) -> float | np.ndarray:
    """Area under the ROC curve: ``sum_b pos[b] * (FP(b + 1) + neg[b] / 2) / (P * N)``.

    Equal to ``sklearn.metrics.roc_auc_score`` on the raw scores when the bins hold one value
    each; for ``(C, B)`` histograms, one-vs-rest per class as ``roc_auc_score(...,
    multi_class="ovr")``: ``average`` None (per class), ``"macro"`` (mean), ``"weighted"``
    (weighted by positives ``P``) or ``"micro"`` (one curve of the pooled histograms).
    Classes without positives or without negatives are NaN (with an
    ``UndefinedMetricWarning``) and left out of averages.

    Example:
        >>> auroc([1, 0, 1], [1, 1, 0])  # bins: (1 pos, 1 neg), (1 neg), (1 pos)
        0.625
    """
    return auroc_bounds(positives, negatives, average=average).value


def _digamma(x: np.ndarray) -> np.ndarray:
    """The digamma function for ``x >= 1`` (recurrence up to 7, then the asymptotic series:
    absolute error below 2e-12)."""
    shift = np.zeros_like(x)
    for j in range(6):
        shift += 1.0 / (x + j)
    y = x + 6.0
    inv = 1.0 / (y * y)
    series = inv * (1 / 12 - inv * (1 / 120 - inv * (1 / 252 - inv * (1 / 240 - inv / 132))))
    return np.log(y) - 0.5 / y - series - shift


def _spread_steps(
    pos_d: np.ndarray,
    neg_d: np.ndarray,
    tps_above: np.ndarray,
    fps_above: np.ndarray,
    tied_steps: np.ndarray,
    spread: np.ndarray,
) -> np.ndarray:
    """Each bin's share of the step sum with its ``k`` positives and ``m`` negatives spread
    evenly, the ``i``-th positive after ``i * m / (k + 1)`` of the negatives: with ``a`` TP
    and ``b`` TP + FP above the bin and ``r = 1 + m / (k + 1)``, ``sum_{i=1..k} (a + i) /
    (b + r i) = k / r + (a - b / r) / r * (psi(b / r + k + 1) - psi(b / r + 1))`` (digamma
    ``psi``; exact for a bin of positives only). Bins where ``spread`` is False keep
    ``tied_steps``."""
    k = pos_d
    b = tps_above + fps_above
    r = 1.0 + neg_d / (k + 1.0)
    x = b / r
    share = k / r + (tps_above - x) / r * (_digamma(x + k + 1.0) - _digamma(x + 1.0))
    return np.where(spread & (k > 0), share, tied_steps)


def continuous_bins(positives: object, negatives: object) -> np.ndarray:
    """Bins that look like a stretch of continuous scores: the bin and at least two of its
    four nearest bins (two on each side) hold samples.

    Continuous scores fill runs of adjacent bins, each bin holding several distinct values;
    discrete scores (rounded, or a few exact values such as 0 and 1) leave occupied bins
    apart, each holding one repeated value. Average precision spreads the samples of the
    first kind through their bin and counts the second kind as tied (see
    :func:`average_precision_bounds`). Computed from the histogram alone, so merged and
    synced states give the same answer as one stream.

    Example:
        >>> continuous_bins([0, 1, 1, 1, 0, 0, 1, 0], [0, 0, 1, 0, 0, 0, 0, 0]).tolist()
        [False, True, True, True, False, False, False, False]
    """
    pos, neg = _hist(positives, negatives)
    occupied = (pos + neg) > 0
    near = np.zeros(occupied.shape, dtype=np.int8)
    for distance in (1, 2):
        near[..., distance:] += occupied[..., :-distance]
        near[..., :-distance] += occupied[..., distance:]
    return occupied & (near >= 2)


def _ap_parts(
    pos: np.ndarray, neg: np.ndarray, exact: np.ndarray, spread: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    pos_d, neg_d, tps, fps, tps_above, fps_above = _descending(pos, neg)
    positives = tps[..., -1] if tps.shape[-1] else np.zeros(pos.shape[:-1])
    predicted = tps + fps
    precision = np.divide(tps, predicted, out=np.zeros_like(tps), where=predicted > 0)
    tied_steps = pos_d * precision
    steps = tied_steps.sum(axis=-1)
    estimate = steps
    if spread is not None:
        exact_rows = exact if pos.ndim == 2 else exact[0]
        many = np.asarray(spread, dtype=bool)[..., ::-1] & ~np.asarray(exact_rows)[..., None]
        estimate = _spread_steps(pos_d, neg_d, tps_above, fps_above, tied_steps, many).sum(axis=-1)
    # Best order inside a bin: its positives first, all tied; worst: its negatives first, then
    # each positive alone, sum_{i=1..p} (a + i) / (b + i) >= p - (b - a) * log(1 + p / b) with
    # a = TP above, b = TP above + FP above + negatives of the bin.
    best_precision = np.divide(
        tps, tps + fps_above, out=np.ones_like(tps), where=(tps + fps_above) > 0
    )
    best = (pos_d * best_precision).sum(axis=-1)
    base = tps_above + fps
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = np.where(
            base > 0, (base - tps_above) * np.log1p(pos_d / np.where(base > 0, base, 1.0)), 0.0
        )
    worst = (pos_d - loss).sum(axis=-1)
    exact2 = exact if pos.ndim == 2 else exact[0]
    best = np.where(exact2, steps, best + _SLACK * positives)
    worst = np.where(exact2, steps, np.minimum(worst, steps) - _SLACK * positives)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(positives > 0, 1.0 / np.where(positives > 0, positives, 1.0), 0.0)
    # The spread estimate lies between the extreme orders; clipped against float rounding.
    estimate = np.clip(estimate, worst, best)
    return estimate * scale, worst * scale, best * scale, positives


def average_precision_bounds(
    positives: object,
    negatives: object,
    *,
    exact: object = None,
    average: CurveAverage = None,
    spread: object = None,
) -> Bounded:
    """Average precision with its worst-case interval; see :func:`average_precision`.

    In each bin holding several values the raw order is unknown: the upper end assumes the
    bin's positives come first, all tied; the lower end its negatives first, then each
    positive alone (bounded below in closed form, so it holds for weighted counts too).

    The value treats each bin's samples as tied (scikit-learn's rule for equal scores:
    exact when every bin holds one value). ``spread``, a boolean per bin, instead spreads
    the positives and negatives of the marked bins of inexact classes evenly through the bin
    (the expected step sum of a random order inside the bin): far closer to the value of the
    raw scores when bins hold many distinct continuous scores (on 10^5 smooth float32
    probabilities, 2e-4 -> 1e-6), further when they hold ties (scores rounded to 2 decimals:
    0 -> 3e-3). The interval does not change.
    """
    _check_average(average)
    pos, neg = _hist(positives, negatives)
    flags = _exact(exact, pos.shape)
    squeeze = pos.ndim == 1
    if average == "micro" and pos.ndim == 2:
        pos, neg = pos.sum(axis=0), neg.sum(axis=0)
        flags = np.array([bool(flags.all())])
        average = None
        squeeze = True
    mask = None
    if spread is not None:
        mask = np.asarray(spread, dtype=bool)
        if mask.ndim == 2 and pos.ndim == 1:
            mask = np.asarray(mask.any(axis=0))  # micro: a bin of the summed histogram
        mask = np.broadcast_to(mask, pos.shape)
    ap, lower, upper, support = (np.atleast_1d(x) for x in _ap_parts(pos, neg, flags, mask))
    if np.any(support <= 0):
        _warn(
            "Average precision is set to 0.0 for classes without positive samples "
            "(recall is undefined).",
            3,
        )
    return Bounded(
        _scalar(_average(ap, average, support), squeeze),
        _scalar(_average(lower, average, support), squeeze),
        _scalar(_average(upper, average, support), squeeze),
    )


def average_precision(
    positives: object, negatives: object, *, average: CurveAverage = None
) -> float | np.ndarray:
    """Average precision ``sum_b (pos[b] / P) * TP(b) / (TP(b) + FP(b))``.

    scikit-learn's ``average_precision_score`` (a step sum over distinct thresholds, not the
    trapezoidal area). ``average`` as in :func:`auroc`; a class without positives scores 0.0
    with an ``UndefinedMetricWarning`` and counts in averages, as in scikit-learn.

    Example:
        >>> average_precision([1, 0, 1], [1, 1, 0])
        0.75
    """
    return average_precision_bounds(positives, negatives, average=average).value


# ---------------------------------------------------------------------------------- points
def _points(pos: np.ndarray, neg: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """Every threshold of one class (non-empty bins, highest first, after threshold inf)."""
    nonempty = np.flatnonzero((pos + neg) > 0)[::-1]
    p = pos[nonempty]
    n = neg[nonempty]
    tps = np.r_[0.0, np.cumsum(p)]
    fps = np.r_[0.0, np.cumsum(n)]
    # Counts of the bins above each point and of the bin itself, for the upper bounds.
    return {
        "tps": tps,
        "fps": fps,
        "thresholds": np.r_[np.inf, values[nonempty]],
        "bin_pos": np.r_[0.0, p],
        "fps_above": np.r_[0.0, fps[:-1]],
    }


def _select(
    value: np.ndarray, feasible: np.ndarray, tiebreak: np.ndarray, thresholds: np.ndarray
) -> tuple[float, float]:
    """Largest feasible ``value``, ties broken by the larger ``tiebreak``."""
    if not feasible.any():
        return 0.0, float("inf")
    candidates = np.flatnonzero(feasible)
    order = np.lexsort((tiebreak[candidates], value[candidates]))
    best = candidates[order[-1]]
    return float(value[best]), float(thresholds[best])


def _ratio(numerator: np.ndarray, denominator: np.ndarray | float, empty: float) -> np.ndarray:
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.broadcast_to(np.asarray(denominator, dtype=np.float64), numerator.shape)
    return np.divide(
        numerator, denominator, out=np.full(numerator.shape, empty), where=denominator > 0
    )


Target = Literal[
    "precision_at_recall",
    "recall_at_precision",
    "sensitivity_at_specificity",
    "specificity_at_sensitivity",
    "f1",
    "youden",
]


def operating_point(
    positives: object,
    negatives: object,
    bin_values: object,
    target: Target,
    constraint: float = 0.0,
    *,
    exact: object = None,
) -> tuple[OperatingPoint, Bounded]:
    """The best threshold of one class for ``target``, and the interval of the best value.

    ``target`` and its meaning (``P``, ``N`` the positives and negatives; among thresholds at
    which the constraint holds, the one maximising the value, ties to the larger recall /
    sensitivity):

    * ``"precision_at_recall"``: max ``TP / (TP + FP)`` s.t. ``TP / P >= constraint``;
    * ``"recall_at_precision"``: max ``TP / P`` s.t. ``TP / (TP + FP) >= constraint``;
    * ``"sensitivity_at_specificity"``: max ``TP / P`` s.t. ``1 - FP / N >= constraint``;
    * ``"specificity_at_sensitivity"``: max ``1 - FP / N`` s.t. ``TP / P >= constraint``;
    * ``"f1"``: max ``2 TP / (P + TP + FP)`` (no constraint);
    * ``"youden"``: max ``TP / P - FP / N``, Youden's J (no constraint).

    Thresholds are those of :func:`roc_curve` (``inf``: predict nothing positive). When no
    threshold satisfies the constraint the value is 0.0 and the threshold ``inf``. 0/0 rules:
    precision with nothing predicted is 0 (not a feasible point for ``recall_at_precision``);
    without positives (or negatives) the rates are NaN, with an ``UndefinedMetricWarning``.

    The lower end of the interval is the value itself (it is reached at a real threshold);
    the upper end is the best value a threshold *inside* a bin could reach, taking the bin's
    positives before its negatives (equal to the value for exact classes).
    """
    pos, neg = _hist(positives, negatives)
    values = np.asarray(bin_values, dtype=np.float64)
    if pos.ndim != 1:
        raise ValueError(f"one class expected: histograms of shape (B,), got {pos.shape}.")
    if not 0.0 <= constraint <= 1.0:
        raise ValueError(f"the constraint must lie in [0, 1], got {constraint!r}.")
    flags = _exact(exact, pos.shape)
    pts = _points(pos, neg, values)
    tps, fps, thresholds = pts["tps"], pts["fps"], pts["thresholds"]
    total_pos = float(pos.sum())
    total_neg = float(neg.sum())
    needs_pos = target != "f1" or total_pos == 0
    needs_neg = target in ("sensitivity_at_specificity", "specificity_at_sensitivity", "youden")
    if (needs_pos and total_pos <= 0) or (needs_neg and total_neg <= 0):
        _warn(
            f"{target} is undefined (NaN) for a class without "
            f"{'positive' if total_pos <= 0 else 'negative'} samples."
        )
        nan = float("nan")
        return OperatingPoint(nan, nan), Bounded(nan, nan, nan)
    recall = _ratio(tps, total_pos, 0.0)
    precision = _ratio(tps, tps + fps, 0.0)
    specificity = 1.0 - _ratio(fps, total_neg, 0.0)
    # The best point inside each bin: all its positives, none of its negatives.
    inner_tps = tps
    inner_fps = pts["fps_above"]
    inner_recall = _ratio(inner_tps, total_pos, 0.0)
    inner_precision = _ratio(inner_tps, inner_tps + inner_fps, 0.0)
    inner_specificity = 1.0 - _ratio(inner_fps, total_neg, 0.0)
    if target == "precision_at_recall":
        value, feasible, tie = precision, recall >= constraint, recall
        inner, inner_ok = inner_precision, inner_recall >= constraint
    elif target == "recall_at_precision":
        predicted = (tps + fps) > 0
        value, feasible, tie = recall, predicted & (precision >= constraint), precision
        inner, inner_ok = inner_recall, (inner_tps > 0) & (inner_precision >= constraint)
    elif target == "sensitivity_at_specificity":
        value, feasible, tie = recall, specificity >= constraint, specificity
        inner, inner_ok = inner_recall, inner_specificity >= constraint
    elif target == "specificity_at_sensitivity":
        value, feasible, tie = specificity, recall >= constraint, recall
        inner, inner_ok = inner_specificity, inner_recall >= constraint
    elif target == "f1":
        value = _ratio(2 * tps, total_pos + tps + fps, 0.0)
        feasible, tie = np.ones(tps.shape, dtype=bool), recall
        inner = _ratio(2 * inner_tps, total_pos + inner_tps + inner_fps, 0.0)
        inner_ok = feasible
    elif target == "youden":
        value = recall - (1.0 - specificity)
        feasible, tie = np.ones(tps.shape, dtype=bool), recall
        inner = inner_recall - (1.0 - inner_specificity)
        inner_ok = feasible
    else:
        raise ValueError(
            f"`target` must be one of 'precision_at_recall', 'recall_at_precision', "
            f"'sensitivity_at_specificity', 'specificity_at_sensitivity', 'f1', 'youden', "
            f"got {target!r}."
        )
    best, threshold = _select(value, feasible, tie, thresholds)
    upper = best
    if not flags[0] and inner_ok.any():
        upper = max(best, float(inner[inner_ok].max())) + _SLACK
    return OperatingPoint(best, threshold), Bounded(best, best, upper)


def confusion_at(positives: object, negatives: object, bin_index: int) -> np.ndarray:
    """The 2x2 matrix ``[[TN, FP], [FN, TP]]`` of one class at the threshold of bin
    ``bin_index`` (samples in bins ``>= bin_index`` are predicted positive); rows true,
    columns predicted, as ``sklearn.metrics.confusion_matrix`` with labels ``[0, 1]``.
    """
    pos, neg = _hist(positives, negatives)
    if pos.ndim != 1:
        raise ValueError(f"one class expected: histograms of shape (B,), got {pos.shape}.")
    index = int(bin_index)
    tp = pos[index:].sum()
    fp = neg[index:].sum()
    return np.array([[neg.sum() - fp, fp], [pos.sum() - tp, tp]])
