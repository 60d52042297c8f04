"""Hostile state: bytes, state dicts and files made by an attacker, not by ``to_bytes``/``save``.

What is promised (metricstream.serialization): ``from_bytes`` and ``from_state_dict`` raise only
``ValueError`` (``TypeError`` for a wrong Python type), verify the checksum before parsing,
and allocate no more than the input's size justifies; ``load`` reads only regular files, the
fixed prefix first and then exactly what it announces (a large file is checksummed in pieces
before it is held in memory), so a FIFO, ``/dev/zero`` or a huge sparse file cannot block it or
exhaust memory. Unpickling is documented as unsafe for untrusted data.

Oracles: the exception types, the messages, and ``tracemalloc``'s peak per input (a bound of a
few times the input's size plus a constant, far below what an unchecked allocation would take).
The fuzz loops are seeded and bounded in count, so they take the same few seconds every run.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

import metricstream.serialization as codec
from metricstream import Accumulator, AccumulatorGroup, ConfusionAccumulator, ScoreAccumulator
from metricstream.serialization import MAGIC, stale_temporaries
from tests.sync_fixtures import LabelHistogram, WeightTotals, make_group

CONFIG = {
    "num_classes": 2,
    "class_names": None,
    "ignore_index": None,
    "weighted": False,
    "class_axis": 1,
    "threshold": None,
}
SLACK = 1 << 20  # constant allowance of the memory bound (interpreter noise, small objects)


# ---------------------------------------------------------------------------- blob crafting
def craft(
    header: object = None,
    payload: bytes = b"",
    *,
    version: int = 2,
    header_bytes: bytes | None = None,
    payload_size: int | None = None,
) -> bytes:
    """A blob with a valid checksum around any header and payload."""
    text = json.dumps(header).encode() if header_bytes is None else header_bytes
    if version == 1:
        body = struct.pack("<8sII", MAGIC, 1, len(text)) + text + payload
    else:
        size = len(payload) if payload_size is None else payload_size
        body = struct.pack("<8sIIQ", MAGIC, version, len(text), size) + text + payload
    return body + struct.pack("<I", zlib.crc32(body))


def header(
    config=None,
    arrays=(("matrix", "<i8", [2, 2]),),
    type_name="ConfusionAccumulator",
    state_format=2,
) -> dict:
    return {
        "type": type_name,
        "format": state_format,
        "config": CONFIG if config is None else config,
        "arrays": [list(entry) for entry in arrays],
    }


def zeros(n: int, dtype: str = "<i8") -> bytes:
    return np.zeros(n, dtype).tobytes()


def group_header(members, arrays) -> dict:
    return {
        "type": "AccumulatorGroup",
        "format": 1,
        "config": {"members": members},
        "arrays": arrays,
    }


CRAFTED = {
    # name: (blob, expected message fragment)
    "negative-count": (
        craft(header(), np.array([-1, 0, 0, 0], "<i8").tobytes()),
        "state `matrix` holds -1 at (0, 0); state values are non-negative",
    ),
    "count-2-63-via-float": (
        craft(
            header(arrays=[("matrix", "<f8", [2, 2])]),
            np.array([2.0**63, 0, 0, 0], "<f8").tobytes(),
        ),
        "holds counts of 2**63 or more, beyond int64",
    ),
    "count-1e300-via-float": (
        craft(
            header(arrays=[("matrix", "<f8", [2, 2])]), np.array([1e300, 0, 0, 0], "<f8").tobytes()
        ),
        "holds counts of 2**63 or more, beyond int64",
    ),
    "fractional-count": (
        craft(
            header(arrays=[("matrix", "<f8", [2, 2])]), np.array([0.5, 0, 0, 0], "<f8").tobytes()
        ),
        "holds fractional counts in an integer state",
    ),
    "nan-weight": (
        craft(
            header({**CONFIG, "weighted": True}, [("matrix", "<f8", [2, 2])]),
            np.array([np.nan, 0, 0, 0], "<f8").tobytes(),
        ),
        "holds NaN or infinite values",
    ),
    "negative-weight": (
        craft(
            header({**CONFIG, "weighted": True}, [("matrix", "<f8", [2, 2])]),
            np.array([0, -0.5, 0, 0], "<f8").tobytes(),
        ),
        "holds -0.5 at (0, 1)",
    ),
    "num-classes-4000-tiny-payload": (
        craft(header({**CONFIG, "num_classes": 4000}), zeros(4)),
        "the configuration needs 128,000,000 bytes of state, but the state given carries 32",
    ),
    "num-classes-1e9-tiny-payload": (
        craft(header({**CONFIG, "num_classes": 10**9}), zeros(4)),
        "needs 8,000,000,000,000,000,000 bytes of state",
    ),
    "v1-num-classes-5000": (
        craft(
            {
                "format": 1,
                "dtype": "<i8",
                "shape": [2, 2],
                **{k: v for k, v in CONFIG.items() if k != "threshold"},
                "num_classes": 5000,
            },
            zeros(4),
            version=1,
        ),
        "needs 200,000,000 bytes of state",
    ),
    "json-nested-1000": (
        craft(
            header_bytes=b'{"type":"ConfusionAccumulator","format":2,"arrays":[],"config":'
            + b"[" * 1000
            + b"]" * 1000
            + b"}"
        ),
        # Whether 1000 levels overflow the JSON parser depends on the process's recursion limit
        # (libraries such as torch's compiler raise it): either way a ValueError, in bounded
        # memory.
        (
            "has an unreadable header (RecursionError)",
            "has a header without a valid type, format, config and array list",
        ),
    ),
    "json-nested-100000": (
        craft(header_bytes=b"[" * 100_000 + b"]" * 100_000),
        "has an unreadable header (RecursionError)",
    ),
    "json-integer-5000-digits": (
        craft(
            header_bytes=b'{"type":"ConfusionAccumulator","format":2,"config":{"n":'
            + b"9" * 5000
            + b'},"arrays":[]}'
        ),
        "has an unreadable header (ValueError)",
    ),
    "json-not-utf8": (
        craft(header_bytes=b"\xff\xfe{}"),
        "has an unreadable header (UnicodeDecodeError)",
    ),
    "json-not-an-object": (craft(header_bytes=b"[1, 2]"), "header that is not a JSON object"),
    "header-length-2-32": (
        struct.pack("<8sIIQ", MAGIC, 2, 2**32 - 1, 0) + b"{}" + zeros(1)[:4],
        "is truncated: 30 bytes, but its prefix announces 4294967323",
    ),
    "payload-length-2-64": (
        struct.pack("<8sIIQ", MAGIC, 2, 2, 2**64 - 1) + b"{}" + b"\0" * 4,
        "but its prefix announces 18446744073709551645",
    ),
    "header-beyond-cap": (
        craft(header_bytes=b" " * (codec.MAX_HEADER_BYTES + 1)),
        f"more than the {codec.MAX_HEADER_BYTES} a configuration can need",
    ),
    "arrays-not-filling-payload": (
        craft(header(), zeros(5)),
        "8 payload bytes that no array announces",
    ),
    "arrays-beyond-payload": (
        craft(header(), zeros(3)),
        "announces more array data than its payload of 24 bytes holds",
    ),
    "huge-shape-tiny-payload": (
        craft(header(arrays=[("matrix", "<i8", [2**39, 2**39])]), zeros(4)),
        "announces more array data than its payload",
    ),
    "negative-shape": (
        craft(header(arrays=[("matrix", "<i8", [-2, -2])]), zeros(4)),
        "has an invalid shape [-2, -2]",
    ),
    "nine-dimensions": (
        craft(header(arrays=[("matrix", "<i8", [1] * 9)]), zeros(1)),
        "has an invalid shape",
    ),
    "big-endian-dtype": (
        craft(header(arrays=[("matrix", ">i8", [2, 2])]), zeros(4, ">i8")),
        "has an invalid array entry",
    ),
    "object-dtype": (
        craft(header(arrays=[("matrix", "|O", [2, 2])]), zeros(4)),
        "has an invalid array entry",
    ),
    "duplicate-array": (
        craft(header(arrays=[("matrix", "<i8", [2, 2])] * 2), zeros(8)),
        "has an invalid array entry",
    ),
    "extra-array": (
        craft(header(arrays=[("matrix", "<i8", [2, 2]), ("x", "<i8", [1])]), zeros(5)),
        "state has the arrays ['matrix', 'x'], expected ['matrix']",
    ),
    "wrong-shape": (
        craft(header(arrays=[("matrix", "<i8", [4])]), zeros(4)),
        "has shape (4,), but the configuration gives (2, 2)",
    ),
    "wrong-type-name": (
        craft(header(type_name="Nope"), zeros(4)),
        "holds a Nope, not a ConfusionAccumulator",
    ),
    "another-accumulator": (
        craft(
            header(
                {"size": 4, "ignore_index": None}, [("counts", "<i8", [4])], "LabelHistogram", 1
            ),
            zeros(4),
        ),
        "holds a LabelHistogram, not a ConfusionAccumulator",
    ),
    "type-not-a-string": (
        craft(header(type_name=3), zeros(4)),
        "without a valid type, format, config and array list",
    ),
    "format-from-the-future": (
        craft(header(state_format=99), zeros(4)),
        "has format 99, written by a newer metricstream",
    ),
    "format-0": (craft(header(state_format=0), zeros(4)), "has format 0"),
    "format-float": (
        craft(header(state_format=2.0), zeros(4)),
        "without a valid type, format, config and array list",
    ),
    "container-version-0": (craft(header(), zeros(4), version=0), "invalid binary format 0"),
    "container-version-3": (craft(header(), zeros(4), version=3), "uses binary format 3"),
    "config-not-a-dict": (
        craft(header(config=[1]), zeros(4)),
        "without a valid type, format, config and array list",
    ),
    "config-string-num-classes": (
        craft(header({**CONFIG, "num_classes": "2"}), zeros(4)),
        "`num_classes`",
    ),
    "config-unknown-key": (
        craft(header({**CONFIG, "colour": "red"}), zeros(4)),
        "does not fit ConfusionAccumulator",
    ),
    "config-missing-keys": (
        craft(header({"num_classes": 2}), zeros(4)),
        "the configuration lacks the setting(s)",
    ),
    "config-ignore-index-2-64": (
        craft(header({**CONFIG, "ignore_index": 2**64}), zeros(4)),
        "`ignore_index` must fit in int64",
    ),
    "config-class-axis-1e30": (
        craft(header({**CONFIG, "class_axis": 10**30}), zeros(4)),
        "`class_axis` must be an axis in [-32, 32)",
    ),
    "v1-header-without-format": (
        craft({"dtype": "<i8", "shape": [2, 2]}, zeros(4), version=1),
        "invalid format-1 header",
    ),
    "v1-negative": (
        craft(
            {
                "format": 1,
                "dtype": "<i8",
                "shape": [2, 2],
                **{k: v for k, v in CONFIG.items() if k != "threshold"},
            },
            np.array([-5, 0, 0, 0], "<i8").tobytes(),
            version=1,
        ),
        "holds -5 at (0, 0)",
    ),
}

GROUP_CRAFTED = {
    "member-entry-too-short": (
        craft(group_header([["a"]], [])),
        "the member entry \"['a']\" is not [name, type, format, configuration]",
    ),
    "members-not-a-list": (craft(group_header({"a": 1}, [])), "has no 'members' list"),
    "unknown-member-type": (
        craft(group_header([["a", "Nope", 1, {}]], [])),
        "unknown accumulator type 'Nope'",
    ),
    "member-listed-twice": (
        craft(
            group_header(
                [["a", "ConfusionAccumulator", 2, CONFIG]] * 2, [["a/matrix", "<i8", [2, 2]]]
            ),
            zeros(4),
        ),
        "member 'a' is listed twice",
    ),
    "array-of-no-member": (
        craft(
            group_header(
                [["a", "ConfusionAccumulator", 2, CONFIG]],
                [["a/matrix", "<i8", [2, 2]], ["b/x", "<i8", [1]]],
            ),
            zeros(5),
        ),
        "the arrays ['b/x'] belong to no member",
    ),
    "member-huge-config": (
        craft(
            group_header(
                [["a", "ConfusionAccumulator", 2, {**CONFIG, "num_classes": 4000}]],
                [["a/matrix", "<i8", [2, 2]]],
            ),
            zeros(4),
        ),
        "needs 128,000,000 bytes of state",
    ),
    "member-name-with-slash": (
        craft(
            group_header(
                [["a/b", "ConfusionAccumulator", 2, CONFIG]], [["a/b/matrix", "<i8", [2, 2]]]
            ),
            zeros(4),
        ),
        "member names must be non-empty strings without '/'",
    ),
    "member-negative": (
        craft(
            group_header([["a", "ConfusionAccumulator", 2, CONFIG]], [["a/matrix", "<i8", [2, 2]]]),
            np.array([0, 0, -1, 0], "<i8").tobytes(),
        ),
        "holds -1 at (1, 0)",
    ),
}


def _peak_while(function, *args):
    """(result or exception, peak traced bytes above the level before the call)."""
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    try:
        outcome = function(*args)
    except Exception as error:  # noqa: BLE001 - the caller checks the type
        outcome = error
    return outcome, tracemalloc.get_traced_memory()[1] - before


@pytest.fixture
def traced(no_background_compiles):
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name", CRAFTED)
def test_crafted_valid_checksum_blobs_raise_value_error_in_bounded_memory(traced, name):
    blob, fragment = CRAFTED[name]
    outcome, peak = _peak_while(ConfusionAccumulator.from_bytes, blob)
    assert isinstance(outcome, ValueError), repr(outcome)
    fragments = (fragment,) if isinstance(fragment, str) else fragment
    assert any(part in str(outcome) for part in fragments), str(outcome)
    assert peak <= 8 * len(blob) + SLACK, f"{peak:,} bytes traced for a {len(blob):,}-byte blob"


@pytest.mark.parametrize("name", GROUP_CRAFTED)
def test_crafted_group_blobs_raise_value_error_in_bounded_memory(traced, name):
    blob, fragment = GROUP_CRAFTED[name]
    outcome, peak = _peak_while(AccumulatorGroup.from_bytes, blob)
    assert isinstance(outcome, ValueError), repr(outcome)
    assert fragment in str(outcome), str(outcome)
    assert peak <= 8 * len(blob) + SLACK
    # The other reader refuses it too, by type.
    with pytest.raises(ValueError, match=r"holds an AccumulatorGroup, not a ConfusionAccumulator"):
        ConfusionAccumulator.from_bytes(blob)


def test_the_header_is_not_parsed_before_the_checksum_holds(monkeypatch):
    blob = bytearray(CRAFTED["json-nested-1000"][0])
    blob[-1] ^= 0xFF  # a wrong checksum: the RecursionError-prone header must not be parsed
    parsed = []
    monkeypatch.setattr(codec.json, "loads", lambda *a, **k: parsed.append(1))
    with pytest.raises(ValueError, match=r"is corrupt: its checksum does not match"):
        ConfusionAccumulator.from_bytes(bytes(blob))
    assert parsed == []


@pytest.mark.parametrize(
    "data", ["text", [1, 2], None, 3, np.zeros(3)], ids=["str", "list", "None", "int", "ndarray"]
)
def test_from_bytes_of_non_bytes_is_a_type_error(data):
    with pytest.raises(TypeError, match=r"`data` must be bytes made by `to_bytes\(\)`, got"):
        ConfusionAccumulator.from_bytes(data)


# ---------------------------------------------------------------------------- fuzzing
def _valid_blobs() -> list[bytes]:
    acc = ConfusionAccumulator(3, class_names=["a", "b", "c"], ignore_index=255)
    acc.update([0, 1, 2, 2, 255], [0, 2, 2, 1, 0])
    weighted = ConfusionAccumulator(2, weighted=True).update([0, 1], [1, 1], [0.5, 2.25])
    group = make_group(
        wide=ConfusionAccumulator(4), weighted_wide=ConfusionAccumulator(4, weighted=True)
    )
    group.update([0, 1, 2], [1, 1, 2], [1, 2, 3])
    return [
        acc.to_bytes(),
        weighted.to_bytes(),
        ConfusionAccumulator(2).to_bytes(),
        LabelHistogram(5).update([1, 4]).to_bytes(),
        WeightTotals(3).update([0], [2]).to_bytes(),
        group.to_bytes(),
    ]


def _rechecksum(blob: bytearray) -> bytes:
    """Fix the lengths in the prefix and the checksum, so the parser sees the mutation."""
    if len(blob) >= 28 and blob[:8] == MAGIC:
        version, header_size = struct.unpack_from("<II", blob, 8)
        if version == 2 and 24 + header_size + 4 <= len(blob):
            struct.pack_into("<Q", blob, 16, len(blob) - 24 - header_size - 4)
    body = bytes(blob[:-4])
    return body + struct.pack("<I", zlib.crc32(body))


def _mutate(rng: np.random.Generator, blob: bytes) -> bytearray:
    data = bytearray(blob)
    for _ in range(int(rng.integers(1, 4))):
        kind = int(rng.integers(0, 5))
        at = int(rng.integers(0, max(1, len(data))))
        if kind == 0 and data:  # flip a byte
            data[at % len(data)] ^= int(rng.integers(1, 256))
        elif kind == 1:  # insert bytes
            data[at:at] = rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
        elif kind == 2 and len(data) > 1:  # delete bytes
            del data[at : at + int(rng.integers(1, 9))]
        elif kind == 3:  # an interesting integer at a random offset
            values = [0, 1, 2**31, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 1]
            value = values[int(rng.integers(0, len(values)))]
            data[at : at + 8] = value.to_bytes(8, "little")
        elif kind == 4:  # a JSON token in the header
            token = rng.choice(
                [
                    b"-1",
                    b"1e308",
                    b"NaN",
                    b"null",
                    b"[]",
                    b"{}",
                    b'"x"',
                    b"true",
                    b"9" * 30,
                    b"-9223372036854775809",
                ]
            )
            data[at : at + len(token)] = bytes(token)
    return data


def _check_bounded(data: bytes, readers=(ConfusionAccumulator, AccumulatorGroup)) -> None:
    for reader in readers:
        outcome, peak = _peak_while(reader.from_bytes, data)
        if isinstance(outcome, Exception):
            assert type(outcome) in (ValueError, TypeError), (
                f"{reader.__name__}.from_bytes raised {outcome!r} for {bytes(data[:64])!r}..."
            )
        else:
            assert isinstance(outcome, (Accumulator, AccumulatorGroup))
        assert peak <= 8 * len(data) + SLACK, f"{peak:,} bytes for a {len(data)}-byte blob"


@pytest.mark.parametrize("seed", range(4))
def test_fuzz_random_bytes(traced, seed):
    rng = np.random.default_rng(seed)
    for _ in range(300):
        size = int(rng.integers(0, 300))
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        if rng.random() < 0.5:  # past the magic, into the prefix checks
            data = MAGIC + data
        _check_bounded(data)


@pytest.mark.parametrize("seed", range(4))
def test_fuzz_mutated_valid_blobs(traced, seed):
    rng = np.random.default_rng(100 + seed)
    blobs = _valid_blobs()
    for _ in range(400):
        blob = blobs[int(rng.integers(0, len(blobs)))]
        mutated = _mutate(rng, blob)
        _check_bounded(bytes(mutated))  # the checksum catches these
        _check_bounded(_rechecksum(mutated))  # these reach the header and arrays


def test_fuzz_mutations_that_pass_the_checksum_are_refused_or_exact(traced):
    """A re-checksummed mutation either fails cleanly or restores a valid state."""
    rng = np.random.default_rng(7)
    blob = _valid_blobs()[0]
    loaded = refused = 0
    for _ in range(500):
        data = _rechecksum(_mutate(rng, blob))
        try:
            acc = ConfusionAccumulator.from_bytes(data)
        except ValueError:
            refused += 1
            continue
        loaded += 1
        # Whatever loaded is a valid accumulator: non-negative int64 counts, round-trips.
        assert (acc.matrix >= 0).all()
        assert ConfusionAccumulator.from_bytes(acc.to_bytes()) == acc
    assert refused > 0


# ---------------------------------------------------------------------------- state dicts
STATE_DICTS = {
    "negative": (
        {
            "type": "ConfusionAccumulator",
            "format": 2,
            "config": CONFIG,
            "arrays": {
                "matrix": {
                    "dtype": "<i8",
                    "shape": [2, 2],
                    "data": np.array([0, -3, 0, 0], "<i8").tobytes(),
                }
            },
        },
        "holds -3 at (0, 1)",
    ),
    "float-2-63": (
        {
            "type": "ConfusionAccumulator",
            "format": 2,
            "config": CONFIG,
            "arrays": {"matrix": np.array([[2.0**63, 0], [0, 0]])},
        },
        "2**63 or more",
    ),
    "uint64-max": (
        {
            "type": "ConfusionAccumulator",
            "format": 2,
            "config": CONFIG,
            "arrays": {"matrix": np.full((2, 2), 2**64 - 1, dtype=np.uint64)},
        },
        "2**63 or more",
    ),
    "huge-config": (
        {
            "type": "ConfusionAccumulator",
            "format": 2,
            "config": {**CONFIG, "num_classes": 5000},
            "arrays": {"matrix": np.zeros((2, 2), dtype=np.int64)},
        },
        "needs 200,000,000 bytes of state",
    ),
    "short-data": (
        {
            "type": "ConfusionAccumulator",
            "format": 2,
            "config": CONFIG,
            "arrays": {"matrix": {"dtype": "<i8", "shape": [2, 2], "data": b"\0" * 8}},
        },
        "has 8 bytes of data, but its shape [2, 2] needs 32",
    ),
    "object-array": (
        {
            "type": "ConfusionAccumulator",
            "format": 2,
            "config": CONFIG,
            "arrays": {"matrix": np.array([[0, 0], [0, None]], dtype=object)},
        },
        "has dtype object",
    ),
    "bool-array": (
        {
            "type": "ConfusionAccumulator",
            "format": 2,
            "config": CONFIG,
            "arrays": {"matrix": np.ones((2, 2), dtype=bool)},
        },
        "the configuration needs 32 bytes of state, but the state given carries 4",
    ),
    "no-format": ({"type": "ConfusionAccumulator", "config": CONFIG}, "no valid 'format' entry"),
    "bool-format": ({"type": "ConfusionAccumulator", "format": True}, "no valid 'format'"),
    "arrays-not-dict": (
        {"type": "ConfusionAccumulator", "format": 2, "config": CONFIG, "arrays": [1]},
        "has no 'arrays' dict",
    ),
}


@pytest.mark.parametrize("name", STATE_DICTS)
def test_crafted_state_dicts_raise_value_error(traced, name):
    state, fragment = STATE_DICTS[name]
    outcome, peak = _peak_while(ConfusionAccumulator.from_state_dict, state)
    assert isinstance(outcome, ValueError), repr(outcome)
    assert fragment in str(outcome), str(outcome)
    assert peak <= SLACK


@pytest.mark.parametrize(
    "state", [None, [1], "text", b"bytes"], ids=["None", "list", "str", "bytes"]
)
def test_from_state_dict_of_non_dicts_is_a_type_error(state):
    with pytest.raises(TypeError, match=r"`state` must be a dict"):
        ConfusionAccumulator.from_state_dict(state)
    with pytest.raises(TypeError, match=r"`state` must be a dict"):
        AccumulatorGroup.from_state_dict(state)


# ---------------------------------------------------------------------------- files
def _load_in_subprocess(path: str, timeout: float = 60) -> subprocess.CompletedProcess:
    code = textwrap.dedent(f"""
        from metricstream import ConfusionAccumulator
        try:
            ConfusionAccumulator.load({path!r})
        except (ValueError, OSError) as error:
            print(type(error).__name__, error)
    """)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_load_of_a_fifo_raises_instead_of_blocking(tmp_path):
    fifo = tmp_path / "state.msacc"
    os.mkfifo(fifo)
    # A blocking open() or read() would hang until the timeout (nobody writes to the FIFO).
    proc = _load_in_subprocess(str(fifo))
    assert proc.returncode == 0, proc.stderr
    assert "ValueError" in proc.stdout and "is not a regular file" in proc.stdout


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_load_of_dev_zero_raises_instead_of_reading_forever():
    proc = _load_in_subprocess("/dev/zero")
    assert proc.returncode == 0, proc.stderr
    assert "is not a regular file" in proc.stdout


def test_load_of_a_directory_and_of_a_symlink_to_dev_zero(tmp_path):
    with pytest.raises(ValueError, match=r"is not a regular file"):
        ConfusionAccumulator.load(tmp_path)
    if os.path.exists("/dev/zero"):
        link = tmp_path / "zero.msacc"
        link.symlink_to("/dev/zero")
        with pytest.raises(ValueError, match=r"is not a regular file"):
            ConfusionAccumulator.load(link)
    with pytest.raises(FileNotFoundError):
        ConfusionAccumulator.load(tmp_path / "missing.msacc")


def _sparse(path: Path, size: int, announced_payload: int) -> None:
    with open(path, "wb") as handle:
        handle.write(struct.pack("<8sIIQ", MAGIC, 2, 2, announced_payload) + b"{}")
        handle.truncate(size)  # a hole: no disk blocks, but `size` bytes to read


def test_load_of_a_huge_sparse_file_with_a_valid_prefix_is_bounded(tmp_path, traced):
    path = tmp_path / "huge.msacc"
    size = 256 << 20
    _sparse(path, size, size - 24 - 2 - 4)  # the prefix announces exactly the file's size
    outcome, peak = _peak_while(ConfusionAccumulator.load, path)
    assert isinstance(outcome, ValueError)
    # the header (no arrays) announces none of the payload: refused before the payload is read
    assert "but the arrays of its header fill 0; it is corrupt" in str(outcome)
    assert peak <= 16 << 20, f"{peak:,} bytes traced to refuse a {size:,}-byte sparse file"


def test_load_of_a_huge_file_announcing_less_is_refused_before_reading(tmp_path, traced):
    path = tmp_path / "huge.msacc"
    _sparse(path, 1 << 30, 100)
    outcome, peak = _peak_while(ConfusionAccumulator.load, path)
    assert isinstance(outcome, ValueError)
    assert "followed by extra bytes: 1073741824 bytes on disk, but its prefix announces 130" in (
        str(outcome)
    )
    assert peak <= SLACK


def test_large_valid_file_still_loads_after_the_streamed_checksum(tmp_path):
    acc = ConfusionAccumulator(3000)  # 72 MB: beyond the streamed-check threshold
    acc.update(np.arange(3000), np.arange(3000)[::-1].copy())
    loaded = ConfusionAccumulator.load(acc.save(tmp_path / "large.msacc"))
    assert loaded == acc


def test_truncated_and_foreign_files(tmp_path):
    blob = ConfusionAccumulator(2).update([0], [1]).to_bytes()
    (tmp_path / "short.msacc").write_bytes(blob[:-1])
    with pytest.raises(ValueError, match=r"is truncated: \d+ bytes on disk, but its prefix"):
        ConfusionAccumulator.load(tmp_path / "short.msacc")
    (tmp_path / "text.msacc").write_text("num_classes,2\n")
    with pytest.raises(ValueError, match=r"is not a saved metricstream accumulator"):
        ConfusionAccumulator.load(tmp_path / "text.msacc")
    (tmp_path / "empty.msacc").write_bytes(b"")
    with pytest.raises(ValueError, match=r"is not a saved metricstream accumulator"):
        ConfusionAccumulator.load(tmp_path / "empty.msacc")


# ---------------------------------------------------------------------------- temporaries
def test_stale_temporaries_lists_only_leftovers_of_interrupted_saves(tmp_path):
    target = tmp_path / "acc.msacc"
    ConfusionAccumulator(2).save(target)
    assert stale_temporaries(target) == []  # a completed save leaves none
    leftovers = [tmp_path / ".acc.msacc.0123456789ab.tmp", tmp_path / ".acc.msacc.ffffffffffff.tmp"]
    unrelated = [
        tmp_path / ".acc.msacc.xyz.tmp",
        tmp_path / ".acc.msacc.0123456789ab.tmp.bak",
        tmp_path / ".other.msacc.0123456789ab.tmp",
        tmp_path / "acc.msacc.tmp",
        tmp_path / ".acc.msacc.0123456789AB.tmp",
    ]
    for path in leftovers + unrelated:
        path.write_bytes(b"partial")
    assert stale_temporaries(target) == sorted(leftovers)
    assert ConfusionAccumulator.load(target) == ConfusionAccumulator(2)


@pytest.mark.skipif(not hasattr(os, "kill") or sys.platform == "win32", reason="needs SIGKILL")
def test_a_save_killed_before_the_rename_leaves_one_stale_temporary(tmp_path):
    target = tmp_path / "acc.msacc"
    ConfusionAccumulator(2).update([0], [0]).save(target)
    code = textwrap.dedent(f"""
        import os, signal
        from metricstream import ConfusionAccumulator
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # die mid-save
        ConfusionAccumulator(2).update([1], [1]).save({str(target)!r})
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -9
    stale = stale_temporaries(target)
    assert len(stale) == 1 and stale[0].parent == tmp_path
    # The target still holds the previous complete state; the leftover can be removed.
    assert ConfusionAccumulator.load(target) == ConfusionAccumulator(2).update([0], [0])
    stale[0].unlink()
    assert stale_temporaries(target) == []


# ---------------------------------------------------------------------------- pickle
def test_unpickling_is_documented_as_unsafe_for_untrusted_data():
    doc = " ".join(codec.__doc__.split())
    assert "Unpickling runs code chosen by whoever wrote the pickle" in doc
    assert "never unpickle a state from an untrusted source; use ``from_bytes``" in doc


# ---------------------------------------------------------------------------- format upgrades
class _Tally(LabelHistogram):
    """Format 2 of a histogram that format 1 stored without its `ignore_index` setting."""

    state_format = 2
    state_upgrades = {
        1: lambda state: {
            **state,
            "format": 2,
            "config": {**state["config"], "ignore_index": None},
            "arrays": {"counts": state["arrays"]["counts"] * 1},
        }
    }


def test_upgrades_see_numpy_arrays_from_state_dicts_and_from_bytes():
    counts = np.array([2, 0, 5], dtype=np.int64)
    old_dict = {
        "type": "_Tally",
        "format": 1,
        "config": {"size": 3},
        "arrays": {"counts": {"dtype": "<i8", "shape": [3], "data": counts.tobytes()}},
    }
    old_blob = codec.encode("_Tally", 1, {"size": 3}, {"counts": counts})
    from_dict, from_blob = _Tally.from_state_dict(old_dict), _Tally.from_bytes(old_blob)
    assert from_dict == from_blob
    assert from_dict.state_arrays()["counts"].tolist() == [2, 0, 5]


def test_an_upgrade_that_fails_on_damaged_input_is_a_value_error():
    damaged = {
        "type": "_Tally",
        "format": 1,
        "config": None,
        "arrays": {"counts": np.zeros(3, dtype=np.int64)},
    }
    with pytest.raises(ValueError, match=r"`state` of format 1 cannot be upgraded \(.+\); it"):
        _Tally.from_state_dict(damaged)
    del damaged["config"]
    with pytest.raises(ValueError, match=r"format 1 lacks or mangles the entry 'config'"):
        _Tally.from_state_dict(damaged)


@pytest.mark.parametrize("config", [None, [1, 2], "bins=65536", 7, b"{}"])
def test_a_format_1_score_state_without_a_config_dict_is_refused_by_name(config):
    """The upgrade of a score state (format 1 -> 2) reads its configuration first."""
    acc = ScoreAccumulator("multiclass", 3).update([0, 1, 2], np.eye(3, dtype=np.float32))
    state = acc.state_dict()
    before = {name: array.copy() for name, array in acc.state_arrays().items()}
    damaged = {**state, "format": 1, "config": config}
    with pytest.raises(ValueError, match=r"format 1 cannot be upgraded \(`state` has no config"):
        ScoreAccumulator.from_state_dict(damaged)
    with pytest.raises(ValueError, match=r"format 1 lacks or mangles the entry 'config'"):
        ScoreAccumulator.from_state_dict({k: v for k, v in damaged.items() if k != "config"})
    for name, array in acc.state_arrays().items():  # the source is untouched
        np.testing.assert_array_equal(array, before[name])


# ---------------------------------------------------------------------------- hostile headers
def _kinds():
    from metricstream import MultilabelAccumulator

    return [
        ConfusionAccumulator(3),
        ScoreAccumulator("binary"),
        MultilabelAccumulator(3),
    ]


@pytest.mark.parametrize("dtype", [["<i8"], {"<i8": 1}, 8, None])
@pytest.mark.parametrize("kind", range(3))
def test_an_unhashable_or_foreign_dtype_is_a_value_error(kind, dtype):
    acc = _kinds()[kind]
    state = acc.state_dict()
    entries = [[name, dtype, list(array.shape)] for name, array in acc.state_arrays().items()]
    blob = craft(
        {
            "type": type(acc).__name__,
            "format": state["format"],
            "config": state["config"],
            "arrays": entries,
        },
        b"".join(array.astype("<i8").tobytes() for array in acc.state_arrays().values()),
    )
    with pytest.raises(ValueError, match="invalid array entry"):
        type(acc).from_bytes(blob)
    name = next(iter(state["arrays"]))
    state["arrays"][name] = {**state["arrays"][name], "dtype": dtype}
    with pytest.raises(ValueError, match="dtype"):
        type(acc).from_state_dict(state)


@pytest.mark.parametrize("dtype", [["<i8"], {"a": 1}])
def test_a_format_1_blob_with_an_unhashable_dtype_is_a_value_error(dtype):
    blob = craft({**CONFIG, "format": 1, "dtype": dtype, "shape": [2, 2]}, zeros(4), version=1)
    with pytest.raises(ValueError, match="invalid format-1 header"):
        ConfusionAccumulator.from_bytes(blob)


@pytest.mark.parametrize(
    ("setting", "value"),
    [("num_labels", 2**64), ("num_labels", 2**41), ("betas", [1e308]), ("betas", [1e-200])],
)
def test_multilabel_configurations_out_of_range_are_value_errors(setting, value):
    from metricstream import MultilabelAccumulator

    acc = MultilabelAccumulator(3)
    state = acc.state_dict()
    blob = craft(
        {
            "type": "MultilabelAccumulator",
            "format": state["format"],
            "config": {**state["config"], setting: value},
            "arrays": [[n, "<i8", list(a.shape)] for n, a in acc.state_arrays().items()],
        },
        b"".join(a.astype("<i8").tobytes() for a in acc.state_arrays().values()),
    )
    with pytest.raises(ValueError, match=setting):
        MultilabelAccumulator.from_bytes(blob)
    state["config"][setting] = value
    with pytest.raises(ValueError, match=setting):
        MultilabelAccumulator.from_state_dict(state)


@pytest.mark.parametrize("kind", range(3))
def test_a_non_contiguous_memoryview_loads(kind):
    acc = _kinds()[kind]
    raw = acc.to_bytes()
    spread = np.zeros(2 * len(raw), np.uint8)
    spread[::2] = np.frombuffer(raw, np.uint8)
    view = memoryview(spread)[::2]
    assert not view.contiguous
    assert type(acc).from_bytes(view) == acc
    spread[1] = 0  # a byte between: not part of the view
    assert type(acc).from_bytes(view) == acc


@pytest.mark.parametrize("version", [0, 3, 2**32 - 1])
def test_load_of_a_huge_file_of_magic_and_zeros_reads_the_prefix_only(tmp_path, traced, version):
    path = tmp_path / "zeros.msacc"
    with open(path, "wb") as handle:
        handle.write(struct.pack("<8sI", MAGIC, version))
        handle.truncate(4 << 30)  # a hole: 4 GiB to read for a reader that trusted the size
    outcome, peak = _peak_while(ConfusionAccumulator.load, path)
    assert isinstance(outcome, ValueError)
    assert "binary format" in str(outcome)
    assert peak <= SLACK


@pytest.mark.parametrize("header_size", [0, 9, 2**32 - 1])
def test_load_of_a_huge_format_1_file_is_bounded_by_its_header(tmp_path, traced, header_size):
    path = tmp_path / "v1.msacc"
    with open(path, "wb") as handle:
        handle.write(struct.pack("<8sII", MAGIC, 1, header_size))
        if header_size == 9:
            handle.write(b'{"a": 1} ')
        handle.truncate(4 << 30)
    outcome, peak = _peak_while(ConfusionAccumulator.load, path)
    assert isinstance(outcome, ValueError)
    assert peak <= SLACK


def test_load_of_a_huge_file_whose_header_announces_less_payload(tmp_path, traced):
    path = tmp_path / "v2.msacc"
    text = json.dumps(header()).encode()
    size = 256 << 20
    with open(path, "wb") as handle:
        handle.write(struct.pack("<8sIIQ", MAGIC, 2, len(text), size - 28 - len(text)) + text)
        handle.truncate(size)
    outcome, peak = _peak_while(ConfusionAccumulator.load, path)
    assert isinstance(outcome, ValueError)
    assert "the arrays of its header fill 32" in str(outcome)
    assert peak <= SLACK


def test_saved_files_of_every_version_still_load_through_the_bounded_reader():
    fixtures = sorted(Path(__file__).parent.glob("fixtures/state_v*.msacc"))
    assert len(fixtures) >= 4
    for fixture in fixtures:
        acc = ConfusionAccumulator.load(fixture)
        assert acc == ConfusionAccumulator.from_bytes(fixture.read_bytes())
