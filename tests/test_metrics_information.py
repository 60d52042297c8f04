"""Mutual information and NMI at their corners, against scikit-learn exactly."""

from __future__ import annotations

import numpy as np
import pytest
import sklearn.metrics as skm

from metricstream.metrics import mutual_information, normalized_mutual_information
from metricstream.metrics._kernels import gather_nonzero
from metricstream.metrics.information import _cell_xlogx_sum

METHODS = ["arithmetic", "geometric", "min", "max"]


def _labels(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = matrix.shape[0]
    pairs = [(i, j) for i in range(k) for j in range(k) for _ in range(int(matrix[i, j]))]
    y_true, y_pred = zip(*pairs, strict=True)
    return np.array(y_true), np.array(y_pred)


SINGLE_CLASS = {
    "one-prediction": np.array([[0, 3], [0, 20]]),
    "one-truth": np.array([[3, 20], [0, 0]]),
    "one-truth-3": np.array([[4, 5, 6], [0, 0, 0], [0, 0, 0]]),
    "one-prediction-weights": np.array([[0.0, 2.5], [0.0, 7.25]]),
}


@pytest.mark.parametrize("matrix", SINGLE_CLASS.values(), ids=SINGLE_CLASS.keys())
@pytest.mark.parametrize("method", METHODS)
def test_one_labelling_with_a_single_class_gives_exactly_zero(matrix, method):
    assert mutual_information(matrix) == 0.0
    assert normalized_mutual_information(matrix, average_method=method) == 0.0
    if matrix.dtype.kind == "i":
        y_true, y_pred = _labels(matrix)
        assert skm.mutual_info_score(y_true, y_pred) == 0.0
        assert skm.normalized_mutual_info_score(y_true, y_pred, average_method=method) == 0.0


@pytest.mark.parametrize("method", METHODS)
def test_both_single_class_is_one(method):
    assert normalized_mutual_information([[0, 0], [0, 7]], average_method=method) == 1.0


@pytest.mark.parametrize("seed", range(20))
def test_random_matrices_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 7))
    y_true = rng.integers(0, k, 200)
    y_pred = np.where(rng.random(200) < 0.5, y_true, rng.integers(0, k, 200))
    if seed % 4 == 0:
        y_pred[:] = y_pred[0]
    matrix = skm.confusion_matrix(y_true, y_pred, labels=range(k))
    assert mutual_information(matrix) == pytest.approx(
        skm.mutual_info_score(y_true, y_pred), abs=1e-14
    )
    for method in METHODS:
        expected = skm.normalized_mutual_info_score(y_true, y_pred, average_method=method)
        got = normalized_mutual_information(matrix, average_method=method)
        assert got == pytest.approx(expected, abs=1e-14)
        if expected == 0.0:
            assert got == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_nonzero_cells_are_gathered_as_boolean_indexing_does(seed):
    # The mutual information sums the non-zero cells through np.dot, whose rounding depends on
    # the order of its terms: the kernel must gather exactly ``cells[cells != 0]``, in order.
    rng = np.random.default_rng(seed)
    size = [0, 1, 7, 1000, 4099, 100_000][seed]
    cells = rng.integers(0, 4, size) * rng.random(size) * (rng.random(size) < 0.5)
    cells[: size // 3] = -0.0  # negative zeros are zeros
    expected = cells[cells != 0]
    out = np.full(expected.size + 4, 7.0)
    end = gather_nonzero(cells, out, 2)
    assert end == 2 + expected.size
    assert np.array_equal(out[2:end], expected) and out[0] == out[1] == 7.0
    for k in (1, 3, 40, 300):  # 300: several chunks
        matrix = rng.integers(0, 5, (k, k)) * (rng.random((k, k)) < 0.4)
        nonzero = matrix[matrix != 0].astype(np.float64)
        assert _cell_xlogx_sum(matrix) == float(np.sum(nonzero * np.log(nonzero)))
        transposed = matrix.T  # not contiguous: cells are taken in C order all the same
        nonzero = transposed[transposed != 0].astype(np.float64)
        assert _cell_xlogx_sum(transposed) == float(np.sum(nonzero * np.log(nonzero)))
