"""metricstream.arrow: Arrow columns, tables and streams (pyarrow, Polars, DuckDB) against the
numpy path (one ``update`` on the same values as ndarrays)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow", reason='needs pyarrow: pip install "metricstream[arrow]"')

from metricstream import (  # noqa: E402 - after the skip
    AccumulatorGroup,
    ConfusionAccumulator,
    MultilabelAccumulator,
    ScoreAccumulator,
)
from metricstream.arrow import record_batches, to_numpy, update, update_from_table  # noqa: E402

K = 4
NAMES = ["ant", "bee", "cat", "dog"]


def _data(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    p = np.where(rng.random(n) < 0.7, y, rng.integers(0, K, n))
    return y, p, rng.integers(0, 4, n)


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


# ---------------------------------------------------------------------------- columns
def test_numeric_chunks_are_read_in_place():
    y = np.arange(100, dtype=np.int32) % K
    column = pa.array(y)
    values = to_numpy(column)
    assert _address(values) == column.buffers()[1].address
    sliced = column.slice(10, 50)
    assert _address(to_numpy(sliced)) == column.buffers()[1].address + 10 * 4
    scores = np.random.default_rng(0).random((30, K)).astype(np.float32)
    rows = pa.FixedSizeListArray.from_arrays(pa.array(scores.reshape(-1)), K)
    read = to_numpy(rows)
    assert read.shape == (30, K)
    assert _address(read) == rows.values.buffers()[1].address
    listed = pa.array(list(scores), type=pa.list_(pa.float32()))
    assert np.array_equal(to_numpy(listed), scores)
    assert _address(to_numpy(listed)) == listed.values.buffers()[1].address


def test_update_accepts_arrow_arrays_chunked_arrays_and_polars():
    y, p, w = _data()
    expected = ConfusionAccumulator(K).update(y, p, w)
    assert ConfusionAccumulator(K).update(pa.array(y), pa.array(p), pa.array(w)) == expected
    chunked_y = pa.chunked_array([y[:300], y[300:]])
    chunked_p = pa.chunked_array([p[:10], p[10:700], p[700:]])
    assert ConfusionAccumulator(K).update(chunked_y, chunked_p, pa.array(w)) == expected
    group = AccumulatorGroup(a=ConfusionAccumulator(K), b=ConfusionAccumulator(K))
    group.update(pa.array(y), chunked_p)
    assert group["a"] == ConfusionAccumulator(K).update(y, p)
    pl = pytest.importorskip("polars")
    assert ConfusionAccumulator(K).update(pl.Series(y), pl.Series(p), pl.Series(w)) == expected
    assert update(ConfusionAccumulator(K), pl.Series(y), pl.Series(p), pl.Series(w)) == expected


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=5),
    st.lists(st.integers(0, 40), min_size=1, max_size=5),
)
def test_any_chunking_counts_as_one_update(true_sizes, pred_sizes):
    n = min(sum(true_sizes), sum(pred_sizes))
    rng = np.random.default_rng(n)
    y, p = rng.integers(0, K, n), rng.integers(0, K, n)

    def chunks(values, sizes):
        bounds = np.cumsum([0, *sizes])
        bounds = np.minimum(bounds, n)
        parts = [values[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        parts[-1] = np.concatenate([parts[-1], values[bounds[-1] :]])
        return pa.chunked_array(parts, type=pa.int64())

    acc = update(ConfusionAccumulator(K), chunks(y, true_sizes), chunks(p, pred_sizes))
    assert acc == ConfusionAccumulator(K).update(y, p)


def test_class_names_strings_and_dictionaries():
    y, p, _ = _data(seed=1)
    names = np.array(NAMES, dtype=object)
    expected = ConfusionAccumulator(K, class_names=NAMES).update(y, p)
    strings = pa.array(names[y].tolist())
    dictionary = pa.array(names[p].tolist()).dictionary_encode()
    acc = update(ConfusionAccumulator(K, class_names=NAMES), strings, dictionary)
    assert acc == expected
    large = pa.array(names[y].tolist(), type=pa.large_string())
    assert update(ConfusionAccumulator(K, class_names=NAMES), large, dictionary) == expected
    # A dictionary may hold names that no row uses, in any order.
    indices = pa.array(p.astype(np.int32))
    shuffled = pa.DictionaryArray.from_arrays(
        pa.array((3 - indices.to_numpy()).astype(np.int32)),
        pa.array(["dog", "cat", "bee", "ant", "yak"]),
    )
    assert update(ConfusionAccumulator(K, class_names=NAMES), strings, shuffled) == expected
    # A group maps through its members' names; a score accumulator through class_names=.
    group = AccumulatorGroup(
        c=ConfusionAccumulator(K, class_names=NAMES), d=ConfusionAccumulator(K, class_names=NAMES)
    )
    assert update(group, strings, dictionary)["d"] == expected
    probs = np.random.default_rng(1).dirichlet(np.ones(K), y.size)
    rows = pa.array(list(probs), type=pa.list_(pa.float64()))
    roc = update(ScoreAccumulator("multiclass", K), strings, rows, class_names=NAMES)
    assert roc == ScoreAccumulator("multiclass", K).update(y, probs)


def test_unknown_names_and_missing_names_are_refused():
    acc = ConfusionAccumulator(K, class_names=NAMES)
    before = acc.copy().update([0, 1], [1, 1])
    acc.update([0, 1], [1, 1])
    chunks = pa.chunked_array([["ant", "bee"], ["cat", "emu", "dog"]])
    preds = pa.array(["ant"] * 5)
    with pytest.raises(ValueError, match=r"`y_true` holds class name 'emu' at row 3"):
        update(acc, chunks, preds)
    dictionary = pa.array(["ant", "bee", "gnu"]).dictionary_encode()
    with pytest.raises(ValueError, match=r"`y_pred` holds class name 'gnu' at row 2"):
        update(acc, pa.array(["ant"] * 3), dictionary)
    assert acc == before  # atomic: nothing counted
    with pytest.raises(TypeError, match="no `class_names`"):
        update(ConfusionAccumulator(K), pa.array(["ant"]), pa.array(["ant"]))
    with pytest.raises(TypeError, match="metricstream.arrow.update"):
        ConfusionAccumulator(K, class_names=NAMES).update(pa.array(["ant"]), pa.array(["ant"]))
    group = AccumulatorGroup(
        a=ConfusionAccumulator(2, class_names=["x", "y"]),
        b=ConfusionAccumulator(2, class_names=["y", "x"]),
    )
    with pytest.raises(ValueError, match="different `class_names`"):
        update(group, pa.array(["x"]), pa.array(["y"]))


def test_nulls_raise_or_are_skipped_never_counted():
    y = pa.chunked_array([[0, 1, 2], [None, 3, 1]])
    p = pa.chunked_array([[0, 1], [None, 2, 3, 3]])
    w = pa.array([1, 2, 3, 4, 5, None])
    acc = ConfusionAccumulator(K).update([1], [1])
    before = acc.copy()
    with pytest.raises(ValueError, match=r"`y_pred` holds a null at row 2.*nulls='skip'"):
        update(acc, y, p)
    with pytest.raises(ValueError, match=r"`y_true` holds a null at row 3"):
        acc.update(y, p)
    assert acc == before
    skipped = update(ConfusionAccumulator(K), y, p, w, nulls="skip")
    assert skipped == ConfusionAccumulator(K).update([0, 1, 3], [0, 1, 3], [1, 2, 5])
    with pytest.raises(ValueError, match="`nulls`"):
        update(acc, y, p, nulls="drop")
    with pytest.raises(ValueError, match="null inside the list at row 1"):
        update(
            ScoreAccumulator("multiclass", 2), pa.array([0, 1]), pa.array([[0.5, 0.5], [0.1, None]])
        )


def test_bad_columns():
    with pytest.raises(ValueError, match="lists of different lengths"):
        to_numpy(pa.array([[0.1, 0.9], [0.2, 0.3, 0.5]]))
    with pytest.raises(TypeError, match="type date32"):
        to_numpy(pa.array([0], type=pa.date32()))
    with pytest.raises(TypeError, match="is a table"):
        to_numpy(pa.table({"a": [1]}))
    with pytest.raises(ValueError, match="different lengths"):
        update(ConfusionAccumulator(K), pa.array([0, 1]), pa.array([0]))
    with pytest.raises(TypeError, match="accumulator"):
        update(object(), pa.array([0]), pa.array([0]))
    with pytest.raises(ValueError, match=r"label 9 at position 1.*from row 2"):
        update(ConfusionAccumulator(K), pa.chunked_array([[0, 1], [0, 9]]), pa.array([0] * 4))


def test_multilabel_and_binary_scores():
    rng = np.random.default_rng(3)
    targets = (rng.random((200, 3)) < 0.4).astype(np.int8)
    probs = rng.random((200, 3))
    t = pa.FixedSizeListArray.from_arrays(pa.array(targets.reshape(-1)), 3)
    s = pa.array(list(probs), type=pa.list_(pa.float64()))
    assert update(MultilabelAccumulator(3), t, s) == MultilabelAccumulator(3).update(targets, probs)
    y = pa.array(rng.random(100) < 0.5)  # booleans
    score = pa.array(rng.random(100).astype(np.float16))
    expected = ScoreAccumulator("binary").update(y.to_numpy(zero_copy_only=False), score.to_numpy())
    assert ScoreAccumulator("binary").update(y, score) == expected


# ---------------------------------------------------------------------------- tables
def test_tables_polars_and_duckdb_equal_the_numpy_path():
    y, p, w = _data(n=5000, seed=4)
    expected = ConfusionAccumulator(K).update(y, p, w)
    table = pa.table({"label": y, "pred": p, "w": w, "other": np.zeros(y.size)})
    acc = update_from_table(ConfusionAccumulator(K), table, "label", "pred", "w")
    assert acc == expected
    batches = table.to_batches(max_chunksize=700)
    reader = pa.RecordBatchReader.from_batches(table.schema, batches)
    assert update_from_table(ConfusionAccumulator(K), reader, "label", "pred", "w") == expected
    assert update_from_table(ConfusionAccumulator(K), batches[0], "label", "pred", "w") == (
        ConfusionAccumulator(K).update(y[:700], p[:700], w[:700])
    )
    pl = pytest.importorskip("polars")
    frame = pl.DataFrame({"label": y, "pred": p, "w": w})
    assert update_from_table(ConfusionAccumulator(K), frame, "label", "pred", "w") == expected
    duckdb = pytest.importorskip("duckdb")
    relation = duckdb.from_arrow(table).select("label, pred, w")
    assert update_from_table(ConfusionAccumulator(K), relation, "label", "pred", "w") == expected


def test_table_names_score_columns_and_errors():
    y, p, _ = _data(n=300, seed=5)
    names = np.array(NAMES, dtype=object)
    probs = np.random.default_rng(5).dirichlet(np.ones(K), y.size)
    columns = {f"p{i}": probs[:, i] for i in range(K)}
    table = pa.table({"label": pa.array(names[y].tolist()).dictionary_encode(), **columns})
    acc = update_from_table(
        ConfusionAccumulator(K, class_names=NAMES), table, "label", [f"p{i}" for i in range(K)]
    )
    assert acc == ConfusionAccumulator(K, class_names=NAMES).update(y, probs)
    with pytest.raises(KeyError, match="no column 'pred'"):
        update_from_table(ConfusionAccumulator(K, class_names=NAMES), table)
    with pytest.raises(TypeError, match="RecordBatchReader"):
        update_from_table(ConfusionAccumulator(K), [1, 2])
    bad = pa.table({"label": [0, 1, 2, 3], "pred": [0, 1, 2, 3]})
    acc = ConfusionAccumulator(3)
    with pytest.raises(ValueError, match="label 3"):
        update_from_table(acc, bad)
    assert acc == ConfusionAccumulator(3)


def test_a_stream_is_read_one_batch_at_a_time():
    # 40 batches of 1M int8 rows (80 MB in all) from a generator: the accumulator never holds
    # more than one batch, so the stream may be larger than memory.
    seen = []

    def batches():
        for i in range(40):
            labels = np.full(1_000_000, i % K, dtype=np.int8)
            seen.append(i)
            yield pa.record_batch({"label": labels, "pred": labels})

    schema = pa.schema([("label", pa.int8()), ("pred", pa.int8())])
    reader = pa.RecordBatchReader.from_batches(schema, batches())
    acc = update_from_table(ConfusionAccumulator(K), reader)
    assert np.diag(acc.matrix).tolist() == [10_000_000] * K
    assert seen == list(range(40))


@pytest.mark.slow
def test_a_stream_larger_than_a_memory_cap(tmp_path):
    # In a child process whose address space is capped at 1.5 GiB more than it starts with,
    # a 3 GB stream of int64 batches is counted: streaming holds one batch at a time.
    script = tmp_path / "stream.py"
    script.write_text(
        "import resource, numpy as np, pyarrow as pa\n"
        "from metricstream import ConfusionAccumulator\n"
        "from metricstream.arrow import update_from_table\n"
        "ConfusionAccumulator(4).update(np.zeros(3, np.int64), np.zeros(3, np.int64))\n"
        "used = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
        "cap = used + 1536 * 2**20\n"
        "resource.setrlimit(resource.RLIMIT_AS, (cap, cap))\n"
        "def batches():\n"
        "    for i in range(96):\n"
        "        x = np.full(2_000_000, i % 4, dtype=np.int64)\n"
        "        yield pa.record_batch({'label': x, 'pred': x})\n"
        "schema = pa.schema([('label', pa.int64()), ('pred', pa.int64())])\n"
        "reader = pa.RecordBatchReader.from_batches(schema, batches())\n"
        "acc = update_from_table(ConfusionAccumulator(4), reader)\n"
        "print(int(acc.matrix.trace()))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(96 * 2_000_000)]


def test_record_batches_selects_columns():
    table = pa.table({"a": [1, 2], "b": [3, 4], "c": [5, 6]})
    (batch,) = list(record_batches(table, ["c", "a"]))
    assert batch.schema.names == ["c", "a"]


@pytest.mark.slow
def test_import_metricstream_does_not_import_pyarrow():
    code = "import sys, metricstream; print('pyarrow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
