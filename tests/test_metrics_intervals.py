"""Confidence intervals: textbook values, PyCM (clipped), and the [0, 1] / no-trials rules."""

from __future__ import annotations

import numpy as np
import pytest

from metricstream import ConfusionAccumulator
from metricstream import metrics as ms
from metricstream.exceptions import UndefinedMetricWarning

METHODS = ["wilson", "normal", "agresti-coull"]


# Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I
# (95%, 4 decimals): Wald ("normal") and Wilson score intervals.
@pytest.mark.parametrize(
    "x, n, method, expected",
    [
        (81, 263, "normal", (0.2522, 0.3638)),
        (81, 263, "wilson", (0.2553, 0.3662)),
        (15, 148, "normal", (0.0527, 0.1500)),
        (15, 148, "wilson", (0.0624, 0.1605)),
        (0, 20, "normal", (0.0, 0.0)),
        (0, 20, "wilson", (0.0, 0.1611)),
    ],
)
def test_textbook_intervals(x, n, method, expected):
    low, high = ms.proportion_interval(x, n, method=method)
    assert (round(low, 4), round(high, 4)) == expected


def test_agresti_coull_by_hand():
    # 12 of 25 at z = 1.96: n~ = 28.8416, p~ = (12 + 1.9208) / n~
    z = 1.96
    n_tilde = 25 + z * z
    p_tilde = (12 + z * z / 2) / n_tilde
    half = z * np.sqrt(p_tilde * (1 - p_tilde) / n_tilde)
    low, high = ms.proportion_interval(12, 25, method="agresti-coull", z=z)
    assert low == pytest.approx(p_tilde - half, rel=1e-15)
    assert high == pytest.approx(p_tilde + half, rel=1e-15)


def test_critical_value():
    assert ms.critical_value(0.95) == pytest.approx(1.959963984540054, rel=1e-12)
    assert ms.critical_value(0.99) == pytest.approx(2.5758293035489, rel=1e-12)
    with pytest.raises(ValueError, match="`confidence` must be in"):
        ms.critical_value(1.0)
    with pytest.raises(ValueError, match="`method` must be"):
        ms.proportion_interval(1, 2, method="exact")


@pytest.mark.parametrize("method", METHODS)
def test_bounds_are_clipped_and_ordered(method):
    rng = np.random.default_rng(0)
    n = rng.integers(0, 40, size=2000)
    x = np.floor(rng.random(2000) * (n + 1)).astype(int)
    empty = n == 0
    with pytest.warns(UndefinedMetricWarning, match=f"{empty.sum()} of the proportions have no"):
        low, high = ms.proportion_interval(x, n, method=method)
    assert ((0 <= low) & (low <= high) & (high <= 1))[~empty].all()
    p = np.divide(x, n, out=np.full(n.shape, 0.5), where=n > 0)
    if method != "agresti-coull":  # Agresti–Coull is centred on p~, not p
        assert ((low <= p + 1e-12) & (p - 1e-12 <= high))[~empty].all()
    assert np.isnan(low[empty]).all() and np.isnan(high[empty]).all()


@pytest.mark.parametrize("method", METHODS)
def test_no_trials_is_nan_with_a_warning(method):
    """0/0 follows the rule of every view of no samples: NaN with an UndefinedMetricWarning
    (the interval was [0, 1], silently)."""
    with pytest.warns(UndefinedMetricWarning, match="a proportion has no trials"):
        low, high = ms.proportion_interval(0, 0, method=method)
    assert np.isnan(low) and np.isnan(high)
    empty = ConfusionAccumulator(3)
    with pytest.warns(UndefinedMetricWarning, match="no trials"):
        assert np.isnan(empty.accuracy_interval()).all()
    with pytest.warns(UndefinedMetricWarning, match="3 of the proportions"):
        low, high = ms.recall_interval(np.zeros((3, 3)), method=method)
    assert np.isnan(low).all() and np.isnan(high).all()
    # an absent class is 0/0 too; the others keep their intervals
    with pytest.warns(UndefinedMetricWarning, match="its interval is undefined"):
        low, high = ms.recall_interval([[5, 1, 0], [2, 3, 0], [0, 0, 0]], method=method)
    assert np.isnan(low[2]) and np.isfinite(low[:2]).all() and (high[:2] <= 1).all()


@pytest.fixture(scope="module")
def pycm():
    """PyCM (in the test extra); only the tests that compare with it skip without it."""
    return pytest.importorskip("pycm", reason='needs PyCM: pip install ".[test]"')


PYCM_METHOD = {"wilson": "wilson", "normal": "normal-approx", "agresti-coull": "agresti-coull"}
PYCM_PARAM = {
    "TPR": ms.recall_interval,
    "PPV": ms.precision_interval,
    "TNR": ms.specificity_interval,
    "NPV": ms.negative_predictive_value_interval,
}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed", range(15))
def test_against_pycm_clipped(pycm, seed, method):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 6))
    matrix = rng.integers(0, 15, size=(k, k))
    matrix[np.diag_indices(k)] += rng.integers(5, 40, size=k)
    cm = pycm.ConfusionMatrix(
        matrix={i: {j: int(matrix[i, j]) for j in range(k)} for i in range(k)}
    )
    for param, function in PYCM_PARAM.items():
        result = cm.CI(param, binom_method=PYCM_METHOD[method])  # alpha 0.05: z = 1.96
        low, high = function(matrix, method=method, z=1.96)
        expected = np.array([result[i][1] for i in range(k)], dtype=float)
        np.testing.assert_allclose(low, np.clip(expected[:, 0], 0, 1), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(high, np.clip(expected[:, 1], 0, 1), rtol=1e-12, atol=1e-15)
    low, high = ms.accuracy_interval(matrix, method=method, z=1.96)
    _, (expected_low, expected_high) = cm.CI("Overall ACC", binom_method=PYCM_METHOD[method])
    assert low == pytest.approx(max(expected_low, 0.0), rel=1e-12, abs=1e-15)
    assert high == pytest.approx(min(expected_high, 1.0), rel=1e-12, abs=1e-15)


def test_pycm_leaves_zero_one(pycm):
    """PyCM's normal and Agresti–Coull intervals leave [0, 1]; ours are clipped."""
    cm = pycm.ConfusionMatrix(matrix={0: {0: 19, 1: 1}, 1: {0: 0, 1: 5}})
    assert cm.CI("TPR", binom_method="normal-approx")[0][1][1] > 1
    assert cm.CI("TPR", binom_method="agresti-coull")[1][1][1] > 1
    matrix = [[19, 1], [0, 5]]
    for method in ("normal", "agresti-coull"):
        low, high = ms.recall_interval(matrix, method=method, z=1.96)
        assert (high <= 1).all() and (low >= 0).all()


def test_kappa_interval_and_accumulator_views():
    matrix = np.array([[4, 1, 1], [6, 2, 2], [3, 0, 6]])
    acc = ConfusionAccumulator.from_matrix(matrix)
    kappa, se = acc.cohen_kappa(), acc.cohen_kappa_standard_error()
    low, high = acc.cohen_kappa_interval(confidence=0.95)
    z = ms.critical_value(0.95)
    assert (low, high) == pytest.approx((kappa - z * se, kappa + z * se), rel=1e-15)
    assert acc.accuracy_interval() == ms.accuracy_interval(matrix)
    for name in (
        "recall_interval",
        "precision_interval",
        "specificity_interval",
        "negative_predictive_value_interval",
    ):
        ours = getattr(acc, name)(method="agresti-coull", confidence=0.9, labels=[2, 0])
        expected = getattr(ms, name)(matrix, method="agresti-coull", confidence=0.9, labels=[2, 0])
        np.testing.assert_array_equal(ours, expected)
    # undefined kappa: both bounds are zero_division
    assert ms.cohen_kappa_interval(np.diag([0, 5]), zero_division=1) == (1.0, 1.0)
    assert ms.cohen_kappa_interval(np.zeros((2, 2)), zero_division=0) == (0.0, 0.0)
