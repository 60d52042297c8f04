"""Averaging per-class scores: the ``average`` argument shared by the set-wise metrics.

* ``None``: per-class scores;
* ``"micro"``: sum the counts of the selected classes, then divide;
* ``"macro"``: the plain mean of the per-class scores;
* ``"weighted"``: their mean weighted by support ``AP_i``;
* ``"binary"``: the score of the class ``pos_label`` alone, as a float (two classes at most:
  scikit-learn's ``average="binary"``);
* ``"samples"``: (multilabel only) the mean over samples of the per-sample score.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Average = Literal["micro", "macro", "weighted"] | None
BinaryAverage = Literal["binary", "micro", "macro", "weighted"] | None
MultilabelAverage = Literal["micro", "macro", "weighted", "samples"] | None
AVERAGES = (None, "micro", "macro", "weighted")
BINARY_AVERAGES = ("binary", None, "micro", "macro", "weighted")


def check_average(average: object, *, binary: bool = False) -> None:
    """Raise ValueError unless ``average`` is one of the accepted values."""
    allowed = BINARY_AVERAGES if binary else AVERAGES
    if average not in allowed:
        extra = "'binary', " if binary else ""
        raise ValueError(
            f"`average` must be None, {extra}'micro', 'macro' or 'weighted', got {average!r}."
        )


def average_scores(
    scores: np.ndarray, average: BinaryAverage | MultilabelAverage, support: np.ndarray
) -> float | np.ndarray:
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
    # np.nanmean over every class, as scikit-learn's macro average: summing the defined entries
    # alone can differ from it in the last bit.
    return float(np.nanmean(scores))
