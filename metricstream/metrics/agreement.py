"""Chance-corrected agreement: Cohen's kappa and the Matthews correlation coefficient."""

from __future__ import annotations

from typing import Literal, Union

import numpy as np

from ._zero_division import ZeroDivision, undefined_scalar, zero_division_value
from .counts import MatrixLike, as_counts

KappaWeights = Union[Literal["linear", "quadratic"], None, np.ndarray]


def _kappa_weight_matrix(weights: KappaWeights, num_classes: int) -> np.ndarray:
    if weights is None:
        w = np.ones((num_classes, num_classes))
        np.fill_diagonal(w, 0)
        return w
    if isinstance(weights, str):
        distance = np.zeros((num_classes, num_classes)) + np.arange(num_classes)
        if weights == "linear":
            return np.abs(distance - distance.T)
        if weights == "quadratic":
            return (distance - distance.T) ** 2
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
    confusion = counts.matrix.astype(np.float64)
    sum0 = confusion.sum(axis=0)
    sum1 = confusion.sum(axis=1)
    total = sum0.sum()
    if total == 0:
        return undefined_scalar(zero_division, "Cohen's kappa is ill-defined and being set to 0.0 "
                                "because there are no samples.")
    expected = np.outer(sum0, sum1) / total
    w = _kappa_weight_matrix(weights, counts.num_classes)
    denominator = np.sum(w * expected)
    if denominator == 0:
        return undefined_scalar(zero_division, "Cohen's kappa is ill-defined and being set to 0.0 "
                                "because chance agreement is perfect.")
    return float(1 - np.sum(w * confusion) / denominator)


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
    confusion = counts.matrix
    t_sum = confusion.sum(axis=1, dtype=np.float64)
    p_sum = confusion.sum(axis=0, dtype=np.float64)
    n_correct = np.trace(confusion, dtype=np.float64)
    n_samples = p_sum.sum()
    cov_ytyp = n_correct * n_samples - np.dot(t_sum, p_sum)
    cov_ypyp = n_samples**2 - np.dot(p_sum, p_sum)
    cov_ytyt = n_samples**2 - np.dot(t_sum, t_sum)
    product = cov_ypyp * cov_ytyt
    if product == 0:
        if replacement is None:
            return undefined_scalar("warn", "Matthews correlation coefficient is ill-defined and "
                                    "being set to 0.0 because truth or prediction is constant.")
        return replacement
    return float(cov_ytyp / np.sqrt(product))
