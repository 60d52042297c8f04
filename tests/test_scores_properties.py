"""Streaming invariants of ScoreAccumulator (hypothesis): any batch split and any merge order
give the same counts; merging an empty accumulator changes nothing; the bounds hold."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm

from metricstream.scores import ScoreAccumulator

# Float sums (calibration confidence, losses) depend on the order of additions.
INTEGER_STATE = ("curves", "inexact", "ranks", "calibration")
FLOAT_STATE = ("confidence", "losses")

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def streams(draw):
    classes = draw(st.integers(2, 5))
    n = draw(st.integers(0, 60))
    y = np.array(
        draw(st.lists(st.integers(0, classes - 1), min_size=n, max_size=n)), dtype=np.int64
    )
    # Values on a coarse grid: ties within and across rows, exact 0 and 1.
    grid = draw(
        st.lists(
            st.lists(st.integers(0, 8), min_size=classes, max_size=classes), min_size=n, max_size=n
        )
    )
    # Rows of probabilities sum to one: the first C - 1 classes on the grid, the last the rest.
    values = np.array(grid, dtype=np.float64).reshape(n, classes) / 8.0 / (classes - 1)
    values[:, -1] = np.maximum(1.0 - values[:, :-1].sum(axis=1), 0.0)
    scores = values.astype(np.float32)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    weights = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    return classes, y, scores, weights, cuts


def _assert_same(a: ScoreAccumulator, b: ScoreAccumulator) -> None:
    left, right = a.state_arrays(), b.state_arrays()
    for name in INTEGER_STATE:
        np.testing.assert_array_equal(left[name], right[name], err_msg=name)
    for name in FLOAT_STATE:
        np.testing.assert_allclose(left[name], right[name], rtol=1e-12, atol=1e-12)


@SETTINGS
@given(streams())
def test_unweighted_rows_in_any_split_equal_weights_of_one(stream):
    """Without weights, at most 16 classes of probabilities are counted row by row; with
    weights of one, by the block kernel: the same state."""
    classes, y, scores, _, cuts = stream
    ones = ScoreAccumulator("multiclass", classes, bins=256).update(y, scores, np.ones(len(y)))
    split = ScoreAccumulator("multiclass", classes, bins=256)
    edges = [0, *cuts, len(y)]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        split.update(y[lo:hi], scores[lo:hi])
    _assert_same(ones, split)


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.integers(20, 300), st.sampled_from([16, 64, 1024]))
def test_auroc_and_ap_bounds_contain_exact(seed, n, bins):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    if y.min() == y.max():
        y[0] = 1 - y[0]
    scores = np.clip(rng.normal(0.5 + 0.1 * y, 0.2), 0, 1)
    acc = ScoreAccumulator("binary", bins=bins).update(y, scores)
    auroc = acc.auroc(with_bound=True)
    ap = acc.average_precision(with_bound=True)
    exact_auroc = skm.roc_auc_score(y, scores)
    exact_ap = skm.average_precision_score(y, scores)
    assert auroc.lower - 1e-12 <= exact_auroc <= auroc.upper + 1e-12
    assert ap.lower - 1e-12 <= exact_ap <= ap.upper + 1e-12
    for target in ("f1", "youden"):
        point, bound = acc.best_threshold(target, with_bound=True)
        assert bound.lower <= bound.upper


@pytest.mark.parametrize("logits", [False, True])
def test_failed_update_after_merge_keeps_state(logits):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 9000)
    scores = rng.random((9000, 3))
    scores = (scores / scores.sum(axis=1, keepdims=True)).astype(np.float32)
    if logits:
        scores = np.log(scores)
    acc = ScoreAccumulator("multiclass", 3, logits=logits).update(y[:100], scores[:100])
    before = {k: v.tobytes() for k, v in acc.state_arrays().items()}
    bad = scores.copy()
    bad[8500, 1] = np.nan
    with pytest.raises(ValueError, match="NaN|nan"):
        acc.update(y, bad)
    assert {k: v.tobytes() for k, v in acc.state_arrays().items()} == before
