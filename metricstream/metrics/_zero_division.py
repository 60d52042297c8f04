"""The one place where 0/0 is handled.

Every rate in metricstream is a ratio of counts. When a denominator is zero the rate is
undefined and is replaced by ``zero_division``, exactly as scikit-learn does:

* ``"warn"`` (default): 0.0, and an :class:`~metricstream.UndefinedMetricWarning` is issued;
* ``0`` or ``1``: that value, silently;
* ``np.nan``: NaN, silently; averages then skip the NaN entries instead of being poisoned by
  them (an average of only NaN entries is NaN).
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np

from ..exceptions import UndefinedMetricWarning, caller_stacklevel

ZeroDivision = Literal["warn"] | float


def zero_division_value(zero_division: ZeroDivision) -> float:
    """Validate ``zero_division`` and return the number that replaces 0/0."""
    if isinstance(zero_division, str):
        if zero_division == "warn":
            return 0.0
    elif isinstance(zero_division, (int, float, np.integer, np.floating)) and not isinstance(
        zero_division, bool
    ):
        if np.isnan(zero_division):
            return float("nan")
        if zero_division in (0, 1):
            return float(zero_division)
    raise ValueError(f"`zero_division` must be 'warn', 0, 1 or np.nan, got {zero_division!r}.")


def divide(
    numerator: np.ndarray,
    denominator: np.ndarray,
    zero_division: ZeroDivision,
    *,
    metric: str,
    missing: str,
    stacklevel: int = 4,
    positive_over_zero: float | None = None,
) -> np.ndarray:
    """Element-wise ``numerator / denominator`` in float64, with 0/0 replaced by ``zero_division``.

    ``metric`` (e.g. "Precision") and ``missing`` (e.g. "predicted") word the warning, as in
    "Precision is ill-defined and being set to 0.0 in labels with no predicted samples."

    For the ratios whose denominator can vanish while the numerator does not (likelihood
    ratios, odds ratio), ``positive_over_zero`` (``np.inf``) is the value of ``x/0`` with
    ``x > 0``: that is a limit, not an undefined value, so it neither warns nor uses
    ``zero_division``. By default every zero denominator counts as undefined (for the rates of
    the confusion matrix the numerator is then 0 too).
    """
    replacement = zero_division_value(zero_division)
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    undefined = denominator == 0
    if not undefined.any():
        return numerator / denominator
    result = numerator / np.where(undefined, 1.0, denominator)
    if positive_over_zero is not None:
        limit = undefined & (numerator != 0)
        result[limit] = positive_over_zero
        undefined &= ~limit
        if not undefined.any():
            return result
    result[undefined] = replacement
    if isinstance(zero_division, str):
        # scikit-learn's wording (``_warn_prf``): "due to" for a single value (micro average)
        where = "due to" if result.size == 1 else "in labels with"
        what = f"{where} no {missing} samples"
        if missing.startswith("("):  # a reason that is not about some labels
            what = f"{missing[1:-1]} samples"
        warnings.warn(
            f"{metric} is ill-defined and being set to 0.0 {what}. "
            f"Use `zero_division` parameter to control this behavior.",
            UndefinedMetricWarning,
            stacklevel=caller_stacklevel(),
        )
    return result


def undefined_scalar(zero_division: ZeroDivision, message: str, stacklevel: int = 4) -> float:
    """The value of a scalar metric that is 0/0, warning when asked to."""
    replacement = zero_division_value(zero_division)
    if isinstance(zero_division, str):
        warnings.warn(
            f"{message} Use `zero_division` parameter to control this behavior.",
            UndefinedMetricWarning,
            stacklevel=caller_stacklevel(),
        )
    return replacement


def replace_undefined(
    scores: np.ndarray,
    undefined: np.ndarray,
    zero_division: ZeroDivision,
    *,
    metric: str,
    missing: str,
    stacklevel: int = 4,
) -> np.ndarray:
    """Set ``scores[undefined]`` to ``zero_division`` (warning when asked to), in place.

    Used by the metrics built from several ratios (informedness, markedness, per-class MCC):
    such a metric is undefined exactly when one of its ratios is 0/0, and then takes the
    ``zero_division`` value as a whole, like a single ratio does.
    """
    replacement = zero_division_value(zero_division)
    if not undefined.any():
        return scores
    scores[undefined] = replacement
    if isinstance(zero_division, str):
        warnings.warn(
            f"{metric} is ill-defined and being set to 0.0 in labels with no {missing} samples. "
            f"Use `zero_division` parameter to control this behavior.",
            UndefinedMetricWarning,
            stacklevel=caller_stacklevel(),
        )
    return scores
