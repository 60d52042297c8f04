"""metricstream.ray on a local Ray (2 CPUs): the aggregation equals one in-memory update of
the same rows, whatever the blocks (empty ones included), with string labels, per group, and
through the documented ``map_batches`` recipe. Slow: every test uses a Ray cluster."""

from __future__ import annotations

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason='needs ray: pip install "metricstream[ray]"')
pytest.importorskip("ray.data", reason='needs ray[data]: pip install "metricstream[ray]"')
pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

from ray.data.aggregate import Count  # noqa: E402

from metricstream import AccumulatorGroup, ConfusionAccumulator, ScoreAccumulator  # noqa: E402
from metricstream.arrow import update_from_table  # noqa: E402
from metricstream.ray import (  # noqa: E402
    MetricAggregate,
    aggregate,
    aggregate_by,
    confusion,
    pack,
    scores,
)

pytestmark = pytest.mark.slow

K = 4
NAMES = ["ant", "bee", "cat", "dog"]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.default_hash_shuffle_parallelism = 2  # Ray's 200 shuffle partitions, on 2 CPUs
    yield
    ray.shutdown()


def _data(n=6000, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    p = np.where(rng.random(n) < 0.6, y, rng.integers(0, K, n))
    return y, p, rng.integers(1, 5, n)


def test_aggregate_equals_one_process(local_ray):
    y, p, w = _data()
    ds = ray.data.from_arrow(pa.table({"label": y, "pred": p, "w": w})).repartition(7)
    assert confusion(ds, "label", "pred", K) == ConfusionAccumulator(K).update(y, p)
    weighted = aggregate(ds, ConfusionAccumulator(K, weighted=True), "label", "pred", "w")
    assert weighted == ConfusionAccumulator(K, weighted=True).update(y, p, w)
    group = AccumulatorGroup(a=ConfusionAccumulator(K), b=ConfusionAccumulator(K, weighted=True))
    assert aggregate(ds, group, "label", "pred", "w") == group.copy().update(y, p, w)
    assert group["a"].num_samples == 0  # the template is untouched


def test_scores_from_pandas_blocks(local_ray):
    rng = np.random.default_rng(1)
    y = (rng.random(3000) < 0.4).astype(np.int64)
    s = rng.random(3000).astype(np.float32)
    ds = ray.data.from_pandas(
        [pd.DataFrame({"label": y[i::3], "score": s[i::3]}) for i in range(3)]
    )
    expected = ScoreAccumulator("binary").update(
        np.concatenate([y[i::3] for i in range(3)]), np.concatenate([s[i::3] for i in range(3)])
    )
    ours = scores(ds, "label", "score")
    # Counts exactly; float sums (losses, calibration) up to their order of addition.
    for name, array in expected.state_arrays().items():
        if array.dtype.kind == "f":
            np.testing.assert_allclose(ours.state_arrays()[name], array, rtol=1e-12, atol=0)
        else:
            np.testing.assert_array_equal(ours.state_arrays()[name], array)


def test_empty_blocks_and_an_empty_dataset(local_ray):
    y, p, _ = _data(n=500, seed=2)
    tables = [
        pa.table({"label": y[:200], "pred": p[:200]}),
        pa.table({"label": y[:0], "pred": p[:0]}),
        pa.table({"label": y[200:], "pred": p[200:]}),
        pa.table({"label": y[:0], "pred": p[:0]}),
    ]
    ds = ray.data.from_arrow(tables)
    assert confusion(ds, "label", "pred", K) == ConfusionAccumulator(K).update(y, p)
    empty = ray.data.from_arrow([tables[1], tables[3]])
    assert confusion(empty, "label", "pred", K) == ConfusionAccumulator(K)
    filtered = ray.data.from_arrow(tables[0]).filter(lambda row: row["label"] > 99)
    assert confusion(filtered, "label", "pred", K) == ConfusionAccumulator(K)


def test_string_labels_and_groupby(local_ray):
    y, p, _ = _data(n=3000, seed=3)
    names = np.array(NAMES, dtype=object)
    model = np.arange(y.size) % 2
    table = pa.table({"label": names[y].tolist(), "pred": names[p].tolist(), "model": model})
    ds = ray.data.from_arrow(table).repartition(4)
    acc = confusion(ds, "label", "pred", class_names=NAMES)
    assert acc == ConfusionAccumulator(K, class_names=NAMES).update(y, p)
    per_model = aggregate_by(
        ds, "model", ConfusionAccumulator(K, class_names=NAMES), num_partitions=2
    )
    assert sorted(per_model) == [0, 1]
    for key, acc in per_model.items():
        keep = model == key
        assert acc == ConfusionAccumulator(K, class_names=NAMES).update(y[keep], p[keep])
    # The same by hand, beside another aggregation (Ray prunes each to its declared column).
    agg = MetricAggregate(ConfusionAccumulator(K, class_names=NAMES), "label", "pred", packed=True)
    rows = pack(ds, "label", "pred").groupby("model").aggregate(agg, Count()).take_all()
    for row in rows:
        assert agg.result(row[agg.name]) == per_model[row["model"]]
        assert row["count()"] == (model == row["model"]).sum()
    bad = ray.data.from_arrow(pa.table({"label": ["ant", "emu"], "pred": ["ant", "ant"]}))
    with pytest.raises(Exception, match="'emu' at row 1"):
        confusion(bad, "label", "pred", class_names=NAMES)


def test_map_batches_recipe(local_ray):
    # The streaming-inference recipe of docs/engines.md: count each batch where it is
    # predicted, keep one small state per batch, merge the states.
    y, p, _ = _data(n=4000, seed=4)
    ds = ray.data.from_arrow(pa.table({"label": y, "pred": p})).repartition(5)

    def count(batch: pa.Table) -> pa.Table:
        acc = update_from_table(ConfusionAccumulator(K), batch, "label", "pred")
        return pa.table({"state": pa.array([acc.to_bytes()], pa.binary())})

    states = ds.map_batches(count, batch_format="pyarrow", batch_size=1000)
    total = ConfusionAccumulator(K)
    for row in states.iter_rows():
        total.merge(ConfusionAccumulator.from_bytes(row["state"]))
    assert total == ConfusionAccumulator(K).update(y, p)
