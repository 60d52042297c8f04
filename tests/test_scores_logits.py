"""Multiclass and binary logits: the kernels' own exp against np.exp, the whole state against a
reference in numpy (the per-row softmax with np.exp, summed class by class), the losses
against scikit-learn, and bad logits rejected atomically."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special
from sklearn import metrics as skm

from metricstream.scores import ScoreAccumulator
from metricstream.scores import _kernels as kernels

from .marks import slow_beyond

LOGIT_DTYPES = slow_beyond([np.float32, np.float64], 1, ids=lambda d: np.dtype(d).name)
INTEGER_ARRAYS = ("curves", "inexact", "ranks", "calibration")
LOG_LOSS_BOUND = -np.log(2.0**-52)
FLOAT_ARRAYS = ("confidence", "losses")


def test_exp_is_within_an_ulp_of_numpy():
    rng = np.random.default_rng(0)
    n = 2_000_000
    wide = -np.abs(rng.standard_normal(n) * np.exp(rng.uniform(-40, 6.7, n)))
    edges = [0.0, -0.0, -np.inf, -1e-300, -5e-324, -np.log(2) / 2, -np.log(2), -1.0]
    edges += [-708.3, -708.4, -709.0, -744.4, -745.1, -745.2, -746.0, -1e300]
    edges += (-np.arange(1, 1100) * np.log(2)).tolist()  # where the reduction switches k
    x = np.concatenate([wide, -rng.uniform(0, 1, 100_000), edges])
    got = np.empty_like(x)
    kernels.exp_nonpositive(x, got)
    expected = np.exp(x)
    ulps = np.abs(got - expected) / np.spacing(np.maximum(expected, 5e-324))
    assert ulps.max() <= 1.0
    assert got[np.isneginf(x) | (x < -746)].max() == 0.0
    assert got[x == 0].min() == 1.0


def reference_state(acc: ScoreAccumulator, y, logits, weights=None) -> dict[str, np.ndarray]:
    """The state the per-row kernel computed: np.exp of ``s - max``, the classes summed in
    order, ``p_c = e_c / total``, confidence ``1 / total``, log loss ``max + log(total) -
    s_t``; curves and ranks from the public bins and the rank rule."""
    state = {name: np.zeros_like(a) for name, a in acc.state_arrays().items()}
    ignore = acc.config()["ignore_index"]
    keep = np.ones(len(y), bool) if ignore is None else y != ignore
    y, logits = y[keep], logits[keep]
    w = np.ones(len(y), np.int64) if weights is None else weights[keep]
    n, classes = logits.shape
    wide = logits.astype(np.float64)
    top = wide.max(axis=1)
    exps = np.exp(wide - top[:, None])
    total = np.zeros(n)
    for c in range(classes):
        total = total + exps[:, c]
    onehot = np.eye(classes)[y]
    brier = np.zeros(n)
    for c in range(classes):
        d = exps[:, c] / total - onehot[:, c]
        brier = brier + d * d
    true = wide[np.arange(n), y]
    conf = 1.0 / total
    fine_bins = state["confidence"].shape[0]
    fine = np.clip((conf * fine_bins).astype(np.int64), 0, fine_bins - 1)
    greater = (logits > logits[np.arange(n), y][:, None]).sum(axis=1)
    equal = logits == logits[np.arange(n), y][:, None]
    columns = np.arange(classes)[None, :]
    before = (equal & (columns < y[:, None])).sum(axis=1)
    after = (equal & (columns > y[:, None])).sum(axis=1)
    correct = (greater == 0) & (before == 0)
    np.add.at(state["calibration"], (fine, 0), w)
    np.add.at(state["calibration"], (fine, 1), w * correct)
    np.add.at(state["confidence"], fine, w * conf)
    state["losses"][0] = np.sum(w * brier)
    # the loss of a sample is clipped at -log(eps) of float64, as scikit-learn clips
    # ((top - true) first: top + log(total) - true loses log(total) next to huge logits)
    state["losses"][1] = np.sum(w * np.minimum((top - true) + np.log(total), LOG_LOSS_BOUND))
    np.add.at(state["ranks"], (0, y, greater + after), w)
    np.add.at(state["ranks"], (1, y, greater), w)
    # curves: each class's softmax probability (as the kernel forms it, exp times 1 / total)
    values = acc.bin_values()
    for c in range(classes):
        probability = exps[:, c] * (1.0 / total)
        bins = np.array([acc.bin_index(v) for v in probability])
        np.add.at(state["curves"], (c, bins, (y == c).astype(np.int64)), w)
        exact = values[bins] == probability
        state["inexact"][c] = np.count_nonzero(~exact)
    return state


def assert_state_equal(mine: dict, expected: dict) -> None:
    for name in INTEGER_ARRAYS:
        np.testing.assert_array_equal(mine[name], expected[name], err_msg=name)
    for name in FLOAT_ARRAYS:
        np.testing.assert_allclose(mine[name], expected[name], rtol=1e-12, atol=0, err_msg=name)


def random_logits(seed: int, n: int, classes: int, dtype, spread: float = 1.0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    logits = spread * rng.normal(size=(n, classes)) + 3.0 * np.eye(classes)[y]
    return y, logits.astype(dtype)


@pytest.mark.parametrize("dtype", LOGIT_DTYPES)
@pytest.mark.parametrize(("n", "classes"), [(256, 10), (700, 3), (300, 100), (40, 1000)], ids=str)
def test_state_equals_reference(n, classes, dtype):
    y, logits = random_logits(n + classes, n, classes, dtype)
    acc = ScoreAccumulator("multiclass", classes, logits=True).update(y, logits)
    assert_state_equal(acc.state_arrays(), reference_state(acc, y, logits))


def test_state_equals_reference_on_extreme_logits():
    """Ties, -inf logits (not a whole row), huge magnitudes, exps that underflow."""
    rng = np.random.default_rng(5)
    n, classes = 600, 7
    y = rng.integers(0, classes, n)
    values = [-np.inf, -3e38, -800.0, -745.5, -50.0, -1.0, 0.0, 1.0, 50.0, 3e38]
    logits = rng.choice(values, (n, classes))
    logits[np.arange(n), rng.integers(0, classes, n)] = rng.choice([0.0, 1.0, 50.0], n)
    logits = logits.astype(np.float32)
    acc = ScoreAccumulator("multiclass", classes, logits=True).update(y, logits)
    assert_state_equal(acc.state_arrays(), reference_state(acc, y, logits))


@pytest.mark.parametrize("spread", [0.1, 10.0, 100.0])
def test_state_equals_reference_with_weights_and_ignored_rows(spread):
    n, classes = 1000, 12
    y, logits = random_logits(int(spread), n, classes, np.float32, spread)
    y[::7] = -1
    logits[::7, 2] = np.nan  # ignored rows are not read
    weights = np.random.default_rng(1).integers(0, 5, n)
    acc = ScoreAccumulator("multiclass", classes, logits=True, ignore_index=-1)
    acc.update(y, logits, weights)
    assert_state_equal(acc.state_arrays(), reference_state(acc, y, logits, weights))
    unweighted = ScoreAccumulator("multiclass", classes, logits=True, ignore_index=-1)
    unweighted.update(y, logits)
    assert_state_equal(unweighted.state_arrays(), reference_state(unweighted, y, logits))


@pytest.mark.parametrize("classes", [3, 10, 100])
def test_losses_equal_sklearn_on_the_softmax(classes):
    y, logits = random_logits(classes, 3000, classes, np.float32)
    weights = np.random.default_rng(2).integers(1, 4, len(y))
    acc = ScoreAccumulator("multiclass", classes, logits=True)
    for lo in range(0, len(y), 700):
        acc.update(y[lo : lo + 700], logits[lo : lo + 700], weights[lo : lo + 700])
    p = scipy.special.softmax(logits.astype(np.float64), axis=1)
    labels = np.arange(classes)
    assert acc.log_loss() == pytest.approx(
        skm.log_loss(y, p, sample_weight=weights, labels=labels), rel=1e-9
    )
    assert acc.brier_score() == pytest.approx(
        skm.brier_score_loss(y, p, sample_weight=weights, labels=labels), rel=1e-9
    )


@pytest.mark.parametrize("n", [5, 300, 5000])
@pytest.mark.parametrize("bad", ["nan", "inf", "row"])
def test_bad_logits_leave_the_state_unchanged(n, bad):
    y, logits = random_logits(3, n, 6, np.float32)
    acc = ScoreAccumulator("multiclass", 6, logits=True).update(y[:50], logits[:50])
    before = acc.state_arrays()
    row = n - 2
    if bad == "nan":
        logits[row, 4] = np.nan
        match = "logits must not be NaN or \\+inf"
    elif bad == "inf":
        logits[row, 4] = np.inf
        match = "logits must not be NaN or \\+inf"
    else:
        logits[row] = -np.inf
        match = "all -inf"
    with pytest.raises(ValueError, match=match):
        acc.update(y, logits)
    after = acc.state_arrays()
    for name, array in before.items():
        np.testing.assert_array_equal(after[name], array, err_msg=name)


def test_log1p_is_within_an_ulp_of_numpy():
    rng = np.random.default_rng(1)
    edges = [0.0, 5e-324, 1e-300, 1e-17, np.sqrt(2) - 1, 0.5, 1.0]
    edges += [np.nextafter(np.sqrt(2) - 1, 0), np.nextafter(np.sqrt(2) - 1, 1)]
    x = np.concatenate([rng.uniform(0, 1, 1_000_000), np.exp(-rng.uniform(0, 745, 1_000_000))])
    x = np.concatenate([x, edges])
    got = np.empty_like(x)
    kernels.log1p_unit(x, got)
    expected = np.log1p(x)
    ulps = np.abs(got - expected) / np.spacing(np.maximum(expected, 5e-324))
    assert ulps.max() <= 1.0
    assert got[x == 0].max() == 0.0


def elementwise_reference(acc: ScoreAccumulator, targets, logits, weights=None):
    """The state of binary/multilabel logits as the per-element kernel computed it with
    np.exp and np.log1p: ``q = sigmoid(s)``, log loss ``max(s, 0) - s y + log1p(exp(-|s|))``
    (``max(s, 0)`` for ``y = 0``: 0, not NaN, at ``s = -inf``)."""
    state = {name: np.zeros_like(a) for name, a in acc.state_arrays().items()}
    targets = targets.reshape(len(targets), -1)
    logits = logits.reshape(len(logits), -1)
    w = np.ones(len(targets), np.int64) if weights is None else weights
    w = np.broadcast_to(w[:, None], targets.shape)
    ignore = acc.config()["ignore_index"]
    if ignore is not None:  # ignored targets count nothing (weight 0, scores made valid)
        w = np.where(targets == ignore, 0, w)
        logits = np.where(targets == ignore, 0, logits)
        targets = np.where(targets == ignore, 0, targets)
    x = logits.astype(np.float64)
    e = np.exp(-np.abs(x))
    q = np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    above = np.maximum(x, 0.0)
    loss = np.minimum(np.where(targets == 1, above - x, above) + np.log1p(e), LOG_LOSS_BOUND)
    fine_bins = state["confidence"].shape[0]
    fine = np.clip((q * fine_bins).astype(np.int64), 0, fine_bins - 1)
    np.add.at(state["calibration"], (fine, 0), w)
    np.add.at(state["calibration"], (fine, 1), w * targets)
    np.add.at(state["confidence"], fine, w * q)
    state["losses"][0] = np.sum(w * (q - targets) ** 2)
    state["losses"][1] = np.sum(w * loss)
    values = acc.bin_values()
    for c in range(targets.shape[1]):
        bins = np.array([acc.bin_index(v) for v in x[:, c]])
        np.add.at(state["curves"], (c, bins, targets[:, c]), w[:, c])
        state["inexact"][c] = np.count_nonzero((values[bins] != x[:, c]) & (w[:, c] != 0))
    return state


@pytest.mark.parametrize("dtype", LOGIT_DTYPES)
@pytest.mark.parametrize("n", [1, 300, 20_000])
def test_binary_state_equals_reference(n, dtype):
    rng = np.random.default_rng(n)
    y = rng.integers(0, 2, n)
    logits = (rng.normal(size=n) * 4 + 2 * y - 1).astype(dtype)
    logits[: n // 50] = rng.choice([-1e30, -800.0, -40.0, 0.0, 40.0, 800.0, 1e30, -np.inf], n // 50)
    acc = ScoreAccumulator("binary", logits=True).update(y, logits)
    expected = elementwise_reference(acc, y, logits)
    for name in ("curves", "inexact", "calibration"):
        np.testing.assert_array_equal(acc.state_arrays()[name], expected[name], err_msg=name)
    for name in FLOAT_ARRAYS:
        np.testing.assert_allclose(
            acc.state_arrays()[name], expected[name], rtol=1e-12, atol=0, err_msg=name
        )
    # scikit-learn clips the float64 probabilities, the logits' loss at the same bound
    p = scipy.special.expit(logits.astype(np.float64))
    assert acc.log_loss() == pytest.approx(skm.log_loss(y, p, labels=[0, 1]), rel=1e-6)
    moderate = ScoreAccumulator("binary", logits=True).update(y[n // 50 :], logits[n // 50 :])
    p = scipy.special.expit(logits[n // 50 :].astype(np.float64))
    assert moderate.log_loss() == pytest.approx(
        skm.log_loss(y[n // 50 :], p, labels=[0, 1]), rel=1e-9
    )
    assert moderate.brier_score() == pytest.approx(skm.brier_score_loss(y[n // 50 :], p), rel=1e-9)


@pytest.mark.parametrize("ignore", [None, -1])
def test_multilabel_state_equals_reference_with_weights(ignore):
    rng = np.random.default_rng(4)
    n, labels = 700, 6
    y = rng.integers(0, 2, (n, labels))
    logits = (rng.normal(size=(n, labels)) * 3 + 2 * y - 1).astype(np.float32)
    if ignore is not None:
        hidden = rng.random((n, labels)) < 0.1
        y[hidden] = ignore
        logits[hidden] = np.nan  # ignored targets' scores are not read
    weights = rng.integers(1, 4, n)
    acc = ScoreAccumulator("multilabel", labels, logits=True, ignore_index=ignore)
    acc.update(y, logits, weights)
    expected = elementwise_reference(acc, y, logits, weights)
    for name in ("curves", "inexact", "calibration"):
        np.testing.assert_array_equal(acc.state_arrays()[name], expected[name], err_msg=name)
    for name in FLOAT_ARRAYS:
        np.testing.assert_allclose(
            acc.state_arrays()[name], expected[name], rtol=1e-12, atol=0, err_msg=name
        )


@pytest.mark.parametrize("n", [5, 300, 9000])
def test_bad_binary_logits_leave_the_state_unchanged(n):
    rng = np.random.default_rng(6)
    y = rng.integers(0, 2, n)
    logits = rng.normal(size=n).astype(np.float32)
    acc = ScoreAccumulator("binary", logits=True).update(y[:3], logits[:3])
    before = acc.state_arrays()
    for bad in (np.nan, np.inf):
        broken = logits.copy()
        broken[n - 1] = bad
        with pytest.raises(ValueError, match="logits must not be NaN or \\+inf"):
            acc.update(y, broken)
        for name, array in before.items():
            np.testing.assert_array_equal(acc.state_arrays()[name], array, err_msg=name)
