"""Confidence intervals for the proportions read off the matrix, and for Cohen's kappa.

Each proportion is ``x / n`` successes over trials (the samples are treated as independent
Bernoulli trials; for a weighted matrix ``x`` and ``n`` are total weights):

==============================  ==========  ==========
proportion                      ``x``       ``n``
==============================  ==========  ==========
accuracy                        ``Σ TP_i``  ``N``
recall (sensitivity) of ``i``   ``TP_i``    ``AP_i``
precision of ``i``              ``TP_i``    ``PP_i``
specificity of ``i``            ``TN_i``    ``N - AP_i``
NPV of ``i``                    ``TN_i``    ``N - PP_i``
==============================  ==========  ==========

Methods, with ``p = x/n`` and ``z`` the standard normal quantile ``Φ⁻¹(1 - α/2)`` of the
``confidence`` level ``1 - α``:

* ``"wilson"`` (default; Wilson 1927): ``(p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``;
* ``"normal"`` (Wald): ``p ± z sqrt(p(1-p)/n)`` — poor near 0 and 1 and for small ``n``;
* ``"agresti-coull"`` (Agresti & Coull 1998): ``p̃ ± z sqrt(p̃(1-p̃)/ñ)`` with
  ``ñ = n + z²`` and ``p̃ = (x + z²/2)/ñ``.

Every bound is clipped to [0, 1] (the Wald and Agresti–Coull intervals otherwise leave it;
PyCM reports them unclipped). With no trials (``n = 0``: nothing counted yet, or a class absent
from truth or prediction) the proportion is 0/0, undefined: both bounds are NaN, with an
``UndefinedMetricWarning`` (the rule of every metricstream view of no samples).
"""

from __future__ import annotations

import warnings
from statistics import NormalDist
from typing import Literal

import numpy as np

from ..exceptions import UndefinedMetricWarning
from ._selection import select
from ._zero_division import ZeroDivision, undefined_scalar, zero_division_value
from .agreement import _single_class, cohen_kappa, cohen_kappa_standard_error
from .counts import Labels, MatrixLike, as_counts

__all__ = [
    "accuracy_interval",
    "cohen_kappa_interval",
    "critical_value",
    "negative_predictive_value_interval",
    "precision_interval",
    "proportion_interval",
    "recall_interval",
    "specificity_interval",
]

IntervalMethod = Literal["wilson", "normal", "agresti-coull"]
METHODS = ("wilson", "normal", "agresti-coull")


def critical_value(confidence: float = 0.95) -> float:
    """Two-sided standard normal quantile ``z = Φ⁻¹((1 + confidence) / 2)`` (1.959964 at 95%).

    Example:
        >>> round(critical_value(0.95), 6)
        1.959964
    """
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float, np.floating)):
        raise TypeError(f"`confidence` must be a number in (0, 1), got {confidence!r}.")
    if not 0 < confidence < 1:
        raise ValueError(f"`confidence` must be in (0, 1), got {confidence!r}.")
    return NormalDist().inv_cdf((1 + float(confidence)) / 2)


def _z(confidence: float, z: float | None) -> float:
    if z is None:
        return critical_value(confidence)
    if isinstance(z, bool) or not isinstance(z, (int, float, np.floating)) or not z > 0:
        raise ValueError(f"`z` must be a positive critical value, got {z!r}.")
    return float(z)


def proportion_interval(
    successes,
    trials,
    *,
    method: IntervalMethod = "wilson",
    confidence: float = 0.95,
    z: float | None = None,
):
    """Confidence interval ``(low, high)`` for the proportion ``successes / trials``.

    Works element-wise on arrays; scalars give floats. ``z`` overrides the critical value
    computed from ``confidence`` (e.g. ``z=1.96`` as in tables and PyCM). Bounds are clipped
    to [0, 1]. Zero trials (0/0) give NaN bounds with an ``UndefinedMetricWarning``. See the
    module docstring for the formulas.

    Example:
        >>> low, high = proportion_interval(12, 25)           # accuracy 0.48 of 25 samples
        >>> round(low, 4), round(high, 4)
        (0.3003, 0.665)
        >>> proportion_interval(10, 10, method="normal")     # Wald: degenerate at p = 1
        (1.0, 1.0)
    """
    if method not in METHODS:
        raise ValueError(f"`method` must be 'wilson', 'normal' or 'agresti-coull', got {method!r}.")
    crit = _z(confidence, z)
    scalar = np.ndim(successes) == 0 and np.ndim(trials) == 0
    x = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if (x < 0).any() or (x > n).any():
        raise ValueError("`successes` must lie in [0, trials].")
    empty = n == 0
    n_safe = np.where(empty, 1.0, n)
    p = x / n_safe
    z2 = crit * crit
    if method == "wilson":
        denominator = 1 + z2 / n_safe
        center = (p + z2 / (2 * n_safe)) / denominator
        half = crit / denominator * np.sqrt(p * (1 - p) / n_safe + z2 / (4 * n_safe * n_safe))
    elif method == "normal":
        center = p
        half = crit * np.sqrt(p * (1 - p) / n_safe)
    else:
        n_tilde = n_safe + z2
        center = (x + z2 / 2) / n_tilde
        half = crit * np.sqrt(center * (1 - center) / n_tilde)
    low = np.clip(center - half, 0.0, 1.0)
    high = np.clip(center + half, 0.0, 1.0)
    if empty.any():
        count = int(np.count_nonzero(empty))
        warnings.warn(
            f"{'a proportion has' if scalar else f'{count} of the proportions have'} no trials "
            f"(0/0): {'its interval is' if count == 1 else 'their intervals are'} undefined "
            f"and set to NaN.",
            UndefinedMetricWarning,
            stacklevel=3,
        )
        low = np.where(empty, np.nan, low)
        high = np.where(empty, np.nan, high)
    if scalar:
        return float(low), float(high)
    return low, high


def accuracy_interval(
    matrix: MatrixLike,
    *,
    method: IntervalMethod = "wilson",
    confidence: float = 0.95,
    z: float | None = None,
) -> tuple[float, float]:
    """Confidence interval for accuracy ``Σ TP_i / N`` (see :func:`proportion_interval`).

    Example:
        >>> low, high = accuracy_interval([[4, 1, 1], [6, 2, 2], [3, 0, 6]])
        >>> round(low, 4), round(high, 4)
        (0.3003, 0.665)
    """
    counts = as_counts(matrix)
    return proportion_interval(
        counts.true_positives.sum(), counts.total, method=method, confidence=confidence, z=z
    )


def _class_interval(matrix, labels, successes, trials, method, confidence, z):
    sel = select(matrix, labels=labels)
    return proportion_interval(
        successes(sel), trials(sel), method=method, confidence=confidence, z=z
    )


def recall_interval(
    matrix: MatrixLike,
    *,
    labels: Labels = None,
    method: IntervalMethod = "wilson",
    confidence: float = 0.95,
    z: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-class confidence intervals for recall ``TP_i / AP_i`` (arrays ``low``, ``high``).

    Example:
        >>> low, high = recall_interval([[4, 1, 1], [6, 2, 2], [3, 0, 6]])
        >>> low.round(4), high.round(4)
        (array([0.3   , 0.0567, 0.3542]), array([0.9032, 0.5098, 0.8794]))
    """
    return _class_interval(matrix, labels, lambda s: s.tp, lambda s: s.ap, method, confidence, z)


def precision_interval(
    matrix: MatrixLike,
    *,
    labels: Labels = None,
    method: IntervalMethod = "wilson",
    confidence: float = 0.95,
    z: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-class confidence intervals for precision ``TP_i / PP_i``."""
    return _class_interval(matrix, labels, lambda s: s.tp, lambda s: s.pp, method, confidence, z)


def specificity_interval(
    matrix: MatrixLike,
    *,
    labels: Labels = None,
    method: IntervalMethod = "wilson",
    confidence: float = 0.95,
    z: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-class confidence intervals for specificity ``TN_i / (N - AP_i)``."""
    return _class_interval(
        matrix, labels, lambda s: s.tn, lambda s: s.tn + s.fp, method, confidence, z
    )


def negative_predictive_value_interval(
    matrix: MatrixLike,
    *,
    labels: Labels = None,
    method: IntervalMethod = "wilson",
    confidence: float = 0.95,
    z: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-class confidence intervals for the negative predictive value ``TN_i / (N - PP_i)``."""
    return _class_interval(
        matrix, labels, lambda s: s.tn, lambda s: s.tn + s.fn, method, confidence, z
    )


def cohen_kappa_interval(
    matrix: MatrixLike,
    *,
    confidence: float = 0.95,
    z: float | None = None,
    zero_division: ZeroDivision = "warn",
) -> tuple[float, float]:
    """Confidence interval ``kappa ± z SE`` for unweighted Cohen's kappa, clipped to [-1, 1].

    ``SE`` is :func:`~metricstream.metrics.cohen_kappa_standard_error`. When kappa is
    undefined (no samples, or perfect chance agreement) both bounds are ``zero_division``.

    Example:
        >>> low, high = cohen_kappa_interval([[4, 1, 1], [6, 2, 2], [3, 0, 6]], z=1.96)
        >>> round(low, 4), round(high, 4)
        (-0.0262, 0.5353)
    """
    counts = as_counts(matrix)
    zero_division_value(zero_division)
    crit = _z(confidence, z)
    if counts.total == 0 or _single_class(counts):  # kappa is undefined
        value = undefined_scalar(
            zero_division,
            "Kappa confidence interval is ill-defined and "
            "being set to 0.0 because kappa is undefined.",
        )
        return value, value
    kappa = cohen_kappa(counts, zero_division=zero_division)
    se = cohen_kappa_standard_error(counts, zero_division=zero_division)
    return max(kappa - crit * se, -1.0), min(kappa + crit * se, 1.0)
