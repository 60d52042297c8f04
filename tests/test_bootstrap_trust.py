"""The bootstrap family under trust: independent seeds, states that always load, one vocabulary.

Each test names what it pins: the cluster hash and its legacy format, the default B, intervals
of a clustered accumulator through every entry point, groups passing ``cluster_ids``, the
deprecated names, views before any update, weighted sums that would reach infinity, and
restored counts that would wrap int64.
"""

from __future__ import annotations

import base64
import pickle
import warnings

import numpy as np
import pytest

from metricstream import (
    Accumulator,
    AccumulatorGroup,
    BootstrapConfusionAccumulator,
    ConfusionAccumulator,
    serialization,
)
from metricstream.bootstrap import _kernels as kernels
from metricstream.bootstrap import bootstrap, delta_method, interval_report
from metricstream.bootstrap.accumulator import count_limit
from metricstream.bootstrap.resampling import interval
from metricstream.exceptions import UndefinedMetricWarning

K = 3
INT64_MAX = np.iinfo(np.int64).max
MAX_WEIGHT = kernels.MAX_POISSON1_WEIGHT


def _images(n: int = 40, k: int = K, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, k, (n, 8, 8))
    quality = rng.beta(8, 2, n)[:, None, None]
    pred = np.where(rng.random((n, 8, 8)) < quality, truth, rng.integers(0, k, (n, 8, 8)))
    return truth, pred


def _clustered(n_resamples: int = 50, seed: int = 3) -> BootstrapConfusionAccumulator:
    truth, pred = _images()
    acc = BootstrapConfusionAccumulator(K, n_resamples, seed=seed)
    return acc.update(truth, pred, cluster_ids=np.arange(truth.shape[0]))


# ---------------------------------------------------------------------------- the cluster hash
def test_seeds_are_not_relabelled_clusters() -> None:
    """Seed s gave cluster c the weights of cluster c ^ s under seed 0: paired images (ids 2k,
    2k + 1 holding the same image) made seeds 0 and 1 bit-identical."""
    truth, pred = _images(30)
    paired_true, paired_pred = np.repeat(truth, 2, axis=0), np.repeat(pred, 2, axis=0)
    ids = np.arange(60)
    by_seed = [
        BootstrapConfusionAccumulator(K, 40, seed=seed).update(
            paired_true, paired_pred, cluster_ids=ids
        )
        for seed in (0, 1)
    ]
    assert not np.array_equal(by_seed[0].replicates, by_seed[1].replicates)
    assert by_seed[0].interval("miou") != by_seed[1].interval("miou")
    keys = np.arange(4096, dtype=np.int64)
    for seed in (1, 2, 7, 255):
        mine = np.zeros((keys.size, 8), dtype=np.int64)
        relabelled = np.zeros_like(mine)
        kernels.poisson1_weights(keys, seed, 8, mine)
        kernels.poisson1_weights(keys ^ seed, 0, 8, relabelled)
        assert np.abs(np.corrcoef(mine.reshape(-1), relabelled.reshape(-1))[0, 1]) < 0.03


def test_weights_are_poisson_and_independent_across_seeds_clusters_and_replicates() -> None:
    keys = np.arange(20_000, dtype=np.int64)
    weights = {}
    for seed in (0, 1, 2**63):
        out = np.zeros((keys.size, 6), dtype=np.int64)
        kernels.poisson1_weights(keys, seed, 6, out)
        weights[seed] = out
        assert abs(out.mean() - 1) < 0.02 and abs(out.var() - 1) < 0.03
        assert np.abs(np.corrcoef(out.T) - np.eye(6)).max() < 0.03  # replicates
        assert abs(np.corrcoef(out[:-1, 0], out[1:, 0])[0, 1]) < 0.03  # neighbouring ids
    pooled = np.stack([w.reshape(-1) for w in weights.values()])
    assert np.abs(np.corrcoef(pooled) - np.eye(3)).max() < 0.03  # seeds


def test_the_legacy_hash_is_the_earlier_one() -> None:
    """What an old state means: the earlier hash, whose seeds relabel clusters."""
    keys = np.arange(100, dtype=np.int64)
    by_seed = np.zeros((100, 5), dtype=np.int64)
    relabelled = np.zeros_like(by_seed)
    kernels.poisson1_weights(keys, 6, 5, by_seed, legacy=True)
    kernels.poisson1_weights(keys ^ 6, 0, 5, relabelled, legacy=True)
    assert np.array_equal(by_seed, relabelled)


# A BootstrapConfusionAccumulator(3, n_replicates=4, seed=5, class_names=["a", "b", "c"]) that
# counted [0,1,2,2,1,0,1] / [0,2,2,1,1,0,1] with cluster_ids [7,7,8,8,9,9,300], saved by
# metricstream at the state format 1 (to_bytes of the release before the keyed hash).
FORMAT_1_BLOB = base64.b64decode(
    "iU1TQUNDDQoCAAAACAEAAGgBAAAAAAAAeyJhcnJheXMiOltbIm1hdHJpeCIsIjxpOCIsWzMsM11dLFsicmVwbGlj"
    "YXRlcyIsIjxpOCIsWzQsMywzXV1dLCJjb25maWciOnsiY2xhc3NfYXhpcyI6MSwiY2xhc3NfbmFtZXMiOlsiYSIs"
    "ImIiLCJjIl0sImlnbm9yZV9pbmRleCI6bnVsbCwibl9yZXBsaWNhdGVzIjo0LCJudW1fY2xhc3NlcyI6Mywic2Vl"
    "ZCI6NSwidGhyZXNob2xkIjpudWxsLCJ3ZWlnaHRlZCI6ZmFsc2V9LCJmb3JtYXQiOjEsInR5cGUiOiJCb290c3Ry"
    "YXBDb25mdXNpb25BY2N1bXVsYXRvciJ9AgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACAAAAAAAAAAEA"
    "AAAAAAAAAAAAAAAAAAABAAAAAAAAAAEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAACAAAAAAAAAAIAAAAAAAAAAwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAADAAAAAAAAAAEAAAAAAAAAAAAAAAAAAAABAAAAAAAAAAEAAAAAAAAAAwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAABAAAAAAAAAAMAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABAAAAAAAAAAEAAAAAAAAA4Zj9GA=="
)
# Its replicates, and what the release that wrote it made of them after one more update of
# [0, 1] / [1, 1] with cluster_ids [8, 11].
FORMAT_1_REPLICATES = [
    [[0, 0, 0], [0, 0, 0], [0, 2, 2]],
    [[3, 0, 0], [0, 3, 1], [0, 1, 1]],
    [[3, 0, 0], [0, 1, 3], [0, 0, 0]],
    [[0, 0, 0], [0, 0, 0], [0, 1, 1]],
]
FORMAT_1_NEXT = [
    [[0, 2, 0], [0, 0, 0], [0, 2, 2]],
    [[3, 1, 0], [0, 4, 1], [0, 1, 1]],
    [[3, 0, 0], [0, 5, 3], [0, 0, 0]],
    [[0, 1, 0], [0, 1, 0], [0, 1, 1]],
]


def test_a_format_1_state_loads_and_keeps_its_meaning() -> None:
    old = BootstrapConfusionAccumulator.from_bytes(FORMAT_1_BLOB)
    assert old.weight_hash == "xor-legacy" and old.n_resamples == 4 and old.seed == 5
    assert old.config()["n_resamples"] == 4 and "n_replicates" not in old.config()
    assert old.replicates.tolist() == FORMAT_1_REPLICATES
    assert old.matrix.tolist() == [[2, 0, 0], [0, 2, 1], [0, 1, 1]]
    # it goes on counting as the release that wrote it did: clusters spanning the checkpoint
    # keep their weights
    old.update([0, 1], [1, 1], cluster_ids=[8, 11])
    assert old.replicates.tolist() == FORMAT_1_NEXT
    # and it saves at the current format, and loads back the same
    assert BootstrapConfusionAccumulator.from_bytes(old.to_bytes()) == old
    assert BootstrapConfusionAccumulator.from_state_dict(old.state_dict()) == old
    assert old.state_dict()["format"] == BootstrapConfusionAccumulator.state_format == 3
    # a state of the new hash does not merge with it
    fresh = BootstrapConfusionAccumulator(K, 4, seed=5, class_names=["a", "b", "c"])
    with pytest.raises(ValueError, match="different `weight_hash`: 'xor-legacy' here, 'keyed'"):
        old.merge(fresh)
    with pytest.raises(ValueError, match="`weight_hash` must be one of"):
        BootstrapConfusionAccumulator(K, weight_hash="xor")  # type: ignore[arg-type]


def test_a_format_1_state_dict_and_pickle_load_too() -> None:
    old = BootstrapConfusionAccumulator.from_bytes(FORMAT_1_BLOB)
    state = old.state_dict()
    state["format"] = 1
    state["config"] = {**state["config"], "n_replicates": 4}
    del state["config"]["n_resamples"], state["config"]["weight_hash"]
    assert BootstrapConfusionAccumulator.from_state_dict(state) == old
    assert pickle.loads(pickle.dumps(old)) == old
    del state["config"]["n_replicates"]
    with pytest.raises(ValueError, match="format 1 lacks or mangles the entry 'n_replicates'"):
        BootstrapConfusionAccumulator.from_state_dict(state)


# ---------------------------------------------------------------------------- the default B
def test_the_default_b_covers() -> None:
    """In the coverage study (benchmarks/coverage_study.py --sweep, 2,000 repetitions of 200
    clustered images), nominal 95% percentile intervals covered 92.2-92.3% with B = 100 and
    93.0-93.5% with B = 200 (below 93.5%, the Monte-Carlo band), 93.7-93.9% from B = 300 on."""
    acc = BootstrapConfusionAccumulator(K)
    assert acc.n_resamples >= 300
    assert acc.replicates.shape == (acc.n_resamples, K, K)


# ---------------------------------------------------------------------------- one interval
def test_bootstrap_of_a_clustered_accumulator_uses_its_replicates() -> None:
    acc = _clustered()
    own = acc.interval("macro_f1")
    assert bootstrap(acc, "macro_f1") == own
    assert bootstrap(acc, "macro_f1", n_resamples=50, seed=3) == own
    assert interval(acc, "f1", average="macro") == own
    report = interval_report(acc, ["macro_f1"])
    assert isinstance(report, dict) and report["metrics"]["macro_f1"]["low"] == own.low
    assert bootstrap(acc, "accuracy", method="normal") == acc.interval("accuracy", method="normal")
    # the i.i.d. bootstrap of the same matrix is far narrower: it is only given on purpose
    iid = bootstrap(acc.matrix, "macro_f1")
    assert iid.resampling == "multinomial" and iid.standard_error < own.standard_error / 2
    for kwargs, match in [
        ({"n_resamples": 1000}, "holds 50 cluster-bootstrap replicates"),
        ({"seed": 4}, "drawn with seed 3"),
        ({"seed": None}, "drawn with seed 3"),
        ({"resampling": "multinomial"}, "resamples whole clusters"),
        ({"method": "bca"}, "jackknife over the clusters"),
    ]:
        with pytest.raises(ValueError, match=match):
            bootstrap(acc, "macro_f1", **kwargs)


def test_delta_method_refuses_a_clustered_accumulator() -> None:
    acc = _clustered()
    with pytest.raises(ValueError, match=r"assumes independent samples.*acc.interval\(metric\)"):
        delta_method(acc, "macro_f1")
    with pytest.raises(ValueError, match="assumes independent samples"):
        interval(acc, "macro_f1", method="delta")
    with pytest.raises(ValueError, match="method='normal' gives"):
        acc.interval("macro_f1", method="delta")  # type: ignore[arg-type]
    assert delta_method(acc.matrix, "macro_f1").standard_error > 0  # on purpose: the matrix


def test_a_group_passes_cluster_ids_to_the_members_that_take_them() -> None:
    truth, pred = _images()
    ids = np.arange(truth.shape[0])
    group = AccumulatorGroup(
        plain=ConfusionAccumulator(K), boot=BootstrapConfusionAccumulator(K, 20, seed=1)
    )
    group.update(truth, pred, cluster_ids=ids)
    alone = BootstrapConfusionAccumulator(K, 20, seed=1).update(truth, pred, cluster_ids=ids)
    assert group["boot"] == alone
    assert np.array_equal(group["plain"].matrix, alone.matrix)
    before = group["boot"].state_arrays()
    with pytest.raises(ValueError, match="`cluster_ids` has shape"):
        group.update(truth, pred, cluster_ids=ids[:3])
    assert all(np.array_equal(before[n], a) for n, a in group["boot"].state_arrays().items())


# ---------------------------------------------------------------------------- one vocabulary
def test_deprecated_names_still_work_and_warn() -> None:
    with pytest.warns(DeprecationWarning, match="`n_replicates` is deprecated"):
        old = BootstrapConfusionAccumulator(K, n_replicates=30, seed=2)
    assert old == BootstrapConfusionAccumulator(K, n_resamples=30, seed=2)
    assert old.n_resamples == 30 and old.config()["n_resamples"] == 30
    with pytest.warns(DeprecationWarning, match="use `n_resamples`"):
        assert old.n_replicates == 30
    with pytest.raises(TypeError, match="not both"):
        BootstrapConfusionAccumulator(K, n_resamples=30, n_replicates=30)
    acc = _clustered()
    with pytest.warns(DeprecationWarning, match=r"use `acc.interval\(metric\)`"):
        assert acc.bootstrap("miou") == acc.interval("miou")


def test_seeds_default_to_zero_everywhere() -> None:
    matrix = np.array([[50, 3, 2], [4, 40, 6], [1, 5, 39]])
    assert bootstrap(matrix, "accuracy", n_resamples=60).seed == 0
    assert bootstrap(matrix, "accuracy", n_resamples=60) == bootstrap(
        matrix, "accuracy", n_resamples=60, seed=0
    )
    assert interval(matrix, "accuracy").seed == 0
    assert BootstrapConfusionAccumulator(K, 2).seed == 0
    report = interval_report(matrix, ["accuracy"], n_resamples=60)
    assert isinstance(report, dict) and report["seed"] == 0


def test_interval_is_the_one_entry_point() -> None:
    matrix = np.array([[50, 3, 2], [4, 40, 6], [1, 5, 39]])
    assert interval(matrix, "macro_f1", method="delta") == delta_method(matrix, "macro_f1")
    assert interval(matrix, "mcc", method="bca", n_resamples=300) == bootstrap(
        matrix, "mcc", method="bca", n_resamples=300
    )
    assert interval(matrix, "accuracy").n_resamples == 1000
    with pytest.raises(ValueError, match="`n_resamples`, `seed` cannot apply"):
        interval(matrix, "accuracy", method="delta", n_resamples=10, seed=4)
    with pytest.raises(ValueError, match="`method` must be one of"):
        interval(matrix, "accuracy", method="wilson")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="closed-form gradient"):
        interval(matrix, len, method="delta")


# ---------------------------------------------------------------- views before any update
@pytest.mark.parametrize(
    ("metric", "kwargs", "shape"),
    [("accuracy", {}, ()), ("macro_f1", {}, ()), ("recall", {}, (K,))],
)
def test_intervals_before_any_update_are_nan_with_a_warning(
    metric: str, kwargs: dict, shape: tuple
) -> None:
    empty = BootstrapConfusionAccumulator(K, 10)
    results = []
    for compute in (
        lambda: empty.interval(metric, **kwargs),
        lambda: bootstrap(empty, metric, **kwargs),
        lambda: bootstrap(np.zeros((K, K), dtype=int), metric, n_resamples=10, **kwargs),
        lambda: bootstrap(ConfusionAccumulator(K), metric, n_resamples=10, **kwargs),
        lambda: delta_method(np.zeros((K, K)), metric, **kwargs),
    ):
        with pytest.warns(UndefinedMetricWarning, match="no samples have been counted"):
            results.append(compute())
    for result in results:
        assert np.shape(result.estimate) == shape
        for value in (result.estimate, result.low, result.high, result.standard_error):
            assert np.isnan(value).all()
    assert results[0].n_resamples == 10 and results[0].resampling == "cluster-poisson"


def test_an_empty_report_lists_undefined_values() -> None:
    with pytest.warns(UndefinedMetricWarning):
        report = interval_report(BootstrapConfusionAccumulator(K, 10), ["accuracy", "mcc"])
    assert isinstance(report, dict)
    assert report["metrics"]["mcc"] == {
        "estimate": None,
        "low": None,
        "high": None,
        "standard_error": None,
    }
    with pytest.warns(UndefinedMetricWarning):
        text = interval_report(np.zeros((2, 2)), ["accuracy"], format="text", n_resamples=10)
    assert "accuracy         –    –     –   –" in str(text)


# ---------------------------------------------------------------------------- weights past inf
@pytest.mark.parametrize("form", ["one cluster", "per sample", "per item", "anonymous"])
def test_weighted_sums_never_reach_infinity(form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import metricstream.bootstrap.accumulator as module

    monkeypatch.setattr(module, "ITEM_MIN_SAMPLES", 1)
    acc = BootstrapConfusionAccumulator(2, 8, seed=0, weighted=True)
    acc.update([[0, 1]], [[0, 1]], [[1.0, 2.0]], cluster_ids=[1])
    before = acc.state_arrays()
    ids = {
        "one cluster": 5,
        "per sample": [[5, 6]],
        "per item": [5],
        "anonymous": None,
    }[form]
    # one finite weight suffices: a replicate multiplies it by up to MAX_WEIGHT
    for weights in ([[1e308, 1.0]], [[1e307, 1e307]], [[np.finfo(float).max / 4, 0.0]]):
        with pytest.raises(ValueError, match="stay finite only up to .* nothing was counted"):
            acc.update([[0, 0]], [[0, 0]], weights, cluster_ids=ids)
        after = acc.state_arrays()
        assert all(np.array_equal(before[n], after[n]) for n in before)
    # the largest total accepted keeps every replicate finite, and the state loads
    acc.update([[0, 0]], [[0, 0]], [[module.WEIGHT_LIMIT / 2 - 3, 0.0]], cluster_ids=ids)
    assert np.isfinite(acc.replicates).all()
    assert BootstrapConfusionAccumulator.from_bytes(acc.to_bytes()) == acc
    assert pickle.loads(pickle.dumps(acc)) == acc


def test_a_restored_weighted_state_must_be_finite_in_all() -> None:
    acc = BootstrapConfusionAccumulator(2, 2, weighted=True)
    state = acc.state_dict()
    big = np.array([[1e308, 1e308], [0.0, 0.0]])
    state["arrays"]["matrix"]["data"] = big.tobytes()
    with pytest.raises(ValueError, match="sum to infinity"):
        BootstrapConfusionAccumulator.from_state_dict(state)
    state["arrays"]["matrix"]["data"] = np.array([[1.0, 0], [0, 0]]).tobytes()
    state["arrays"]["replicates"]["data"] = np.array([[[1e300, 0], [0, 0]]] * 2).tobytes()
    with pytest.raises(ValueError, match=r"more than \d+ \(the largest weight\) times"):
        BootstrapConfusionAccumulator.from_state_dict(state)


# ---------------------------------------------------------------------------- counts past 2^63
def _forged(matrix: np.ndarray, replicates: np.ndarray) -> dict:
    state = BootstrapConfusionAccumulator(2, replicates.shape[0]).state_dict()
    state["arrays"]["matrix"]["data"] = matrix.astype("<i8").tobytes()
    state["arrays"]["replicates"]["data"] = replicates.astype("<i8").tobytes()
    return state


def test_restored_cells_summing_past_int64_are_refused() -> None:
    cell = 2**62
    state = _forged(np.array([[cell, cell], [0, 0]]), np.zeros((2, 2, 2), dtype=np.int64))
    blob = BootstrapConfusionAccumulator(2, 2).to_bytes()
    with pytest.raises(ValueError, match="beyond int64"):
        BootstrapConfusionAccumulator.from_state_dict(state)
    type_name, state_format, config, arrays = serialization.decode(blob)
    arrays = {
        "matrix": np.array([[cell, cell], [0, 0]], dtype=np.int64),
        "replicates": arrays["replicates"],
    }
    forged_blob = serialization.encode(type_name, state_format, config, arrays)
    with pytest.raises(ValueError, match="holds an invalid state: .*beyond int64"):
        BootstrapConfusionAccumulator.from_bytes(forged_blob)
    # replicate totals too
    state = _forged(
        np.array([[cell, cell // 2], [0, 0]]),
        np.array([[[cell, cell], [0, 0]], [[0, 0], [0, 0]]]),
    )
    with pytest.raises(ValueError, match="beyond int64"):
        BootstrapConfusionAccumulator.from_state_dict(state)


def test_a_restored_state_cannot_make_an_update_wrap_a_replicate() -> None:
    # A replicate cell above the largest weight times its main cell cannot come from counting;
    # accepted, one more sample in that cell wrapped the replicate.
    state = _forged(np.array([[1, 0], [0, 0]]), np.array([[[2**62, 0], [0, 0]], [[0, 0], [0, 0]]]))
    with pytest.raises(ValueError, match=r"holds 4611686018427387904 at \(0, 0, 0\), more than"):
        BootstrapConfusionAccumulator.from_state_dict(state)
    # the largest consistent state loads, and its updates refuse rather than wrap
    limit = count_limit(2)
    matrix = np.array([[limit // 2, limit - limit // 2], [0, 0]])
    replicates = np.stack([matrix * MAX_WEIGHT, matrix * 0])
    acc = BootstrapConfusionAccumulator.from_state_dict(_forged(matrix, replicates))
    before = acc.state_arrays()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for ids in (None, 3, [3]):
            with pytest.raises(ValueError, match="nothing was counted"):
                acc.update([1], [1], cluster_ids=ids)  # a cell that is still empty: the total
    assert all(np.array_equal(before[n], a) for n, a in acc.state_arrays().items())
    assert (acc.replicates >= 0).all()


def test_merges_past_the_update_limit_still_load_and_refuse_updates() -> None:
    limit = count_limit(2)
    matrix = np.array([[limit, 0], [0, 0]])
    acc = BootstrapConfusionAccumulator.from_state_dict(
        _forged(matrix, np.zeros((2, 2, 2), dtype=np.int64))
    )
    merged = acc + acc  # a sum of two states: loads, as every state that exists must
    assert BootstrapConfusionAccumulator.from_bytes(merged.to_bytes()) == merged
    with pytest.raises(ValueError, match="nothing was counted"):
        merged.update([1], [1])


def test_a_dask_reduction_passes_cluster_ids() -> None:
    da = pytest.importorskip("dask.array", reason='needs dask: pip install "metricstream[dask]"')
    from metricstream.dask import accumulate

    truth, pred = _images(24)
    ids = np.arange(truth.shape[0])
    template = BootstrapConfusionAccumulator(K, 16, seed=2)
    result = accumulate(
        template,
        da.from_array(truth, chunks=(5, 8, 8)),
        da.from_array(pred, chunks=(5, 8, 8)),
        cluster_ids=da.from_array(ids, chunks=5),
        scheduler="synchronous",
    )
    alone = BootstrapConfusionAccumulator(K, 16, seed=2).update(truth, pred, cluster_ids=ids)
    assert result == alone


# ---------------------------------------------------------------------------- groups, cheaply
class _RefusingMember(Accumulator):
    """A member that accepts every batch and then refuses to count it (fails after the others
    have counted)."""

    def __init__(self) -> None:
        super().__init__({"n": ((1,), np.int64)})

    def config(self) -> dict:
        return {}

    def _prepare(self, y_true: object, y_pred: object, weights: object = None) -> None:
        return None

    def _count(self, arrays: dict, batch: None) -> None:
        raise ValueError("refused on purpose; nothing was counted")


@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "weights"])
@pytest.mark.parametrize("form", ["one cluster", "per sample", "per item", "anonymous"])
def test_a_group_that_fails_later_leaves_a_bootstrap_member_bit_identical(
    form: str, weighted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Integer members are undone by subtracting what was added (no copy of the state);
    weighted ones are restored from a copy. Either way bit for bit."""
    import metricstream.bootstrap.accumulator as module

    monkeypatch.setattr(module, "ITEM_MIN_SAMPLES", 1)
    truth, pred = _images(6)
    weights = np.random.default_rng(2).random(truth.shape) if weighted else None
    ids = {"one cluster": 4, "per sample": np.arange(truth.size).reshape(truth.shape) // 7}
    ids |= {"per item": np.array([3, 1, 3, 0, 2, 2]), "anonymous": None}
    boot = BootstrapConfusionAccumulator(K, 12, seed=1, weighted=weighted)
    boot.update(truth, pred, weights, cluster_ids=ids[form])  # something to undo back to
    group = AccumulatorGroup(boot=boot, last=_RefusingMember())
    before = boot.state_arrays()
    with pytest.raises(ValueError, match="nothing was counted"):
        group.update(truth, pred, weights, cluster_ids=ids[form])
    after = boot.state_arrays()
    assert all(np.array_equal(before[n], after[n]) for n in before)
    # and the undo is what the accumulator uses: count then uncount is the identity
    batch = boot._prepare(truth, pred, weights, cluster_ids=ids[form])
    with boot.exclusive_state() as arrays:
        boot._count(arrays, batch)
        assert not np.array_equal(arrays["replicates"], before["replicates"])
        boot._uncount(arrays, batch)
        if not weighted:
            assert all(np.array_equal(before[n], arrays[n]) for n in before)


def test_a_dask_reduction_passes_cluster_ids_per_element_and_as_one_value() -> None:
    da = pytest.importorskip("dask.array", reason='needs dask: pip install "metricstream[dask]"')
    from metricstream.dask import accumulate

    truth, pred = _images(12)
    ids = np.repeat(np.arange(truth.shape[0]), truth[0].size).reshape(truth.shape)
    result = accumulate(
        BootstrapConfusionAccumulator(K, 16, seed=2),
        da.from_array(truth, chunks=(5, 8, 8)),
        da.from_array(pred, chunks=(5, 8, 8)),
        cluster_ids=da.from_array(ids, chunks=(5, 8, 8)),
        scheduler="synchronous",
    )
    alone = BootstrapConfusionAccumulator(K, 16, seed=2).update(truth, pred, cluster_ids=ids)
    assert result == alone
    one = accumulate(
        BootstrapConfusionAccumulator(K, 16, seed=2),
        da.from_array(truth, chunks=(5, 8, 8)),
        da.from_array(pred, chunks=(5, 8, 8)),
        cluster_ids=7,
        scheduler="synchronous",
    )
    assert one == BootstrapConfusionAccumulator(K, 16, seed=2).update(truth, pred, cluster_ids=7)


def test_binary_thresholds_are_probabilities_and_logits_are_declared() -> None:
    """The confusion family's rule: a threshold is a probability; scores outside [0, 1] are
    refused unless ``logits=True``, which decides as ``sigmoid(logit) >= threshold``."""
    probabilities = np.array([0.2, 0.9, 0.6, 0.3, 0.5])
    truth = np.array([0, 1, 1, 0, 1])
    logits = np.log(probabilities / (1 - probabilities))
    for cluster_ids in (None, 7, np.arange(5)):
        plain = BootstrapConfusionAccumulator(2, 8, seed=1, threshold=0.5)
        plain.update(truth, probabilities, cluster_ids=cluster_ids)
        read = BootstrapConfusionAccumulator(2, 8, seed=1, threshold=0.5, logits=True)
        read.update(truth, logits, cluster_ids=cluster_ids)
        assert read.matrix.tolist() == plain.matrix.tolist() == [[2, 0], [0, 3]]
        before = plain.state_arrays()
        with pytest.raises(ValueError, match="logits=True"):
            plain.update(truth, logits, cluster_ids=cluster_ids)
        after = plain.state_arrays()
        assert all(np.array_equal(before[k], after[k]) for k in before)
    assert read.logits and read.threshold == 0.5 and read.config()["logits"] is True
    with pytest.warns(UserWarning, match="logits"):  # logits that all look like probabilities
        BootstrapConfusionAccumulator(2, 8, threshold=0.5, logits=True).update(
            np.tile(truth, 8), np.tile(probabilities, 8)
        )
    # a format-2 state compared raw scores with its threshold: 0.0 meant logits
    state = read.state_dict()
    state["format"] = 2
    config = dict(state["config"])
    del config["logits"]
    config["threshold"] = 0.0
    state["config"] = config
    upgraded = BootstrapConfusionAccumulator.from_state_dict(state)
    assert upgraded.logits and upgraded.threshold == 0.5
    assert upgraded.matrix.tolist() == read.matrix.tolist()


def test_an_empty_batch_of_images_with_per_image_ids_changes_nothing():
    # No image to look at: the per-image route must not read the first one.
    acc = BootstrapConfusionAccumulator(3, n_resamples=10)
    before = acc.to_bytes()
    empty = np.zeros((0, 5), np.int64)
    acc.update(empty, empty, cluster_ids=np.zeros(0, np.int64))
    assert acc.to_bytes() == before
