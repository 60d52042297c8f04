"""Streaming invariants (hypothesis): batching, merge order, round trips and the seed identities."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from metricstream import ConfusionAccumulator


@st.composite
def streams(draw, weighted=False):
    num_classes = draw(st.integers(1, 12))
    size = draw(st.integers(0, 300))
    labels = st.lists(st.integers(0, num_classes - 1), min_size=size, max_size=size)
    y_true = np.array(draw(labels), dtype=np.int64)
    y_pred = np.array(draw(labels), dtype=np.int64)
    weights = None
    if weighted:
        # Whole-number float weights keep float sums exact in any order, so equality is exact.
        weights = np.array(
            draw(st.lists(st.integers(0, 5), min_size=size, max_size=size)), dtype=np.float64
        )
    cuts = sorted(draw(st.lists(st.integers(0, size), max_size=6)))
    return num_classes, y_true, y_pred, weights, cuts


def _pieces(y_true, y_pred, weights, cuts):
    bounds = [0, *cuts, y_true.size]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        yield y_true[lo:hi], y_pred[lo:hi], None if weights is None else weights[lo:hi]


@given(streams(), st.floats(0.1, 10))
def test_seed_identities(stream, beta):
    """Seed 000: micro P = R = F1 = F-beta = accuracy, and weighted recall = accuracy."""
    num_classes, y_true, y_pred, _, _ = stream
    acc = ConfusionAccumulator(num_classes).update(y_true, y_pred)
    if acc.num_samples == 0:
        return
    accuracy = acc.accuracy()
    for value in (
        acc.precision(average="micro"),
        acc.recall(average="micro"),
        acc.f1(average="micro"),
        acc.fbeta(beta, average="micro"),
    ):
        assert np.isclose(value, accuracy, rtol=1e-12, atol=1e-15)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert np.isclose(acc.recall(average="weighted"), accuracy, rtol=1e-12, atol=1e-15)
    # N = sum of actual positives = sum of predicted positives.
    assert acc.support().sum() == acc.predicted_positives().sum() == acc.num_samples


@given(st.integers(1, 9), st.integers(0, 4), st.integers(1, 40), st.data())
def test_scores_path_equals_argmax_then_update(num_classes, extra_dims, batch, data):
    shape = (batch,) + tuple(
        data.draw(st.lists(st.integers(1, 5), min_size=extra_dims, max_size=extra_dims))
    )
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    scores = rng.normal(size=(shape[0], num_classes) + shape[1:]).astype(
        data.draw(st.sampled_from([np.float32, np.float64]))
    )
    # Ties must resolve as np.argmax does (first maximum).
    scores[rng.random(scores.shape) < 0.2] = 0.5
    y_true = rng.integers(0, num_classes, size=shape)
    fused = ConfusionAccumulator(num_classes).update(y_true, scores)
    reference = ConfusionAccumulator(num_classes).update(y_true, scores.argmax(axis=1))
    np.testing.assert_array_equal(fused.matrix, reference.matrix)
    # Channels-last layout through class_axis=-1.
    last = np.moveaxis(scores, 1, -1).copy()
    channels_last = ConfusionAccumulator(num_classes, class_axis=-1).update(y_true, last)
    np.testing.assert_array_equal(channels_last.matrix, reference.matrix)
