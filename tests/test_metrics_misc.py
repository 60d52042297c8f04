"""Hand-computed examples, the asymmetric-kappa fix, and every metric on a K = 1000 matrix."""

from __future__ import annotations

import numpy as np
import pytest

from metricstream import ConfusionAccumulator, report
from metricstream import metrics as ms


def test_asymmetric_kappa_weights_use_rows_as_truth():
    # only "true 0 predicted 1" is penalized: sum w C = C_01 = 1, E_01 = AP_0 PP_1 / N = 1.5
    matrix = np.array([[2, 1], [0, 1]])
    weights = np.array([[0.0, 1.0], [0.0, 0.0]])
    assert ms.cohen_kappa(matrix, weights=weights) == pytest.approx(1 - 1 / 1.5, rel=1e-15)
    # and the transposed problem with the transposed weights gives the same
    assert ms.cohen_kappa(matrix.T, weights=weights.T) == pytest.approx(1 / 3, rel=1e-15)


def test_ordinal_weight_cache_is_not_writable():
    ms.cohen_kappa(np.eye(3), weights="linear")
    from metricstream.metrics.agreement import _kappa_weight_matrix

    w = _kappa_weight_matrix("quadratic", 3)
    with pytest.raises(ValueError):
        w[0, 0] = 5
    assert w.tolist() == [[0, 1, 4], [1, 0, 1], [4, 1, 0]]


def test_scott_pi_by_hand():
    # p_o = 12/25; pooled marginals (AP + PP) / 2N = (19, 13, 18) / 50
    matrix = [[4, 1, 1], [6, 2, 2], [3, 0, 6]]
    p_e = (19**2 + 13**2 + 18**2) / 50**2
    assert ms.scott_pi(matrix) == pytest.approx((0.48 - p_e) / (1 - p_e), rel=1e-15)


def test_kappa_standard_error_by_hand():
    matrix = [[4, 1, 1], [6, 2, 2], [3, 0, 6]]
    p_o, p_e = 0.48, (6 * 13 + 10 * 3 + 9 * 9) / 625
    expected = np.sqrt(p_o * (1 - p_o) / (25 * (1 - p_e) ** 2))
    assert ms.cohen_kappa_standard_error(matrix) == pytest.approx(expected, rel=1e-15)


def test_fwiou_equals_weighted_jaccard_and_dice_equals_f1():
    rng = np.random.default_rng(3)
    matrix = rng.integers(0, 9, size=(6, 6))
    matrix[2] = 0
    assert ms.fwiou(matrix) == pytest.approx(ms.jaccard(matrix, average="weighted"), rel=1e-14)
    np.testing.assert_array_equal(ms.dice(matrix, zero_division=0), ms.f1(matrix, zero_division=0))


def test_ari_exact_for_huge_counts():
    # beyond 2**31 samples the pair counts leave int64; the integer path stays exact
    matrix = np.array([[3_000_000_000, 1], [2, 1_000_000_000]], dtype=np.int64)
    as_float = ms.adjusted_rand_index(matrix.astype(np.float64))
    assert ms.adjusted_rand_index(matrix) == pytest.approx(as_float, rel=1e-9)


def test_new_views_cache_and_match_functions():
    acc = ConfusionAccumulator(4).update([0, 1, 2, 3, 3, 1], [0, 2, 2, 3, 1, 1])
    for name in ("specificity", "informedness", "ovr_matthews_corrcoef", "dice"):
        first = getattr(acc, name)(average="macro", zero_division=0)
        assert first == getattr(ms, name)(acc.matrix, average="macro", zero_division=0)
        assert getattr(acc, name)(average="macro", zero_division=0) == first
    per_class = acc.specificity(zero_division=0)
    per_class[0] = -1  # returned arrays are copies of the cache
    assert acc.specificity(zero_division=0)[0] != -1
    acc.update([0], [1])
    assert acc.false_positive_rate(labels=[1], zero_division=0)[0] == pytest.approx(2 / 5)


def _all_metrics(counts):
    for name in (
        "precision",
        "recall",
        "f1",
        "jaccard",
        "dice",
        "specificity",
        "negative_predictive_value",
        "false_positive_rate",
        "false_negative_rate",
        "false_discovery_rate",
        "false_omission_rate",
        "informedness",
        "markedness",
        "ovr_matthews_corrcoef",
    ):
        for average in (None, "micro", "macro", "weighted"):
            getattr(ms, name)(counts, average=average, zero_division=np.nan)
    for name in (
        "positive_likelihood_ratio",
        "negative_likelihood_ratio",
        "diagnostic_odds_ratio",
        "prevalence",
        "accuracy",
        "balanced_accuracy",
        "hamming_loss",
        "zero_one_loss",
        "miou",
        "fwiou",
        "scott_pi",
        "cohen_kappa_standard_error",
        "mutual_information",
        "normalized_mutual_information",
        "adjusted_rand_index",
        "cohen_kappa_interval",
    ):
        getattr(ms, name)(counts, zero_division=np.nan)
    for weights in (None, "linear", "quadratic"):
        ms.cohen_kappa(counts, weights=weights)
    ms.matthews_corrcoef(counts)
    for name in (
        "accuracy_interval",
        "recall_interval",
        "precision_interval",
        "specificity_interval",
        "negative_predictive_value_interval",
    ):
        getattr(ms, name)(counts)
    report.classification_report(counts, zero_division=np.nan)
    report.summary(counts, zero_division=np.nan)


def test_every_metric_runs_on_a_k1000_matrix():
    # Speed is benchmark target 7 (python -m benchmarks); here only that every call works.
    rng = np.random.default_rng(0)
    matrix = rng.poisson(2.0, size=(1000, 1000)).astype(np.int64)
    matrix[np.diag_indices(1000)] += rng.integers(0, 5000, 1000)
    _all_metrics(ms.ClassCounts.from_matrix(matrix))
