"""Read-time bootstrap and delta method: exact samplers, batched metrics, intervals, errors."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats

from metricstream import ConfusionAccumulator, metrics
from metricstream.bootstrap import (
    METRIC_ALIASES,
    MetricInterval,
    bootstrap,
    delta_method,
    interval_report,
)
from metricstream.bootstrap import _kernels as kernels
from metricstream.exceptions import UndefinedMetricWarning
from metricstream.metrics import batched

MATRIX = np.array([[50, 3, 2], [4, 40, 6], [1, 5, 39]])


# ---------------------------------------------------------------------------- samplers
def _chi_square_pvalue(draws: np.ndarray, pmf: np.ndarray) -> float:
    """Pearson chi-square p-value of integer ``draws`` against ``pmf`` (bins pooled to >= 5)."""
    observed = np.bincount(draws, minlength=pmf.size)
    assert observed.size <= pmf.size, "a draw fell outside the support"
    expected = pmf * draws.size
    obs_bins, exp_bins, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(observed, expected, strict=True):
        acc_o += o
        acc_e += e
        if acc_e >= 5:
            obs_bins.append(acc_o)
            exp_bins.append(acc_e)
            acc_o = acc_e = 0.0
    obs_bins[-1] += acc_o
    exp_bins[-1] += acc_e
    obs_arr, exp_arr = np.array(obs_bins), np.array(exp_bins)
    exp_arr *= obs_arr.sum() / exp_arr.sum()
    return float(stats.chisquare(obs_arr, exp_arr).pvalue)


@pytest.mark.parametrize(
    ("n", "p"),
    [
        (1, 0.5),
        (7, 0.3),
        (100, 0.02),
        (40, 0.25),
        (25, 0.4),
        (37, 0.5),
        (1000, 0.3),
        (1000, 0.97),
        (200_000, 0.001),
        (5000, 0.5),
    ],
    ids=lambda v: str(v),
)
def test_binomial_sampler_matches_the_distribution(n: int, p: float) -> None:
    draws = kernels.binomial_draws(n, p, 12345, 40_000)
    assert draws.min() >= 0 and draws.max() <= n
    support = np.arange(n + 1)
    pmf = stats.binom.pmf(support, n, p)
    assert _chi_square_pvalue(draws, pmf) > 1e-4
    assert abs(draws.mean() - n * p) < 5 * np.sqrt(n * p * (1 - p) / draws.size) + 1e-12


def test_binomial_sampler_edges() -> None:
    assert (kernels.binomial_draws(0, 0.3, 1, 100) == 0).all()
    assert (kernels.binomial_draws(10, 0.0, 1, 100) == 0).all()
    assert (kernels.binomial_draws(10, 1.0, 1, 100) == 10).all()
    big = kernels.binomial_draws(10**15, 0.5, 3, 2000)
    z = (big - 0.5e15) / np.sqrt(0.25e15)
    assert abs(z.mean()) < 0.2 and 0.85 < z.std() < 1.15


@pytest.mark.parametrize(
    "lam", [0.3, 1.0, 4.5, 9.99, 10.0, 17.3, 100.0, 2500.0], ids=lambda v: f"lam={v}"
)
def test_poisson_sampler_matches_the_distribution(lam: float) -> None:
    draws = kernels.poisson_draws(lam, 777, 40_000)
    assert draws.min() >= 0
    support = np.arange(int(lam + 12 * np.sqrt(lam) + 30))
    pmf = stats.poisson.pmf(support, lam)
    assert _chi_square_pvalue(draws, pmf) > 1e-4


def test_multinomial_replicates_have_multinomial_moments() -> None:
    counts = np.array([500, 3, 40, 1, 120, 9, 2000, 17], dtype=np.int64)
    total = counts.sum()
    draws = kernels.replicate_cells(counts, np.uint64(5), 0, 20_000, True)
    assert (draws.sum(axis=1) == total).all()
    p = counts / total
    assert np.allclose(draws.mean(axis=0), total * p, rtol=0.02, atol=0.05)
    covariance = total * (np.diag(p) - np.outer(p, p))
    assert np.allclose(
        np.cov(draws.T),
        covariance,
        rtol=0.06,
        atol=0.05 * np.sqrt(np.outer(np.diag(covariance), np.diag(covariance))).max() ** 0.5,
    )
    # each cell's marginal is Binomial(N, p_k)
    for k in (1, 3, 5):
        pmf = stats.binom.pmf(np.arange(total + 1), total, p[k])
        assert _chi_square_pvalue(draws[:, k], pmf) > 1e-4


def test_poisson_replicates_are_independent_poisson_cells() -> None:
    counts = np.array([3, 40, 1, 12], dtype=np.int64)
    draws = kernels.replicate_cells(counts, np.uint64(9), 0, 20_000, False)
    assert np.allclose(draws.mean(axis=0), counts, rtol=0.03)
    assert np.allclose(draws.var(axis=0), counts, rtol=0.06)
    corr = np.corrcoef(draws.T)
    assert np.abs(corr - np.eye(4)).max() < 0.04


def test_replicates_depend_only_on_seed_and_index() -> None:
    counts = np.array([30, 2, 5, 60], dtype=np.int64)
    whole = kernels.replicate_cells(counts, np.uint64(42), 0, 100, True)
    assert np.array_equal(
        kernels.replicate_cells(counts, np.uint64(42), 40, 70, True), whole[40:70]
    )
    assert not np.array_equal(kernels.replicate_cells(counts, np.uint64(43), 0, 100, True), whole)
    rows = np.array([0, 0, 1, 1], dtype=np.int64)
    cols = np.array([0, 1, 0, 1], dtype=np.int64)
    tp, ap, pp, total = kernels.replicate_marginals(
        rows, cols, counts, 2, np.uint64(42), 0, 100, True
    )
    stack = whole.reshape(100, 2, 2)
    assert np.array_equal(tp, np.diagonal(stack, axis1=1, axis2=2))
    assert np.array_equal(ap, stack.sum(axis=2))
    assert np.array_equal(pp, stack.sum(axis=1))
    assert np.array_equal(total, stack.sum(axis=(1, 2)))


# ---------------------------------------------------------------------------- batched metrics
def _random_stack(rng: np.random.Generator, b: int, k: int) -> np.ndarray:
    stack = rng.integers(0, 4, size=(b, k, k)) * (rng.random((b, k, k)) < 0.5)
    stack[0] = 0  # no samples
    stack[1] = 0
    stack[1, 2, 2] = 5  # one class only
    stack[2, :, 1] = 0  # class 1 never predicted
    stack[2, 1, :] = 0  # ... nor true: absent
    stack[3, 0, :] = 0  # class 0 never true
    stack[4] = 0
    stack[4, 0, 1] = 3  # every sample wrong
    return stack


BATCHED_CASES = [
    ("accuracy", {}),
    ("hamming_loss", {}),
    ("balanced_accuracy", {}),
    ("balanced_accuracy", {"adjusted": True}),
    ("miou", {}),
    ("fwiou", {}),
    ("matthews_corrcoef", {}),
    ("cohen_kappa", {}),
    *[
        (name, {"average": average, "zero_division": zd, "ignore_absent": ignore})
        for name in ("precision", "recall", "f1", "jaccard")
        for average in (None, "micro", "macro", "weighted")
        for zd in (0, 1, np.nan)
        for ignore in (False, True)
    ],
    ("fbeta", {"beta": 0.5, "average": "macro"}),
    ("fbeta", {"beta": 0.0, "average": "weighted"}),
    ("fbeta", {"beta": np.inf, "average": "macro"}),
    ("f1", {"average": "macro", "labels": [3, 1]}),
    ("recall", {"average": "micro", "labels": [0, 2]}),
    ("dice", {"average": "macro", "ignore_absent": True}),
]


@pytest.mark.parametrize(
    ("name", "kwargs"), BATCHED_CASES, ids=[f"{n}-{k}" for n, k in BATCHED_CASES]
)
def test_batched_metric_equals_scalar_metric(name: str, kwargs: dict) -> None:
    rng = np.random.default_rng(7)
    stack = _random_stack(rng, 40, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        expected = np.array([getattr(metrics, name)(m, **kwargs) for m in stack], dtype=np.float64)
    got = batched.BATCHED[name](stack, **kwargs)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15, equal_nan=True)
    counts = batched.BatchedCounts.from_stack(stack)
    np.testing.assert_allclose(batched.BATCHED[name](counts, **kwargs), got, equal_nan=True)


def test_batched_warn_is_silent_zero() -> None:
    stack = np.zeros((2, 3, 3), dtype=np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (batched.f1(stack, average="macro") == 0).all()
        assert (batched.accuracy(stack) == 0).all()


def test_batched_rejects_bad_stacks() -> None:
    with pytest.raises(ValueError, match=r"`stack` must be a \(B, K, K\)"):
        batched.accuracy(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="`average`"):
        batched.f1(np.zeros((1, 2, 2)), average="mean")
    with pytest.raises(ValueError, match="`weights` of a batched kappa"):
        batched.cohen_kappa(np.zeros((1, 2, 2)), weights="linear")


# ---------------------------------------------------------------------------- bootstrap
def test_bootstrap_is_deterministic_and_prefix_stable() -> None:
    a = bootstrap(MATRIX, "macro_f1", n_resamples=300, seed=11)
    b = bootstrap(MATRIX, "macro_f1", n_resamples=300, seed=11)
    c = bootstrap(MATRIX, "macro_f1", n_resamples=100, seed=11)
    assert a == b and np.array_equal(a.replicates, b.replicates)
    assert np.array_equal(c.replicates, a.replicates[:100])
    assert bootstrap(MATRIX, "macro_f1", n_resamples=300, seed=12).low != a.low


def test_seed_none_is_reported_and_reproduces() -> None:
    first = bootstrap(MATRIX, "accuracy", n_resamples=50, seed=None)
    again = bootstrap(MATRIX, "accuracy", n_resamples=50, seed=first.seed)
    assert np.array_equal(first.replicates, again.replicates)
    from_generator = bootstrap(MATRIX, "accuracy", n_resamples=50, seed=np.random.default_rng(0))
    assert isinstance(from_generator.seed, int)


@pytest.mark.parametrize("method", ["percentile", "basic", "normal", "bca"])
@pytest.mark.parametrize("resampling", ["multinomial", "poisson"])
def test_batched_and_callable_paths_agree(method: str, resampling: str) -> None:
    fast = bootstrap(
        MATRIX, "f1", average="macro", n_resamples=400, seed=3, method=method, resampling=resampling
    )

    def macro_f1(matrix: np.ndarray) -> float:
        return metrics.f1(matrix, average="macro")

    slow = bootstrap(
        MATRIX, macro_f1, n_resamples=400, seed=3, method=method, resampling=resampling
    )
    np.testing.assert_allclose(fast.replicates, slow.replicates, rtol=1e-12)
    assert fast.low == pytest.approx(slow.low, rel=1e-12)
    assert fast.high == pytest.approx(slow.high, rel=1e-12)
    assert fast.low < fast.estimate < fast.high


def test_interval_formulas() -> None:
    result = bootstrap(MATRIX, "accuracy", n_resamples=999, seed=1, confidence=0.9)
    values = result.replicates
    assert result.low == pytest.approx(np.quantile(values, 0.05))
    assert result.high == pytest.approx(np.quantile(values, 0.95))
    assert result.standard_error == pytest.approx(values.std(ddof=1))
    basic = bootstrap(MATRIX, "accuracy", n_resamples=999, seed=1, confidence=0.9, method="basic")
    assert basic.low == pytest.approx(2 * result.estimate - result.high)
    normal = bootstrap(MATRIX, "accuracy", n_resamples=999, seed=1, confidence=0.9, method="normal")
    assert normal.high - normal.estimate == pytest.approx(stats.norm.ppf(0.95) * values.std(ddof=1))


def test_bca_matches_a_direct_computation() -> None:
    result = bootstrap(MATRIX, "matthews_corrcoef", n_resamples=2000, seed=4, method="bca")
    theta, values = result.estimate, result.replicates
    z0 = stats.norm.ppf((np.sum(values < theta) + 0.5 * np.sum(values == theta)) / values.size)
    # jackknife over the 9 * N leave-one-out matrices, grouped by cell
    jack, weights = [], []
    for (r, c), count in np.ndenumerate(MATRIX):
        m = MATRIX.copy()
        m[r, c] -= 1
        jack.append(metrics.matthews_corrcoef(m))
        weights.append(count)
    jack, weights = np.array(jack), np.array(weights, dtype=float)
    mean = np.average(jack, weights=weights)
    a = np.sum(weights * (mean - jack) ** 3) / (6 * np.sum(weights * (mean - jack) ** 2) ** 1.5)
    levels = [
        stats.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))) for z in stats.norm.ppf([0.025, 0.975])
    ]
    assert result.low == pytest.approx(np.quantile(values, levels[0]), rel=1e-9)
    assert result.high == pytest.approx(np.quantile(values, levels[1]), rel=1e-9)


def test_bootstrap_agrees_with_resampling_the_samples() -> None:
    """The matrix shortcut has the distribution of the textbook bootstrap of the samples."""
    y_true = np.repeat(np.arange(3), MATRIX.sum(axis=1))
    y_pred = np.concatenate([np.repeat(np.arange(3), row) for row in MATRIX])
    rng = np.random.default_rng(0)
    values = []
    for _ in range(2000):
        index = rng.integers(0, y_true.size, y_true.size)
        values.append(
            metrics.f1(
                np.bincount(3 * y_true[index] + y_pred[index], minlength=9).reshape(3, 3),
                average="macro",
            )
        )
    fast = bootstrap(MATRIX, "macro_f1", n_resamples=4000, seed=2)
    assert fast.standard_error == pytest.approx(np.std(values, ddof=1), rel=0.08)
    assert fast.low == pytest.approx(np.quantile(values, 0.025), abs=0.01)
    assert fast.high == pytest.approx(np.quantile(values, 0.975), abs=0.01)
    for resampling in ("poisson",):
        other = bootstrap(MATRIX, "macro_f1", n_resamples=4000, seed=2, resampling=resampling)
        assert other.standard_error == pytest.approx(fast.standard_error, rel=0.08)


def test_per_class_output_and_names() -> None:
    acc = ConfusionAccumulator.from_matrix(MATRIX, class_names=["cat", "dog", "hen"])
    result = bootstrap(acc, "recall", labels=["hen", "cat"], n_resamples=200, seed=0)
    assert result.estimate.shape == (2,) and result.replicates.shape == (200, 2)
    assert np.all(result.low <= result.estimate) and np.all(result.estimate <= result.high)
    assert result.metric == "recall(labels=[2, 0])"
    with pytest.raises(ValueError, match="`labels` holds 'cow' at position 0"):
        bootstrap(acc, "recall", labels=["cow"], n_resamples=10, seed=0)


def test_aliases_and_metric_names() -> None:
    for alias, (name, kwargs) in METRIC_ALIASES.items():
        result = bootstrap(MATRIX, alias, n_resamples=20, seed=0)
        assert result.estimate == pytest.approx(getattr(metrics, name)(MATRIX, **kwargs))
    with pytest.raises(ValueError, match="already sets average='macro'"):
        bootstrap(MATRIX, "macro_f1", average="micro", n_resamples=10)
    with pytest.raises(ValueError, match="`metric` 'f2' is not a metric"):
        bootstrap(MATRIX, "f2", n_resamples=10)
    with pytest.raises(ValueError, match="is not a metric"):
        bootstrap(MATRIX, "proportion_interval", n_resamples=10)


def test_metrics_without_batched_form_use_the_loop() -> None:
    weighted_kappa = bootstrap(MATRIX, "cohen_kappa", weights="quadratic", n_resamples=100, seed=0)
    assert weighted_kappa.estimate == pytest.approx(
        metrics.cohen_kappa(MATRIX, weights="quadratic")
    )
    nmi = bootstrap(MATRIX, "normalized_mutual_information", n_resamples=50, seed=0)
    assert 0 < nmi.low < nmi.high < 1


def test_replicate_warnings_are_silenced_but_point_estimate_warns() -> None:
    matrix = np.array([[5, 0, 0], [0, 0, 0], [0, 0, 4]])  # class 1 absent
    with pytest.warns(UndefinedMetricWarning):
        result = bootstrap(matrix, "precision", average="macro", n_resamples=100, seed=0)
    assert np.isfinite(result.replicates).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nan_result = bootstrap(matrix, "precision", n_resamples=100, seed=0, zero_division=np.nan)
    assert np.isnan(nan_result.estimate[1]) and np.isnan(nan_result.low[1])


def test_generic_counts_with_a_callable() -> None:
    histogram = np.array([[30, 20, 5], [2, 10, 40]])  # e.g. negatives/positives per score bin

    def positive_share(h: np.ndarray) -> float:
        return h[1].sum() / h.sum()

    result = bootstrap(histogram, positive_share, n_resamples=500, seed=0)
    assert result.low < positive_share(histogram) < result.high
    with pytest.raises(ValueError, match="square K×K confusion matrix for a named metric"):
        bootstrap(histogram, "accuracy", n_resamples=10)


def test_weighted_matrices() -> None:
    whole = bootstrap(MATRIX.astype(float), "accuracy", n_resamples=100, seed=0)
    assert np.array_equal(
        whole.replicates, bootstrap(MATRIX, "accuracy", n_resamples=100, seed=0).replicates
    )
    acc = ConfusionAccumulator.from_matrix([[0.5, 0.0], [2.0, 1.0]])
    with pytest.raises(ValueError, match=r"fractional count 0\.5 at position \(0, 0\)"):
        bootstrap(acc, "accuracy", n_resamples=10)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_resamples": 1}, ValueError, "`n_resamples` must be at least 2, got 1"),
        ({"n_resamples": 10.0}, TypeError, "`n_resamples` must be an int"),
        ({"confidence": 1.0}, ValueError, r"`confidence` must be in \(0, 1\), got 1.0"),
        ({"confidence": "high"}, TypeError, "`confidence` must be a number"),
        ({"method": "studentized"}, ValueError, "`method` must be one of"),
        ({"resampling": "jackknife"}, ValueError, "`resampling` must be one of"),
        ({"seed": "x"}, TypeError, "`seed` must be None, an int"),
    ],
)
def test_bad_arguments(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        bootstrap(MATRIX, "accuracy", **kwargs)


def test_bad_sources() -> None:
    with pytest.warns(UndefinedMetricWarning, match="no samples have been counted"):
        assert np.isnan(bootstrap(np.zeros((3, 3)), "accuracy").low)
    with pytest.raises(ValueError, match=r"holds -1 at position \(0, 1\)"):
        bootstrap([[1, -1], [0, 2]], "accuracy")
    with pytest.raises(ValueError, match="must be finite"):
        bootstrap([[1, np.nan], [0, 2]], "accuracy")
    with pytest.raises(TypeError, match="must hold counts"):
        bootstrap([["a", "b"], ["c", "d"]], "accuracy")
    with pytest.raises(TypeError, match="`metric` must be a metric name or a function"):
        bootstrap(MATRIX, 3)


def test_result_to_dict_is_json() -> None:
    result = bootstrap(MATRIX, "recall", n_resamples=50, seed=0)
    data = result.to_dict()
    assert json.loads(json.dumps(data))["n_resamples"] == 50
    assert len(data["low"]) == 3
    assert isinstance(result, MetricInterval) and result.interval == (result.low, result.high)


# ---------------------------------------------------------------------------- delta method
DELTA_CASES = [
    ("accuracy", {}),
    ("f1", {"average": "macro"}),
    ("f1", {"average": "micro"}),
    ("f1", {"average": "weighted"}),
    ("fbeta", {"beta": 2.0, "average": "macro"}),
    ("precision", {"average": "macro"}),
    ("recall", {"average": "weighted"}),
    ("jaccard", {"average": "macro"}),
    ("miou", {}),
    ("balanced_accuracy", {}),
    ("balanced_accuracy", {"adjusted": True}),
    ("cohen_kappa", {}),
    ("matthews_corrcoef", {}),
    ("recall", {"average": "micro", "labels": [0, 2]}),
    ("f1", {"average": "macro", "labels": [1, 2]}),
]


def _numeric_variance(matrix: np.ndarray, name: str, kwargs: dict) -> float:
    """``Σ C g² - (Σ C g)²/N`` with ``g`` by central differences on each cell."""
    base = matrix.astype(np.float64)
    g = np.zeros_like(base)
    for index in np.ndindex(base.shape):
        h = 1e-4 * max(base[index], 1.0)
        up, down = base.copy(), base.copy()
        up[index] += h
        down[index] -= h
        g[index] = (
            getattr(metrics, name)(up, **kwargs) - getattr(metrics, name)(down, **kwargs)
        ) / (2 * h)
    return float((base * g**2).sum() - (base * g).sum() ** 2 / base.sum())


@pytest.mark.parametrize(("name", "kwargs"), DELTA_CASES, ids=[f"{n}-{k}" for n, k in DELTA_CASES])
def test_delta_gradient_matches_finite_differences(name: str, kwargs: dict) -> None:
    rng = np.random.default_rng(1)
    matrix = rng.integers(1, 20, size=(4, 4)) + np.diag([60, 40, 70, 30])
    result = delta_method(matrix, name, **kwargs)
    assert result.standard_error**2 == pytest.approx(
        _numeric_variance(matrix, name, kwargs), rel=1e-5
    )


@pytest.mark.parametrize(("name", "kwargs"), DELTA_CASES, ids=[f"{n}-{k}" for n, k in DELTA_CASES])
def test_delta_agrees_with_bootstrap(name: str, kwargs: dict) -> None:
    rng = np.random.default_rng(5)
    matrix = rng.integers(0, 30, size=(5, 5)) + np.diag([300, 200, 400, 250, 150])
    delta = delta_method(matrix, name, **kwargs)
    boot = bootstrap(matrix, name, n_resamples=8000, seed=9, **kwargs)
    assert delta.standard_error == pytest.approx(boot.standard_error, rel=0.05)


def test_delta_per_class_rates_are_the_binomial_ones() -> None:
    result = delta_method(MATRIX, "recall")
    r = np.diagonal(MATRIX) / MATRIX.sum(axis=1)
    np.testing.assert_allclose(result.standard_error, np.sqrt(r * (1 - r) / MATRIX.sum(axis=1)))
    precision = delta_method(MATRIX, "precision", labels=[2])
    p = MATRIX[2, 2] / MATRIX[:, 2].sum()
    np.testing.assert_allclose(
        precision.standard_error, [np.sqrt(p * (1 - p) / MATRIX[:, 2].sum())]
    )
    micro = delta_method(MATRIX, "micro_f1")
    acc = metrics.accuracy(MATRIX)
    assert micro.standard_error == pytest.approx(np.sqrt(acc * (1 - acc) / MATRIX.sum()))


def test_delta_wald_interval_and_clipping() -> None:
    result = delta_method(MATRIX, "macro_f1", confidence=0.9)
    z = stats.norm.ppf(0.95)
    assert result.low == pytest.approx(result.estimate - z * result.standard_error)
    perfect = delta_method(np.diag([5, 5]), "accuracy")
    assert perfect.high == 1.0 and perfect.standard_error == 0.0


def test_delta_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="no closed-form standard error"):
        delta_method(MATRIX, "normalized_mutual_information")
    with pytest.raises(ValueError, match="no closed-form standard error"):
        delta_method(MATRIX, "cohen_kappa", weights="linear")
    with pytest.raises(TypeError, match="needs a closed-form gradient"):
        delta_method(MATRIX, len)
    with pytest.warns(UndefinedMetricWarning, match="no samples have been counted"):
        assert np.isnan(delta_method(np.zeros((2, 2)), "accuracy").standard_error)


# ---------------------------------------------------------------------------- report section
def test_interval_report_formats() -> None:
    data = interval_report(MATRIX, n_resamples=200)
    assert isinstance(data, dict)
    assert list(data["metrics"]) == [
        "accuracy",
        "balanced_accuracy",
        "macro_f1",
        "miou",
        "mcc",
        "kappa",
    ]
    assert json.loads(json.dumps(data))["seed"] == 0
    row = data["metrics"]["macro_f1"]
    again = bootstrap(MATRIX, "macro_f1", n_resamples=200, seed=0)
    assert row["low"] == again.low and row["estimate"] == again.estimate
    text = interval_report(MATRIX, ["accuracy", "mcc"], format="text", n_resamples=200)
    assert isinstance(text, str)
    assert text.splitlines()[0].startswith("95% percentile bootstrap intervals, B=200")
    assert "MCC" in text and "(independent samples)" in text
    markdown = interval_report(MATRIX, ["kappa"], format="markdown", n_resamples=200)
    assert "| Cohen's kappa |" in str(markdown)
    with pytest.raises(ValueError, match="`format` must be"):
        interval_report(MATRIX, format="html")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="which is per-class"):
        interval_report(MATRIX, ["recall"], n_resamples=20)


def test_threads_do_not_change_the_replicates(monkeypatch: pytest.MonkeyPatch) -> None:
    import metricstream.bootstrap.resampling as module

    rng = np.random.default_rng(3)
    matrix = rng.integers(0, 50, size=(12, 12)) + np.diag(np.full(12, 500))
    monkeypatch.setattr(module, "PARALLEL_MIN_DRAWS", 1)
    threaded = bootstrap(matrix, "macro_f1", n_resamples=301, seed=8)
    monkeypatch.setattr(module, "PARALLEL_MIN_DRAWS", 1 << 62)
    single = bootstrap(matrix, "macro_f1", n_resamples=301, seed=8)
    assert np.array_equal(threaded.replicates, single.replicates)


def test_auroc_interval_from_a_score_histogram() -> None:
    """A binary score histogram is a multinomial table too: AUROC intervals by the same path."""
    from sklearn.metrics import roc_auc_score

    from metricstream.metrics.curves import auroc
    from metricstream.scores import ScoreAccumulator

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 3000)
    scores = np.clip(rng.normal(0.4 + 0.2 * y, 0.2), 0, 1).astype(np.float32)
    acc = ScoreAccumulator("binary").update(y, scores)
    histogram = acc.state_arrays()["curves"][0]  # (bins, [negatives, positives])
    result = bootstrap(histogram, lambda h: auroc(h[:, 1], h[:, 0]), n_resamples=400, seed=0)
    assert result.estimate == pytest.approx(roc_auc_score(y, scores), abs=1e-4)
    values = []
    for _ in range(400):
        index = rng.integers(0, y.size, y.size)
        values.append(roc_auc_score(y[index], scores[index]))
    assert result.standard_error == pytest.approx(np.std(values, ddof=1), rel=0.15)
    with pytest.raises(TypeError, match="whose state has no confusion matrix"):
        bootstrap(acc, "accuracy", n_resamples=10)


@settings(max_examples=60, deadline=None)
@given(
    stack=arrays(
        np.int64,
        st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 5)).filter(
            lambda s: s[1] == s[2]
        ),
        elements=st.integers(0, 3),
    ),
    name=st.sampled_from(
        [
            "accuracy",
            "balanced_accuracy",
            "miou",
            "fwiou",
            "matthews_corrcoef",
            "cohen_kappa",
            "f1",
            "precision",
            "jaccard",
        ]
    ),
    average=st.sampled_from([None, "micro", "macro", "weighted"]),
    zd=st.sampled_from([0, 1, np.nan]),
)
def test_batched_metrics_property(stack, name, average, zd) -> None:
    kwargs: dict = {"zero_division": zd}
    if name in ("f1", "precision", "jaccard"):
        kwargs["average"] = average
    if name == "matthews_corrcoef" and np.isnan(zd):
        kwargs["zero_division"] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        expected = np.array([getattr(metrics, name)(m, **kwargs) for m in stack], dtype=np.float64)
    np.testing.assert_allclose(
        batched.BATCHED[name](stack, **kwargs), expected, rtol=1e-12, atol=1e-15, equal_nan=True
    )


def test_auroc_and_ap_of_a_binary_score_accumulator_by_name() -> None:
    from metricstream.metrics.curves import auroc
    from metricstream.scores import ScoreAccumulator

    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 500)
    scores = np.clip(rng.normal(0.4 + 0.2 * y, 0.2), 0, 1)
    acc = ScoreAccumulator("binary").update(y, scores)
    by_name = bootstrap(acc, "auroc", n_resamples=100, seed=1)
    histogram = acc.state_arrays()["curves"][0]
    by_hand = bootstrap(histogram, lambda h: auroc(h[:, 1], h[:, 0]), n_resamples=100, seed=1)
    assert by_name.estimate == pytest.approx(acc.auroc())
    np.testing.assert_array_equal(by_name.replicates, by_hand.replicates)
    assert by_name.metric == "auroc"
    ap = bootstrap(acc, "average_precision", n_resamples=50, seed=1)
    assert ap.estimate == pytest.approx(acc.average_precision())
    assert ap.low < ap.estimate < ap.high
    with pytest.raises(ValueError, match="takes no arguments"):
        bootstrap(acc, "auroc", average="macro", n_resamples=10)
    multiclass = ScoreAccumulator("multiclass", 3).update(
        rng.integers(0, 3, 50), rng.dirichlet(np.ones(3), 50)
    )
    with pytest.raises(ValueError, match="one-vs-rest score histograms of 3 classes"):
        bootstrap(multiclass, "auroc", n_resamples=10)
