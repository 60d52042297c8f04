"""RegressionAccumulator against scikit-learn, scipy and exact rational arithmetic.

* randomized streams (any batch split, weights, 1 or 3 outputs, every ``multioutput`` option)
  equal ``sklearn.metrics`` and ``scipy.stats.pearsonr`` to 1e-12;
* a large mean with a small spread (1e9 and 1) equals a ``fractions.Fraction`` reference to
  1e-13, where float sums about zero would lose every digit;
* scikit-learn's edge rules: constant ``y_true`` with and without ``force_finite``, one sample,
  zero weights; nothing counted follows the package's ``zero_division`` convention;
* merging is exact (any merge order gives a bit-identical state); the maximum error survives
  ``merge``/``+``/``sum`` and is reported unknown after a sum-only path (group merge, sync);
* every bad input names its position and leaves the state bit-identical;
* every round trip, groups, pickling, threads, a 3-rank in-process sync and (slow) 2 gloo ranks.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

if __package__ in (None, ""):  # run as a script (--worker): make `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metricstream import AccumulatorGroup, ConfusionAccumulator, UndefinedMetricWarning  # noqa: E402
from metricstream.regression import RegressionAccumulator  # noqa: E402

sk = pytest.importorskip("sklearn.metrics", reason="the reference is scikit-learn")
scipy_stats = pytest.importorskip("scipy.stats", reason="the Pearson reference is scipy")

RTOL = 1e-12


def _data(rng: np.random.Generator, n: int, outputs: int, *, mean: float = 0.0, spread=1.0):
    shape = (n,) if outputs == 1 else (n, outputs)
    t = rng.normal(mean, spread, shape)
    p = t + rng.normal(0.3 * spread, 0.7 * spread, shape)
    return t, p


def _fed(t, p, w=None, splits=(), outputs=None):
    acc = RegressionAccumulator(outputs or (1 if t.ndim == 1 else t.shape[1]))
    bounds = [0, *sorted(splits), len(t)]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        acc.update(t[lo:hi], p[lo:hi], None if w is None else w[lo:hi])
    return acc


def _close(actual, expected, rtol=RTOL, atol=1e-13):
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def _check_all(acc, t, p, w, atol=1e-13):
    """Every view of ``acc`` against scikit-learn/scipy on the concatenated data."""
    outputs = acc.num_outputs
    custom = [np.arange(1.0, outputs + 1)] if outputs > 1 else []  # as scikit-learn
    for mo in ["raw_values", "uniform_average", *custom]:
        _close(
            acc.mae(mo), sk.mean_absolute_error(t, p, sample_weight=w, multioutput=mo), atol=atol
        )
        _close(acc.mse(mo), sk.mean_squared_error(t, p, sample_weight=w, multioutput=mo), atol=atol)
        _close(acc.rmse(mo), _rmse(t, p, w, mo), atol=atol)
        bias = np.average(np.reshape(p - t, (len(t), -1)), axis=0, weights=w)
        expected = (
            bias
            if isinstance(mo, str) and mo == "raw_values"
            else np.average(bias, weights=None if isinstance(mo, str) else mo)
        )
        _close(acc.mean_error(mo), expected, atol=atol)
    for mo in ["raw_values", "uniform_average", "variance_weighted", *custom]:
        for ff in (True, False):
            _close(
                acc.r2(mo, force_finite=ff),
                sk.r2_score(t, p, sample_weight=w, multioutput=mo, force_finite=ff),
            )
            _close(
                acc.explained_variance(mo, force_finite=ff),
                sk.explained_variance_score(t, p, sample_weight=w, multioutput=mo, force_finite=ff),
            )
    t2, p2 = np.reshape(t, (len(t), -1)), np.reshape(p, (len(p), -1))
    keep = np.ones(len(t), bool) if w is None else w > 0
    _close(
        acc.max_error("raw_values"),
        [sk.max_error(t2[keep, j], p2[keep, j]) for j in range(outputs)],
        rtol=0,
        atol=0,
    )
    if w is None:
        expected = [scipy_stats.pearsonr(t2[:, j], p2[:, j]).statistic for j in range(outputs)]
    else:
        expected = [_weighted_pearson(t2[:, j], p2[:, j], w) for j in range(outputs)]
    _close(acc.pearson("raw_values"), expected, atol=atol)


def _rmse(t, p, w, multioutput):
    """scikit-learn's root_mean_squared_error (1.4+): the root per output, then the average."""
    function = getattr(sk, "root_mean_squared_error", None)
    if function is not None:
        return function(t, p, sample_weight=w, multioutput=multioutput)
    roots = np.sqrt(sk.mean_squared_error(t, p, sample_weight=w, multioutput="raw_values"))
    if isinstance(multioutput, str):
        return roots if multioutput == "raw_values" else np.average(roots)
    return np.average(roots, weights=multioutput)


def _weighted_pearson(x, y, w):
    scale = np.abs(x).max()  # the correlation does not depend on it; np.cov's products do
    cov = np.cov(x / scale, y / scale, aweights=w)
    return cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1])


# ---------------------------------------------------------------------- worked example
def test_worked_example_matches_sklearn_docs():
    y_true, y_pred = [3.0, -0.5, 2.0, 7.0], [2.5, 0.0, 2.0, 8.0]
    acc = RegressionAccumulator().update(y_true, y_pred)
    assert acc.mae() == 0.5  # (0.5 + 0.5 + 0 + 1) / 4
    assert acc.mse() == 0.375  # (0.25 + 0.25 + 0 + 1) / 4
    assert acc.mean_error() == 0.25  # (-0.5 + 0.5 + 0 + 1) / 4: over-predicts on average
    assert acc.max_error() == 1.0
    # SST = 29.1875 (mean 2.875), SSE = 1.5: R² = 1 - 1.5 / 29.1875
    assert acc.r2() == pytest.approx(1 - 1.5 / 29.1875, rel=1e-15)
    assert acc.num_samples == 4 and acc.total_weight == 4.0
    two = RegressionAccumulator(2).update([[0.5, 1], [-1, 1], [7, -6]], [[0, 2], [-1, 2], [8, -5]])
    assert two.r2("variance_weighted") == pytest.approx(0.9382566585956416, rel=1e-15)
    assert two.mae("raw_values").tolist() == [0.5, 1.0]


# ---------------------------------------------------------------------- against the references
@pytest.mark.parametrize("outputs", [1, 3])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_random_streams_match_sklearn_and_scipy(outputs, weighted, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    t, p = _data(rng, n, outputs, mean=float(rng.normal(0, 10)), spread=float(rng.uniform(0.1, 5)))
    w = rng.uniform(0, 3, n) * (rng.random(n) > 0.2) if weighted else None
    if w is not None:
        w[0] = 1.0
    splits = rng.integers(0, n, int(rng.integers(0, 6)))
    _check_all(_fed(t, p, w, splits), t, p, w)


def test_integer_bool_and_list_inputs():
    acc = RegressionAccumulator().update([1, 2, 3], np.array([True, False, True]))
    assert acc.mse() == sk.mean_squared_error([1, 2, 3], [1, 0, 1])
    acc = RegressionAccumulator().update(
        np.arange(5, dtype=np.int8), np.arange(5, dtype=np.float32)
    )
    assert acc.mae() == 0.0


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch", reason="needs PyTorch for the tensor input test")
    t = torch.linspace(0, 1, 50, dtype=torch.float32)
    p = (t * 2).requires_grad_()
    acc = RegressionAccumulator().update(t, p, torch.ones(50))
    # read as float64, like the float64 arrays scikit-learn is given here
    expected = sk.mean_squared_error(t.double().numpy(), p.detach().double().numpy())
    _close(acc.mse(), expected)


# ---------------------------------------------------------------------- numerical stability
def _exact_reference(t, p, w):
    ft, fp, fw = ([Fraction(float(v)) for v in a] for a in (t, p, w))
    total = sum(fw)
    mean = sum(a * b for a, b in zip(fw, ft, strict=True)) / total
    sst = sum(a * (b - mean) ** 2 for a, b in zip(fw, ft, strict=True))
    errors = [Fraction(float(b) - float(a)) for a, b in zip(t, p, strict=True)]  # float e
    sse = sum(a * e * e for a, e in zip(fw, errors, strict=True))
    bias = sum(a * e for a, e in zip(fw, errors, strict=True)) / total
    var_e = sum(a * (e - bias) ** 2 for a, e in zip(fw, errors, strict=True))
    mp = sum(a * b for a, b in zip(fw, fp, strict=True)) / total
    cov = sum(a * (b - mean) * (c - mp) for a, b, c in zip(fw, ft, fp, strict=True))
    var_p = sum(a * (c - mp) ** 2 for a, c in zip(fw, fp, strict=True))
    return {
        "mse": sse / total,
        "mean_error": bias,
        "r2": 1 - sse / sst,
        "explained_variance": 1 - var_e / sst,
        "pearson_squared": cov * cov / (sst * var_p),
    }


@pytest.mark.parametrize("mean", [1e9, -3e12, 1e15])
def test_large_mean_small_spread_is_exact(mean):
    rng = np.random.default_rng(7)
    n = 300
    t = mean + rng.normal(0, 1, n)
    p = t + rng.normal(0.25, 0.5, n)
    w = rng.uniform(0.1, 2, n)
    acc = _fed(t, p, w, splits=[37, 38, 200])
    exact = _exact_reference(t, p, w)
    for name in ("mse", "mean_error", "r2", "explained_variance"):
        assert float(exact[name]) == pytest.approx(getattr(acc, name)(), rel=1e-13), name
    assert float(exact["pearson_squared"]) == pytest.approx(acc.pearson() ** 2, rel=1e-13)
    if mean == 1e9:  # scikit-learn centres too and agrees to its own rounding here; at
        # -3e12 and 1e15 its float64 mean is off enough to move R² by 3e-7 and 2.5%.
        _close(acc.r2(), sk.r2_score(t, p, sample_weight=w))
    # ... while the raw sums of squares that a naive stream keeps have no correct digit left.
    true_sst = float(np.sum(w * (t - np.average(t, weights=w)) ** 2))
    naive_sst = (w * t * t).sum() - (w * t).sum() ** 2 / w.sum()
    assert abs(naive_sst - true_sst) > 0.5 * true_sst


@pytest.mark.parametrize("scale", [1e-150, 1e-5, 1e5, 1e150])
def test_any_magnitude_matches_sklearn(scale):
    rng = np.random.default_rng(8)
    t, p = _data(rng, 100, 2, mean=scale, spread=scale)
    w = rng.uniform(0, 2, 100)
    _check_all(_fed(t, p, w, [50]), t, p, w, atol=0.0)


def test_sums_beyond_float64_range_are_refused():
    acc = RegressionAccumulator().update([1.0, 2.0], [1.0, 2.5])
    before = acc.state_arrays()
    with pytest.raises(ValueError, match="overflow float64"):
        acc.update([1e200, 1e200], [1e200, 1e200])  # sum(w t**2) = 2e400
    assert all(np.array_equal(before[k], v) for k, v in acc.state_arrays().items())


def test_merge_of_far_apart_shards_is_exact():
    # Two shards whose means differ by 1e9: the between-shard term must be exact too.
    rng = np.random.default_rng(3)
    t1, t2 = rng.normal(0, 1, 100), rng.normal(1e9, 1, 100)
    p1, p2 = t1 + rng.normal(0, 1, 100), t2 + rng.normal(0, 1, 100)
    acc = _fed(t1, p1) + _fed(t2, p2)
    t, p = np.concatenate([t1, t2]), np.concatenate([p1, p2])
    exact = _exact_reference(t, p, np.ones(200))
    assert acc.r2() == pytest.approx(float(exact["r2"]), rel=1e-14)
    assert acc.explained_variance() == pytest.approx(float(exact["explained_variance"]), rel=1e-14)


# ---------------------------------------------------------------------- edge rules
@pytest.mark.parametrize("force_finite", [True, False])
def test_constant_targets_follow_sklearn(force_finite):
    cases = [
        ([3.0, 3.0, 3.0], [3.0, 3.0, 3.0]),  # perfect, constant: 1.0 (nan without force)
        ([3.0, 3.0, 3.0], [3.0, 2.0, 3.0]),  # imperfect, constant: 0.0 (-inf without force)
        ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]),  # perfect
        ([1.0, 2.0, 3.0], [2.0, 3.0, 4.0]),  # constant error: explained variance 1
    ]
    for t, p in cases:
        acc = RegressionAccumulator().update(t, p)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            _close(acc.r2(force_finite=force_finite), sk.r2_score(t, p, force_finite=force_finite))
            _close(
                acc.explained_variance(force_finite=force_finite),
                sk.explained_variance_score(t, p, force_finite=force_finite),
            )
    # Outputs mixing constant and varying columns, every average.
    t = np.array([[1.0, 5.0], [2.0, 5.0], [4.0, 5.0]])
    p = np.array([[1.5, 5.0], [2.0, 4.0], [3.0, 5.0]])
    acc = RegressionAccumulator(2).update(t, p)
    for mo in ("raw_values", "uniform_average", "variance_weighted"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            _close(
                acc.r2(mo, force_finite=force_finite),
                sk.r2_score(t, p, multioutput=mo, force_finite=force_finite),
            )
    # Every output constant: variance_weighted falls back to uniform, as in scikit-learn.
    t = np.full((4, 2), 2.0)
    acc = RegressionAccumulator(2).update(t, t + [[0, 1]] * 4)
    _close(
        acc.r2("variance_weighted"),
        sk.r2_score(t, t + [[0, 1]] * 4, multioutput="variance_weighted"),
    )


def test_constant_detected_exactly_across_batches_and_weights():
    acc = RegressionAccumulator()
    for _ in range(5):
        acc.update([0.1, 0.1, 0.1], [0.1, 0.1, 0.1], [0.3, 0.7, 1.1])
    assert acc.r2() == 1.0 and acc.explained_variance() == 1.0
    assert acc.r2(force_finite=False) != acc.r2(force_finite=False)  # nan: 0/0


def test_one_sample_r2_is_nan_with_warning_like_sklearn():
    acc = RegressionAccumulator().update([1.0], [2.0])
    with pytest.warns(UndefinedMetricWarning, match="less than two samples"):
        assert np.isnan(acc.r2())
    assert acc.mse() == 1.0 and acc.max_error() == 1.0
    assert acc.explained_variance() == sk.explained_variance_score([1.0], [2.0])


def test_nothing_counted_follows_zero_division():
    for acc in (
        RegressionAccumulator(2),
        RegressionAccumulator(2).update(np.ones((3, 2)), np.zeros((3, 2)), [0.0, 0.0, 0.0]),
    ):
        views = [acc.mae, acc.mse, acc.rmse, acc.r2, acc.explained_variance]
        views += [acc.mean_error, acc.max_error, acc.pearson]
        for view in views:
            with pytest.warns(UndefinedMetricWarning, match="no samples"):
                assert view() == 0.0
            assert np.isnan(view(zero_division=np.nan))
            assert view("raw_values", zero_division=1).tolist() == [1.0, 1.0]
            with pytest.raises(ValueError, match="zero_division"):
                view(zero_division=0.5)
    assert RegressionAccumulator().num_samples == 0
    assert RegressionAccumulator().total_weight == 0.0


def test_zero_weight_rows_count_for_nothing_but_num_samples():
    rng = np.random.default_rng(5)
    t, p = _data(rng, 50, 1)
    w = np.where(np.arange(50) % 3 == 0, 0.0, 1.0)
    acc = RegressionAccumulator().update(t, p, w)
    keep = w > 0
    twin = RegressionAccumulator().update(t[keep], p[keep])
    assert acc.num_samples == 50 and twin.num_samples == keep.sum()
    for name in ("mae", "mse", "r2", "explained_variance", "pearson", "max_error", "mean_error"):
        _close(getattr(acc, name)(), getattr(twin, name)())


def test_pearson_constant_input_is_nan_like_scipy():
    acc = RegressionAccumulator().update([1.0, 2.0, 3.0], [4.0, 4.0, 4.0])
    with pytest.warns(UndefinedMetricWarning, match="constant"):
        assert np.isnan(acc.pearson())
    perfect = RegressionAccumulator().update([1.0, 2.0, 3.0], [-2.0, -4.0, -6.0])
    assert perfect.pearson() == -1.0


def test_multioutput_errors():
    acc = RegressionAccumulator(2).update(np.ones((3, 2)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="one per output"):
        acc.mae([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="'raw_values', 'uniform_average' or 2 weights"):
        acc.mse("variance_weighted")
    with pytest.raises(ValueError, match="variance_weighted"):
        acc.r2("median")
    with pytest.raises(TypeError, match="force_finite"):
        acc.r2(force_finite="yes")
    with pytest.raises(ValueError, match="several outputs"):
        RegressionAccumulator().update([1.0], [1.0]).mae([1.0])


# ---------------------------------------------------------------------- bad input, atomically
def _bad_inputs():
    ok = np.array([1.0, 2.0, 3.0])
    yield (ok, [1.0, np.nan, 3.0], None), ValueError, r"`y_pred` holds nan at position 1"
    yield ([1.0, 2.0, -np.inf], ok, None), ValueError, r"`y_true` holds -inf at position 2"
    yield (ok, ok, [1.0, -0.5, 1.0]), ValueError, r"`weights` holds -0.5 at position 1"
    yield (ok, ok, [1.0, 1.0, np.inf]), ValueError, r"`weights` holds inf at position 2"
    yield ([1e308, 0, 0], [-1e308, 0, 0], None), ValueError, r"overflows float64 at position 0"
    yield (ok, ok, [1.0, 1.0]), ValueError, r"one weight per row: \(3,\)"
    yield (ok, ok[:2], None), ValueError, "must match"
    yield (np.ones((3, 2)), np.ones((3, 2)), None), ValueError, r"1 output\(s\)"
    yield (np.array(["a", "b"]), ok[:2], None), TypeError, "y_true"
    yield ([1e200, 0.0], [1e200, 0.0], [1e300, 1.0]), ValueError, "overflow float64"


@pytest.mark.parametrize("args, error, match", list(_bad_inputs()))
def test_bad_input_names_position_and_changes_nothing(args, error, match):
    acc = RegressionAccumulator().update([0.5, 1.5], [1.0, 1.0])
    before = acc.state_arrays()
    with pytest.raises(error, match=match):
        acc.update(*args)
    after = acc.state_arrays()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_bad_input_positions_in_two_dimensions():
    acc = RegressionAccumulator(2)
    t = np.zeros((4, 2))
    t[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"`y_true` holds nan at position \(2, 1\)"):
        acc.update(t, np.zeros((4, 2)))
    assert acc.num_samples == 0


def test_configuration_is_checked():
    with pytest.raises(ValueError, match="at least 1, got 0"):
        RegressionAccumulator(0)
    for bad in (1.5, True, "2"):
        with pytest.raises(TypeError, match="num_outputs"):
            RegressionAccumulator(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="different `num_outputs`: 1 here, 2"):
        RegressionAccumulator(1).merge(RegressionAccumulator(2))


def _exact_sums(acc):
    """The state's sums as Fractions, per output: {name: [value per output]}."""
    x = acc._view_source()
    scale = 2**3239  # the fixed point's unit (limb 0 is worth 2**-3239)
    names = ("t", "tt", "p", "pp", "e", "ee", "tp", "ae")
    sums = {name: [Fraction(v, scale) for v in getattr(x, name)] for name in names}
    sums["w"] = Fraction(x.w, scale)
    return sums


def _exact_terms(t, p, w):
    """Every row's terms in exact rational arithmetic, summed: the reference of the state."""
    t2, p2 = np.reshape(t, (len(t), -1)), np.reshape(p, (len(p), -1))
    weights = [Fraction(1)] * len(t) if w is None else [Fraction(float(v)) for v in w]
    sums = {name: [] for name in ("t", "tt", "p", "pp", "e", "ee", "tp", "ae")}
    for j in range(t2.shape[1]):
        ts = [Fraction(float(v)) for v in t2[:, j]]
        ps = [Fraction(float(v)) for v in p2[:, j]]
        es = [Fraction(float(b - a)) for a, b in zip(t2[:, j], p2[:, j], strict=True)]
        rows = list(zip(weights, ts, ps, es, strict=True))
        sums["t"].append(sum(w_ * a for w_, a, _, _ in rows))
        sums["tt"].append(sum(w_ * a * a for w_, a, _, _ in rows))
        sums["p"].append(sum(w_ * b for w_, _, b, _ in rows))
        sums["pp"].append(sum(w_ * b * b for w_, _, b, _ in rows))
        sums["e"].append(sum(w_ * e for w_, _, _, e in rows))
        sums["ee"].append(sum(w_ * e * e for w_, _, _, e in rows))
        sums["tp"].append(sum(w_ * a * b for w_, a, b, _ in rows))
        sums["ae"].append(sum(w_ * abs(e) for w_, _, _, e in rows))
    sums["w"] = sum(weights)
    return sums


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_every_row_is_added_exactly_at_any_magnitude(weighted):
    # Values from subnormals to 1e150 (squares and triple products far outside float64),
    # zeros, negative zeros, equal pairs; more rows than one carry of the kernel's bins.
    rng = np.random.default_rng(11)
    n = 700
    t = rng.normal(size=(n, 2)) * 10.0 ** rng.integers(-320, 150, (n, 2))
    p = t * rng.normal(1, 0.5, (n, 2)) + rng.normal(size=(n, 2)) * 10.0 ** rng.integers(
        -300, 5, (n, 2)
    )
    t[:5, 0] = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308]
    p[5:8, 1] = t[5:8, 1]
    w = None
    if weighted:
        w = rng.uniform(0, 3, n) * 10.0 ** rng.integers(-300, 3, n)
        w[:3] = [0.0, 5e-324, 1e-310]
    acc = _fed(t, p, w, splits=[1, 300])
    assert _exact_sums(acc) == _exact_terms(t, p, w)
    assert acc == _fed(t, p, w)  # and so one state for any split


def test_format_1_states_load_with_the_same_sums():
    acc = RegressionAccumulator(2).update([[0.5, 1.25], [3.0, -2.0]], [[1.0, 1.0], [2.5, 0.0]])
    state = acc.state_dict()
    moments = np.frombuffer(state["arrays"]["moments"]["data"], dtype="<i8").reshape(2, 13, -1)
    assert not moments[..., :69].any()  # dyadic values: nothing below 2**-1100
    old = dict(state, format=1, arrays=dict(state["arrays"]))
    old["arrays"]["moments"] = dict(
        state["arrays"]["moments"], shape=[2, 13, 71], data=moments[..., 69:].tobytes()
    )
    assert RegressionAccumulator.from_state_dict(old) == acc
    old["arrays"]["moments"] = dict(old["arrays"]["moments"], shape=[2, 13, 80])
    with pytest.raises(ValueError):
        RegressionAccumulator.from_state_dict(old)


def test_hostile_state_loads_but_refuses_to_wrap():
    acc = RegressionAccumulator().update([1.0, 2.0], [1.0, 3.0])
    state = acc.state_dict()
    moments = np.frombuffer(state["arrays"]["moments"]["data"], dtype="<i8").copy()
    moments[-1] = 2**62
    state["arrays"]["moments"]["data"] = moments.tobytes()
    hostile = RegressionAccumulator.from_state_dict(state)
    before = hostile.state_arrays()
    with pytest.raises(ValueError, match="too large"):
        hostile.update([1.0], [1.0])
    assert all(np.array_equal(before[k], v) for k, v in hostile.state_arrays().items())


# ---------------------------------------------------------------------- merging
@settings(max_examples=25, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 60), max_size=6),
    order=st.randoms(use_true_random=False),
    weighted=st.booleans(),
)
def test_any_split_and_merge_order(cuts, order, weighted):
    rng = np.random.default_rng(len(cuts))
    t, p = _data(rng, 60, 2, mean=100.0)
    w = rng.uniform(0, 2, 60) if weighted else None
    whole = _fed(t, p, w)
    # Any batch split: one bit-identical state (every row's terms are added exactly).
    split = _fed(t, p, w, cuts)
    assert split == whole
    for name in ("mae", "mse", "r2", "explained_variance", "pearson", "mean_error", "max_error"):
        assert np.array_equal(
            getattr(split, name)("raw_values"), getattr(whole, name)("raw_values")
        )
    # Any merge order of the shards: a bit-identical state (the sums are exact).
    bounds = [0, *sorted(cuts), 60]
    shards = [
        _fed(t[a:b], p[a:b], None if w is None else w[a:b], outputs=2)
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    reference = sum(shards)
    shuffled = list(shards)
    order.shuffle(shuffled)
    assert sum(shuffled) == reference
    while len(shuffled) > 1:  # a random merge tree
        i = order.randrange(len(shuffled) - 1)
        shuffled[i : i + 2] = [shuffled[i] + shuffled[i + 1]]
    assert shuffled[0] == reference
    assert reference.num_samples == 60


def test_every_merge_path_keeps_the_maximum():
    a = RegressionAccumulator().update([0.0, 0.0], [1.0, -3.0])
    b = RegressionAccumulator().update([0.0], [2.0])
    assert (a + b).max_error() == 3.0 and (b + a).max_error() == 3.0
    assert sum([a, b, RegressionAccumulator()]).max_error() == 3.0
    a2 = a.copy()
    a2 += b
    assert a2.max_error() == 3.0
    assert (a + RegressionAccumulator()).max_error() == 3.0
    # A group's merge combines `max_error` by its declared reduction (a maximum), the sums
    # by addition: the same state as the accumulators' own merge.
    g = AccumulatorGroup(r=a.copy()).merge(AccumulatorGroup(r=b.copy()))
    assert g["r"] == a + b
    assert g["r"].max_error() == 3.0
    g = AccumulatorGroup(r=a.copy()).merge(AccumulatorGroup(r=RegressionAccumulator()))
    assert g["r"].max_error() == 3.0 and g["r"] == a


# ---------------------------------------------------------------------- the protocol
def test_group_membership_and_atomicity(tmp_path):
    rng = np.random.default_rng(2)
    t, p = _data(rng, 30, 1)
    w = rng.random(30)
    group = AccumulatorGroup(all=RegressionAccumulator(), again=RegressionAccumulator())
    group.update(t, p, w)
    assert group["all"] == RegressionAccumulator().update(t, p, w) == group["again"]
    assert group.summary()["all"]["mse"] == group["all"].mse()
    assert AccumulatorGroup.from_bytes(group.to_bytes()) == group
    assert AccumulatorGroup.load(group.save(tmp_path / "g.msacc")) == group
    before = group.copy()
    bad = AccumulatorGroup(ok=RegressionAccumulator(), wrong=ConfusionAccumulator(3))
    with pytest.raises(ValueError):
        bad.update(t, p)
    assert bad["ok"].num_samples == 0
    with pytest.raises(ValueError, match="position 3"):
        group.update(t[:5], np.where(np.arange(5) == 3, np.nan, p[:5]))
    assert group == before


def test_sync_in_process_three_ranks():
    from tests.sync_fixtures import FakeWorld

    rng = np.random.default_rng(4)
    t, p = _data(rng, 90, 2, mean=1e6)
    ranks = [_fed(t[i::3], p[i::3]) for i in range(3)]
    expected = sum(ranks)
    world = FakeWorld(3)
    results = world.run([r.copy() for r in ranks])
    for result in results:
        assert not isinstance(result, BaseException), result
        for name in ("mae", "mse", "rmse", "r2", "explained_variance", "pearson", "mean_error"):
            assert np.array_equal(
                getattr(result, name)("raw_values"), getattr(expected, name)("raw_values")
            )
        assert result == expected  # the maximum error is a maximum over the ranks
        assert np.array_equal(result.max_error("raw_values"), expected.max_error("raw_values"))


@pytest.mark.slow
def test_views_are_typed_for_mypy(tmp_path):
    api = pytest.importorskip("mypy.api", reason="needs mypy (the dev extra)")
    snippet = tmp_path / "user_code.py"
    snippet.write_text(
        "import numpy as np\n"
        "from metricstream.regression import RegressionAccumulator\n"
        "acc = RegressionAccumulator(1).update([1.0, 2.0], [1.5, 2.0])\n"
        "score: float = acc.r2()\n"
        "per_output: np.ndarray = acc.mae('raw_values')\n"
        "weighted: float = acc.r2('variance_weighted', force_finite=False)\n"
        "table: dict[str, float] = (acc + acc).summary()\n"
        "count: int = acc.num_samples\n"
        "wrong: str = acc.mse()\n"
    )
    out, _, status = api.run(["--follow-imports=silent", "--no-incremental", str(snippet)])
    assert status == 1, out
    assert out.count("error:") == 1 and 'variable has type "str"' in out, out


# ---------------------------------------------------------------------- 2 real gloo ranks
WORLD = 2


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _shard_data():
    rng = np.random.default_rng(21)
    return _data(rng, 200, 2, mean=1e9)


def worker(rank: int, port: int, out: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from metricstream.distributed import all_reduce

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=60),
    )
    t, p = _shard_data()
    acc = RegressionAccumulator(2).update(t[rank::WORLD], p[rank::WORLD])
    all_reduce(acc)
    Path(out, f"rank{rank}.bin").write_bytes(acc.to_bytes())
    dist.destroy_process_group()


@pytest.mark.slow
def test_all_reduce_on_two_gloo_ranks(tmp_path):
    pytest.importorskip("torch", reason='needs PyTorch: pip install "metricstream[torch]"')
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", str(rank), str(port), str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(WORLD)
    ]
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), outputs
    t, p = _shard_data()
    one = RegressionAccumulator(2).update(t, p)
    for rank in range(WORLD):
        synced = RegressionAccumulator.from_bytes((tmp_path / f"rank{rank}.bin").read_bytes())
        assert synced.num_samples == 200
        for name in ("mae", "mse", "r2", "explained_variance", "pearson", "mean_error"):
            _close(getattr(synced, name)("raw_values"), getattr(one, name)("raw_values"))
        _close(synced.r2(), sk.r2_score(t, p))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"usage: {sys.argv[0]} --worker RANK PORT OUT_DIR (started by pytest)")
