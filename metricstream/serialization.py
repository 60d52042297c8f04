"""Durable, versioned state of any accumulator: a codec of (type, format, configuration, arrays).

This module knows no concrete accumulator. It turns the four parts every accumulator has — its
type name, the format version of its layout, its JSON-able configuration and its named int64 /
float64 state arrays — into three forms, and back, checking everything it reads:

* **state dict** (``acc.state_dict()`` / ``Type.from_state_dict(d)``)::

      {"type": "ConfusionAccumulator", "format": 2, "config": {...},
       "arrays": {"matrix": {"dtype": "<i8", "shape": [3, 3], "data": b"..."}}}

  Only dicts, lists, strings, numbers, None and bytes: it pickles, and it survives
  ``torch.load``'s default ``weights_only=True`` inside a ``torch.save`` checkpoint without
  ``add_safe_globals``. ``acc.state_arrays()`` gives the arrays as numpy arrays.
* **bytes** (``acc.to_bytes()`` / ``Type.from_bytes(b)``): see :func:`encode`. Safe for untrusted
  input: the checksum is verified before anything is parsed, and what is allocated is bounded by
  the size of the input.
* **file** (``acc.save(path)`` / ``Type.load(path)``): the bytes, written atomically (a temporary
  file in the same directory, fsynced, renamed over the target); read back with bounded reads
  (only regular files; the fixed prefix first, then exactly the bytes it announces).

Unpickling runs code chosen by whoever wrote the pickle: never unpickle a state from an untrusted
source; use ``from_bytes`` (or a state dict loaded with ``torch.load(weights_only=True)``).

Compatibility rule: every reader accepts every format written by earlier releases
(``tests/fixtures/`` holds files of each version); input from a *newer* release, or truncated,
corrupt or foreign input, raises ``ValueError`` saying which.

Example:
    >>> from metricstream import ConfusionAccumulator
    >>> acc = ConfusionAccumulator(num_classes=2).update([0, 1, 1], [0, 1, 0])
    >>> ConfusionAccumulator.from_bytes(acc.to_bytes()) == acc
    True
    >>> sorted(acc.state_dict())
    ['arrays', 'config', 'format', 'type']
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import struct
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BINARY_FORMAT",
    "MAGIC",
    "check_arrays",
    "decode",
    "encode",
    "make_state_dict",
    "read_file",
    "read_state_dict",
    "save_bytes",
    "stale_temporaries",
]

# Version of the binary container (magic, prefix, header, payload, checksum).
# 1: one K×K matrix of a ConfusionAccumulator, configuration at the top level of the header.
# 2: any accumulator: type, format, configuration and a list of named arrays.
BINARY_FORMAT = 2

# PNG-style magic: a non-ASCII first byte catches text-mode transfers, CR LF newline conversion.
MAGIC = b"\x89MSACC\r\n"

_PREFIX_V1 = struct.Struct("<8sII")  # magic, binary format, header length
_PREFIX = struct.Struct("<8sIIQ")  # magic, binary format, header length, payload length
_CRC = struct.Struct("<I")
_DTYPES = {"<i8": np.dtype("<i8"), "<f8": np.dtype("<f8")}


def _dtype_named(value: Any) -> np.dtype | None:
    """The state dtype named ``value``, None for anything else (a JSON list or dict included:
    they are unhashable, and must be refused as a bad name, not raise ``TypeError``)."""
    return _DTYPES.get(value) if isinstance(value, str) else None


# A header is configuration, not data: class names of 10^5 classes fit in a few MiB.
MAX_HEADER_BYTES = 64 << 20
_INT64_MAX = int(np.iinfo(np.int64).max)


# ---------------------------------------------------------------------------- state dicts
def make_state_dict(
    type_name: str, state_format: int, config: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
) -> dict[str, Any]:
    """The plain-data state dict of an accumulator (see the module docstring)."""
    return {
        "type": type_name,
        "format": state_format,
        "config": dict(config),
        "arrays": {name: _array_record(array) for name, array in arrays.items()},
    }


def _array_record(array: np.ndarray) -> dict[str, Any]:
    dtype = "<f8" if array.dtype.kind == "f" else "<i8"
    data = np.ascontiguousarray(array, dtype=dtype).tobytes()
    return {"dtype": dtype, "shape": list(array.shape), "data": data}


def read_state_dict(
    state: Any,
    type_name: str,
    current_format: int,
    upgrades: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]],
) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
    """Check a state dict and bring it to ``current_format``: ``(type, config, arrays)``.

    ``type_name`` is the type the caller expects (a state of another type is returned as read,
    un-upgraded, for the caller to refuse by name); states without a ``"type"`` entry (format 1
    of the confusion accumulator) are taken to be of that type.
    """
    if not isinstance(state, dict):
        raise TypeError(
            f"`state` must be a dict made by `state_dict()`, got {type(state).__name__}."
        )
    found = state.get("type", type_name)
    if not isinstance(found, str):
        raise ValueError(f"`state` has a 'type' entry {found!r} that is not a type name.")
    version = state.get("format")
    if isinstance(version, bool) or not isinstance(version, (int, np.integer)):
        raise ValueError(
            f"`state` has no valid 'format' entry (got {version!r}); it was not made by "
            f"`state_dict()` of metricstream."
        )
    version = int(version)
    if found != type_name:
        return found, {}, {}
    if version > current_format:
        raise ValueError(
            f"`state` has format {version}, written by a newer metricstream; this version reads "
            f"{type_name} formats 1 to {current_format}. Upgrade metricstream to load it."
        )
    if version < 1:
        raise ValueError(f"`state` has format {version}; valid formats are 1 to {current_format}.")
    if version < current_format and isinstance(state.get("arrays"), dict):
        # Upgrade functions always see numpy arrays, whether the state came from a state dict
        # (records of bytes) or from a blob (arrays already decoded).
        state = {
            **state,
            "arrays": {
                str(name): _read_array(name, record) for name, record in state["arrays"].items()
            },
        }
    while version < current_format:
        try:
            state = upgrades[version](dict(state))
        except KeyError as error:  # the upgrade looked up an entry the state lacks
            raise ValueError(
                f"`state` of format {version} lacks or mangles the entry "
                f"{error}; it was not made by `state_dict()` or is damaged."
            ) from None
        except (TypeError, AttributeError, IndexError, ValueError) as error:
            raise ValueError(
                f"`state` of format {version} cannot be upgraded ({error}); it was not made "
                "by `state_dict()` or is damaged."
            ) from None
        if not isinstance(state, dict):
            raise ValueError(f"the upgrade of `state` from format {version} did not return a dict.")
        version += 1
    config = state.get("config")
    arrays = state.get("arrays")
    if not isinstance(config, dict) or not all(isinstance(key, str) for key in config):
        raise ValueError("`state` has no 'config' dict of named settings.")
    if not isinstance(arrays, dict):
        raise ValueError("`state` has no 'arrays' dict.")
    return (
        found,
        dict(config),
        {str(name): _read_array(name, record) for name, record in arrays.items()},
    )


def _read_array(name: Any, record: Any) -> np.ndarray:
    if isinstance(record, np.ndarray):
        return record
    if not isinstance(record, dict):
        raise ValueError(
            f"state array {name!r} is neither an array nor a dict of dtype, shape and data."
        )
    dtype = _dtype_named(record.get("dtype"))
    shape = _check_shape(record.get("shape"), f"state array {name!r}")
    data = record.get("data")
    if dtype is None:
        raise ValueError(
            f"state array {name!r} has dtype {record.get('dtype')!r}; expected '<i8' or '<f8'."
        )
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"state array {name!r} has no bytes 'data'.")
    needed = _num_items(shape) * dtype.itemsize
    if len(data) != needed:
        raise ValueError(
            f"state array {name!r} has {len(data)} bytes of data, but its shape "
            f"{list(shape)} needs {needed}."
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))


def check_arrays(given: Mapping[str, np.ndarray], target: Mapping[str, np.ndarray]) -> None:
    """Check that ``given`` (from outside) can be the state whose empty form is ``target``.

    Names, shapes, dtypes and values: counts must be non-negative, finite, whole for int64
    states, and below 2**63.
    """
    if set(given) != set(target):
        raise ValueError(f"state has the arrays {sorted(given)}, expected {sorted(target)}.")
    for name, live in target.items():
        array = np.asarray(given[name])
        if array.shape != live.shape:
            raise ValueError(
                f"state `{name}` has shape {array.shape}, but the configuration gives {live.shape}."
            )
        kinds = "iuf" if live.dtype.kind == "f" else "iuf"
        if array.dtype.kind not in kinds:
            raise ValueError(
                f"state `{name}` has dtype {array.dtype}, which does not fit the "
                f"accumulator's {live.dtype} values."
            )
        if array.dtype.kind == "f":
            if not np.isfinite(array).all():
                raise ValueError(f"state `{name}` holds NaN or infinite values.")
            if live.dtype.kind != "f":
                if not (array == np.round(array)).all():
                    raise ValueError(f"state `{name}` holds fractional counts in an integer state.")
                if (array >= 2.0**63).any():
                    raise ValueError(f"state `{name}` holds counts of 2**63 or more, beyond int64.")
        elif array.dtype.kind == "u" and array.dtype.itemsize == 8 and live.dtype.kind != "f":
            if (array > _INT64_MAX).any():
                raise ValueError(f"state `{name}` holds counts of 2**63 or more, beyond int64.")
        negative = array < 0
        if negative.any():
            position = tuple(int(i) for i in np.argwhere(negative)[0])
            raise ValueError(
                f"state `{name}` holds {array[position].item()!r} at {position}; "
                f"state values are non-negative."
            )


def _check_shape(shape: Any, what: str) -> tuple[int, ...]:
    if (
        not isinstance(shape, (list, tuple))
        or len(shape) > 8
        or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**40 for n in shape)
    ):
        raise ValueError(f"{what} has an invalid shape {shape!r}.")
    return tuple(shape)


def _num_items(shape: tuple[int, ...]) -> int:
    total = 1
    for n in shape:
        total *= n
    return total


# ---------------------------------------------------------------------------- bytes
def encode(
    type_name: str, state_format: int, config: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
) -> bytes:
    """The versioned, checksummed blob. Layout (integers little-endian)::

    8 bytes   magic b"\\x89MSACC\\r\\n"
    uint32    binary format version (2)
    uint32    header length H
    uint64    payload length P
    H bytes   UTF-8 JSON: {"type", "format", "config", "arrays": [[name, dtype, shape], ...]}
    P bytes   the arrays, in header order, C order, "<i8" (counts) or "<f8" (weights)
    uint32    CRC-32 of every byte before it
    """
    records = [(name, _array_record(array)) for name, array in arrays.items()]
    header = {
        "type": type_name,
        "format": state_format,
        "config": dict(config),
        "arrays": [[name, record["dtype"], record["shape"]] for name, record in records],
    }
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    payload = b"".join(record["data"] for _, record in records)
    body = b"".join(
        (_PREFIX.pack(MAGIC, BINARY_FORMAT, len(header_bytes), len(payload)), header_bytes, payload)
    )
    return body + _CRC.pack(zlib.crc32(body))


def decode(
    data: Any, *, source: str = "`data`"
) -> tuple[str, int, dict[str, Any], dict[str, np.ndarray]]:
    """``(type, format, config, arrays)`` from :func:`encode` output of any container version.

    Order of checks: magic, container version, announced sizes against the actual size, the
    checksum, and only then the header; the arrays must fill the payload exactly. Only
    ``ValueError`` (``TypeError`` for non-bytes) is raised, and nothing is allocated beyond the
    size of ``data``.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{source} must be bytes made by `to_bytes()`, got {type(data).__name__}.")
    view = memoryview(data)
    if not view.contiguous:
        # a strided view (e.g. every other byte of a buffer) cannot be cast to bytes in place;
        # its bytes in order are a copy of at most the size of the input
        view = memoryview(view.tobytes())
    view = view.cast("B")
    size = len(view)
    if size < len(MAGIC) or bytes(view[: len(MAGIC)]) != MAGIC:
        raise ValueError(
            f"{source} is not a saved metricstream accumulator: it starts with "
            f"{bytes(view[: len(MAGIC)])!r}, expected the magic bytes {MAGIC!r}."
        )
    if size < _PREFIX_V1.size:
        raise ValueError(f"{source} is truncated: {size} bytes, shorter than the fixed prefix.")
    _, version, header_size = _PREFIX_V1.unpack_from(view)
    if version > BINARY_FORMAT:
        raise ValueError(
            f"{source} uses binary format {version}, written by a newer metricstream; this version "
            f"reads formats 1 to {BINARY_FORMAT}. Upgrade metricstream to load it."
        )
    if version < 1:
        raise ValueError(f"{source} has invalid binary format {version}; it is corrupt.")
    prefix = _PREFIX_V1 if version == 1 else _PREFIX
    if size < prefix.size + _CRC.size:
        raise ValueError(f"{source} is truncated: {size} bytes, shorter than the fixed prefix.")
    header_end = prefix.size + header_size
    if version == 1:
        if size < header_end + _CRC.size:
            raise ValueError(
                f"{source} is truncated: {size} bytes, but its header alone needs "
                f"{header_end + _CRC.size}."
            )
        payload_size = size - header_end - _CRC.size
    else:
        payload_size = _PREFIX.unpack_from(view)[3]
        expected = header_end + payload_size + _CRC.size
        if size != expected:
            problem = "truncated" if size < expected else "followed by extra bytes"
            raise ValueError(
                f"{source} is {problem}: {size} bytes, but its prefix announces {expected}."
            )
    (stored,) = _CRC.unpack_from(view, size - _CRC.size)
    if zlib.crc32(view[: size - _CRC.size]) != stored:
        raise ValueError(f"{source} is corrupt: its checksum does not match.")
    if header_size > MAX_HEADER_BYTES:
        raise ValueError(
            f"{source} has a header of {header_size} bytes, more than the "
            f"{MAX_HEADER_BYTES} a configuration can need."
        )
    try:
        header = json.loads(bytes(view[prefix.size : header_end]).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise ValueError(f"{source} has an unreadable header ({type(error).__name__}).") from None
    if not isinstance(header, dict):
        raise ValueError(f"{source} has a header that is not a JSON object.")
    payload = view[header_end : header_end + payload_size]
    if version == 1:
        return _decode_v1(header, payload, source)
    type_name, state_format = header.get("type"), header.get("format")
    config, entries = header.get("config"), header.get("arrays")
    if (
        not isinstance(type_name, str)
        or isinstance(state_format, bool)
        or not isinstance(state_format, int)
        or not isinstance(config, dict)
        or not isinstance(entries, list)
    ):
        raise ValueError(
            f"{source} has a header without a valid type, format, config and array list."
        )
    arrays: dict[str, np.ndarray] = {}
    offset = 0
    for entry in entries:
        if not (
            isinstance(entry, list)
            and len(entry) == 3
            and isinstance(entry[0], str)
            and _dtype_named(entry[1]) is not None
            and entry[0] not in arrays
        ):
            raise ValueError(f"{source} has an invalid array entry {str(entry)[:80]!r}.")
        name, dtype_name, shape_list = entry
        shape = _check_shape(shape_list, f"{source} array {name!r}")
        dtype = _DTYPES[dtype_name]
        nbytes = _num_items(shape) * dtype.itemsize
        if offset + nbytes > payload_size:
            raise ValueError(
                f"{source} announces more array data than its payload of "
                f"{payload_size} bytes holds."
            )
        array = np.frombuffer(payload, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset)
        arrays[name] = array.reshape(shape).astype(dtype.newbyteorder("="))
        offset += nbytes
    if offset != payload_size:
        raise ValueError(
            f"{source} has {payload_size - offset} payload bytes that no array "
            f"announces; it is corrupt."
        )
    return type_name, state_format, config, arrays


def _decode_v1(
    header: dict[str, Any], payload: memoryview, source: str
) -> tuple[str, int, dict[str, Any], dict[str, np.ndarray]]:
    """Container format 1: a ConfusionAccumulator's configuration and one K×K matrix."""
    dtype = _dtype_named(header.pop("dtype", None))
    shape = header.pop("shape", None)
    state_format = header.pop("format", None)
    if dtype is None or isinstance(state_format, bool) or not isinstance(state_format, int):
        raise ValueError(f"{source} has an invalid format-1 header.")
    shape = _check_shape(shape, f"{source} matrix")
    if len(shape) != 2 or _num_items(shape) * dtype.itemsize != len(payload):
        raise ValueError(
            f"{source} is truncated or padded: its header describes a matrix of "
            f"shape {list(shape)}, its payload has {len(payload)} bytes."
        )
    matrix = np.frombuffer(payload, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
    return "ConfusionAccumulator", state_format, header, {"matrix": matrix}


# ---------------------------------------------------------------------------- files
def save_bytes(data: bytes, path: str | os.PathLike[str]) -> Path:
    """Write ``data`` to ``path`` atomically and return the path.

    The bytes go to a temporary file ``.<name>.<random>.tmp`` in the same directory, which is
    flushed, fsynced and renamed over ``path`` (``os.replace``, atomic on POSIX and Windows):
    readers see the old file or the new one, never a mixture. If the process is killed before
    the rename, that temporary file stays behind; :func:`stale_temporaries` lists such files.
    """
    target = Path(os.fspath(path))
    directory = target.parent
    # os.open with mode 0o666 honours the umask, as a plain open() would; tempfile's files would
    # be private (0o600). O_EXCL and a random name keep concurrent writers apart.
    temporary = directory / f".{target.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(
        temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(directory)
    return target


def stale_temporaries(path: str | os.PathLike[str]) -> list[Path]:
    """Temporary files that interrupted :func:`save_bytes` calls to ``path`` left behind.

    Only files named ``.<name>.<12 hex digits>.tmp`` beside ``path``; removing them is safe once
    no process is saving to ``path``.
    """
    target = Path(os.fspath(path))
    found = []
    for candidate in target.parent.glob(f".{target.name}.*.tmp"):
        middle = candidate.name[len(target.name) + 2 : -len(".tmp")]
        if len(middle) == 12 and all(c in "0123456789abcdef" for c in middle):
            found.append(candidate)
    return sorted(found)


def read_file(path: str | os.PathLike[str]) -> tuple[bytes, str]:
    """The bytes of a file written by :func:`save_bytes`, read with bounded reads.

    Refuses anything but a regular file (a FIFO would block, ``/dev/zero`` never ends), reads the
    fixed prefix, then exactly the bytes the prefix announces, and checks the file holds no more.

    Returns:
        ``(data, source)`` where ``source`` names the file for messages.
    """
    target = Path(os.fspath(path))
    source = f"file {str(target)!r}"
    info = os.stat(target)  # FileNotFoundError names the path
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{source} is not a regular file; only files written by `save()` load.")
    fd = os.open(target, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(
                f"{source} is not a regular file; only files written by `save()` load."
            )
        prefix = handle.read(_PREFIX.size)
        if len(prefix) < _PREFIX_V1.size or prefix[: len(MAGIC)] != MAGIC:
            return prefix, source  # decode names what is wrong (foreign or truncated)
        _, version, header_size = _PREFIX_V1.unpack_from(prefix)
        if not 1 <= version <= BINARY_FORMAT or header_size > MAX_HEADER_BYTES:
            # decode names what is wrong from the prefix alone: nothing more is read
            return prefix, source
        if version >= 2 and len(prefix) == _PREFIX.size:
            _, _, header_size, payload_size = _PREFIX.unpack_from(prefix)
            total = _PREFIX.size + header_size + payload_size + _CRC.size
        elif version == 1:
            total = _v1_total(handle, prefix, header_size, info.st_size, source)
        else:
            total = info.st_size  # a prefix cut short: decode says so
        if total != info.st_size:
            problem = "truncated" if info.st_size < total else "followed by extra bytes"
            raise ValueError(
                f"{source} is {problem}: {info.st_size} bytes on disk, but its "
                f"prefix announces {total}."
            )
        if version >= 2 and total > _STREAMED_CHECK_BYTES:
            # the header (bounded above) says how many payload bytes its arrays fill: a prefix
            # announcing more is refused before the payload is read
            _check_announced(handle, prefix, header_size, payload_size, source)
            handle.seek(len(prefix))
        if total > _STREAMED_CHECK_BYTES:
            # A large file (possibly sparse, or garbage behind a valid prefix) is checksummed
            # in pieces first, in constant memory: only a file whose checksum holds is then
            # read whole.
            _check_streamed(handle, prefix, total, source)
            handle.seek(len(prefix))
        rest = handle.read(total - len(prefix))
        if len(rest) != total - len(prefix):
            raise ValueError(
                f"{source} changed while it was read (it is shorter than its prefix announces)."
            )
    return prefix + rest, source


def _header_of(handle: Any, start: int, header_size: int, source: str) -> dict[str, Any]:
    """The JSON header of ``header_size`` bytes (at most ``MAX_HEADER_BYTES``) at ``start``."""
    handle.seek(start)
    raw = handle.read(header_size)
    if len(raw) != header_size:
        raise ValueError(f"{source} is truncated: its header is cut short.")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise ValueError(f"{source} has an unreadable header ({type(error).__name__}).") from None
    if not isinstance(header, dict):
        raise ValueError(f"{source} has a header that is not a JSON object.")
    return header


def _v1_total(handle: Any, prefix: bytes, header_size: int, on_disk: int, source: str) -> int:
    """The size a container of format 1 must have: its header describes the one matrix."""
    if on_disk < _PREFIX_V1.size + header_size + _CRC.size:
        return on_disk  # decode says it is truncated
    header = _header_of(handle, _PREFIX_V1.size, header_size, source)
    dtype = _dtype_named(header.get("dtype"))
    try:
        shape = _check_shape(header.get("shape"), f"{source} matrix")
    except ValueError:
        shape = None
    if dtype is None or shape is None or len(shape) != 2:
        raise ValueError(f"{source} has an invalid format-1 header.")
    handle.seek(len(prefix))
    return _PREFIX_V1.size + header_size + _num_items(shape) * dtype.itemsize + _CRC.size


def _check_announced(
    handle: Any, prefix: bytes, header_size: int, payload_size: int, source: str
) -> None:
    header = _header_of(handle, _PREFIX.size, header_size, source)
    entries = header.get("arrays")
    announced = 0
    if isinstance(entries, list):
        for entry in entries:
            if isinstance(entry, list) and len(entry) == 3:
                dtype = _dtype_named(entry[1])
                try:
                    shape = _check_shape(entry[2], source)
                except ValueError:
                    continue
                if dtype is not None:
                    announced += _num_items(shape) * dtype.itemsize
    if announced != payload_size:
        raise ValueError(
            f"{source} announces a payload of {payload_size} bytes, but the arrays of its "
            f"header fill {announced}; it is corrupt."
        )


# Files larger than this are checksummed in 1 MiB pieces before they are read into memory.
_STREAMED_CHECK_BYTES = 64 << 20
_PIECE_BYTES = 1 << 20


def _check_streamed(handle: Any, prefix: bytes, total: int, source: str) -> None:
    crc = zlib.crc32(prefix)
    remaining = total - len(prefix) - _CRC.size
    while remaining > 0:
        piece = handle.read(min(_PIECE_BYTES, remaining))
        if not piece:
            raise ValueError(
                f"{source} changed while it was read (it is shorter than its prefix announces)."
            )
        crc = zlib.crc32(piece, crc)
        remaining -= len(piece)
    stored = handle.read(_CRC.size)
    if len(stored) != _CRC.size or _CRC.unpack(stored)[0] != crc:
        raise ValueError(f"{source} is corrupt: its checksum does not match.")


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; not possible on every platform (Windows), hence optional.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
