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
    "labels_int64": {"num_classes": 3, "class_names": ("cat", "fish", "hen"),
                     "ignore_index": 255, "weighted": False, "class_axis": 1},
    "weighted_float64": {"num_classes": 4, "class_names": None, "ignore_index": None,
                         "weighted": True, "class_axis": -1},
}


def _same(a: ConfusionAccumulator, b: ConfusionAccumulator) -> None:
    assert a == b
    assert a.class_axis == b.class_axis
    assert a.matrix.dtype == b.matrix.dtype
    np.testing.assert_array_equal(a.matrix, b.matrix)


# ---------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_state_dict_round_trip(make):
    acc = make()
    _same(ConfusionAccumulator.from_state_dict(acc.state_dict()), acc)


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_pickle_round_trip(make):
    acc = make()
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        _same(pickle.loads(pickle.dumps(acc, protocol=protocol)), acc)


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_bytes_round_trip(make):
    acc = make()
    blob = acc.to_bytes()
    assert blob.startswith(serialization.MAGIC)
    _same(ConfusionAccumulator.from_bytes(blob), acc)
    _same(ConfusionAccumulator.from_bytes(bytearray(blob)), acc)
    _same(ConfusionAccumulator.from_bytes(memoryview(blob)), acc)


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_save_load_round_trip(make, tmp_path):
    acc = make()
    path = acc.save(tmp_path / "acc.msacc")
    assert path == tmp_path / "acc.msacc"
    _same(ConfusionAccumulator.load(path), acc)
    _same(serialization.load(str(path)), acc)


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
        k, class_names=[f"c{i}" for i in range(k)] if names else None, ignore_index=ignore,
        class_axis=axis,
    )
    acc._matrix[...] = matrix.reshape(k, k)
    _same(ConfusionAccumulator.from_bytes(acc.to_bytes()), acc)
    _same(pickle.loads(pickle.dumps(acc)), acc)


# ---------------------------------------------------------------------------- the state dict
def test_state_dict_is_plain_and_independent():
    acc = _labels_acc()
    state = acc.state_dict()
    assert type(state) is dict
    assert state["format"] == serialization.STATE_FORMAT == 1
    assert {k: v for k, v in state.items() if k != "matrix"} == {
        "format": 1, "num_classes": 3, "class_names": ["cat", "fish", "hen"],
        "ignore_index": 255, "weighted": False, "class_axis": 1,
    }
    assert isinstance(state["matrix"], np.ndarray)
    json.dumps({k: v for k, v in state.items() if k != "matrix"})  # builtins only
    state["matrix"][0, 0] = 99  # a copy: the accumulator is unaffected
    assert acc.matrix[0, 0] == 1
    assert pickle.loads(pickle.dumps(acc)).__getstate__().keys() == state.keys()


def test_state_dict_accepts_lists_and_whole_floats():
    state = _labels_acc().state_dict()
    state["matrix"] = state["matrix"].tolist()
    assert ConfusionAccumulator.from_state_dict(state) == _labels_acc()
    state["matrix"] = np.asarray(state["matrix"], dtype=np.float64)
    assert ConfusionAccumulator.from_state_dict(state) == _labels_acc()


@pytest.mark.parametrize(
    "change, error, match",
    [
        (lambda s: s.update(format=2), ValueError, r"format 2, written by a newer metricstream"),
        (lambda s: s.update(format=0), ValueError, r"format 0; valid formats are 1 to 1"),
        (lambda s: s.pop("format"), ValueError, r"no valid 'format' entry"),
        (lambda s: s.update(format="1"), ValueError, r"no valid 'format' entry"),
        (lambda s: s.pop("matrix"), ValueError, r"lacks the key\(s\) \['matrix'\]"),
        (lambda s: s.pop("weighted"), ValueError, r"lacks the key\(s\) \['weighted'\]"),
        (lambda s: s.update(matrix=np.zeros((2, 2), np.int64)), ValueError,
         r"shape \(2, 2\), but `num_classes` is 3"),
        (lambda s: s.update(matrix=np.full((3, 3), 0.5)), ValueError,
         r"dtype float64, which does not fit"),
        (lambda s: s.update(matrix=-np.ones((3, 3), np.int64)), ValueError,
         r"holds -1 at \(0, 0\); counts are non-negative"),
        (lambda s: s.update(num_classes=0), ValueError, r"`num_classes` must be at least 1"),
        (lambda s: s.update(class_names=["a", "a", "b"]), ValueError, r"more than once"),
    ],
    ids=["newer", "zero", "no-format", "string-format", "no-matrix", "no-weighted",
         "wrong-shape", "fractional-counts", "negative-counts", "bad-num-classes",
         "duplicate-names"],
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
    state["matrix"][1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        ConfusionAccumulator.from_state_dict(state)


def test_unpickling_a_newer_state_fails_clearly():
    blob = pickle.dumps(_labels_acc())
    acc = ConfusionAccumulator.__new__(ConfusionAccumulator)
    state = pickle.loads(blob).__getstate__()
    state["format"] = 7
    with pytest.raises(ValueError, match="format 7, written by a newer metricstream"):
        acc.__setstate__(state)


def test_older_formats_are_upgraded(monkeypatch):
    """The upgrade chain runs: a format-1 state loads when the current format is 2."""
    def upgrade_1_to_2(state):
        state["class_axis"] = state.pop("axis_v1", state["class_axis"])
        return state

    monkeypatch.setattr(serialization, "STATE_FORMAT", 2)
    monkeypatch.setitem(serialization._UPGRADES, 1, upgrade_1_to_2)
    with open(FIXTURES / "state_v1_labels_int64.pkl", "rb") as handle:
        acc = pickle.load(handle)
    np.testing.assert_array_equal(acc.matrix, FIXTURE_MATRICES["labels_int64"])
    assert acc.state_dict()["format"] == 2


# ---------------------------------------------------------------------------- fixtures
@pytest.mark.parametrize("name", sorted(FIXTURE_MATRICES))
@pytest.mark.parametrize("kind", ["pkl", "msacc"])
def test_fixtures_from_earlier_versions_load(name, kind):
    path = FIXTURES / f"state_v1_{name}.{kind}"
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
    """Today's writer still produces the version-1 fixture byte for byte."""
    expected = (FIXTURES / "state_v1_labels_int64.msacc").read_bytes()
    assert _labels_acc().to_bytes() == expected


# ---------------------------------------------------------------------------- bad bytes
def _with_header(blob: bytes, **changes) -> bytes:
    """``blob`` with header fields changed and a valid checksum (a well-formed foreign file)."""
    _, version, size = struct.unpack_from("<8sII", blob)
    header = json.loads(blob[16 : 16 + size])
    version = changes.pop("binary_format", version)
    header.update(changes)
    raw = json.dumps(header).encode()
    body = struct.pack("<8sII", serialization.MAGIC, version, len(raw)) + raw + blob[16 + size : -4]
    return body + struct.pack("<I", zlib.crc32(body))


@pytest.mark.parametrize(
    "corrupt, match",
    [
        (lambda b: b[:-1], r"is truncated: 233 bytes, but its header describes 234"),
        (lambda b: b[:100], r"is truncated: 100 bytes, but its header alone needs 162"),
        (lambda b: b[:12], r"truncated: 12 bytes, shorter than the fixed prefix"),
        (lambda b: b[:5], r"not a saved metricstream accumulator"),
        (lambda b: b"", r"not a saved metricstream accumulator: it starts with b''"),
        (lambda b: b + b"\x00", r"is followed by extra bytes"),
        (lambda b: b[:200] + bytes([b[200] ^ 1]) + b[201:], r"corrupt: its checksum does not"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 0x80]), r"corrupt: its checksum does not match"),
        (lambda b: b[:20] + b"#" + b[21:], r"corrupt: its checksum does not match"),
        (lambda b: b"PK\x03\x04" + b[4:], r"not a saved metricstream accumulator"),
        (lambda b: pickle.dumps(_labels_acc()), r"not a saved metricstream accumulator"),
        (lambda b: b.replace(b"\r\n", b"\n", 1), r"not a saved metricstream accumulator"),
        (lambda b: _with_header(b, binary_format=2), r"binary format 2, written by a newer"),
        (lambda b: _with_header(b, format=2), r"state format|format 2, written by a newer"),
        (lambda b: _with_header(b, dtype="<u2"), r"unreadable header"),
        (lambda b: _with_header(b, num_classes=4, class_names=None),
         r"invalid state: state `matrix` has shape \(3, 3\), but `num_classes` is 4"),
        (lambda b: _with_header(b, shape=[2, 2]), r"followed by extra bytes"),
    ],
    ids=["truncated-by-one", "truncated-in-payload", "truncated-in-prefix", "magic-only",
         "empty", "trailing-byte", "flipped-payload-bit", "flipped-checksum-bit",
         "flipped-header-byte", "zip-file", "pickle", "newline-converted", "newer-binary",
         "newer-state", "unknown-dtype", "inconsistent-header", "wrong-shape"],
)
def test_bad_bytes_raise_value_error(corrupt, match):
    blob = _labels_acc().to_bytes()
    assert len(blob) == 234
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


@pytest.mark.parametrize("value", ["text", 12, None, np.zeros(3)],
                         ids=["str", "int", "None", "array"])
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
