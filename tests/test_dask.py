"""metricstream.dask: chunk-by-chunk counting and tree merging, on threads and a 2-process cluster.

Oracle: one in-memory ``ConfusionAccumulator.update`` on the same (computed) data.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metricstream import ConfusionAccumulator

da = pytest.importorskip("dask.array", reason='needs dask: pip install "metricstream[dask]"')
dd = pytest.importorskip("dask.dataframe", reason='needs dask: pip install "metricstream[dask]"')
pd = pytest.importorskip("pandas")

from metricstream import Accumulator, AccumulatorGroup  # noqa: E402
from metricstream.dask import accumulate, confusion  # noqa: E402 - after the skips
from tests.sync_fixtures import LabelHistogram, WeightTotals, make_group  # noqa: E402

K = 6


def _data(n=20_000, seed=0):
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, K, size=n)
    logits = rng.normal(size=(n, K)) + 2.0 * np.eye(K)[y_true]
    return y_true, logits.argmax(axis=1), logits, rng.random(n) * 2


def _masks(seed=1):
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, K, size=(4, 30, 20))
    y_true[rng.random(y_true.shape) < 0.1] = 255
    logits = rng.normal(size=(4, K, 30, 20))
    return y_true, logits


def _same_weighted(acc, expected):
    assert acc.weighted and expected.weighted
    np.testing.assert_allclose(acc.matrix, expected.matrix, rtol=1e-12)


# ---------------------------------------------------------------------------- cases
def case_labels():
    y_true, y_pred, _, _ = _data()
    expected = ConfusionAccumulator(K).update(y_true, y_pred)
    return (da.from_array(y_true, chunks=3000), da.from_array(y_pred, chunks=1700)), {}, expected


def case_logits_chunked_on_classes():
    y_true, _, logits, _ = _data()
    expected = ConfusionAccumulator(K).update(y_true, logits)
    args = (da.from_array(y_true, chunks=5000), da.from_array(logits, chunks=(2000, 4)))
    return args, {}, expected


def case_weighted():
    y_true, y_pred, _, weights = _data()
    expected = ConfusionAccumulator(K, weighted=True).update(y_true, y_pred, weights)
    args = (da.from_array(y_true, chunks=4000), da.from_array(y_pred, chunks=4000))
    kwargs = {"weights": da.from_array(weights, chunks=3000), "weighted": True}
    return args, kwargs, expected


def case_masks_ignore_index():
    y_true, logits = _masks()
    expected = ConfusionAccumulator(K, ignore_index=255).update(y_true, logits)
    args = (da.from_array(y_true, chunks=(1, 15, 20)), da.from_array(logits, chunks=(2, 3, 10, 10)))
    return args, {"ignore_index": 255}, expected


def case_channels_last():
    y_true, logits = _masks()
    logits = np.moveaxis(logits, 1, -1)
    expected = ConfusionAccumulator(K, ignore_index=255, class_axis=-1).update(y_true, logits)
    args = (da.from_array(y_true, chunks=(2, 10, 20)), da.from_array(logits, chunks=(2, 10, 5, 2)))
    return args, {"ignore_index": 255, "class_axis": -1}, expected


def case_dataframe_columns():
    y_true, y_pred, _, weights = _data()
    frame = dd.from_pandas(
        pd.DataFrame({"label": y_true, "prediction": y_pred, "w": weights}), npartitions=7
    )
    expected = ConfusionAccumulator(K, weighted=True).update(y_true, y_pred, weights)
    args = (frame["label"], frame["prediction"])
    return args, {"weights": frame["w"], "weighted": True}, expected


def case_dataframe_filtered():
    y_true, y_pred, _, _ = _data()
    frame = dd.from_pandas(pd.DataFrame({"label": y_true, "prediction": y_pred}), npartitions=5)
    frame = frame[frame["label"] != 0]  # unknown partition lengths
    keep = y_true != 0
    expected = ConfusionAccumulator(K).update(y_true[keep], y_pred[keep])
    return (frame["label"], frame["prediction"]), {}, expected


CASES = {name[5:]: case for name, case in globals().items() if name.startswith("case_")}


def _check(acc, expected):
    assert isinstance(acc, ConfusionAccumulator)
    if expected.weighted:
        _same_weighted(acc, expected)
    else:
        assert acc == expected


# Dataframe columns reach the kernels as read-only arrays: kernel specialisations of their own
# (2-3 s each on a cold cache), so those cases run in CI only.
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, id=name, marks=[pytest.mark.slow] if "dataframe" in name else [])
        for name, case in CASES.items()
    ],
)
def test_threaded_scheduler_equals_in_memory(case):
    args, kwargs, expected = case()
    _check(confusion(*args, num_classes=K, scheduler="threads", **kwargs), expected)


@pytest.mark.parametrize("split_every", [2, 3, 8, 100])
def test_tree_fan_in_does_not_change_the_result(split_every):
    args, kwargs, expected = case_labels()
    acc = confusion(*args, num_classes=K, split_every=split_every, scheduler="sync", **kwargs)
    assert acc == expected


def test_merges_form_a_tree():
    y_true, y_pred, _, _ = _data(n=1600)
    delayed = confusion(
        da.from_array(y_true, chunks=100),
        da.from_array(y_pred, chunks=100),
        K,
        split_every=4,
        compute=False,
    )
    names = [str(key[0] if isinstance(key, tuple) else key) for key in dict(delayed.dask)]
    assert sum(name.startswith("_count_piece") for name in names) == 16
    assert sum(name.startswith("_merge") for name in names) == 4 + 1  # 16 -> 4 -> 1
    assert delayed.compute(scheduler="sync") == ConfusionAccumulator(K).update(y_true, y_pred)


@pytest.mark.slow
@given(
    n=st.integers(0, 300),
    true_chunk=st.integers(1, 120),
    pred_chunk=st.integers(1, 120),
    split_every=st.integers(2, 5),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=40, deadline=None)
def test_any_chunking_equals_in_memory(n, true_chunk, pred_chunk, split_every, seed):
    rng = np.random.default_rng(seed)
    y_true, y_pred = rng.integers(0, 3, size=n), rng.integers(0, 3, size=n)
    acc = confusion(
        da.from_array(y_true, chunks=true_chunk),
        da.from_array(y_pred, chunks=pred_chunk),
        3,
        split_every=split_every,
        scheduler="sync",
    )
    assert acc == ConfusionAccumulator(3).update(y_true, y_pred)


def test_configuration_is_kept():
    y_true, y_pred, _, _ = _data(n=100)
    names = [f"c{i}" for i in range(K)]
    acc = confusion(
        da.from_array(y_true, chunks=30),
        da.from_array(y_pred, chunks=30),
        K,
        class_names=names,
        ignore_index=-1,
        scheduler="sync",
    )
    assert acc.class_names == tuple(names) and acc.ignore_index == -1


def test_numpy_inputs_and_empty_inputs():
    y_true, y_pred, _, _ = _data(n=500)
    assert confusion(y_true, y_pred, K, scheduler="sync") == ConfusionAccumulator(K).update(
        y_true, y_pred
    )
    empty = confusion(da.zeros((0,), dtype=int, chunks=5), da.zeros((0,), dtype=int, chunks=5), K)
    assert empty == ConfusionAccumulator(K)


# ---------------------------------------------------------------------------- any accumulator
class LabelwiseCounts(Accumulator):
    """Per label of a multilabel ``(N, L)`` batch: true positives and positives (int64), and
    the total row weight (float64). Needs whole rows: a chunk split along L would be refused."""

    def __init__(self, num_labels: int) -> None:
        self._num_labels = int(num_labels)
        super().__init__(
            {
                "tp": ((num_labels,), np.int64),
                "pos": ((num_labels,), np.int64),
                "rows": ((1,), np.float64),
            }
        )

    def config(self):
        return {"num_labels": self._num_labels}

    def _prepare(self, y_true, y_pred, weights=None):
        y_true, y_pred = np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)
        if y_true.ndim != 2 or y_true.shape[1] != self._num_labels or y_pred.shape != y_true.shape:
            raise ValueError(
                f"`y_true` must have shape (N, {self._num_labels}), got "
                f"{y_true.shape} (and `y_pred` {y_pred.shape})."
            )
        w = np.ones(len(y_true)) if weights is None else np.asarray(weights, dtype=np.float64)
        return y_true, y_pred, w

    def _count(self, arrays, batch):
        y_true, y_pred, w = batch
        arrays["tp"] += (y_true & y_pred).sum(axis=0)
        arrays["pos"] += y_true.sum(axis=0)
        arrays["rows"] += w.sum()


def _group_case():
    y_true, y_pred, _, _ = _data()
    # whole numbers as float64: the weight dtype the rest of the suite compiles kernels for
    weights = np.random.default_rng(5).integers(0, 3, size=len(y_true)).astype(np.float64)
    group = make_group(
        wide=ConfusionAccumulator(50),
        labels=LabelHistogram(K),
        totals=WeightTotals(K),
        counts=ConfusionAccumulator(K),
        weighted=ConfusionAccumulator(K, weighted=True),
        weighted_wide=ConfusionAccumulator(K, weighted=True, class_axis=1),
    )
    expected = group.copy().update(y_true, y_pred, weights)
    args = (
        da.from_array(y_true, chunks=3000),
        da.from_array(y_pred, chunks=2500),
        da.from_array(weights, chunks=4000),
    )
    return group, args, expected


@pytest.mark.parametrize("split_every", [2, 8])
def test_group_of_accumulators_equals_one_in_memory_update(split_every):
    group, (y_true, y_pred, weights), expected = _group_case()
    before = group.copy()
    result = accumulate(
        group, y_true, y_pred, weights, split_every=split_every, scheduler="threads"
    )
    assert isinstance(result, AccumulatorGroup) and result == expected
    assert group == before  # the template is left untouched (and empty)
    assert list(result) == list(group)


def test_single_non_confusion_accumulator_and_delayed_tree():
    y_true, y_pred, _, _ = _data(n=1600)
    delayed = accumulate(
        WeightTotals(K),
        da.from_array(y_true, chunks=100),
        da.from_array(y_pred, chunks=100),
        split_every=4,
        compute=False,
    )
    names = [str(key[0] if isinstance(key, tuple) else key) for key in dict(delayed.dask)]
    assert sum(name.startswith("_count_piece") for name in names) == 16
    assert sum(name.startswith("_merge") for name in names) == 4 + 1
    assert delayed.compute(scheduler="sync") == WeightTotals(K).update(y_true, y_pred)


def test_rows_are_never_split_for_accumulators_of_whole_samples():
    rng = np.random.default_rng(2)
    y_true, y_pred = rng.integers(0, 2, size=(900, 6)), rng.integers(0, 2, size=(900, 6))
    row_weights = rng.random(900)
    # Chunked along the labels too: accumulate must hand each task whole rows.
    result = accumulate(
        LabelwiseCounts(6),
        da.from_array(y_true, chunks=(200, 4)),
        da.from_array(y_pred, chunks=(300, 3)),
        da.from_array(row_weights, chunks=250),
        scheduler="sync",
    )
    expected = LabelwiseCounts(6).update(y_true, y_pred, row_weights)
    assert result.state_arrays()["tp"].tolist() == expected.state_arrays()["tp"].tolist()
    np.testing.assert_allclose(
        result.state_arrays()["rows"], expected.state_arrays()["rows"], rtol=1e-12
    )


def test_group_of_scores_and_labels_views():
    y_true, _, logits, _ = _data()
    group = AccumulatorGroup(first=ConfusionAccumulator(K), last=ConfusionAccumulator(K))
    result = accumulate(
        group,
        da.from_array(y_true, chunks=5000),
        da.from_array(logits, chunks=(3000, 4)),
        scheduler="threads",
    )
    assert result["first"] == ConfusionAccumulator(K).update(y_true, logits)


def test_empty_inputs_give_an_empty_copy_of_the_template():
    empty = accumulate(
        make_group(),
        da.zeros((0,), dtype=int, chunks=5),
        da.zeros((0,), dtype=int, chunks=5),
        scheduler="sync",
    )
    assert empty == make_group()


@pytest.mark.parametrize(
    "template, error, match",
    [
        (
            np.zeros((3, 3)),
            TypeError,
            r"`template` must be an accumulator or an AccumulatorGroup, got ndarray",
        ),
        (
            ConfusionAccumulator(K).update([0], [1]),
            ValueError,
            r"`template` already holds counts; pass an empty accumulator",
        ),
        (
            AccumulatorGroup(a=ConfusionAccumulator(K), b=LabelHistogram(K).update([1], [1])),
            ValueError,
            r"`template` \(member 'b'\) already holds counts",
        ),
        (
            AccumulatorGroup(a=ConfusionAccumulator(K), b=ConfusionAccumulator(K, class_axis=-1)),
            ValueError,
            r"different `class_axis` settings \[-1, 1\]; pass `class_axis=`",
        ),
    ],
    ids=["not-an-accumulator", "not-empty", "member-not-empty", "class-axes-differ"],
)
def test_template_is_checked_before_any_task_runs(template, error, match):
    y_true = da.from_array(np.zeros(10, dtype=int), chunks=5)
    calls = []
    y_true = y_true.map_blocks(lambda block: calls.append(1) or block, meta=np.zeros(0, dtype=int))
    with pytest.raises(error, match=match):
        accumulate(template, y_true, y_true, scheduler="sync")
    assert calls == []


def test_template_whose_config_does_not_rebuild_it_is_refused():
    class Talkative(LabelHistogram):
        def config(self):
            return {**super().config(), "colour": "blue"}  # not a constructor argument

    with pytest.raises(
        ValueError,
        match=r"`template` cannot be rebuilt from its type and "
        r"config\(\): .*colour",
    ):
        accumulate(Talkative(3), np.zeros(3, dtype=int), np.zeros(3, dtype=int))


def test_bad_input_in_a_group_names_the_chunk():
    group, _, _ = _group_case()
    y_true, y_pred, _, _ = _data(n=1000)
    y_pred[650] = K  # fine for the 50-class member, not for the others
    with pytest.raises(
        ValueError,
        match=r"`y_pred` .*\(The position is counted within dask "
        r"chunk \(3,\) of `y_true`, which starts at index "
        r"\(600,\)\.\)",
    ):
        accumulate(
            group,
            da.from_array(y_true, chunks=200),
            da.from_array(y_pred, chunks=200),
            scheduler="sync",
        )
    assert group == group.copy().reset()


def test_weights_must_match_labels_or_rows():
    with pytest.raises(
        ValueError,
        match=r"`weights` has shape \(9,\), but `y_true` has shape "
        r"\(10,\); give weights of shape \(10,\)\.",
    ):
        accumulate(
            ConfusionAccumulator(3), da.zeros(10, dtype=int), da.zeros(10, dtype=int), da.ones(9)
        )
    with pytest.raises(ValueError, match=r"or \(10,\) \(one per row\)"):
        accumulate(
            LabelwiseCounts(2),
            da.zeros((10, 2), dtype=int),
            da.zeros((10, 2), dtype=int),
            da.ones(9),
        )


# ---------------------------------------------------------------------------- errors
def test_bad_label_names_the_chunk():
    y_true, y_pred, _, _ = _data(n=1000)
    y_true[777] = 9
    with pytest.raises(
        ValueError,
        match=r"holds label 9 at position 177, but `num_classes` is 6"
        r".*within dask chunk \(3,\) of `y_true`, which starts "
        r"at index \(600,\)",
    ):
        confusion(
            da.from_array(y_true, chunks=200),
            da.from_array(y_pred, chunks=200),
            K,
            scheduler="sync",
        )


@pytest.mark.slow  # read-only dataframe columns: a kernel specialisation of their own
def test_bad_label_names_the_partition():
    frame = dd.from_pandas(pd.DataFrame({"t": [0, 1, 2, 7], "p": [0, 1, 2, 3]}), npartitions=2)
    with pytest.raises(ValueError, match=r"holds label 7 .*within dask dataframe partition 1"):
        confusion(frame["t"], frame["p"], 4, scheduler="sync")


@pytest.mark.parametrize(
    "y_true, y_pred, kwargs, error, match",
    [
        (
            da.zeros(10, dtype=int),
            da.zeros(11, dtype=int),
            {},
            ValueError,
            r"`y_true` has shape \(10,\) and `y_pred` has shape \(11,\)",
        ),
        (
            da.zeros(10, dtype=int),
            da.zeros((10, 5)),
            {},
            ValueError,
            r"scores of shape \(10, 5\) with classes on axis 1, but .* `num_classes` is 6",
        ),
        (
            da.zeros(10, dtype=int),
            da.zeros((10, 6, 2)),
            {},
            ValueError,
            r"must have the same shape \(labels\) or one more dimension",
        ),
        (
            da.zeros(10, dtype=int),
            da.zeros(10, dtype=int),
            {"weights": da.ones(9)},
            ValueError,
            r"`weights` has shape \(9,\), but `y_true` has shape \(10,\)",
        ),
        (
            da.zeros(10, dtype=int),
            da.zeros(10, dtype=int),
            {"split_every": 1},
            ValueError,
            r"`split_every` must be an int of at least 2, got 1",
        ),
        (
            da.zeros(10, dtype=int),
            da.zeros(10, dtype=int),
            {"class_names": ["a"]},
            ValueError,
            r"`class_names` has 1 names, but `num_classes` is 6",
        ),
    ],
    ids=["length", "score-classes", "too-many-dims", "weights-shape", "split-every", "bad-config"],
)
def test_bad_arguments(y_true, y_pred, kwargs, error, match):
    with pytest.raises(error, match=match):
        confusion(y_true, y_pred, K, **kwargs)


def test_dataframe_inputs_must_be_columns_partitioned_alike():
    frame = dd.from_pandas(pd.DataFrame({"t": range(10), "p": range(10)}), npartitions=2)
    other = dd.from_pandas(pd.DataFrame({"p": range(10)}), npartitions=3)
    with pytest.raises(ValueError, match=r"different numbers of partitions"):
        confusion(frame["t"], other["p"], 10)
    with pytest.raises(TypeError, match=r"`y_pred` is a Array; with dask dataframes, pass columns"):
        confusion(frame["t"], da.zeros(10, dtype=int), 10)
    with pytest.raises(TypeError, match=r"`y_true` is a DataFrame"):
        confusion(frame, frame["p"], 10)


# ---------------------------------------------------------------------------- a real cluster
@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        silence_logs=logging.ERROR,
    )
    client = distributed.Client(cluster, set_as_default=False, timeout=120)
    try:
        client.wait_for_workers(2, timeout=120)
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.mark.slow
def test_cluster_has_two_worker_processes(client):
    pids = client.run(os.getpid)
    assert len(pids) == 2 and os.getpid() not in pids.values()
    assert len(set(pids.values())) == 2


# A local cluster of two worker processes takes seconds to start: CI only (the threaded
# scheduler runs the same cases by default).
@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_local_cluster_equals_in_memory(client, case):
    args, kwargs, expected = case()
    _check(confusion(*args, num_classes=K, scheduler=client, **kwargs), expected)


@pytest.mark.slow
def test_cluster_counts_on_the_workers(client):
    distributed = pytest.importorskip("distributed")
    y_true, y_pred, _, _ = _data()
    delayed = confusion(
        da.from_array(y_true, chunks=2000), da.from_array(y_pred, chunks=2000), K, compute=False
    )
    with distributed.get_task_stream(client) as stream:
        result = client.compute(delayed).result(timeout=120)
    assert result == ConfusionAccumulator(K).update(y_true, y_pred)
    ran = [(str(task["key"]), task["worker"]) for task in stream.data]
    counted = [worker for key, worker in ran if "_count_piece" in key]
    merged = [worker for key, worker in ran if "_merge" in key]
    assert len(counted) == 10 and len(merged) == 2 + 1  # 10 chunks -> 2 -> 1 (split_every=8)
    assert set(counted + merged) <= set(client.scheduler_info()["workers"])


@pytest.mark.slow
def test_cluster_reports_bad_labels(client):
    y_true, y_pred, _, _ = _data(n=1000)
    y_true[5] = -1
    with pytest.raises(ValueError, match=r"negative labels are not allowed.*dask chunk \(0,\)"):
        confusion(
            da.from_array(y_true, chunks=500),
            da.from_array(y_pred, chunks=500),
            K,
            scheduler=client,
        )


@pytest.mark.slow
def test_local_cluster_accumulates_a_group(client):
    group, (y_true, y_pred, weights), expected = _group_case()
    result = accumulate(group, y_true, y_pred, weights, scheduler=client)
    assert result == expected
