"""Reading prediction files into one matrix: every reader against scikit-learn, streaming growth,
the shared label registry, and one-line errors that name the file, the column and the row."""

from __future__ import annotations

import csv
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import sklearn.metrics as skm
from hypothesis import given, settings
from hypothesis import strategies as st

from metricstream.io import readers as _io
from metricstream.io.readers import InputError, LabelRegistry, read_confusion

try:
    import pyarrow  # noqa: F401

    HAVE_PYARROW = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_PYARROW = False

needs_pyarrow = pytest.mark.skipif(not HAVE_PYARROW, reason="pyarrow is not installed")
READERS = [pytest.param(True, id="pyarrow", marks=needs_pyarrow), pytest.param(False, id="stdlib")]
EXAMPLES = Path(__file__).parent.parent / "examples" / "data"


def write_csv(path: Path, header: list[str], rows, delimiter: str = ",") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def sklearn_matrix(y_true, y_pred, weights=None, labels=None):
    labels = labels if labels is not None else sorted(set(y_true) | set(y_pred))
    return skm.confusion_matrix(y_true, y_pred, labels=labels, sample_weight=weights), labels


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few rows, so that every test streams many chunks and classes appear late."""
    monkeypatch.setattr(_io, "CHUNK_ROWS", 7)
    monkeypatch.setattr(_io, "STDLIB_CHUNK_ROWS", 7)
    monkeypatch.setattr(_io, "CSV_BLOCK_BYTES", 64)
    monkeypatch.setattr(_io, "CSV_PEEK_BYTES", 64)
    monkeypatch.setattr(_io, "CSV_SAMPLE_ROWS", 5)


# ---------------------------------------------------------------------- the registry
def test_registry_gives_first_seen_indices_and_a_sorted_order():
    registry = LabelRegistry()
    assert registry.codes(["hen", "cat"]).tolist() == [0, 1]
    assert registry.codes(["cat", "ant", "hen"]).tolist() == [1, 2, 0]
    assert registry.names == ["hen", "cat", "ant"]
    assert [registry.names[i] for i in registry.sorted_order()] == ["ant", "cat", "hen"]


def test_registry_sorts_integer_names_numerically():
    registry = LabelRegistry()
    registry.codes(["10", "9", "100"])
    assert [registry.names[i] for i in registry.sorted_order()] == ["9", "10", "100"]


def test_frozen_registry_marks_unknown_ignored_and_empty_names():
    registry = LabelRegistry(["a", "b"], frozen=True)
    assert registry.codes(["b", "zzz", "void", ""], ignore="void").tolist() == [1, -2, -1, -3]
    assert registry.names == ["a", "b"]


def test_registry_rejects_duplicate_classes():
    with pytest.raises(InputError, match="lists 'a' twice"):
        LabelRegistry(["a", "b", "a"])


# ---------------------------------------------------------------------- CSV against sklearn
@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_integer_csv_equals_sklearn_and_classes_grow_while_streaming(
    tmp_path, small_chunks, pyarrow_reader
):
    rng = np.random.default_rng(0)
    # Class 11 first appears near the end, class 5 never: the matrix grows, then 5 is dropped.
    y_true = rng.choice([0, 1, 2, 3, 4, 6, 7], size=400)
    y_pred = np.where(rng.random(400) < 0.7, y_true, rng.choice([0, 2, 4, 8], size=400))
    y_true[390], y_pred[395] = 11, 9
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], zip(y_true, y_pred, strict=True))
    result = read_confusion(path, prefer_pyarrow=pyarrow_reader)
    expected, labels = sklearn_matrix(y_true.tolist(), y_pred.tolist())
    np.testing.assert_array_equal(result.accumulator.matrix, expected)
    assert result.accumulator.class_names == tuple(str(label) for label in labels)
    assert result.num_rows == 400 and result.mode == "index"
    assert result.growths >= 2


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_text_labels_share_one_registry(tmp_path, small_chunks, pyarrow_reader):
    rng = np.random.default_rng(1)
    names = np.array(["cat", "dog", "hen", "ox"])
    y_true = names[rng.integers(0, 3, size=300)].tolist()
    y_pred = [t if rng.random() < 0.6 else str(rng.choice(names[:3])) for t in y_true]
    y_pred[250] = "ox"  # seen only in the predictions, late in the stream
    path = write_csv(
        tmp_path / "p.csv",
        ["id", "y_pred", "y_true"],
        ((i, p, t) for i, (t, p) in enumerate(zip(y_true, y_pred, strict=True))),
    )
    result = read_confusion(path, prefer_pyarrow=pyarrow_reader)
    expected, labels = sklearn_matrix(y_true, y_pred)
    assert result.mode == "names"
    assert result.accumulator.class_names == ("cat", "dog", "hen", "ox")
    np.testing.assert_array_equal(result.accumulator.matrix, expected)
    assert result.accumulator.support()[3] == 0
    assert result.accumulator.predicted_positives()[3] == 1


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_weights_equal_sklearn_sample_weight(tmp_path, small_chunks, pyarrow_reader):
    rng = np.random.default_rng(2)
    y_true, y_pred = rng.integers(0, 4, 200), rng.integers(0, 4, 200)
    weights = np.round(rng.exponential(size=200), 3)
    path = write_csv(
        tmp_path / "p.csv", ["y_true", "y_pred", "w"], zip(y_true, y_pred, weights, strict=True)
    )
    result = read_confusion(path, weight="w", prefer_pyarrow=pyarrow_reader)
    expected, _ = sklearn_matrix(y_true.tolist(), y_pred.tolist(), weights)
    assert result.accumulator.weighted
    np.testing.assert_allclose(result.accumulator.matrix, expected, rtol=1e-12)


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_quoted_fields_with_newlines_and_a_byte_order_mark(tmp_path, small_chunks, pyarrow_reader):
    names = ["plain", 'with "quotes"', "two\nlines", "comma, inside", "NA"]
    rng = np.random.default_rng(6)
    y_true = [names[i] for i in rng.integers(0, 5, 120)]
    y_pred = [names[i] for i in rng.integers(0, 5, 120)]
    path = tmp_path / "q.csv"
    with open(path, "w", newline="", encoding="utf-8-sig") as file:
        writer = csv.writer(file, quoting=csv.QUOTE_ALL)
        writer.writerow(["y_true", "y_pred"])
        writer.writerows(zip(y_true, y_pred, strict=True))
    result = read_confusion(path, prefer_pyarrow=pyarrow_reader)
    expected, labels = sklearn_matrix(y_true, y_pred)
    assert list(result.accumulator.class_names) == labels
    np.testing.assert_array_equal(result.accumulator.matrix, expected)


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_default_columns_are_the_first_two_without_y_true(tmp_path, pyarrow_reader):
    path = write_csv(
        tmp_path / "p.tsv", ["label", "guess", "score"], [[0, 1, 0.5], [1, 1, 0.9]], delimiter="\t"
    )
    result = read_confusion(path, prefer_pyarrow=pyarrow_reader)
    assert (result.selection.truth, result.selection.pred) == ("label", "guess")
    np.testing.assert_array_equal(result.accumulator.matrix, [[0, 1], [0, 1]])


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_ignore_skips_true_labels_in_both_modes(tmp_path, pyarrow_reader):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [[0, 0], [255, 1], [1, 1]])
    acc = read_confusion(path, ignore="255", prefer_pyarrow=pyarrow_reader).accumulator
    np.testing.assert_array_equal(acc.matrix, [[1, 0], [0, 1]])
    named = write_csv(
        tmp_path / "n.csv", ["y_true", "y_pred"], [["a", "a"], ["void", "b"], ["b", "b"]]
    )
    acc = read_confusion(named, ignore="void", prefer_pyarrow=pyarrow_reader).accumulator
    assert acc.class_names == ("a", "b")
    np.testing.assert_array_equal(acc.matrix, [[1, 0], [0, 1]])


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_classes_fix_the_order_of_names_and_name_integer_indices(tmp_path, pyarrow_reader):
    named = write_csv(tmp_path / "n.csv", ["y_true", "y_pred"], [["b", "a"], ["a", "a"]])
    acc = read_confusion(named, classes=["b", "a", "c"], prefer_pyarrow=pyarrow_reader).accumulator
    assert acc.class_names == ("b", "a", "c")
    np.testing.assert_array_equal(acc.matrix, [[0, 1, 0], [0, 1, 0], [0, 0, 0]])
    ints = write_csv(tmp_path / "i.csv", ["y_true", "y_pred"], [[1, 0], [0, 0]])
    acc = read_confusion(ints, classes=["b", "a", "c"], prefer_pyarrow=pyarrow_reader).accumulator
    assert acc.class_names == ("b", "a", "c")
    np.testing.assert_array_equal(acc.matrix, [[1, 0, 0], [1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_labels_str_reads_numbers_as_names(tmp_path, pyarrow_reader):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [[10, 10], [2, 10], [100, 2]])
    result = read_confusion(path, labels="str", prefer_pyarrow=pyarrow_reader)
    assert result.mode == "names"
    assert result.accumulator.class_names == ("2", "10", "100")
    np.testing.assert_array_equal(result.accumulator.matrix, [[0, 1, 0], [0, 1, 0], [1, 0, 0]])


def test_shipped_digits_csv_matches_its_named_twin():
    ints = read_confusion(EXAMPLES / "digits_predictions.csv").accumulator
    names = read_confusion(EXAMPLES / "digits_named.csv").accumulator
    spelled = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    order = [names.class_names.index(name) for name in spelled]
    np.testing.assert_array_equal(ints.matrix, names.matrix[np.ix_(order, order)])
    assert ints.num_samples == 899


@pytest.mark.filterwarnings("ignore:A single label was found:UserWarning")
@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abcde"), st.sampled_from("abcdef")), min_size=1, max_size=60
    ),
    st.integers(min_value=1, max_value=9),
)
def test_any_chunk_size_gives_the_sklearn_matrix(tmp_path_factory, rows, chunk_rows):
    path = write_csv(tmp_path_factory.mktemp("h") / "p.csv", ["y_true", "y_pred"], rows)
    old = _io.STDLIB_CHUNK_ROWS
    _io.STDLIB_CHUNK_ROWS = chunk_rows
    try:
        result = read_confusion(path, prefer_pyarrow=False)
    finally:
        _io.STDLIB_CHUNK_ROWS = old
    y_true, y_pred = zip(*rows, strict=True)
    expected, labels = sklearn_matrix(list(y_true), list(y_pred))
    assert list(result.accumulator.class_names) == labels
    np.testing.assert_array_equal(result.accumulator.matrix, expected)


# ---------------------------------------------------------------------- other formats
@needs_pyarrow
def test_parquet_equals_csv(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setattr(_io, "CHUNK_ROWS", 10)
    rng = np.random.default_rng(3)
    y_true = rng.integers(0, 5, 100)
    y_pred = np.array(["0", "1", "2", "x"])[rng.integers(0, 4, 100)]  # text predictions
    pq.write_table(pa.table({"y_true": y_true, "y_pred": y_pred}), tmp_path / "p.parquet")
    result = read_confusion(tmp_path / "p.parquet")
    expected, labels = sklearn_matrix([str(v) for v in y_true], y_pred.tolist())
    assert result.mode == "names"
    assert list(result.accumulator.class_names) == ["0", "1", "2", "3", "4", "x"] == labels
    np.testing.assert_array_equal(result.accumulator.matrix, expected)


def test_npy_structured_and_two_dimensional(tmp_path, monkeypatch):
    monkeypatch.setattr(_io, "CHUNK_ROWS", 4)
    rng = np.random.default_rng(4)
    table = np.zeros(30, dtype=[("y_pred", "i8"), ("y_true", "i8"), ("w", "f8")])
    table["y_true"], table["y_pred"] = rng.integers(0, 3, 30), rng.integers(0, 3, 30)
    table["w"] = rng.random(30)
    np.save(tmp_path / "s.npy", table)
    acc = read_confusion(tmp_path / "s.npy", weight="w").accumulator
    expected, _ = sklearn_matrix(table["y_true"].tolist(), table["y_pred"].tolist(), table["w"])
    np.testing.assert_allclose(acc.matrix, expected, rtol=1e-12)

    np.save(tmp_path / "2d.npy", np.column_stack([table["y_true"], table["y_pred"]]))
    acc = read_confusion(tmp_path / "2d.npy").accumulator
    np.testing.assert_array_equal(
        acc.matrix, sklearn_matrix(table["y_true"].tolist(), table["y_pred"].tolist())[0]
    )


@pytest.mark.parametrize("compressed", [True, False], ids=["savez_compressed", "savez"])
def test_npz_masks_stream_with_void_and_class_names(tmp_path, monkeypatch, compressed):
    monkeypatch.setattr(_io, "CHUNK_ROWS", 37)
    rng = np.random.default_rng(5)
    masks = rng.integers(0, 4, size=(6, 9, 11)).astype(np.uint8)
    masks[rng.random(masks.shape) < 0.1] = 255
    predicted = np.where(rng.random(masks.shape) < 0.7, masks, rng.integers(0, 4, masks.shape))
    predicted = np.where(predicted == 255, 0, predicted).astype(np.uint8)
    save = np.savez_compressed if compressed else np.savez
    save(
        tmp_path / "m.npz",
        y_true=masks,
        y_pred=predicted,
        class_names=np.array(["sky", "road", "car", "tree"]),
    )
    acc = read_confusion(tmp_path / "m.npz", ignore="255").accumulator
    keep = masks != 255
    expected = skm.confusion_matrix(masks[keep], predicted[keep], labels=[0, 1, 2, 3])
    np.testing.assert_array_equal(acc.matrix, expected)
    assert acc.class_names == ("sky", "road", "car", "tree")


def test_shipped_segmentation_example():
    with np.load(EXAMPLES / "digits_segmentation.npz") as data:
        y_true, y_pred = data["y_true"], data["y_pred"]
        names = data["class_names"].tolist()
    acc = read_confusion(EXAMPLES / "digits_segmentation.npz", ignore="255").accumulator
    keep = y_true != 255
    assert (~keep).any() and y_true.ndim == 3
    np.testing.assert_array_equal(
        acc.matrix, skm.confusion_matrix(y_true[keep], y_pred[keep], labels=range(11))
    )
    assert list(acc.class_names) == names and names[0] == "background"


# ---------------------------------------------------------------------- errors
def test_missing_file_and_unknown_suffix_are_usage_errors(tmp_path):
    with pytest.raises(InputError, match=r"nope\.csv: no such file") as caught:
        read_confusion(tmp_path / "nope.csv")
    assert caught.value.usage
    (tmp_path / "p.xlsx").write_text("x")
    with pytest.raises(InputError, match=r"unknown file type '\.xlsx'"):
        read_confusion(tmp_path / "p.xlsx")


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_unknown_column_names_the_file_and_the_columns(tmp_path, pyarrow_reader):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [[0, 0]])
    with pytest.raises(
        InputError,
        match=r"p\.csv: no column 'label' \(given by `--true`\); "
        r"the file's columns are 'y_true', 'y_pred'",
    ) as caught:
        read_confusion(path, truth="label", prefer_pyarrow=pyarrow_reader)
    assert caught.value.usage


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_a_late_unparsable_value_names_column_and_row(tmp_path, small_chunks, pyarrow_reader):
    rows = [[i % 3, (i + 1) % 3] for i in range(200)]
    rows[150][1] = "oops"  # after the first chunk: the column was read as integers
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], rows)
    with pytest.raises(
        InputError,
        match=r"p\.csv: column 'y_pred', row 151: 'oops' is not an "
        r"integer, and the column's labels are read as numbers; "
        r"pass `--labels str`",
    ) as caught:
        read_confusion(path, prefer_pyarrow=pyarrow_reader)
    assert not caught.value.usage


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_a_row_with_too_few_fields_is_named(tmp_path, small_chunks, pyarrow_reader):
    path = tmp_path / "p.csv"
    path.write_text("y_true,y_pred\n" + "1,1\n" * 40 + "2\n" + "0,0\n" * 5)
    with pytest.raises(InputError, match=r"p\.csv: row 41 has 1 fields, but the header has 2"):
        read_confusion(path, prefer_pyarrow=pyarrow_reader)


@pytest.mark.parametrize("pyarrow_reader", READERS)
@pytest.mark.parametrize(
    ("value", "column", "message"),
    [
        ("-1", "y_true", r"label -1 is negative"),
        ("", "y_true", r"the value is empty"),
        # a float label column is a kernel specialisation of its own (CI only)
        pytest.param("2.5", "y_pred", r"label 2.5 is not a whole number", marks=pytest.mark.slow),
        ("nan", "w", r"weight nan is not a finite non-negative number"),
        ("-3", "w", r"weight -3.0 is not a finite non-negative number"),
    ],
    ids=["negative", "empty", "fractional", "nan-weight", "negative-weight"],
)
def test_invalid_values_name_column_and_row(
    tmp_path, small_chunks, pyarrow_reader, value, column, message
):
    # A float prediction column only where a fractional label is the point (a float label
    # column is a kernel specialisation of its own); "2.5" in an integer column is another error.
    prediction = "0.0" if value == "2.5" else "0"
    rows = [["1", prediction, "1.5"] for _ in range(30)]
    rows[22][["y_true", "y_pred", "w"].index(column)] = value
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred", "w"], rows)
    with pytest.raises(InputError, match=rf"p\.csv: column '{column}', row 23: {message}"):
        read_confusion(path, weight="w", prefer_pyarrow=pyarrow_reader)


def test_unknown_name_with_fixed_classes_and_empty_labels(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [["a", "a"], ["a", "zebra"]])
    with pytest.raises(
        InputError,
        match=r"column 'y_pred', row 2: 'zebra' is not one of the "
        r"classes given by `--classes` \(a, b\)",
    ):
        read_confusion(path, classes=["a", "b"], prefer_pyarrow=False)
    path = write_csv(tmp_path / "e.csv", ["y_true", "y_pred"], [["a", "a"], ["", "a"]])
    with pytest.raises(InputError, match=r"column 'y_true', row 2: the label is empty"):
        read_confusion(path, prefer_pyarrow=False)


def test_integer_label_beyond_classes_and_huge_labels(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [[0, 0], [1, 3]])
    with pytest.raises(InputError, match=r"row 2: label 3 is not an index into the 2 classes"):
        read_confusion(path, classes=["a", "b"])
    path = write_csv(tmp_path / "h.csv", ["y_true", "y_pred"], [[0, 0], [123456, 0]])
    with pytest.raises(InputError, match=r"column 'y_true', row 2: label 123456 is too large"):
        read_confusion(path)


def test_npz_error_gives_the_element_position(tmp_path):
    masks = np.zeros((2, 3, 4), dtype=np.int64)
    masks[1, 2, 3] = -5
    np.savez(tmp_path / "m.npz", y_true=masks, y_pred=np.zeros_like(masks))
    with pytest.raises(
        InputError,
        match=r"m\.npz: column 'y_true', element \(1, 2, 3\): "
        r"label -5 is negative",
    ):
        read_confusion(tmp_path / "m.npz")


def test_empty_file_and_all_ignored(tmp_path):
    (tmp_path / "e.csv").write_text("y_true,y_pred\n")
    with pytest.raises(InputError, match="no data rows"):
        read_confusion(tmp_path / "e.csv", prefer_pyarrow=False)
    path = write_csv(tmp_path / "v.csv", ["y_true", "y_pred"], [["void", "a"]])
    with pytest.raises(InputError, match="every one of the 1 rows has the ignored truth label"):
        read_confusion(path, ignore="void")


def test_reading_emits_no_warning(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [[0, 1], [1, 1]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_confusion(path)


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_no_header_and_an_explicit_delimiter(tmp_path, pyarrow_reader):
    path = tmp_path / "p.txt"
    path.write_text("0;1;x\n1;1;y\n1;0;z\n")
    result = read_confusion(path, header=False, delimiter=";", prefer_pyarrow=pyarrow_reader)
    assert (result.selection.truth, result.selection.pred) == ("f0", "f1")
    np.testing.assert_array_equal(result.accumulator.matrix, [[0, 1], [1, 1]])
    with pytest.raises(InputError, match=r"row 2: label -1 is negative"):
        path.write_text("0;1\n-1;1\n")
        read_confusion(path, header=False, delimiter=";", prefer_pyarrow=pyarrow_reader)


def test_npy_text_labels_share_the_registry(tmp_path):
    table = np.array(
        [("cat", "cat"), ("dog", "fox"), ("dog", "dog")], dtype=[("y_true", "U8"), ("y_pred", "U8")]
    )
    np.save(tmp_path / "t.npy", table)
    acc = read_confusion(tmp_path / "t.npy").accumulator
    assert acc.class_names == ("cat", "dog", "fox")
    np.testing.assert_array_equal(acc.matrix, [[1, 0, 0], [0, 1, 1], [0, 0, 0]])


# ---------------------------------------------------------------------- hostile text
@pytest.mark.parametrize(
    ("data", "end"),
    [
        (b'a,b\n1,"x\ny"\n2,3\n', 16),  # a newline inside a quoted field
        (b'a,b\n1,tv 12"\n2,3\n4,"open\n5', 17),  # a stray quote, then a quoted field still open
        (b'1,"a""b"\n2,"c\n', 9),  # an escaped quote; an open field at the end
        (b'x\r\ny\r\n"q', 6),  # CRLF records
        (b'"ab"cd,1\n2', 9),  # a quoted field that goes on unquoted
        (b"no newline yet", 0),
    ],
    ids=["quoted-newline", "stray-quote", "escaped-quote", "crlf", "quoted-then-text", "none"],
)
def test_record_end_reads_quotes_as_pyarrow_does(data, end):
    assert _io._record_end(bytearray(data), len(data)) == end


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_stray_quotes_in_unquoted_fields_are_text(tmp_path, small_chunks, pyarrow_reader):
    rows = [[i % 3, (i * 7) % 3, 'tv 12"' if i % 2 else 'box "x" 3'] for i in range(200)]
    path = tmp_path / "p.csv"
    path.write_text("y_true,y_pred,item\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows))
    result = read_confusion(path, prefer_pyarrow=pyarrow_reader)
    expected, _ = sklearn_matrix([r[0] for r in rows], [r[1] for r in rows])
    np.testing.assert_array_equal(result.accumulator.matrix, expected)
    assert result.num_rows == 200


@needs_pyarrow
def test_a_record_longer_than_the_cap_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(_io, "CSV_BLOCK_BYTES", 64)
    monkeypatch.setattr(_io, "MAX_RECORD_BYTES", 1024)
    path = tmp_path / "p.csv"
    path.write_text("y_true,y_pred,note\n0,0,a\n1,1," + "x" * 5000 + "\n1,0,b\n")
    with pytest.raises(InputError, match=r"p\.csv: row 2 is longer than 0 MiB \(a quoted field "):
        read_confusion(path, classes=None)
    # a record longer than pyarrow's parse block but under the cap is read
    monkeypatch.setattr(_io, "CSV_PARSE_BLOCK_BYTES", 256)
    monkeypatch.setattr(_io, "MAX_RECORD_BYTES", 1 << 20)
    assert read_confusion(path).accumulator.matrix.tolist() == [[1, 0], [1, 1]]


def test_a_huge_field_is_one_line_error_with_the_standard_library(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("y_true,y_pred,note\n0,0,a\n1,1," + "x" * 200_000 + "\n")
    with pytest.raises(InputError, match=r"line 3: a field is longer than 131,072 characters"):
        read_confusion(path, prefer_pyarrow=False)


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_bytes_that_are_not_utf8_name_the_line(tmp_path, pyarrow_reader):
    path = tmp_path / "p.csv"
    path.write_bytes(b"y_true,y_pred\ncat,cat\n\xe9t\xe9,cat\n")
    with pytest.raises(
        InputError,
        match=r"p\.csv: line 3 is not UTF-8 text \(byte 0xe9 at "
        r"offset 22\); save the file as UTF-8",
    ):
        read_confusion(path, prefer_pyarrow=pyarrow_reader)


def test_utf8_error_position_across_read_blocks(tmp_path, monkeypatch):
    path = tmp_path / "p.csv"
    # a two-byte character cut by the 1 MiB block boundary, then a bad byte on line 3
    head = b"y_true,y_pred\n" + b"a" * ((1 << 20) - 15) + b"\xc3\xa9,b\n"
    path.write_bytes(head + b"c,\xff\n")
    error = _io._utf8_error(path)
    assert str(error).startswith(
        f"{path}: line 3 is not UTF-8 text (byte 0xff at offset {len(head) + 2:,})"
    )


@pytest.mark.parametrize(
    ("magic", "what"),
    [
        (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
        (b"PK\x03\x04", "a zip archive"),
        (b"PAR1", "a Parquet file"),
        (b"\x93NUMPY", "a numpy array"),
    ],
)
def test_binary_data_named_csv_is_named(tmp_path, magic, what):
    path = tmp_path / "p.csv"
    path.write_bytes(magic + bytes(100))
    with pytest.raises(InputError, match=f"p\\.csv: holds {what}, not delimited text") as caught:
        read_confusion(path)
    assert caught.value.usage


def test_a_pipe_is_not_read(tmp_path):
    fifo = tmp_path / "p.csv"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"is not a regular file \(a pipe or a device\)"):
        read_confusion(fifo)


# ---------------------------------------------------------------------- class limits and --classes
@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_distinct_names_are_capped(tmp_path, small_chunks, pyarrow_reader):
    path = write_csv(
        tmp_path / "p.csv", ["y_true", "y_pred"], [[f"id{i}", "id0"] for i in range(50)]
    )
    with pytest.raises(
        InputError,
        match=r"column 'y_true', row 31: 'id30' is distinct label "
        r"number 31, over the limit of 30 classes.*"
        r"`--max-classes 60`",
    ):
        read_confusion(path, max_classes=30, prefer_pyarrow=pyarrow_reader)
    result = read_confusion(path, max_classes=50, prefer_pyarrow=pyarrow_reader)
    assert result.accumulator.num_classes == 50
    assert result.growths <= 8  # the matrix doubles, it does not grow class by class
    with pytest.raises(InputError, match=r"`--classes` holds 3 classes, over the limit of 2"):
        read_confusion(path, classes=["a", "b", "c"], max_classes=2)


@pytest.mark.parametrize("pyarrow_reader", READERS)
def test_integer_column_indexes_classes_beside_a_text_column(tmp_path, pyarrow_reader):
    rows = [["cat", 1], ["dog", 1], ["void", 0], ["cat", 0]]
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], rows)
    result = read_confusion(
        path, classes=["cat", "dog"], ignore="void", prefer_pyarrow=pyarrow_reader
    )
    np.testing.assert_array_equal(result.accumulator.matrix, [[1, 1], [0, 1]])
    assert result.ignored_rows == 1 and result.ignore == "void"
    # without classes, the numbers are names as well
    plain = read_confusion(path, prefer_pyarrow=pyarrow_reader)
    assert plain.accumulator.class_names == ("0", "1", "cat", "dog", "void")


def test_ignore_outside_int64_and_duplicate_classes(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["y_true", "y_pred"], [[0, 0], [1, 1]])
    with pytest.raises(InputError, match=r"`--ignore` is 18446744073709551616, outside the range"):
        read_confusion(path, ignore=str(2**64))
    with pytest.raises(InputError, match=r"`--classes` lists 'a' twice"):
        read_confusion(path, classes=["a", "b", "a"])


def test_void_label_note_and_ignored_count(tmp_path):
    path = write_csv(
        tmp_path / "p.csv", ["y_true", "y_pred"], [[0, 0], [1, 1], [2, 1], [255, 0], [255, 2]]
    )
    result = read_confusion(path)
    assert len(result.notes) == 1 and "`--ignore 255`" in result.notes[0]
    ignored = read_confusion(path, ignore="255")
    assert ignored.notes == [] and ignored.ignored_rows == 2
    assert ignored.accumulator.class_names == ("0", "1", "2")


# ---------------------------------------------------------------------- hostile .npz members
def _masks(shape=(3, 5, 7), seed=0):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 4, shape)
    return truth, np.where(rng.random(shape) < 0.6, truth, rng.integers(0, 4, shape))


@pytest.mark.parametrize(
    "layout",
    # the mixed layouts are kernel specialisations of their own (seconds on a cold cache)
    [
        "both-fortran",
        *(pytest.param(m, marks=pytest.mark.slow) for m in ("truth-fortran", "pred-fortran")),
    ],
)
def test_fortran_order_members_stream_to_the_same_matrix(tmp_path, monkeypatch, layout):
    monkeypatch.setattr(_io, "CHUNK_ROWS", 11)
    truth, pred = _masks()
    f_truth = np.asfortranarray(truth) if layout != "pred-fortran" else truth
    f_pred = np.asfortranarray(pred) if layout != "truth-fortran" else pred
    np.savez_compressed(tmp_path / "m.npz", y_true=f_truth, y_pred=f_pred)
    result = read_confusion(tmp_path / "m.npz")
    expected, _ = sklearn_matrix(truth.ravel(), pred.ravel())
    np.testing.assert_array_equal(result.accumulator.matrix, expected)
    # positions in errors are the element's own index, whatever the order of reading
    truth[2, 1, 4] = -3
    np.savez(tmp_path / "bad.npz", y_true=np.asfortranarray(truth), y_pred=f_pred)
    with pytest.raises(InputError, match=r"element \(2, 1, 4\): label -3 is negative"):
        read_confusion(tmp_path / "bad.npz")


def _rewrite_member(path: Path, member: str, change) -> None:
    import zipfile

    with zipfile.ZipFile(path) as archive:
        data = {name: archive.read(name) for name in archive.namelist()}
    data[member] = change(data[member])
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in data.items():
            archive.writestr(name, content)


def test_object_damaged_and_truncated_members_are_one_line_errors(tmp_path):
    labels = np.array(["a", "b"], dtype=object)
    np.savez(tmp_path / "o.npz", y_true=labels, y_pred=labels)
    with pytest.raises(
        InputError,
        match=r"member 'y_true.npy' holds Python objects \(dtype "
        r"object\), which are not read",
    ):
        read_confusion(tmp_path / "o.npz")

    truth, pred = _masks()
    np.savez(tmp_path / "s.npz", y_true=truth, y_pred=pred)
    _rewrite_member(tmp_path / "s.npz", "y_pred.npy", lambda data: data[:-80])
    with pytest.raises(
        InputError,
        match=r"member 'y_pred.npy' ends after 95 elements, but its "
        r"header announces shape \(3, 5, 7\) \(105 elements\)",
    ):
        read_confusion(tmp_path / "s.npz")

    np.savez(tmp_path / "h.npz", y_true=truth, y_pred=pred)
    _rewrite_member(tmp_path / "h.npz", "y_pred.npy", lambda data: data[:30])
    with pytest.raises(InputError, match=r"member 'y_pred.npy' is not a readable numpy array"):
        read_confusion(tmp_path / "h.npz")

    np.savez_compressed(tmp_path / "c.npz", y_true=truth, y_pred=pred)
    raw = bytearray((tmp_path / "c.npz").read_bytes())
    at = raw.find(b"y_pred.npy") + 120
    raw[at : at + 40] = bytes(40)
    (tmp_path / "c.npz").write_bytes(bytes(raw))
    with pytest.raises(InputError, match=r"member 'y_pred.npy' is (damaged|not a readable)"):
        read_confusion(tmp_path / "c.npz")


def test_class_names_member_is_bounded_and_typed(tmp_path):
    truth, pred = _masks()
    np.savez(
        tmp_path / "o.npz",
        y_true=truth,
        y_pred=pred,
        class_names=np.array(["a", "b"], dtype=object),
    )
    with pytest.raises(InputError, match=r"'class_names.npy' must hold strings or numbers"):
        read_confusion(tmp_path / "o.npz")
    np.savez(tmp_path / "big.npz", y_true=truth, y_pred=pred, class_names=np.arange(8))
    _rewrite_member(
        tmp_path / "big.npz",
        "class_names.npy",
        lambda data: data.replace(b"(8,)", b"(99999999999,)"),
    )
    with pytest.raises(InputError, match=r"must be one short list of names"):
        read_confusion(tmp_path / "big.npz")


@pytest.mark.parametrize("pyarrow_reader", READERS)
@pytest.mark.parametrize(
    ("compression", "name"),
    [("gzip", "p.csv.gz"), ("bz2", "p.csv.bz2"), ("xz", "p.tsv.xz"), ("gzip", "named.csv")],
)
def test_compressed_text_is_streamed(tmp_path, small_chunks, pyarrow_reader, compression, name):
    import bz2
    import gzip
    import lzma

    rows = [[f"c{i % 5}", f"c{(i * 3) % 5}"] for i in range(300)]
    sep = "\t" if ".tsv" in name else ","
    text = "y_true" + sep + "y_pred\n" + "".join(f"{a}{sep}{b}\n" for a, b in rows)
    compress = {"gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[compression]
    path = tmp_path / name
    path.write_bytes(compress(text.encode()))
    result = read_confusion(path, prefer_pyarrow=pyarrow_reader)
    expected, labels = sklearn_matrix([r[0] for r in rows], [r[1] for r in rows])
    assert list(result.accumulator.class_names) == labels
    np.testing.assert_array_equal(result.accumulator.matrix, expected)
    path.write_bytes(compress(text.encode())[:-40])  # cut short
    with pytest.raises(InputError, match=r"the compressed data is damaged or truncated"):
        read_confusion(path, prefer_pyarrow=pyarrow_reader)


@needs_pyarrow
def test_header_names_that_are_not_utf8(tmp_path):
    path = tmp_path / "p.csv"
    path.write_bytes(b"y_tr\xd0ue,y_pred\n0,0\n")
    with pytest.raises(InputError, match=r"p\.csv: line 1 is not UTF-8 text \(byte 0xd0"):
        read_confusion(path)


def test_a_member_announcing_a_huge_shape_fails_fast_within_one_chunk_of_memory(
    tmp_path, no_background_compiles
):
    """A header may claim 10^12 elements over 80 bytes of data: reading stops at the end of
    the data, having allocated at most one chunk, and says the member is truncated."""
    import io
    import tracemalloc
    import zipfile

    def member(values: np.ndarray, shape: tuple[int, ...]) -> bytes:
        buffer = io.BytesIO()
        header = np.lib.format.header_data_from_array_1_0(values)
        header["shape"] = shape
        np.lib.format.write_array_header_1_0(buffer, header)
        buffer.write(values.tobytes())
        return buffer.getvalue()

    path = tmp_path / "huge.npz"
    values = np.arange(10, dtype=np.int64) % 3
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("y_true.npy", member(values, (10**12,)))
        archive.writestr("y_pred.npy", member(values, (10**12,)))
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"ends after 10 elements, but its header announces"):
            read_confusion(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * _io.CHUNK_ROWS * 8  # a few chunks at most, not 8 TB
