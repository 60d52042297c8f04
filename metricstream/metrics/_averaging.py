"""Averaging per-class scores: the ``average`` argument shared by the set-wise metrics."""

from __future__ import annotations

from typing import Literal

import numpy as np

Average = Literal["micro", "macro", "weighted"] | None
AVERAGES = (None, "micro", "macro", "weighted")


def check_average(average: object) -> None:
    if average not in AVERAGES:
        raise ValueError(
            f"`average` must be None, 'micro', 'macro' or 'weighted', got {average!r}."
        )


def average_scores(scores: np.ndarray, average: Average, support: np.ndarray) -> float | np.ndarray:
    """Reduce per-class ``scores`` as scikit-learn does, skipping NaN entries.

    * ``None``: the per-class array itself;
    * ``"macro"``: unweighted mean over classes;
    * ``"weighted"``: mean weighted by ``support`` (``AP_i``); when every selected class has zero
      support the unweighted mean is used instead (scikit-learn's rule).

    NaN entries (only produced by ``zero_division=np.nan``) are left out; if all are NaN the
    result is NaN.
    """
    if average is None:
        return scores
    defined = ~np.isnan(scores)
    if not defined.any():
        return float("nan")
    if average == "weighted":
        weights = support[defined]
        if weights.sum() != 0:
            return float(np.average(scores[defined], weights=weights))
    return float(np.mean(scores[defined]))
