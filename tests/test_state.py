"""Durable state: state dicts, pickle, versioned bytes, atomic files (metricstream.serialization).

Oracles: the accumulator that was saved (``==`` compares configuration and counts), and the
hand-checked matrices of the fixture files written by earlier format versions.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metricstream import ConfusionAccumulator, serialization

FIXTURES = Path(__file__).parent / "fixtures"


def _labels_acc() -> ConfusionAccumulator:
    acc = ConfusionAccumulator(3, class_names=["cat", "fish", "hen"], ignore_index=255)
    return acc.update([0, 1, 2, 2, 1, 255, 0], [0, 2, 2, 2, 1, 0, 1])


def _weighted_acc() -> ConfusionAccumulator:
    acc = ConfusionAccumulator(4, weighted=True, class_axis=-1)
    return acc.update([0, 1, 2, 3, 3], [0, 1, 1, 3, 2], weights=[0.5, 1.25, 2.0, 0.75, 3.5])


CASES = {
    "labels-names-ignore": _labels_acc,
    "weighted-float": _weighted_acc,
    "empty": lambda: ConfusionAccumulator(5),
    "one-class": lambda: ConfusionAccumulator(1).update([0, 0], [0, 0]),
    "large-counts": lambda: ConfusionAccumulator.from_matrix(
        np.array([[2**62, 1], [0, 2**40]], dtype=np.int64)
    ),
}

# Hand-checked contents of the fixture files (written by format version 1, metricstream 0.1.0).
FIXTURE_MATRICES = {
    "labels_int64": np.array([[1, 1, 0], [0, 1, 1], [0, 0, 2]], dtype=np.int64),
    "weighted_float64": np.array(
        [[0.5, 0, 0, 0], [0, 1.25, 0, 0], [0, 2.0, 0, 0], [0, 0, 3.5, 0.75]], dtype=np.float64
    ),
}
FIXTURE_CONFIGS = {
    "labels_int64": {
        "num_classes": 3,
        "class_names": ("cat", "fish", "hen"),
        "ignore_index": 255,
        "weighted": False,
        "class_axis": 1,
    },
    "weighted_float64": {
        "num_classes": 4,
        "class_names": None,
        "ignore_index": None,
        "weighted": True,
        "class_axis": -1,
    },
}


def _same(a: ConfusionAccumulator, b: ConfusionAccumulator) -> None:
    assert a == b
    assert a.class_axis == b.class_axis
    assert a.matrix.dtype == b.matrix.dtype
    np.testing.assert_array_equal(a.matrix, b.matrix)


# ---------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_pickle_round_trip(make):
    acc = make()
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        _same(pickle.loads(pickle.dumps(acc, protocol=protocol)), acc)


def test_restored_accumulator_keeps_counting():
    acc = _labels_acc()
    restored = ConfusionAccumulator.from_bytes(acc.to_bytes())
    restored.update([1], [1])
    acc.update([1], [1])
    _same(restored, acc)
    assert restored.f1(average="macro") == acc.f1(average="macro")


@given(
    matrix=st.lists(st.integers(0, 2**40), min_size=1, max_size=36).map(
        lambda v: np.array(v[: int(np.sqrt(len(v))) ** 2], dtype=np.int64)
    ),
    names=st.booleans(),
    ignore=st.one_of(st.none(), st.integers(-(2**40), 2**40)),
    axis=st.integers(-3, 3),
)
@settings(max_examples=60, deadline=None)
def test_bytes_round_trip_property(matrix, names, ignore, axis):
    k = int(np.sqrt(matrix.size))
    acc = ConfusionAccumulator(
        k,
        class_names=[f"c{i}" for i in range(k)] if names else None,
        ignore_index=ignore,
        class_axis=axis,
    )
    acc._matrix[...] = matrix.reshape(k, k)
    _same(ConfusionAccumulator.from_bytes(acc.to_bytes()), acc)
    _same(pickle.loads(pickle.dumps(acc)), acc)


# ---------------------------------------------------------------------------- the state dict
def test_state_dict_is_plain_data_and_independent():
    acc = _labels_acc()
    state = acc.state_dict()
    assert type(state) is dict
    assert state["type"] == "ConfusionAccumulator"
    assert state["format"] == ConfusionAccumulator.state_format == 3
    assert state["config"] == {
        "num_classes": 3,
        "class_names": ["cat", "fish", "hen"],
        "ignore_index": 255,
        "weighted": False,
        "class_axis": 1,
        "threshold": None,
        "logits": False,
    }
    record = state["arrays"]["matrix"]
    assert record["dtype"] == "<i8" and record["shape"] == [3, 3]
    assert isinstance(record["data"], bytes)
    json.dumps({k: v for k, v in state.items() if k != "arrays"})  # builtins only
    np.testing.assert_array_equal(acc.state_arrays()["matrix"], acc.matrix)
    acc.state_arrays()["matrix"][0, 0] = 99  # a copy: the accumulator is unaffected
    assert acc.matrix[0, 0] == 1
    assert pickle.loads(pickle.dumps(acc)).__getstate__() == state


def test_state_dict_accepts_numpy_arrays():
    state = _labels_acc().state_dict()
    state["arrays"]["matrix"] = _labels_acc().state_arrays()["matrix"]
    assert ConfusionAccumulator.from_state_dict(state) == _labels_acc()
    state["arrays"]["matrix"] = state["arrays"]["matrix"].astype(np.float64)
    assert ConfusionAccumulator.from_state_dict(state) == _labels_acc()


def _set_matrix(state, matrix):
    state["arrays"]["matrix"] = np.asarray(matrix)


@pytest.mark.parametrize(
    "change, error, match",
    [
        (lambda s: s.update(format=4), ValueError, r"format 4, written by a newer metricstream"),
        (lambda s: s.update(format=0), ValueError, r"format 0; valid formats are 1 to 3"),
        (lambda s: s.pop("format"), ValueError, r"no valid 'format' entry"),
        (lambda s: s.update(format="2"), ValueError, r"no valid 'format' entry"),
        (
            lambda s: s.update(type="ScoreAccumulator"),
            ValueError,
            r"holds a ScoreAccumulator, not a ConfusionAccumulator",
        ),
        (lambda s: s.pop("arrays"), ValueError, r"no 'arrays' dict"),
        (
            lambda s: s["arrays"].pop("matrix"),
            ValueError,
            r"needs 72 bytes of state, but the state given carries 0",
        ),
        (
            lambda s: s["config"].pop("weighted"),
            ValueError,
            r"lacks the setting\(s\) \['weighted'\]",
        ),
        (lambda s: s["config"].update(colour="red"), ValueError, r"does not fit .*colour"),
        (
            lambda s: _set_matrix(s, np.zeros((2, 2), np.int64)),
            ValueError,
            r"needs 72 bytes of state, but the state given carries 32",
        ),
        (lambda s: _set_matrix(s, np.full((3, 3), 0.5)), ValueError, r"fractional counts"),
        (
            lambda s: _set_matrix(s, -np.ones((3, 3), np.int64)),
            ValueError,
            r"holds -1 at \(0, 0\); state values are non-negative",
        ),
        (
            lambda s: _set_matrix(s, np.full((3, 3), 2**64 - 1, np.uint64)),
            ValueError,
            r"2\*\*63 or more",
        ),
        (lambda s: _set_matrix(s, np.full((3, 3), 2.0**63)), ValueError, r"2\*\*63 or more"),
        (lambda s: _set_matrix(s, np.full((3, 3), 1e300)), ValueError, r"2\*\*63 or more"),
        (
            lambda s: s["config"].update(num_classes=0),
            ValueError,
            r"`num_classes` must be at least 1",
        ),
        (
            lambda s: s["config"].update(num_classes=10**5, class_names=None),
            ValueError,
            r"needs 80,000,000,000 bytes of state, but the state given carries 72",
        ),
        (lambda s: s["config"].update(class_names=["a", "a", "b"]), ValueError, r"more than once"),
        (lambda s: s["config"].update(ignore_index=2**64), ValueError, r"must fit in int64"),
    ],
    ids=[
        "newer",
        "zero",
        "no-format",
        "string-format",
        "other-type",
        "no-arrays",
        "no-matrix",
        "no-weighted",
        "unknown-setting",
        "wrong-shape",
        "fractional-counts",
        "negative-counts",
        "uint64-beyond-int64",
        "float-2-63",
        "float-1e300",
        "bad-num-classes",
        "huge-num-classes",
        "duplicate-names",
        "ignore-beyond-int64",
    ],
)
def test_bad_state_dict(change, error, match):
    state = _labels_acc().state_dict()
    change(state)
    with pytest.raises(error, match=match):
        ConfusionAccumulator.from_state_dict(state)


def test_state_dict_rejects_non_dict():
    with pytest.raises(TypeError, match=r"`state` must be a dict made by .*, got list"):
        ConfusionAccumulator.from_state_dict([1, 2])


def test_weighted_state_rejects_nan():
    state = _weighted_acc().state_dict()
    matrix = _weighted_acc().state_arrays()["matrix"]
    matrix[1, 1] = np.nan
    state["arrays"]["matrix"] = matrix
    with pytest.raises(ValueError, match="NaN or infinite"):
        ConfusionAccumulator.from_state_dict(state)


def test_unpickling_a_newer_state_fails_clearly():
    blob = pickle.dumps(_labels_acc())
    acc = ConfusionAccumulator.__new__(ConfusionAccumulator)
    state = pickle.loads(blob).__getstate__()
    state["format"] = 7
    with pytest.raises(ValueError, match="format 7, written by a newer metricstream"):
        acc.__setstate__(state)


def test_format_1_state_dicts_are_upgraded():
    """A format-1 state dict (configuration and matrix at the top level) still loads."""
    v1 = {
        "format": 1,
        "matrix": FIXTURE_MATRICES["labels_int64"],
        **{
            k: list(v) if isinstance(v, tuple) else v
            for k, v in FIXTURE_CONFIGS["labels_int64"].items()
        },
    }
    acc = ConfusionAccumulator.from_state_dict(v1)
    np.testing.assert_array_equal(acc.matrix, FIXTURE_MATRICES["labels_int64"])
    assert acc.state_dict()["format"] == 3
    del v1["weighted"]
    with pytest.raises(ValueError, match=r"format 1 lacks or mangles the entry 'weighted'"):
        ConfusionAccumulator.from_state_dict(v1)


# ---------------------------------------------------------------------------- fixtures
@pytest.mark.parametrize("name", sorted(FIXTURE_MATRICES))
@pytest.mark.parametrize("kind", ["pkl", "msacc"])
@pytest.mark.parametrize("version", [1, 2])
def test_fixtures_from_earlier_versions_load(name, kind, version):
    path = FIXTURES / f"state_v{version}_{name}.{kind}"
    if kind == "pkl":
        with open(path, "rb") as handle:
            acc = pickle.load(handle)
    else:
        acc = ConfusionAccumulator.load(path)
    for field, value in FIXTURE_CONFIGS[name].items():
        assert getattr(acc, field) == value
    assert acc.matrix.dtype == FIXTURE_MATRICES[name].dtype
    np.testing.assert_array_equal(acc.matrix, FIXTURE_MATRICES[name])


def test_binary_layout_is_stable():
    """Today's writer still produces the format-3 fixture byte for byte."""
    expected = (FIXTURES / "state_v3_labels_int64.msacc").read_bytes()
    assert _labels_acc().to_bytes() == expected


# ---------------------------------------------------------------------------- bad bytes
_PREFIX = struct.Struct("<8sIIQ")


def _with_header(blob: bytes, **changes) -> bytes:
    """``blob`` with header fields changed and a valid checksum (a well-formed foreign file)."""
    _, version, size, payload = _PREFIX.unpack_from(blob)
    header = json.loads(blob[_PREFIX.size : _PREFIX.size + size])
    version = changes.pop("binary_format", version)
    payload_size = changes.pop("payload_size", payload)
    header.update(changes)
    raw = json.dumps(header).encode()
    body = (
        _PREFIX.pack(serialization.MAGIC, version, len(raw), payload_size)
        + raw
        + blob[_PREFIX.size + size : -4]
    )
    return body + struct.pack("<I", zlib.crc32(body))


LABELS_BLOB_SIZE = len(_labels_acc().to_bytes())


@pytest.mark.parametrize(
    "corrupt, match",
    [
        (lambda b: b[:-1], r"is truncated: \d+ bytes, but its prefix announces"),
        (lambda b: b[:100], r"is truncated: 100 bytes, but its prefix announces"),
        (lambda b: b[:12], r"truncated: 12 bytes, shorter than the fixed prefix"),
        (lambda b: b[:5], r"not a saved metricstream accumulator"),
        (lambda b: b"", r"not a saved metricstream accumulator: it starts with b''"),
        (lambda b: b + b"\x00", r"is followed by extra bytes"),
        (lambda b: b[:-30] + bytes([b[-30] ^ 1]) + b[-29:], r"corrupt: its checksum does not"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 0x80]), r"corrupt: its checksum does not match"),
        (lambda b: b[:30] + b"#" + b[31:], r"corrupt: its checksum does not match"),
        (lambda b: b"PK\x03\x04" + b[4:], r"not a saved metricstream accumulator"),
        (lambda b: pickle.dumps(_labels_acc()), r"not a saved metricstream accumulator"),
        (lambda b: b.replace(b"\r\n", b"\n", 1), r"not a saved metricstream accumulator"),
        (lambda b: _with_header(b, binary_format=3), r"binary format 3, written by a newer"),
        (lambda b: _with_header(b, format=4), r"format 4, written by a newer"),
        (lambda b: _with_header(b, arrays=[["matrix", "<u2", [3, 3]]]), r"invalid array entry"),
        (
            lambda b: _with_header(
                b,
                config={
                    **json.loads(b[24 : 24 + _PREFIX.unpack_from(b)[2]])["config"],
                    "num_classes": 4,
                    "class_names": None,
                },
            ),
            r"needs 128 bytes of state, but the state given carries 72",
        ),
        (
            lambda b: _with_header(b, arrays=[["matrix", "<i8", [2, 2]]]),
            r"payload bytes that no array announces",
        ),
        (
            lambda b: _with_header(b, type="ScoreAccumulator"),
            r"holds a ScoreAccumulator, not a ConfusionAccumulator",
        ),
    ],
    ids=[
        "truncated-by-one",
        "truncated-in-payload",
        "truncated-in-prefix",
        "magic-only",
        "empty",
        "trailing-byte",
        "flipped-payload-bit",
        "flipped-checksum-bit",
        "flipped-header-byte",
        "zip-file",
        "pickle",
        "newline-converted",
        "newer-binary",
        "newer-state",
        "unknown-dtype",
        "inconsistent-header",
        "wrong-shape",
        "other-type",
    ],
)
def test_bad_bytes_raise_value_error(corrupt, match):
    blob = _labels_acc().to_bytes()
    with pytest.raises(ValueError, match=match):
        ConfusionAccumulator.from_bytes(corrupt(blob))


def test_every_truncation_and_bit_flip_is_caught():
    blob = _weighted_acc().to_bytes()
    for cut in range(len(blob)):
        with pytest.raises(ValueError):
            ConfusionAccumulator.from_bytes(blob[:cut])
    for position in range(len(blob)):
        flipped = bytearray(blob)
        flipped[position] ^= 0x10
        with pytest.raises(ValueError):
            ConfusionAccumulator.from_bytes(bytes(flipped))


@pytest.mark.parametrize(
    "value", ["text", 12, None, np.zeros(3)], ids=["str", "int", "None", "array"]
)
def test_from_bytes_rejects_non_bytes(value):
    with pytest.raises(TypeError, match=r"`data` must be bytes made by `to_bytes\(\)`"):
        ConfusionAccumulator.from_bytes(value)


# ---------------------------------------------------------------------------- files
def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    path = tmp_path / "acc.msacc"
    old = _labels_acc()
    old.save(path)
    new = old.copy().update([2, 2], [0, 0])

    def failing_replace(src, dst):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated"):
        new.save(path)
    monkeypatch.undo()
    assert ConfusionAccumulator.load(path) == old  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acc.msacc"]

    new.save(path)  # overwrite
    assert ConfusionAccumulator.load(path) == new
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acc.msacc"]


def test_saved_file_honours_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        path = _labels_acc().save(tmp_path / "acc.msacc")
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o644


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        ConfusionAccumulator.load(tmp_path / "missing.msacc")
    foreign = tmp_path / "notes.txt"
    foreign.write_text("hello")
    with pytest.raises(ValueError, match=r"file '.*notes\.txt' is not a saved metricstream"):
        ConfusionAccumulator.load(foreign)
    truncated = tmp_path / "cut.msacc"
    truncated.write_bytes(_labels_acc().to_bytes()[:-10])
    with pytest.raises(ValueError, match=r"file '.*cut\.msacc' is truncated"):
        ConfusionAccumulator.load(truncated)
