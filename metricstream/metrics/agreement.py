"""Chance-corrected agreement: Cohen's kappa (and its standard error), Scott's pi, and the
Matthews correlation coefficient (multiclass R_K and one-vs-rest per class)."""

from __future__ import annotations

import functools
from typing import Literal

import numpy as np

from ._averaging import Average
from ._selection import reduce_scores, select
from ._zero_division import ZeroDivision, divide, undefined_scalar, zero_division_value
from .counts import Labels, MatrixLike, as_counts

KappaWeights = Literal["linear", "quadratic"] | np.ndarray | None


@functools.lru_cache(maxsize=8)
def _ordinal_weights(kind: str, num_classes: int) -> np.ndarray:
    """``|i - j|`` or ``(i - j)²``, cached (read-only) since they depend on K alone."""
    levels = np.arange(num_classes, dtype=np.float64)
    distance = np.abs(levels[:, None] - levels[None, :])
    w = distance if kind == "linear" else distance**2
    w.flags.writeable = False
    return w


def _kappa_weight_matrix(weights: KappaWeights, num_classes: int) -> np.ndarray:
    if weights is None:
        w = np.ones((num_classes, num_classes))
        np.fill_diagonal(w, 0)
        return w
    if isinstance(weights, str):
        if weights in ("linear", "quadratic"):
            return _ordinal_weights(weights, num_classes)
        raise ValueError(
            f"`weights` must be None, 'linear', 'quadratic' or a K×K array, got {weights!r}."
        )
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (num_classes, num_classes):
        raise ValueError(
            f"`weights` must be a {num_classes}×{num_classes} disagreement matrix, got shape "
            f"{w.shape}."
        )
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError("`weights` must hold finite, non-negative disagreement penalties.")
    return w


def _single_class(counts) -> bool:
    """Whether at most one class occurs in truth or prediction (chance agreement is perfect)."""
    return (
        int(np.count_nonzero((counts.actual_positives != 0) | (counts.predicted_positives != 0)))
        <= 1
    )


def cohen_kappa(
    matrix: MatrixLike,
    *,
    weights: KappaWeights = None,
    zero_division: ZeroDivision = "warn",
) -> float:
    """Cohen's kappa: agreement between truth and prediction beyond chance.

    ``kappa = 1 - sum_ij w_ij C_ij / sum_ij w_ij E_ij`` with ``E_ij = AP_i PP_j / N`` the counts
    expected by chance. Unweighted (``w_ij = 1 - [i = j]``) this is ``(p_o - p_e) / (1 - p_e)``
    with ``p_o`` the accuracy and ``p_e = sum_i AP_i PP_i / N²``. ``weights="linear"`` uses
    ``|i - j|`` and ``"quadratic"`` ``(i - j)²`` (class indices as ordinal levels); a K×K array
    gives custom disagreement penalties.

    0/0 (no samples, or chance agreement is perfect, e.g. a single class) gives
    ``zero_division`` (scikit-learn's ``replace_undefined_by``).

    Reference: J. Cohen (1960), "A coefficient of agreement for nominal scales".

    Example:
        >>> round(cohen_kappa([[4, 1, 1], [6, 2, 2], [3, 0, 6]]), 4)
        0.2546
    """
    counts = as_counts(matrix)
    zero_division_value(zero_division)
    actual = counts.actual_positives.astype(np.float64)
    predicted = counts.predicted_positives.astype(np.float64)
    total = float(counts.total)
    if total == 0:
        return undefined_scalar(
            zero_division,
            "Cohen's kappa is ill-defined and being set to 0.0 because there are no samples.",
        )
    if weights is None:
        # 0/1 weights reduce both sums to O(K): sum w C = N - trace, sum w E = N - sum AP PP / N
        # (K = 1000: 0.05 ms instead of 16 ms for the K×K products). sum w E is a sum of
        # non-negative products, zero exactly when one class holds every true and predicted
        # sample; test that directly, as the subtraction need not give 0.0 for float weights.
        if _single_class(counts):
            return undefined_scalar(
                zero_division,
                "Cohen's kappa is ill-defined and being set "
                "to 0.0 because chance agreement is perfect.",
            )
        observed = total - float(counts.true_positives.sum())
        denominator = total - float(np.dot(actual, predicted)) / total
    else:
        w = _kappa_weight_matrix(weights, counts.num_classes)
        # sum_ij w_ij C_ij without a K×K temporary, and sum_ij w_ij AP_i PP_j / N as AP·w·PP/N.
        # E_ij = AP_i PP_j / N (row i true, column j predicted), which matters for asymmetric
        # user weights; scikit-learn's code builds the transpose, the same for its symmetric
        # "linear"/"quadratic" weights.
        observed = float(np.einsum("ij,ij->", w, counts.matrix.astype(np.float64, copy=False)))
        denominator = float(actual @ w @ predicted) / total
    if denominator == 0:
        return undefined_scalar(
            zero_division,
            "Cohen's kappa is ill-defined and being set to 0.0 "
            "because chance agreement is perfect.",
        )
    return float(1 - observed / denominator)


def matthews_corrcoef(matrix: MatrixLike, *, zero_division: float = 0.0) -> float:
    """Matthews correlation coefficient (Gorodkin's R_K for K classes).

    ``MCC = (N sum_i TP_i - sum_i AP_i PP_i) / sqrt((N² - sum_i PP_i²)(N² - sum_i AP_i²))``,
    in [-1, 1]; 1 is perfect, 0 no better than chance. Computed in float64 as scikit-learn does.
    0/0 (all samples in one true class or one predicted class) gives ``zero_division``, 0.0 by
    default, silently (scikit-learn's convention).

    Reference: J. Gorodkin (2004), "Comparing two K-category assignments by a K-category
    correlation coefficient".

    Example:
        >>> round(matthews_corrcoef([[4, 1, 1], [6, 2, 2], [3, 0, 6]]), 4)
        0.2872
    """
    counts = as_counts(matrix)
    replacement = zero_division_value(zero_division) if zero_division != "warn" else None
    # From the cached marginals, O(K): for integer counts these float64 sums are exact, so the
    # result is scikit-learn's bit for bit; a weighted matrix's marginals are the same row and
    # column sums scikit-learn takes.
    t_sum = counts.actual_positives.astype(np.float64)
    p_sum = counts.predicted_positives.astype(np.float64)
    n_correct = counts.true_positives.sum(dtype=np.float64)
    n_samples = p_sum.sum()
    cov_ytyp = n_correct * n_samples - np.dot(t_sum, p_sum)
    cov_ypyp = n_samples**2 - np.dot(p_sum, p_sum)
    cov_ytyt = n_samples**2 - np.dot(t_sum, t_sum)
    product = cov_ypyp * cov_ytyt
    if product == 0:
        if replacement is None:
            return undefined_scalar(
                "warn",
                "Matthews correlation coefficient is ill-defined and "
                "being set to 0.0 because truth or prediction is constant.",
            )
        return replacement
    return float(cov_ytyp / np.sqrt(product))


def scott_pi(matrix: MatrixLike, *, zero_division: ZeroDivision = "warn") -> float:
    """Scott's pi: agreement beyond chance, with chance from the *pooled* marginals.

    ``pi = (p_o - p_e) / (1 - p_e)`` with ``p_o = sum_i TP_i / N`` (accuracy) and
    ``p_e = sum_i ((AP_i + PP_i) / (2N))²``: unlike Cohen's kappa, truth and prediction are
    assumed to share one distribution of classes. 0/0 (no samples, or ``p_e = 1``: a single
    class used by both) gives ``zero_division``.

    Reference: W. A. Scott (1955), "Reliability of content analysis: the case of nominal scale
    coding". PyCM's "Scott PI".

    Example:
        >>> round(scott_pi([[4, 1, 1], [6, 2, 2], [3, 0, 6]]), 4)
        0.2102
    """
    counts = as_counts(matrix)
    zero_division_value(zero_division)
    total = float(counts.total)
    if total == 0:
        return undefined_scalar(
            zero_division,
            "Scott's pi is ill-defined and being set to 0.0 because there are no samples.",
        )
    observed = float(counts.true_positives.sum()) / total
    pooled = (counts.actual_positives + counts.predicted_positives) / (2 * total)
    expected = float(np.dot(pooled, pooled))
    if _single_class(counts):  # p_e = 1, tested exactly (the float sum may miss 1.0)
        return undefined_scalar(
            zero_division,
            "Scott's pi is ill-defined and being set to 0.0 because chance agreement is perfect.",
        )
    return (observed - expected) / (1 - expected)


def cohen_kappa_standard_error(
    matrix: MatrixLike, *, zero_division: ZeroDivision = "warn"
) -> float:
    """Large-sample standard error of unweighted Cohen's kappa.

    ``SE = sqrt(p_o (1 - p_o) / (N (1 - p_e)²))`` with ``p_o`` the accuracy and
    ``p_e = sum_i AP_i PP_i / N²`` (Cohen 1960, the approximation PyCM reports as
    "Kappa Standard Error"). Treat the counts as independent samples: for a weighted
    accumulator ``N`` is the total weight. 0/0 (no samples, or ``p_e = 1``) gives
    ``zero_division``. See :func:`metricstream.metrics.cohen_kappa_interval`.

    Example:
        >>> round(cohen_kappa_standard_error([[4, 1, 1], [6, 2, 2], [3, 0, 6]]), 4)
        0.1432
    """
    counts = as_counts(matrix)
    zero_division_value(zero_division)
    total = float(counts.total)
    if total == 0:
        return undefined_scalar(
            zero_division,
            "Kappa standard error is ill-defined and being "
            "set to 0.0 because there are no samples.",
        )
    observed = float(counts.true_positives.sum()) / total
    expected = float(np.dot(counts.actual_positives / total, counts.predicted_positives / total))
    if _single_class(counts):  # p_e = 1, tested exactly (the float sum may miss 1.0)
        return undefined_scalar(
            zero_division,
            "Kappa standard error is ill-defined and being "
            "set to 0.0 because chance agreement is perfect.",
        )
    return float(np.sqrt(observed * (1 - observed) / (total * (1 - expected) ** 2)))


def ovr_matthews_corrcoef(
    matrix: MatrixLike,
    *,
    average: Average = None,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
    ignore_absent: bool = False,
) -> float | np.ndarray:
    """One-vs-rest Matthews correlation coefficient of each class (binary MCC of "i vs rest").

    ``MCC_i = (TP_i TN_i - FP_i FN_i) / sqrt(PP_i AP_i (N - AP_i) (N - PP_i))``, the geometric
    mean of informedness and markedness (with their common sign), computed in float64.
    0/0 — the class is never true or never predicted, or is the truth or the prediction of
    every sample — gives ``zero_division`` (scikit-learn's binary ``matthews_corrcoef``
    returns 0.0 there). ``"micro"`` applies the formula to the summed TP, FP, FN, TN of the
    selected classes; ``"macro"`` and ``"weighted"`` (by ``AP_i``) average the per-class
    values. This is not the multiclass R_K of :func:`matthews_corrcoef`.

    Example:
        >>> ovr_matthews_corrcoef([[4, 1, 1], [6, 2, 2], [3, 0, 6]]).round(4)
        array([0.165 , 0.201 , 0.4792])
    """
    zero_division_value(zero_division)
    sel = select(matrix, labels=labels, average=average, ignore_absent=ignore_absent)
    tp, fp, fn, tn = (x.astype(np.float64) for x in (sel.tp, sel.fp, sel.fn, sel.tn))
    numerator = tp * tn - fp * fn
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    scores = divide(
        numerator,
        denominator,
        zero_division,
        metric="Matthews correlation coefficient",
        missing="true, predicted, negative or predicted negative",
    )
    return reduce_scores(
        scores, average, sel.support, zero_division, metric="Matthews correlation coefficient"
    )
