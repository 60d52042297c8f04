"""Top-k accuracy for every k at once, from a histogram of the rank of the true class.

``ranks[t, r]`` is the (weighted) number of samples of true class ``t`` whose true class was
ranked ``r`` (0 = highest score). A sample is a top-k hit when ``r < k``, so

* ``top_k_accuracy(k) = sum_t sum_{r < k} ranks[t, r] / sum ranks``;
* ``top_k_recall(k)[t] = sum_{r < k} ranks[t, r] / sum_r ranks[t, r]`` (per class).

Ties: the rank is what a sort of the scores makes of them. The accumulator keeps two rank
histograms: scikit-learn's ``top_k_accuracy_score`` rule (a stable descending sort, so among
equal scores the *higher* class index ranks first: ``r = #{c: s_c > s_t} + #{c > t: s_c ==
s_t}``), and the optimistic rule of Keras' ``in_top_k`` (every class tied with the true one
ranks after it: ``r = #{c: s_c > s_t}``).

0/0 rule: with no samples the accuracy is NaN and a class without samples has NaN recall,
each with an :class:`~metricstream.UndefinedMetricWarning`; ``k >= C`` warns as scikit-learn
does (every sample is a hit).
"""

from __future__ import annotations

import warnings

import numpy as np

from ..exceptions import UndefinedMetricWarning


def _ranks(ranks: object) -> np.ndarray:
    array = np.asarray(ranks, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] != array.shape[1]:
        raise ValueError(f"`ranks` must be a (C, C) histogram, got shape {array.shape}.")
    return array


def _check_k(k: object, num_classes: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"`k` must be a positive integer, got {k!r}.")
    if k >= num_classes:
        warnings.warn(
            f"'k' ({k}) greater than or equal to 'n_classes' ({num_classes}) will result in a "
            f"perfect score and is therefore meaningless.",
            UndefinedMetricWarning,
            stacklevel=3,
        )
    return int(k)


def top_k_accuracy(ranks: object, k: int | None = None) -> float | np.ndarray:
    """Fraction of samples whose true class is among the ``k`` highest scores.

    ``k=None`` returns the accuracies for ``k = 1, ..., C`` at once (no warning for ``k = C``).

    Example:
        >>> top_k_accuracy([[1, 1], [2, 0]], k=1)
        0.75
    """
    array = _ranks(ranks)
    total = array.sum()
    if total <= 0:
        warnings.warn(
            "Top-k accuracy is undefined (NaN): no samples were counted.",
            UndefinedMetricWarning,
            stacklevel=2,
        )
        return float("nan") if k is not None else np.full(array.shape[0], np.nan)
    cumulative = np.cumsum(array.sum(axis=0)) / total
    if k is None:
        return cumulative
    return float(cumulative[min(_check_k(k, array.shape[0]), array.shape[0]) - 1])


def top_k_recall(ranks: object, k: int) -> np.ndarray:
    """Per true class, the fraction of its samples with the class among the top ``k``.

    Example:
        >>> top_k_recall([[1, 1], [2, 0]], k=1).tolist()
        [0.5, 1.0]
    """
    array = _ranks(ranks)
    k = min(_check_k(k, array.shape[0]), array.shape[0])
    support = array.sum(axis=1)
    hits = array[:, :k].sum(axis=1)
    if np.any(support <= 0):
        warnings.warn(
            "Top-k recall is undefined (NaN) for classes without samples.",
            UndefinedMetricWarning,
            stacklevel=2,
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(support > 0, hits / np.where(support > 0, support, 1.0), np.nan)
