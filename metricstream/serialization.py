"""Durable, versioned state of a :class:`~metricstream.ConfusionAccumulator`.

Three forms, all exact and all carrying the configuration with the counts:

* **state dict** (:func:`state_dict` / :func:`from_state_dict`): a plain ``dict`` of the
  configuration, the K×K ``matrix`` (a numpy array) and ``"format"``, the layout version. It is
  what ``pickle`` stores, and what a checkpoint (``torch.save``, ``np.savez``) can hold.
* **bytes** (:func:`to_bytes` / :func:`from_bytes`): a self-describing binary container — magic
  bytes, container version, a JSON header, the little-endian counts and a CRC-32 of everything
  before it — that needs neither pickle nor numpy's file format to read, so it is safe to load from
  an untrusted source.
* **file** (:func:`save` / :func:`load`): the bytes, written atomically (a temporary file in the
  same directory, flushed and fsynced, then renamed over the target), so a crash never leaves a
  half-written file under the final name.

Compatibility rule: every reader accepts every format version written by earlier releases
(``tests/fixtures/`` holds files written by each version, and the tests load them); input written by
a *newer* release, or truncated, corrupt or foreign input, raises ``ValueError`` saying which.

Example:
    >>> from metricstream import ConfusionAccumulator
    >>> acc = ConfusionAccumulator(num_classes=2).update([0, 1, 1], [0, 1, 0])
    >>> blob = acc.to_bytes()
    >>> ConfusionAccumulator.from_bytes(blob) == acc
    True
    >>> sorted(acc.state_dict())
    ['class_axis', 'class_names', 'format', 'ignore_index', 'matrix', 'num_classes', 'weighted']
"""

from __future__ import annotations

import json
import os
import secrets
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .accumulator import ConfusionAccumulator

__all__ = [
    "BINARY_FORMAT",
    "MAGIC",
    "STATE_FORMAT",
    "from_bytes",
    "from_state_dict",
    "load",
    "save",
    "state_dict",
    "to_bytes",
]

# Layout version of the state dict (and of pickles, which store the state dict). Bump it when a
# key is added, removed or changes meaning, and register a function in ``_UPGRADES`` that turns
# the previous layout into the new one.
STATE_FORMAT = 1

# Version of the binary container (magic, header, payload, checksum) of ``to_bytes``/``save``.
BINARY_FORMAT = 1

# PNG-style magic: a non-ASCII first byte catches text-mode transfers, the CR LF pair catches
# newline conversion.
MAGIC = b"\x89MSACC\r\n"

_CONFIG_KEYS = ("num_classes", "class_names", "ignore_index", "weighted", "class_axis")
_PREFIX = struct.Struct("<8sII")  # magic, binary format, header length
_CRC = struct.Struct("<I")

# ``_UPGRADES[n]`` turns a state dict of format ``n`` into format ``n + 1``.
_UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


# ---------------------------------------------------------------------------- state dict
def state_dict(acc: ConfusionAccumulator) -> dict[str, Any]:
    """The accumulator's state as a plain dict: configuration, ``matrix`` (a copy) and ``format``.

    The dict holds only builtins and one numpy array, so it pickles, goes into ``np.savez`` or a
    ``torch.save`` checkpoint, and compares with ``==`` key by key.
    """
    with acc._lock:
        matrix = acc._matrix.copy()
    state: dict[str, Any] = {"format": STATE_FORMAT, "matrix": matrix}
    state.update(acc._config())
    return state


def from_state_dict(state: Any,
                    cls: type[ConfusionAccumulator] | None = None) -> ConfusionAccumulator:
    """A new accumulator from :func:`state_dict` output of this or any earlier format version.

    Raises:
        TypeError: ``state`` is not a dict.
        ValueError: a missing key, a format newer than this release reads, or a matrix whose
            shape, dtype or values do not fit the configuration.
    """
    if cls is None:
        from .accumulator import ConfusionAccumulator  # lazy: accumulator imports this module

        cls = ConfusionAccumulator
    acc = cls.__new__(cls)
    restore(acc, state)
    return acc


def restore(acc: ConfusionAccumulator, state: Any) -> None:
    """Fill ``acc`` (possibly created without ``__init__``, as pickle does) from ``state``."""
    if not isinstance(state, dict):
        raise TypeError(
            f"`state` must be a dict made by `state_dict()`, got {type(state).__name__}."
        )
    state = _upgrade(state)
    missing = [key for key in ("matrix", *_CONFIG_KEYS) if key not in state]
    if missing:
        raise ValueError(
            f"`state` lacks the key(s) {missing}; it was not made by `state_dict()` or is damaged."
        )
    fresh = type(acc)(
        state["num_classes"],
        class_names=state["class_names"],
        ignore_index=state["ignore_index"],
        weighted=state["weighted"],
        class_axis=state["class_axis"],
    )
    fresh._matrix[...] = _check_state_matrix(state["matrix"], fresh._matrix)
    acc.__dict__.update(fresh.__dict__)


def _upgrade(state: dict[str, Any]) -> dict[str, Any]:
    version = state.get("format")
    if isinstance(version, bool) or not isinstance(version, (int, np.integer)):
        raise ValueError(
            f"`state` has no valid 'format' entry (got {version!r}); it was not made by "
            f"`state_dict()` of metricstream."
        )
    version = int(version)
    if version > STATE_FORMAT:
        raise ValueError(
            f"`state` has format {version}, written by a newer metricstream; this version reads "
            f"formats 1 to {STATE_FORMAT}. Upgrade metricstream to load it."
        )
    if version < 1:
        raise ValueError(f"`state` has format {version}; valid formats are 1 to {STATE_FORMAT}.")
    while version < STATE_FORMAT:
        state = _UPGRADES[version](dict(state))
        version += 1
        state["format"] = version
    return state


def _check_state_matrix(matrix: Any, target: np.ndarray) -> np.ndarray:
    array = np.asarray(matrix)
    shape = target.shape
    if array.shape != shape:
        raise ValueError(
            f"state `matrix` has shape {array.shape}, but `num_classes` is {shape[0]} "
            f"(expected {shape})."
        )
    if target.dtype.kind == "f":
        ok = array.dtype.kind in "iuf"
    else:
        whole = array.dtype.kind == "f" and bool(np.isfinite(array).all())
        ok = array.dtype.kind in "iu" or (whole and bool((array == np.round(array)).all()))
    if not ok:
        raise ValueError(
            f"state `matrix` has dtype {array.dtype}, which does not fit the accumulator's "
            f"{target.dtype} counts."
        )
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ValueError("state `matrix` holds NaN or infinite counts.")
    if (array < 0).any():
        position = tuple(int(i) for i in np.argwhere(array < 0)[0])
        raise ValueError(
            f"state `matrix` holds {array[position].item()!r} at {position}; counts are "
            f"non-negative."
        )
    return array


# ---------------------------------------------------------------------------- bytes
def to_bytes(acc: ConfusionAccumulator) -> bytes:
    """The accumulator as a versioned, checksummed binary blob (see the module docstring).

    Layout (all integers little-endian)::

        8 bytes   magic b"\\x89MSACC\\r\\n"
        uint32    binary format version
        uint32    header length H
        H bytes   UTF-8 JSON: state format, configuration, matrix dtype and shape
        K*K*8     the matrix, C order, "<i8" (counts) or "<f8" (weights)
        uint32    CRC-32 of every byte before it
    """
    state = state_dict(acc)
    matrix = state.pop("matrix")
    dtype = "<f8" if matrix.dtype.kind == "f" else "<i8"
    header = dict(state, dtype=dtype, shape=list(matrix.shape))
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    body = b"".join(
        (
            _PREFIX.pack(MAGIC, BINARY_FORMAT, len(header_bytes)),
            header_bytes,
            np.ascontiguousarray(matrix, dtype=dtype).tobytes(),
        )
    )
    return body + _CRC.pack(zlib.crc32(body))


def from_bytes(data: Any, cls: type[ConfusionAccumulator] | None = None,
               *, source: str = "`data`") -> ConfusionAccumulator:
    """A new accumulator from :func:`to_bytes` output of this or any earlier format version.

    Raises:
        TypeError: ``data`` is not bytes-like.
        ValueError: foreign data (wrong magic bytes), a newer binary or state format, truncated
            or trailing bytes, or a checksum mismatch (corruption).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{source} must be bytes made by `to_bytes()`, got {type(data).__name__}.")
    view = memoryview(data).cast("B")
    size = len(view)
    if size < len(MAGIC) or bytes(view[: len(MAGIC)]) != MAGIC:
        raise ValueError(
            f"{source} is not a saved metricstream accumulator: it starts with "
            f"{bytes(view[:len(MAGIC)])!r}, expected the magic bytes {MAGIC!r}."
        )
    if size < _PREFIX.size:
        raise ValueError(f"{source} is truncated: {size} bytes, shorter than the fixed prefix.")
    _, version, header_size = _PREFIX.unpack_from(view)
    if version > BINARY_FORMAT:
        raise ValueError(
            f"{source} uses binary format {version}, written by a newer metricstream; this version "
            f"reads formats 1 to {BINARY_FORMAT}. Upgrade metricstream to load it."
        )
    if version < 1:
        raise ValueError(f"{source} has invalid binary format {version}; it is corrupt.")
    header_end = _PREFIX.size + header_size
    if size < header_end + _CRC.size:
        raise ValueError(
            f"{source} is truncated: {size} bytes, but its header alone needs {header_end + 4}."
        )
    try:
        header = json.loads(bytes(view[_PREFIX.size : header_end]).decode("utf-8"))
        dtype = np.dtype({"<i8": "<i8", "<f8": "<f8"}[header.pop("dtype")])
        shape = tuple(int(n) for n in header.pop("shape"))
        if len(shape) != 2 or min(shape) < 0:
            raise ValueError(shape)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as error:
        if zlib.crc32(view[: size - _CRC.size]) != _CRC.unpack_from(view, size - _CRC.size)[0]:
            raise ValueError(f"{source} is corrupt: its checksum does not match.") from error
        raise ValueError(
            f"{source} has an unreadable header ({error!r}); it is corrupt."
        ) from error
    expected = header_end + shape[0] * shape[1] * dtype.itemsize + _CRC.size
    if size != expected:
        problem = "truncated" if size < expected else "followed by extra bytes"
        raise ValueError(
            f"{source} is {problem}: {size} bytes, but its header describes {expected}."
        )
    (stored,) = _CRC.unpack_from(view, size - _CRC.size)
    if zlib.crc32(view[: size - _CRC.size]) != stored:
        raise ValueError(f"{source} is corrupt: its checksum does not match.")
    matrix = np.frombuffer(view, dtype=dtype, count=shape[0] * shape[1], offset=header_end)
    header["matrix"] = matrix.reshape(shape).astype(dtype.newbyteorder("="))
    try:
        return from_state_dict(header, cls)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source} holds an invalid state: {error}") from error


# ---------------------------------------------------------------------------- files
def save(acc: ConfusionAccumulator, path: str | os.PathLike[str]) -> Path:
    """Write :func:`to_bytes` to ``path`` atomically and return the path.

    The bytes go to a temporary file in the same directory, which is flushed, fsynced and then
    renamed over ``path`` (``os.replace``, atomic on POSIX and Windows): readers see the old file
    or the new one, never a mixture, and a crash leaves at most a stray ``.*.tmp`` file.
    """
    target = Path(os.fspath(path))
    data = to_bytes(acc)
    directory = target.parent
    # os.open with mode 0o666 honours the umask, as a plain open() would; tempfile's files would
    # be private (0o600). O_EXCL and a random name keep concurrent writers apart.
    temporary = directory / f".{target.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                 0o666)
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


def load(path: str | os.PathLike[str],
         cls: type[ConfusionAccumulator] | None = None) -> ConfusionAccumulator:
    """Read an accumulator written by :func:`save` (any earlier format version included).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is foreign, truncated, corrupt or from a newer metricstream; the
            message names the file.
    """
    target = Path(os.fspath(path))
    return from_bytes(target.read_bytes(), cls, source=f"file {str(target)!r}")


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
