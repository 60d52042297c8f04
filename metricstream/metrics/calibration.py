"""Calibration from a histogram of confidences: ECE, MCE, reliability diagrams, Brier score and
log loss, as plain functions of the accumulated sums.

The histogram has ``F`` fine bins of equal width on ``[0, 1]``: bin ``i`` holds the confidences
``q`` with ``floor(q * F) == i``, and ``q = 1.0`` goes to the last bin (``[1 - 1/F, 1]`` is
closed), ``q = 0.0`` to the first. Per bin it keeps ``count`` (total weight), ``correct``
(weight of the samples whose prediction was right, or whose target was 1 for binary and
multilabel scores) and ``confidence`` (sum of weight times confidence). Any ``n_bins`` that
divides ``F`` regroups the fine bins exactly: coarse bin ``j`` is the union of fine bins
``[j F/n_bins, (j + 1) F/n_bins)``, i.e. the confidences in ``[j/n_bins, (j + 1)/n_bins)``.

For each non-empty coarse bin ``j`` with weight ``n_j`` out of ``n``, accuracy
``acc_j = correct_j / n_j`` and mean confidence ``conf_j = confidence_j / n_j``:

* ``ECE = sum_j (n_j / n) |acc_j - conf_j|`` (``norm="l1"``, Naeini et al. 2015; torchmetrics'
  ``CalibrationError``), ``sqrt(sum_j (n_j / n) (acc_j - conf_j)^2)`` for ``norm="l2"``;
* ``MCE = max_j |acc_j - conf_j|`` over non-empty bins (``norm="max"``).

Empty bins are left out. With no samples at all (``n = 0``) every result is NaN, with an
:class:`~metricstream.UndefinedMetricWarning`.
"""

from __future__ import annotations

import warnings
from typing import Literal, NamedTuple

import numpy as np

from ..exceptions import UndefinedMetricWarning

Norm = Literal["l1", "l2", "max"]


class ReliabilityDiagram(NamedTuple):
    """Per coarse bin: edges (``n_bins + 1``), weight, accuracy and mean confidence (NaN for
    empty bins)."""

    edges: np.ndarray
    counts: np.ndarray
    accuracy: np.ndarray
    confidence: np.ndarray


def _coarse(values: object, n_bins: int, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D (one entry per fine bin), got shape {array.shape}.")
    fine = array.shape[0]
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise TypeError(f"`n_bins` must be a positive integer, got {n_bins!r}.")
    if fine % n_bins:
        divisors = [d for d in range(1, min(fine, 100) + 1) if fine % d == 0]
        raise ValueError(
            f"`n_bins` is {n_bins}, which does not divide the {fine} fine bins; use one of "
            f"{divisors}{', ...' if fine > 100 else ''} (or accumulate with another "
            f"`calibration_bins`)."
        )
    return array.reshape(n_bins, fine // n_bins).sum(axis=1)


def reliability_diagram(
    counts: object, correct: object, confidence: object, n_bins: int = 15
) -> ReliabilityDiagram:
    """Accuracy and mean confidence per coarse bin (see the module docstring).

    Example:
        >>> d = reliability_diagram([2, 0, 0, 2], [0, 0, 0, 2], [0.5, 0, 0, 1.5], n_bins=2)
        >>> d.accuracy.tolist(), d.confidence.tolist()
        ([0.0, 1.0], [0.25, 0.75])
    """
    count = _coarse(counts, n_bins, "counts")
    hits = _coarse(correct, n_bins, "correct")
    conf = _coarse(confidence, n_bins, "confidence")
    with np.errstate(divide="ignore", invalid="ignore"):
        accuracy = np.where(count > 0, hits / count, np.nan)
        mean_conf = np.where(count > 0, conf / count, np.nan)
    return ReliabilityDiagram(np.linspace(0.0, 1.0, n_bins + 1), count, accuracy, mean_conf)


def calibration_error(
    counts: object, correct: object, confidence: object, n_bins: int = 15, norm: Norm = "l1"
) -> float:
    """Expected (``"l1"``, ``"l2"``) or maximum (``"max"``) calibration error.

    ``ECE = sum_j (n_j / n) |acc_j - conf_j|``; see the module docstring for the other norms
    and the 0/0 rule (NaN with a warning when there are no samples).

    Example:
        >>> calibration_error([2, 0, 0, 2], [0, 0, 0, 2], [0.5, 0, 0, 1.5], n_bins=2)
        0.25
    """
    if norm not in ("l1", "l2", "max"):
        raise ValueError(f"`norm` must be 'l1', 'l2' or 'max', got {norm!r}.")
    diagram = reliability_diagram(counts, correct, confidence, n_bins)
    total = diagram.counts.sum()
    if total <= 0:
        warnings.warn(
            "Calibration error is undefined (NaN): no samples were counted.",
            UndefinedMetricWarning,
            stacklevel=2,
        )
        return float("nan")
    filled = diagram.counts > 0
    gap = np.abs(diagram.accuracy[filled] - diagram.confidence[filled])
    share = diagram.counts[filled] / total
    if norm == "max":
        return float(gap.max())
    if norm == "l2":
        return float(np.sqrt(np.sum(share * gap * gap)))
    return float(np.sum(share * gap))


def mean_loss(loss_sum: float, total: float, name: str) -> float:
    """``loss_sum / total``: the Brier score or log loss from their exact running sums.

    NaN with an ``UndefinedMetricWarning`` when nothing was counted (``total == 0``).
    """
    if total <= 0:
        warnings.warn(
            f"{name} is undefined (NaN): no samples were counted.",
            UndefinedMetricWarning,
            stacklevel=2,
        )
        return float("nan")
    return float(loss_sum) / float(total)
