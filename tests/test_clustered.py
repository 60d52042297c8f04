"""The clustered bootstrap accumulator: counts, hashed Poisson weights, invariants, errors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from metricstream import ConfusionAccumulator, metrics
from metricstream.bootstrap import _kernels as kernels
from metricstream.bootstrap import bootstrap, interval_from_replicates
from metricstream.clustered import BootstrapConfusionAccumulator
from metricstream.exceptions import UndefinedMetricWarning

K = 4


def _data(seed: int = 0, n: int = 200, k: int = K) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, k, n)
    y_pred = np.where(rng.random(n) < 0.7, y_true, rng.integers(0, k, n))
    clusters = np.sort(rng.integers(0, 25, n))
    return y_true, y_pred, clusters


def _expected_replicates(y_true, y_pred, clusters, seed, b, k=K, weights=None):
    """Replicate ``b`` by definition: each cluster's counts times its hashed weight."""
    ids = np.unique(clusters)
    w = np.zeros((ids.size, b), dtype=np.int64)
    kernels.poisson1_weights(ids.astype(np.int64), np.uint64(seed), b, w)
    out = np.zeros((b, k, k), dtype=np.float64 if weights is not None else np.int64)
    for row, cluster in enumerate(ids):
        mask = clusters == cluster
        counts = np.zeros((k, k), dtype=out.dtype)
        np.add.at(counts, (y_true[mask], y_pred[mask]), 1 if weights is None else weights[mask])
        out += w[row][:, None, None] * counts
    return out


def test_main_matrix_and_replicates_by_definition() -> None:
    y_true, y_pred, clusters = _data()
    acc = BootstrapConfusionAccumulator(K, n_resamples=30, seed=5)
    acc.update(y_true, y_pred, cluster_ids=clusters)
    plain = ConfusionAccumulator(K).update(y_true, y_pred)
    assert np.array_equal(acc.matrix, plain.matrix)
    assert np.array_equal(acc.replicates, _expected_replicates(y_true, y_pred, clusters, 5, 30))
    assert acc.replicates.dtype == np.int64 and acc.replicates.shape == (30, K, K)


def test_weighted_replicates() -> None:
    y_true, y_pred, clusters = _data(1)
    weights = np.random.default_rng(1).random(y_true.size)
    acc = BootstrapConfusionAccumulator(K, n_resamples=10, seed=2, weighted=True)
    acc.update(y_true, y_pred, weights, cluster_ids=clusters)
    np.testing.assert_allclose(
        acc.replicates,
        _expected_replicates(y_true, y_pred, clusters, 2, 10, weights=weights),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        acc.matrix,
        ConfusionAccumulator(K, weighted=True).update(y_true, y_pred, weights).matrix,
        rtol=1e-12,
    )


def test_one_cluster_per_call_and_scalar_ids() -> None:
    y_true, y_pred, _ = _data(2)
    by_scalar = BootstrapConfusionAccumulator(K, n_resamples=20, seed=1)
    by_array = BootstrapConfusionAccumulator(K, n_resamples=20, seed=1)
    for image in range(4):
        part = slice(50 * image, 50 * image + 50)
        by_scalar.update(y_true[part], y_pred[part], cluster_ids=image + 100)
        by_array.update(y_true[part], y_pred[part], cluster_ids=np.full(50, image + 100))
    assert by_scalar == by_array
    anonymous = BootstrapConfusionAccumulator(K, n_resamples=20, seed=1)
    for image in range(4):
        part = slice(50 * image, 50 * image + 50)
        anonymous.update(y_true[part], y_pred[part])
    assert np.array_equal(anonymous.matrix, by_scalar.matrix)
    # each anonymous call is its own cluster: replicate totals are sums of 4 weighted blocks
    totals = anonymous.replicates.sum(axis=(1, 2))
    assert set(np.unique(totals % 50)) == {0}


def test_per_item_ids_equal_per_sample_ids_in_any_memory_order() -> None:
    rng = np.random.default_rng(3)
    masks_true = rng.integers(0, K, (6, 8, 8))
    masks_pred = np.where(rng.random((6, 8, 8)) < 0.8, masks_true, 0)
    ids = np.array([7, 3, 3, 9, 1, 7])
    per_item = BootstrapConfusionAccumulator(K, n_resamples=16, seed=4)
    per_item.update(masks_true, masks_pred, cluster_ids=ids)
    per_sample = BootstrapConfusionAccumulator(K, n_resamples=16, seed=4)
    per_sample.update(
        masks_true, masks_pred, cluster_ids=np.broadcast_to(ids[:, None, None], masks_true.shape)
    )
    fortran = BootstrapConfusionAccumulator(K, n_resamples=16, seed=4)
    fortran.update(np.asfortranarray(masks_true), np.asfortranarray(masks_pred), cluster_ids=ids)
    one_by_one = BootstrapConfusionAccumulator(K, n_resamples=16, seed=4)
    for i in range(6):
        one_by_one.update(masks_true[i], masks_pred[i], cluster_ids=int(ids[i]))
    assert per_item == per_sample == fortran == one_by_one


def test_poisson1_weights_are_poisson_and_independent() -> None:
    keys = np.arange(20_000, dtype=np.int64)
    weights = np.zeros((keys.size, 4), dtype=np.int64)
    kernels.poisson1_weights(keys, np.uint64(11), 4, weights)
    pooled = weights.reshape(-1)
    observed = np.bincount(pooled, minlength=7)[:7].astype(float)
    observed[6] += (pooled > 6).sum()
    expected = stats.poisson.pmf(np.arange(7), 1.0) * pooled.size
    expected[6] += stats.poisson.sf(6, 1.0) * pooled.size
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    assert np.abs(np.corrcoef(weights.T) - np.eye(4)).max() < 0.03
    other_seed = np.zeros_like(weights)
    kernels.poisson1_weights(keys, np.uint64(12), 4, other_seed)
    assert abs(np.corrcoef(weights[:, 0], other_seed[:, 0])[0, 1]) < 0.03


def test_views_delegate_to_the_main_matrix() -> None:
    y_true, y_pred, clusters = _data(5)
    acc = BootstrapConfusionAccumulator(K, n_resamples=10, seed=0, class_names=["a", "b", "c", "d"])
    acc.update(y_true, y_pred, cluster_ids=clusters)
    plain = ConfusionAccumulator(K, ["a", "b", "c", "d"]).update(y_true, y_pred)
    assert acc.f1(average="macro") == plain.f1(average="macro")
    assert acc.miou() == plain.miou()
    assert np.array_equal(acc.recall(labels=["b", "d"]), plain.recall(labels=["b", "d"]))
    assert acc.summary("text") == plain.summary("text")
    assert acc.num_samples == plain.num_samples
    assert acc.confusion() == plain
    assert "miou" in dir(acc) and "interval" in dir(acc)
    with pytest.raises(AttributeError, match="no attribute 'f2'"):
        acc.f2()  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        acc.from_matrix  # noqa: B018
    with pytest.warns(DeprecationWarning, match=r"use `acc.interval\(metric\)`"):
        assert acc.bootstrap("accuracy") == acc.interval("accuracy")
    acc.update([0], [0], cluster_ids=[999])
    assert acc.num_samples == plain.num_samples + 1  # the cached view follows the state


def test_interval_from_the_replicates() -> None:
    y_true, y_pred, clusters = _data(6, n=2000)
    acc = BootstrapConfusionAccumulator(K, n_resamples=200, seed=1)
    acc.update(y_true, y_pred, cluster_ids=clusters)
    result = acc.interval("macro_f1")
    values = [metrics.f1(m, average="macro") for m in acc.replicates]
    assert result.standard_error == pytest.approx(np.std(values, ddof=1), rel=1e-9)
    assert result.low == pytest.approx(np.quantile(values, 0.025), rel=1e-9)
    assert result.estimate == acc.f1(average="macro")
    assert result.resampling == "cluster-poisson" and result.n_resamples == 200
    normal = acc.interval("accuracy", method="normal", confidence=0.9)
    assert normal.high - normal.estimate == pytest.approx(
        stats.norm.ppf(0.95) * normal.standard_error
    )
    custom = acc.interval(lambda m: m[0, 0] / m.sum())
    assert custom.low < custom.estimate < custom.high
    with pytest.raises(ValueError, match="'percentile', 'basic' or 'normal'"):
        acc.interval("accuracy", method="bca")
    with pytest.warns(UndefinedMetricWarning, match="no samples have been counted"):
        empty = BootstrapConfusionAccumulator(K).interval("accuracy")
    assert np.isnan([empty.estimate, empty.low, empty.high, empty.standard_error]).all()


def test_singleton_clusters_match_the_iid_bootstrap() -> None:
    y_true, y_pred, _ = _data(7, n=3000)
    acc = BootstrapConfusionAccumulator(K, n_resamples=1000, seed=3)
    acc.update(y_true, y_pred, cluster_ids=np.arange(y_true.size))
    iid = bootstrap(acc.matrix, "macro_f1", n_resamples=4000, seed=0, resampling="poisson")
    assert acc.interval("macro_f1").standard_error == pytest.approx(iid.standard_error, rel=0.1)


def test_clustered_data_widen_the_interval() -> None:
    """Whole images right or wrong: the cluster bootstrap sees the clumps, the i.i.d. one not."""
    rng = np.random.default_rng(8)
    acc = BootstrapConfusionAccumulator(2, n_resamples=400, seed=0)
    for image in range(60):
        truth = rng.integers(0, 2, (16, 16))
        good = rng.random() < 0.7
        pred = truth if good else 1 - truth
        acc.update(truth, pred, cluster_ids=image)
    clustered = acc.interval("accuracy").standard_error
    iid = bootstrap(acc.matrix, "accuracy", n_resamples=1000, seed=0).standard_error
    assert clustered > 5 * iid


def test_scores_and_threshold_inputs() -> None:
    rng = np.random.default_rng(9)
    y_true = rng.integers(0, 3, (5, 6))
    scores = rng.normal(size=(5, 3, 6)).astype(np.float32)  # the segmentation kernel tests use
    acc = BootstrapConfusionAccumulator(3, n_resamples=6, seed=0)
    acc.update(y_true, scores, cluster_ids=np.arange(5))
    labels = BootstrapConfusionAccumulator(3, n_resamples=6, seed=0)
    labels.update(y_true, scores.argmax(axis=1), cluster_ids=np.arange(5))
    assert acc == labels
    one_call = BootstrapConfusionAccumulator(3, n_resamples=6, seed=0)
    one_call.update(y_true, scores)
    assert np.array_equal(one_call.matrix, labels.matrix)
    binary = BootstrapConfusionAccumulator(2, n_resamples=4, threshold=0.5)
    probabilities = rng.random(10)
    truth = rng.integers(0, 2, 10)
    binary.update(truth, probabilities, cluster_ids=np.arange(10))
    assert np.array_equal(
        binary.matrix, ConfusionAccumulator(2, threshold=0.5).update(truth, probabilities).matrix
    )
    with pytest.raises(ValueError, match="holds NaN"):
        acc.update(y_true, np.full((5, 3, 6), np.nan, np.float32), cluster_ids=np.arange(5))


def test_ignore_index() -> None:
    y_true = np.array([0, 255, 1, 1, 255, 2])
    y_pred = np.array([0, 1, 1, 2, 0, 2])
    acc = BootstrapConfusionAccumulator(3, n_resamples=5, seed=0, ignore_index=255)
    acc.update(y_true, y_pred, cluster_ids=np.array([1, 1, 2, 2, 3, 3]))
    assert acc.num_samples == 4
    assert np.array_equal(
        acc.replicates,
        _expected_replicates(
            np.array([0, 1, 1, 2]), np.array([0, 1, 2, 2]), np.array([1, 2, 2, 3]), 0, 5, k=3
        ),
    )


def test_bad_input_leaves_the_state_unchanged() -> None:
    y_true, y_pred, clusters = _data(12)
    acc = BootstrapConfusionAccumulator(K, n_resamples=4, seed=0)
    acc.update(y_true, y_pred, cluster_ids=clusters)
    before = acc.state_arrays()
    with pytest.raises(ValueError, match=r"`cluster_ids` has shape \(3,\), but `y_true` has"):
        acc.update(y_true, y_pred, cluster_ids=[1, 2, 3])
    with pytest.raises(TypeError, match="`cluster_ids` must hold integers, got dtype float64"):
        acc.update(y_true, y_pred, cluster_ids=np.zeros(y_true.size))
    bad = y_true.copy()
    bad[17] = 9
    with pytest.raises(ValueError, match="`y_true` holds label 9 at position 17"):
        acc.update(bad, y_pred, cluster_ids=clusters)
    with pytest.raises(ValueError, match="`y_true` holds label 9 at position 17"):
        acc.update(bad, y_pred)
    after = acc.state_arrays()
    assert all(np.array_equal(before[name], after[name]) for name in before)


def test_counts_never_wrap() -> None:
    from metricstream.bootstrap.accumulator import count_limit

    acc = BootstrapConfusionAccumulator(2, n_resamples=2)
    limit = count_limit(2)
    with acc.exclusive_state() as arrays:
        arrays["matrix"][0, 0] = limit - 1
    before = acc.state_arrays()
    with pytest.raises(ValueError, match=r"to [\d,]+ samples; .* nothing was counted"):
        acc.update([0, 0], [0, 0])
    with pytest.raises(ValueError, match="nothing was counted"):
        acc.update([0, 0], [0, 0], cluster_ids=[1, 2])
    with pytest.raises(ValueError, match="nothing was counted"):  # another cell: the total
        acc.update([1, 1], [0, 1])
    after = acc.state_arrays()
    assert all(np.array_equal(before[name], after[name]) for name in before)
    acc.update([1], [0])  # up to the limit still counts
    assert acc.matrix.sum() == limit


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_resamples": 1}, ValueError, "`n_resamples` must be at least 2, got 1"),
        ({"n_resamples": 2.5}, TypeError, "`n_resamples` must be an int"),
        ({"seed": -1}, ValueError, r"`seed` must be in \[0, 2\*\*64\), got -1"),
        ({"seed": "s"}, TypeError, "`seed` must be an int"),
        ({"class_names": ["a"]}, ValueError, "`class_names` has 1 names"),
    ],
)
def test_bad_configuration(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        BootstrapConfusionAccumulator(K, **kwargs)


def test_merge_requires_the_same_seed_and_replicates() -> None:
    with pytest.raises(ValueError, match="different `seed`: 0 here, 1 in the other"):
        BootstrapConfusionAccumulator(K, seed=0).merge(BootstrapConfusionAccumulator(K, seed=1))
    with pytest.raises(ValueError, match="different `n_resamples`"):
        BootstrapConfusionAccumulator(K, n_resamples=3).merge(
            BootstrapConfusionAccumulator(K, n_resamples=4)
        )


def test_interval_from_replicates_checks_its_input() -> None:
    with pytest.raises(ValueError, match=r"must be a \(B, 2, 2\) stack"):
        interval_from_replicates(np.eye(2), np.zeros((3, 3, 3)), "accuracy")
    with pytest.raises(ValueError, match="at least 2 are needed"):
        interval_from_replicates(np.eye(2), np.ones((1, 2, 2)), "accuracy")


def test_negative_and_large_ids_are_consistent_across_forms() -> None:
    y_true, y_pred, _ = _data(13, n=30)
    for cluster in (-5, 2**63 - 1, 0):
        scalar = BootstrapConfusionAccumulator(K, n_resamples=12, seed=3)
        scalar.update(y_true, y_pred, cluster_ids=cluster)
        array = BootstrapConfusionAccumulator(K, n_resamples=12, seed=3)
        array.update(y_true, y_pred, cluster_ids=np.full(30, cluster, dtype=np.int64))
        assert scalar == array


def test_interval_report_uses_the_replicates() -> None:
    from metricstream.bootstrap import interval_report

    y_true, y_pred, clusters = _data(14, n=500)
    acc = BootstrapConfusionAccumulator(K, n_resamples=50, seed=4)
    acc.update(y_true, y_pred, cluster_ids=clusters)
    data = interval_report(acc, ["accuracy", "macro_f1"])
    assert isinstance(data, dict)
    assert data["resampling"] == "cluster-poisson" and data["n_resamples"] == 50
    assert data["metrics"]["macro_f1"]["low"] == acc.interval("macro_f1").low
    text = interval_report(acc, ["accuracy"], format="text")
    assert "(clusters resampled)" in str(text)


@pytest.mark.parametrize("layout", ["labels", "scores", "channels-last", "weighted", "ignore"])
def test_item_path_equals_per_sample_path(layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import metricstream.bootstrap.accumulator as module

    rng = np.random.default_rng(15)
    truth = rng.integers(0, 3, (5, 6, 7))
    ids = np.array([4, 2, 4, 9, -1])
    kwargs: dict = {}
    pred: np.ndarray = np.where(rng.random((5, 6, 7)) < 0.7, truth, rng.integers(0, 3))
    weights = None
    if layout == "scores":
        pred = rng.normal(size=(5, 3, 6, 7))
    elif layout == "channels-last":
        pred = rng.normal(size=(5, 6, 7, 3))
        kwargs["class_axis"] = -1
    elif layout == "weighted":
        weights = rng.random((5, 6, 7))
        kwargs["weighted"] = True
    elif layout == "ignore":
        truth[0, 0, :3] = 255
        kwargs["ignore_index"] = 255

    def run(minimum: int) -> BootstrapConfusionAccumulator:
        monkeypatch.setattr(module, "ITEM_MIN_SAMPLES", minimum)
        acc = BootstrapConfusionAccumulator(3, n_resamples=9, seed=6, **kwargs)
        return acc.update(truth, pred, weights, cluster_ids=ids)

    by_items, by_samples = run(1), run(10**9)
    assert np.array_equal(by_items.matrix, by_samples.matrix)
    np.testing.assert_allclose(by_items.replicates, by_samples.replicates, rtol=1e-12)


def test_item_path_errors_name_the_position_in_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    import metricstream.bootstrap.accumulator as module

    monkeypatch.setattr(module, "ITEM_MIN_SAMPLES", 1)
    acc = BootstrapConfusionAccumulator(3, n_resamples=4)
    truth = np.zeros((2, 4, 4), dtype=np.int64)
    truth[1, 2, 3] = 7
    with pytest.raises(ValueError, match=r"`y_true` holds label 7 at position \(1, 2, 3\)"):
        acc.update(truth, np.zeros_like(truth), cluster_ids=[0, 1])
    assert acc.num_samples == 0 and not acc.replicates.any()


def test_per_class_intervals_with_names() -> None:
    y_true, y_pred, clusters = _data(16, n=800)
    acc = BootstrapConfusionAccumulator(K, n_resamples=60, seed=2, class_names=["a", "b", "c", "d"])
    acc.update(y_true, y_pred, cluster_ids=clusters)
    result = acc.interval("recall", labels=["d", "a"])
    assert result.estimate.shape == (2,) and result.replicates.shape == (60, 2)
    np.testing.assert_array_equal(result.estimate, acc.recall(labels=["d", "a"]))
    assert np.all(result.low <= result.estimate) and np.all(result.estimate <= result.high)


@pytest.mark.parametrize("shuffle", [False, True], ids=["runs", "interleaved"])
@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "weights"])
def test_interleaved_cluster_ids(shuffle: bool, weighted: bool) -> None:
    y_true, y_pred, clusters = _data(17, n=600)
    if shuffle:
        order = np.random.default_rng(0).permutation(y_true.size)
        y_true, y_pred, clusters = y_true[order], y_pred[order], clusters[order]
    weights = np.random.default_rng(1).random(y_true.size) if weighted else None
    acc = BootstrapConfusionAccumulator(K, n_resamples=11, seed=8, weighted=weighted)
    acc.update(y_true, y_pred, weights, cluster_ids=clusters)
    np.testing.assert_allclose(
        acc.replicates,
        _expected_replicates(y_true, y_pred, clusters, 8, 11, weights=weights),
        rtol=1e-12,
    )
