"""Reading prediction files in bounded-memory chunks into one confusion matrix.

This is the engine behind ``metricstream report`` (:mod:`metricstream.cli`). It reads

* CSV / TSV: with pyarrow's CSV parser when pyarrow is installed (byte ranges of
  ``CSV_BLOCK_BYTES`` cut after whole records, each parsed on all cores), else with the standard
  library's ``csv`` module in chunks of ``STDLIB_CHUNK_ROWS`` rows;
* Parquet (pyarrow): record batches of ``CHUNK_ROWS`` rows;
* ``.npy``: a structured array (fields are columns) or a 2-D ``(N, C)`` array (columns ``"0"``,
  ``"1"``, ...), memory-mapped and read ``CHUNK_ROWS`` rows at a time;
* ``.npz``: arrays of equal shape (any shape, e.g. ``(B, H, W)`` masks) are columns; each member
  is decompressed and read ``CHUNK_ROWS`` elements at a time, so even a compressed archive is
  never loaded whole. An optional ``class_names`` member names the classes.

Labels come in two modes, decided from the column types (the schema, or the first rows):

* **index**: both label columns are numbers, and label ``i`` is class ``i``. The number of
  classes grows while streaming: when a chunk holds a label ``>= K``, the accumulator is
  re-embedded into a larger zero matrix (its K×K counts copied into the top-left corner), which
  costs O(K²) per growth and nothing on chunks that bring no new class. At the end, classes that
  occur neither in the truth nor in the prediction are dropped, so that the report lists the
  labels present, as scikit-learn's ``unique_labels`` does. ``classes=`` fixes K and names the
  indices instead.
* **names**: a label column holds text. Truth and prediction go through one
  :class:`LabelRegistry`, so a name seen only in the predictions still gets its own row and
  column. The final order is the sorted order of the names (numerically when every name is an
  integer), as scikit-learn sorts labels, or the order of ``classes=``.

Errors are :class:`InputError`: one line naming the file, the column, and the row (counted from
1, not counting a header line) or the element position.
"""

from __future__ import annotations

import csv
import itertools
import os
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .accumulator import ConfusionAccumulator

# Rows per chunk of Parquet batches and of .npy/.npz reads;
# with two int64 columns a chunk is 16 MiB, so memory stays flat whatever the file size.
CHUNK_ROWS = 1 << 20
# Rows per chunk of the standard-library CSV reader: each row is a list of Python strings
# (~200 bytes), so a million would hold ~200 MB; 64 Ki rows hold ~13 MB and cost no speed.
STDLIB_CHUNK_ROWS = 1 << 16
# Bytes of CSV parsed at a time by pyarrow (one range in memory: with two integer columns about
# 3x this size once parsed), and the block size within a range that its threads share.
# Measured on 10 million rows: 4 MiB ranges of 1 MiB blocks read about as fast as
# ``read_csv`` of the whole file, with a flat ~150 MB peak.
CSV_BLOCK_BYTES = 4 << 20
CSV_PARSE_BLOCK_BYTES = 1 << 20
# Rows from which the standard-library reader infers the column types.
CSV_SAMPLE_ROWS = 1000
# Bytes from which pyarrow infers the column types (its own default block size).
CSV_PEEK_BYTES = 1 << 20
# In index mode a label is a row of a K×K int64 matrix: 4096 classes are a 128 MiB matrix.
# Larger integers are more likely identifiers than class indices; read them as names instead.
MAX_INDEX_LABEL = 4096

CSV_DELIMITERS = {".csv": ",", ".tsv": "\t", ".tab": "\t"}
SUFFIXES = (*CSV_DELIMITERS, ".parquet", ".pq", ".npy", ".npz")

_IGNORED = -1  # code of the ignored truth label in names mode (the accumulator skips it)
_UNKNOWN = -2  # a name outside a fixed ``classes`` list
_EMPTY = -3  # an empty label


class InputError(ValueError):
    """A problem with the input file or the options that read it, worded as one line.

    ``usage`` is True when the command line itself is wrong (a missing file, an unknown column or
    file type), False when the file's content is (an unparsable or invalid row).
    """

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


# ---------------------------------------------------------------------- the label registry
class LabelRegistry:
    """One mapping from class names to class indices, shared by the truth and the prediction.

    Names get indices in order of first appearance; :meth:`sorted_order` gives the final order.
    With ``frozen=True`` only the names given at construction are known.

    Example:
        >>> registry = LabelRegistry()
        >>> registry.codes(["cat", "dog"]).tolist(), registry.codes(["hen", "cat"]).tolist()
        ([0, 1], [2, 0])
        >>> registry.names
        ['cat', 'dog', 'hen']
    """

    def __init__(self, names: Sequence[str] = (), *, frozen: bool = False) -> None:
        self._index: dict[str, int] = {}
        self.names: list[str] = []
        for name in names:
            if name in self._index:
                raise InputError(f"`--classes` lists {name!r} twice; class names must be unique.",
                                 usage=True)
            self._index[name] = len(self.names)
            self.names.append(name)
        self.frozen = frozen

    def __len__(self) -> int:
        return len(self.names)

    def codes(self, dictionary: Sequence[str], ignore: str | None = None) -> np.ndarray:
        """The class index of each name in ``dictionary`` (new names are added unless frozen).

        ``ignore`` maps to ``-1``; an unknown name of a frozen registry to ``-2``; ``""`` to
        ``-3``.
        """
        out = np.empty(len(dictionary), dtype=np.int64)
        index = self._index
        for position, name in enumerate(dictionary):
            code = index.get(name)
            if code is None:
                if ignore is not None and name == ignore:
                    code = _IGNORED
                elif name == "":
                    code = _EMPTY
                elif self.frozen:
                    code = _UNKNOWN
                else:
                    code = index[name] = len(self.names)
                    self.names.append(name)
            out[position] = code
        return out

    def sorted_order(self) -> list[int]:
        """Indices of the names in sorted order (numeric when every name is an integer)."""
        try:
            keys: list[Any] = [int(name) for name in self.names]
        except ValueError:
            keys = list(self.names)
        return sorted(range(len(self.names)), key=keys.__getitem__)


# ---------------------------------------------------------------------- chunks and sources
@dataclass
class Coded:
    """A chunk of a text column: ``codes`` index into ``dictionary``."""

    codes: np.ndarray
    dictionary: list[str]

    def __len__(self) -> int:
        return len(self.codes)


@dataclass
class Chunk:
    """Consecutive rows (or flat elements) of the selected columns, starting at ``start``."""

    start: int
    columns: dict[str, Any]
    position: int  # progress after this chunk, in the source's ``progress_unit``


@dataclass
class Source:
    """An opened input: its columns, their kinds, and a way to iterate chunks."""

    path: Path
    columns: list[str]
    kinds: dict[str, str]  # column -> "int", "float" or "str"
    shape: tuple[int, ...] | None  # element shape of .npz columns (positions are unravelled)
    progress_total: int
    progress_unit: str
    read: Callable[[list[str], dict[str, str]], Iterator[Chunk]]
    class_names: list[str] | None = None
    header: bool = True
    text: bool = False  # a text file: any column can be read as any kind, row by row

    def where(self, flat_index: int) -> str:
        """'row N' (1-based) or 'element (i, j, k)' for error messages."""
        if self.shape is not None and len(self.shape) > 1:
            index = np.unravel_index(flat_index, self.shape)
            return f"element {tuple(int(i) for i in index)}"
        return f"row {flat_index + 1}"


def _missing_pyarrow(path: Path, what: str) -> InputError:
    return InputError(
        f"{path}: reading {what} needs pyarrow, which is not installed; "
        f"install it with `pip install pyarrow` (or `pip install 'metricstream[parquet]'`).",
        usage=True,
    )


def open_source(path: str | os.PathLike, *, delimiter: str | None = None, header: bool = True,
                prefer_pyarrow: bool = True) -> Source:
    """Open ``path`` for chunked reading, choosing the reader from its suffix.

    Raises:
        InputError: the file does not exist, its type is unknown, or its header is unreadable.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file.", usage=True)
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a prediction file.", usage=True)
    suffix = path.suffix.lower()
    if suffix in CSV_DELIMITERS or delimiter is not None:
        sep = delimiter if delimiter is not None else CSV_DELIMITERS[suffix]
        if prefer_pyarrow and _have_pyarrow():
            return _open_csv_arrow(path, sep, header)
        return _open_csv_stdlib(path, sep, header)
    if suffix in (".parquet", ".pq"):
        if not _have_pyarrow():
            raise _missing_pyarrow(path, "Parquet")
        return _open_parquet(path)
    if suffix == ".npy":
        return _open_npy(path)
    if suffix == ".npz":
        return _open_npz(path)
    raise InputError(
        f"{path}: unknown file type {suffix or '(no suffix)'!r}; expected one of "
        f"{', '.join(SUFFIXES)} (or pass `--delimiter` for another delimited text file).",
        usage=True,
    )


def _have_pyarrow() -> bool:
    try:
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------- CSV, standard library
def _csv_kind(values: Sequence[str]) -> str:
    for kind, convert in (("int", int), ("float", float)):
        try:
            for value in values:
                convert(value)
        except ValueError:
            continue
        return kind
    return "str"


def _open_csv_stdlib(path: Path, sep: str, header: bool) -> Source:
    with open(path, newline="", encoding="utf-8-sig") as file:
        reader = csv.reader(file, delimiter=sep)
        rows = [row for row in itertools.islice(reader, CSV_SAMPLE_ROWS + 1) if row]
    if not rows:
        raise InputError(f"{path}: the file is empty; expected a header line and rows.")
    columns = rows[0] if header else [f"f{i}" for i in range(len(rows[0]))]
    sample = rows[1:] if header else rows
    kinds = {}
    for i, name in enumerate(columns):
        # Empty fields say nothing about the type (pyarrow, too, infers types around them).
        values = [row[i] for row in sample if i < len(row) and row[i] != ""]
        kinds[name] = _csv_kind(values) if values else "str"

    def read(selected: list[str], as_kinds: dict[str, str]) -> Iterator[Chunk]:
        yield from _read_csv_stdlib(path, sep, header, columns, selected, as_kinds)

    return Source(path, columns, kinds, None, path.stat().st_size, "B", read, header=header,
                  text=True)


def _read_csv_stdlib(path: Path, sep: str, header: bool, columns: list[str], selected: list[str],
                     kinds: dict[str, str]) -> Iterator[Chunk]:
    width = len(columns)
    positions = [columns.index(name) for name in selected]
    with open(path, newline="", encoding="utf-8-sig") as file:
        reader = csv.reader(file, delimiter=sep)
        if header:
            next(reader, None)
        start = 0
        while True:
            block = list(itertools.islice(reader, STDLIB_CHUNK_ROWS))
            if not block:
                return
            rows = [row for row in block if row]  # blank lines are skipped, as pyarrow does
            for offset, row in enumerate(rows):
                if len(row) != width:
                    raise InputError(
                        f"{path}: row {start + offset + 1} has {len(row)} fields, but the header "
                        f"has {width} ({', '.join(columns)}); the row cannot be parsed."
                    )
            chunk: dict[str, Any] = {}
            for name, position in zip(selected, positions, strict=True):
                values = [row[position] for row in rows]
                chunk[name] = _convert_text(path, name, values, kinds[name], start)
            # (text files refuse tell() while iterated; the byte stream under them does not)
            raw: Any = file.buffer
            yield Chunk(start, chunk, raw.tell())
            start += len(rows)


def _convert_text(path: Path, name: str, values: list[str], kind: str, start: int) -> Any:
    if kind == "str":
        dictionary, codes = np.unique(np.asarray(values, dtype=str), return_inverse=True)
        return Coded(codes.reshape(-1), [str(v) for v in dictionary])
    # kind is "int" or "float" (numeric labels), or "weight" (read as float)
    dtype = np.int64 if kind == "int" else np.float64
    convert = int if kind == "int" else float
    try:
        return np.array([convert(v) for v in values], dtype=dtype)
    except (ValueError, OverflowError):
        for offset, value in enumerate(values):
            try:
                convert(value)
            except (ValueError, OverflowError):
                raise _not_a_number(path, name, f"row {start + offset + 1}", value, kind) from None
        raise  # pragma: no cover - some value failed above


def _not_a_number(path: Path, column: str, where: str, value: str, kind: str) -> InputError:
    prefix = f"{path}: column {column!r}, {where}:"
    if value.strip() == "":
        return InputError(f"{prefix} the value is empty.")
    if kind == "weight":
        return InputError(f"{prefix} {value!r} is not a number; weights must be numbers.")
    what = "an integer" if kind == "int" else "a number"
    return InputError(
        f"{prefix} {value!r} is not {what}, and the column's labels are read as numbers; "
        f"pass `--labels str` to read them as class names."
    )


# ---------------------------------------------------------------------- CSV, pyarrow
def _arrow_kind(arrow_type: Any) -> str:
    import pyarrow as pa

    if pa.types.is_integer(arrow_type):
        return "int"
    if pa.types.is_floating(arrow_type):
        return "float"
    return "str"


def _open_csv_arrow(path: Path, sep: str, header: bool) -> Source:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    read_options = pacsv.ReadOptions(block_size=CSV_PEEK_BYTES,
                                     autogenerate_column_names=not header)
    parse_options = pacsv.ParseOptions(delimiter=sep)
    try:
        with pacsv.open_csv(path, read_options=read_options, parse_options=parse_options,
                            convert_options=_arrow_convert_options()) as peek:
            schema = peek.schema
    except pa.ArrowInvalid as error:
        if "Empty CSV file" in str(error):
            raise InputError(f"{path}: the file is empty; expected a header line and rows.") \
                from None
        # The first block does not parse: let the standard library say where.
        return _open_csv_stdlib(path, sep, header)
    columns = list(schema.names)
    kinds = {name: _arrow_kind(schema.field(name).type) for name in columns}

    def read(selected: list[str], as_kinds: dict[str, str]) -> Iterator[Chunk]:
        types = {
            name: {"int": pa.int64(), "float": pa.float64(), "weight": pa.float64(),
                   "str": pa.dictionary(pa.int32(), pa.string())}[as_kinds[name]]
            for name in selected
        }
        try:
            yield from _read_csv_arrow(path, sep, header, columns, selected, types)
        except pa.ArrowInvalid as error:
            # pyarrow names neither the row nor the column of a parse or conversion error; re-read
            # with the standard library, which does (this costs time only on the error path).
            for _ in _read_csv_stdlib(path, sep, header, columns, selected, as_kinds):
                pass
            raise InputError(f"{path}: {str(error).splitlines()[0]}") from None

    return Source(path, columns, kinds, None, path.stat().st_size, "B", read, header=header,
                  text=True)


def _arrow_convert_options(**kwargs: Any) -> Any:
    import pyarrow.csv as pacsv

    # Only an empty field is missing: "NA", "null" or "nan" are class names (or, for a weight,
    # NaN, which is then rejected as a weight), not holes as pyarrow would read them by default.
    return pacsv.ConvertOptions(null_values=[""], strings_can_be_null=False, **kwargs)


def _read_csv_arrow(path: Path, sep: str, header: bool, columns: list[str],
                    selected: list[str], types: dict[str, Any]) -> Iterator[Chunk]:
    """Parse the file in byte ranges of about ``CSV_BLOCK_BYTES``, each cut after a whole record.

    Why not ``pyarrow.csv.open_csv``: measured on 10 to 30 million rows, its multi-threaded
    streaming reader reads ahead of the consumer without bound (peak memory grew with the file:
    300 MB at 10 M rows, 500 MB at 30 M), and single-threaded it gives up half the machine.
    Each range here is parsed by ``read_csv`` on all cores, and only one range is in memory.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    read_options = pacsv.ReadOptions(column_names=columns, block_size=CSV_PARSE_BLOCK_BYTES)
    parse_options = pacsv.ParseOptions(delimiter=sep)
    # Explicit types: measured, inferring them per block makes reading ~1.5x slower.
    convert_options = _arrow_convert_options(column_types=types, include_columns=selected)
    with open(path, "rb") as file:
        if header:
            file.readline()
        buffer = bytearray(CSV_BLOCK_BYTES)
        filled = 0
        start = 0
        while True:
            got = file.readinto(memoryview(buffer)[filled:])
            end = filled + got
            if end == 0:
                return
            cut = end if got == 0 else _record_end(buffer, end)
            if cut == 0:  # one record longer than the buffer: make room and read on
                buffer.extend(bytes(len(buffer)))
                filled = end
                continue
            data = bytes(buffer[:cut])
            buffer[: end - cut] = buffer[cut:end]
            filled = end - cut
            if data.strip():
                table = pacsv.read_csv(pa.py_buffer(data), read_options=read_options,
                                       parse_options=parse_options,
                                       convert_options=convert_options)
                for batch in table.to_batches():
                    chunk = {name: _from_arrow(batch.column(i), path, name, start)
                             for i, name in enumerate(batch.schema.names)}
                    yield Chunk(start, chunk, file.tell() - filled)
                    start += batch.num_rows
            if got == 0:
                return


def _record_end(buffer: bytearray, end: int) -> int:
    """The end of the last whole record in ``buffer[:end]``: after a newline outside quotes."""
    cut = buffer.rfind(b"\n", 0, end) + 1
    if buffer.find(b'"', 0, end) != -1:
        # A newline inside a quoted field does not end a record; quotes are balanced (an escaped
        # quote is doubled) exactly at the newlines that do.
        while cut and buffer.count(b'"', 0, cut) % 2:
            cut = buffer.rfind(b"\n", 0, cut - 1) + 1
    return cut


def _from_arrow(array: Any, path: Path, name: str, start: int) -> Any:
    """A pyarrow array as a numpy array (zero-copy for numbers) or a :class:`Coded`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.null_count:
        first = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(f"{path}: column {name!r}, row {start + first + 1}: the value is empty.")
    if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
        return _arrow_numbers(array)
    if not pa.types.is_dictionary(array.type):
        if not pa.types.is_string(array.type) and not pa.types.is_large_string(array.type):
            array = pc.cast(array, pa.string())
        array = pc.dictionary_encode(array)
    return Coded(_arrow_numbers(array.indices), [str(v) for v in array.dictionary.to_pylist()])


_ARROW_FLOATS = {"halffloat": np.float16, "float": np.float32, "double": np.float64}


def _arrow_numbers(array: Any) -> np.ndarray:
    """A null-free numeric pyarrow array as a read-only numpy view of its data buffer.

    ``Array.to_numpy`` would do the same, but it imports pandas (0.1 s and 40 MB) to do it.
    """
    dtype = np.dtype(_ARROW_FLOATS.get(str(array.type), str(array.type)))
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array),
                         offset=array.offset * dtype.itemsize)


# ---------------------------------------------------------------------- Parquet
def _open_parquet(path: Path) -> Source:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        file = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as error:
        raise InputError(f"{path}: not a readable Parquet file ({error}).") from None
    schema = file.schema_arrow
    columns = list(schema.names)
    kinds = {name: _arrow_kind(schema.field(name).type) for name in columns}

    def read(selected: list[str], as_kinds: dict[str, str]) -> Iterator[Chunk]:
        import pyarrow.compute as pc

        start = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=CHUNK_ROWS, columns=selected):
            chunk = {}
            for name in selected:
                array = batch.column(batch.schema.get_field_index(name))
                if as_kinds[name] == "str" and kinds[name] != "str":
                    array = pc.cast(array, pa.string())
                chunk[name] = _from_arrow(array, path, name, start)
            start += batch.num_rows
            yield Chunk(start - batch.num_rows, chunk, start)

    return Source(path, columns, kinds, None, file.metadata.num_rows, "rows", read)


# ---------------------------------------------------------------------- numpy
def _numpy_kind(dtype: np.dtype) -> str:
    if dtype.kind in "biu":
        return "int"
    if dtype.kind == "f":
        return "float"
    return "str"


def _numpy_column(values: np.ndarray, kind: str) -> Any:
    if kind == "str" or values.dtype.kind not in "biuf":
        dictionary, codes = np.unique(values, return_inverse=True)
        return Coded(codes.reshape(-1), [str(v.item() if hasattr(v, "item") else v)
                                         for v in dictionary])
    return np.ascontiguousarray(values)


def _load_npy(path: Path, **kwargs: Any) -> Any:
    try:
        return np.load(path, allow_pickle=False, **kwargs)
    except (ValueError, OSError, zipfile.BadZipFile) as error:
        raise InputError(f"{path}: not a readable numpy file ({error}).") from None


def _open_npy(path: Path) -> Source:
    array = _load_npy(path, mmap_mode="r")
    if array.dtype.names:
        columns = list(array.dtype.names)
        kinds = {name: _numpy_kind(array.dtype[name]) for name in columns}
    elif array.ndim == 2:
        columns = [str(i) for i in range(array.shape[1])]
        kinds = {name: _numpy_kind(array.dtype) for name in columns}
    else:
        raise InputError(
            f"{path}: holds an array of shape {array.shape}; a .npy file must be a structured "
            f"array (fields are columns) or 2-D (N, C) with one column per field. Save masks as "
            f"a .npz file with `y_true` and `y_pred` arrays instead.", usage=True)
    rows = array.shape[0]

    def read(selected: list[str], as_kinds: dict[str, str]) -> Iterator[Chunk]:
        for start in range(0, rows, CHUNK_ROWS):
            part = array[start : start + CHUNK_ROWS]
            chunk = {}
            for name in selected:
                values = part[name] if array.dtype.names else part[:, int(name)]
                chunk[name] = _numpy_column(values, as_kinds[name])
            yield Chunk(start, chunk, min(start + CHUNK_ROWS, rows))

    return Source(path, columns, kinds, None, rows, "rows", read)


def _npz_header(archive: zipfile.ZipFile, member: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    with archive.open(member) as file:
        version = np.lib.format.read_magic(file)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(file)
        return np.lib.format.read_array_header_2_0(file)


def _open_npz(path: Path) -> Source:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise InputError(f"{path}: not a readable .npz file ({error}).") from None
    with archive:
        members = [m for m in archive.namelist() if m.endswith(".npy")]
        headers = {}
        for member in members:
            try:
                headers[member[:-4]] = _npz_header(archive, member)
            except ValueError as error:
                raise InputError(f"{path}: member {member!r} is not a numpy array ({error}).") \
                    from None
    class_names = None
    if "class_names" in headers:
        with _load_npy(path) as loaded:
            class_names = [str(name) for name in loaded["class_names"].tolist()]
        del headers["class_names"]
    columns = list(headers)
    kinds = {name: _numpy_kind(dtype) for name, (_, _, dtype) in headers.items()}

    def read(selected: list[str], as_kinds: dict[str, str]) -> Iterator[Chunk]:
        shapes = {headers[name][0] for name in selected}
        if len(shapes) > 1:
            described = ", ".join(f"{name!r} {headers[name][0]}" for name in selected)
            raise InputError(f"{path}: the selected arrays differ in shape ({described}); "
                             f"they must have one shape.", usage=True)
        size = int(np.prod(headers[selected[0]][0], dtype=np.int64))
        if any(headers[name][1] or headers[name][2].hasobject for name in selected):
            # Fortran-ordered or object arrays cannot be streamed element by element in C order.
            with _load_npy(path) as loaded:
                arrays = {name: loaded[name].reshape(-1) for name in selected}
            for start in range(0, size, CHUNK_ROWS):
                yield Chunk(start, {name: _numpy_column(arrays[name][start:start + CHUNK_ROWS],
                                                        as_kinds[name]) for name in selected},
                            min(start + CHUNK_ROWS, size))
            return
        with zipfile.ZipFile(path) as archive:
            files = {}
            try:
                for name in selected:
                    files[name] = archive.open(name + ".npy")
                    _npz_header_skip(files[name])
                for start in range(0, size, CHUNK_ROWS):
                    count = min(CHUNK_ROWS, size - start)
                    chunk = {}
                    for name in selected:
                        dtype = headers[name][2]
                        data = files[name].read(count * dtype.itemsize)
                        values = np.frombuffer(data, dtype=dtype, count=count)
                        chunk[name] = _numpy_column(values, as_kinds[name])
                    yield Chunk(start, chunk, start + count)
            finally:
                for file in files.values():
                    file.close()

    shape = next(iter(headers.values()))[0] if headers else None
    total = int(np.prod(shape, dtype=np.int64)) if shape is not None else 0
    return Source(path, columns, kinds, shape, total, "elements", read, class_names=class_names)


def _npz_header_skip(file: Any) -> None:
    version = np.lib.format.read_magic(file)
    if version == (1, 0):
        np.lib.format.read_array_header_1_0(file)
    else:
        np.lib.format.read_array_header_2_0(file)


# ---------------------------------------------------------------------- column selection
@dataclass
class Selection:
    """Which columns hold the truth, the prediction and (optionally) the weights."""

    truth: str
    pred: str
    weight: str | None = None

    @property
    def names(self) -> list[str]:
        return [self.truth, self.pred] + ([self.weight] if self.weight else [])


def select_columns(source: Source, truth: str | None = None, pred: str | None = None,
                   weight: str | None = None) -> Selection:
    """Pick the columns: as given, else ``y_true``/``y_pred``, else the first two columns left."""
    available = source.columns
    for flag, name in (("--true", truth), ("--pred", pred), ("--weight", weight)):
        if name is not None and name not in available:
            raise InputError(
                f"{source.path}: no column {name!r} (given by `{flag}`); the file's columns are "
                f"{', '.join(repr(c) for c in available) or 'none'}.", usage=True)
    truth = truth if truth is not None else ("y_true" if "y_true" in available else None)
    pred = pred if pred is not None else ("y_pred" if "y_pred" in available else None)
    rest = [c for c in available if c not in (truth, pred, weight)]
    if truth is None:
        truth = rest.pop(0) if rest else None
    if pred is None:
        pred = rest.pop(0) if rest else None
    if truth is None or pred is None:
        raise InputError(
            f"{source.path}: needs two columns (truth and prediction), found "
            f"{', '.join(repr(c) for c in available) or 'none'}.", usage=True)
    if truth == pred:
        raise InputError(f"{source.path}: the truth and prediction columns are both {truth!r}.",
                         usage=True)
    return Selection(truth, pred, weight)


# ---------------------------------------------------------------------- accumulation
@dataclass
class ReadResult:
    """What :func:`read_confusion` found: the accumulator and where it came from."""

    accumulator: ConfusionAccumulator
    selection: Selection
    num_rows: int
    mode: str  # "index" or "names"
    path: Path
    growths: int = 0
    shape: tuple[int, ...] | None = None  # of .npz arrays (e.g. masks), else None


def read_confusion(
    path: str | os.PathLike,
    *,
    truth: str | None = None,
    pred: str | None = None,
    weight: str | None = None,
    classes: Sequence[str] | None = None,
    ignore: str | None = None,
    labels: str = "auto",
    delimiter: str | None = None,
    header: bool = True,
    prefer_pyarrow: bool = True,
    on_progress: Callable[[int, int, str], None] | None = None,
    source: Source | None = None,
) -> ReadResult:
    """Stream a prediction file into a :class:`ConfusionAccumulator` with bounded memory.

    Args:
        path: a .csv/.tsv, .parquet, .npy or .npz file.
        truth, pred, weight: column names (default ``y_true``/``y_pred``, else the first two).
        classes: class names in order. Text labels must be among them; integer labels index
            into them.
        ignore: a truth label whose rows are skipped (e.g. ``"255"`` for void pixels).
        labels: ``"auto"`` (numbers are class indices, text is class names), ``"int"`` or
            ``"str"`` (read every label as a name).
        on_progress: called as ``on_progress(position, total, unit)`` after each chunk.

    Raises:
        InputError: one line naming the file, the column and the row of the first problem.
    """
    if labels not in ("auto", "int", "str"):
        raise InputError(f"`--labels` must be auto, int or str, got {labels!r}.", usage=True)
    src = source if source is not None else open_source(
        path, delimiter=delimiter, header=header, prefer_pyarrow=prefer_pyarrow)
    selection = select_columns(src, truth, pred, weight)
    if classes is None and src.class_names is not None:
        classes = src.class_names
    label_kinds = [src.kinds[selection.truth], src.kinds[selection.pred]]
    if labels == "str" or (labels == "auto" and "str" in label_kinds):
        mode = "names"
        read_kinds = {selection.truth: "str", selection.pred: "str"}
    else:
        mode = "index"
        read_kinds = {}
        for column, kind in zip((selection.truth, selection.pred), label_kinds, strict=True):
            if labels == "int" and src.text:
                kind = "int"  # a value that is not an integer is then reported by its row
            elif kind == "str":
                raise InputError(f"{src.path}: column {column!r} holds text, but `--labels int` "
                                 f"asks for integer labels.", usage=True)
            read_kinds[column] = kind
    if selection.weight is not None:
        if src.kinds[selection.weight] == "str" and not src.text:
            raise InputError(f"{src.path}: weight column {selection.weight!r} holds text; weights "
                             f"must be numbers.", usage=True)
        read_kinds[selection.weight] = "weight"
    builder = _Builder(src, selection, mode, classes, ignore)
    for chunk in src.read(selection.names, read_kinds):
        builder.add(chunk)
        if on_progress is not None:
            on_progress(chunk.position, src.progress_total, src.progress_unit)
    return builder.finish()


class _Builder:
    """Feeds chunks to an accumulator, growing it when new classes appear."""

    def __init__(self, source: Source, selection: Selection, mode: str,
                 classes: Sequence[str] | None, ignore: str | None) -> None:
        self.source = source
        self.selection = selection
        self.mode = mode
        self.classes = None if classes is None else [str(c) for c in classes]
        self.weighted = selection.weight is not None
        self.registry: LabelRegistry | None
        self.num_rows = 0
        self.growths = 0
        if mode == "names":
            self.registry = LabelRegistry(self.classes or (), frozen=self.classes is not None)
            self.ignore_name = ignore
            self.ignore_index: int | None = _IGNORED
        else:
            self.registry = None
            if ignore is None:
                self.ignore_index = None
            else:
                try:
                    self.ignore_index = int(ignore)
                except ValueError:
                    raise InputError(
                        f"`--ignore` is {ignore!r}, but the labels are integers; give an "
                        f"integer (e.g. 255) or pass `--labels str`.", usage=True) from None
        self.fixed = self.classes is not None
        size = len(self.classes) if self.classes else 1
        if self.fixed and size == 0:
            raise InputError("`--classes` is empty.", usage=True)
        self.acc = ConfusionAccumulator(size, ignore_index=self.ignore_index,
                                        weighted=self.weighted)

    # -- growth
    def _grow(self, num_classes: int) -> None:
        old = self.acc.matrix
        k = old.shape[0]
        if num_classes <= k:
            return
        matrix = np.zeros((num_classes, num_classes), dtype=old.dtype)
        matrix[:k, :k] = old
        self.acc = ConfusionAccumulator.from_matrix(matrix, ignore_index=self.ignore_index,
                                                    weighted=self.weighted)
        self.growths += 1

    def _fail(self, column: str, flat_index: int, message: str) -> InputError:
        where = self.source.where(flat_index)
        return InputError(f"{self.source.path}: column {column!r}, {where}: {message}")

    # -- one chunk
    def add(self, chunk: Chunk) -> None:
        sel = self.selection
        t, p = chunk.columns[sel.truth], chunk.columns[sel.pred]
        w = chunk.columns[sel.weight] if sel.weight else None
        if self.mode == "names":
            t = self._codes(t, sel.truth, chunk.start, self.ignore_name)
            p = self._codes(p, sel.pred, chunk.start, None)
            self._grow(len(self.registry))  # type: ignore[arg-type]
        count = len(t)
        try:
            self.acc.update(t, p, w)
        except ValueError:
            # Off the fast path: find out why, with our own row numbers, then grow and retry.
            self._check(t, sel.truth, chunk.start, self.ignore_index)
            self._check(p, sel.pred, chunk.start, None)
            if w is not None:
                assert sel.weight is not None
                bad = np.flatnonzero(~(np.isfinite(w) & (w >= 0)))
                if bad.size:
                    raise self._fail(sel.weight, chunk.start + int(bad[0]),
                                     f"weight {w[bad[0]].item()!r} is not a finite "
                                     f"non-negative number.") from None
            if not self.fixed and self.mode == "index":
                kept = t if self.ignore_index is None else t[t != self.ignore_index]
                top = max(int(kept.max()) if kept.size else 0, int(p.max()) if p.size else 0)
                self._grow(top + 1)
            self.acc.update(t, p, w)
        self.num_rows += count

    def _codes(self, column: Any, name: str, start: int, ignore: str | None) -> np.ndarray:
        assert isinstance(column, Coded) and self.registry is not None
        mapping = self.registry.codes(column.dictionary, ignore)
        bad = np.flatnonzero(mapping < _IGNORED)
        if bad.size:
            rows = np.flatnonzero(np.isin(column.codes, bad))
            if rows.size:
                row = int(rows[0])
                value = column.dictionary[column.codes[row]]
                if value == "":
                    raise self._fail(name, start + row, "the label is empty.")
                raise self._fail(name, start + row,
                                 f"{value!r} is not one of the classes given by `--classes` "
                                 f"({', '.join(self.registry.names)}).")
        return mapping[column.codes]

    def _check(self, values: np.ndarray, name: str, start: int, ignore: int | None) -> None:
        """Raise for the first label that is not a usable class index."""
        limit = len(self.classes) if self.classes is not None else MAX_INDEX_LABEL
        ok = (values >= 0) & (values < limit)
        if values.dtype.kind == "f":
            ok &= values == np.floor(values)
        if ignore is not None:
            ok |= values == ignore
        bad = np.flatnonzero(~ok)
        if not bad.size:
            return
        value = values[bad[0]].item()
        if isinstance(value, float) and (value != value or value != int(value)):
            reason = "is not a whole number"
        elif value < 0:
            reason = "is negative"
        elif self.fixed:
            reason = f"is not an index into the {limit} classes given by `--classes`"
        else:
            reason = (f"is too large to be a class index (at most {MAX_INDEX_LABEL - 1}); pass "
                      f"`--labels str` to read labels as names")
        hint = "" if self.fixed or reason.startswith("is too") else \
            "; integer labels must be class indices 0, 1, 2, ... (pass `--ignore` to skip a " \
            "void label, or `--labels str` to read labels as names)"
        raise self._fail(name, start + int(bad[0]), f"label {value!r} {reason}{hint}.")

    # -- the end
    def finish(self) -> ReadResult:
        if self.num_rows == 0:
            raise InputError(f"{self.source.path}: no data rows to count.")
        matrix = self.acc.matrix.copy()
        if not matrix.any():
            what = "the ignored truth label" if self.ignore_index is not None else "weight 0"
            raise InputError(f"{self.source.path}: nothing to count: every one of the "
                             f"{self.num_rows:,} rows has {what}.")
        if self.mode == "names":
            assert self.registry is not None
            order = (list(range(len(self.registry))) if self.fixed
                     else self.registry.sorted_order())
            names = [self.registry.names[i] for i in order]
            matrix = matrix[np.ix_(order, order)]
            ignore_index = None
        elif self.fixed:
            assert self.classes is not None
            names = self.classes
            ignore_index = self.ignore_index
        else:
            # Drop classes that occur nowhere (below the largest label seen), as scikit-learn's
            # unique_labels would not list them.
            present = np.flatnonzero(matrix.sum(axis=0) + matrix.sum(axis=1) > 0)
            if present.size == 0:
                present = np.arange(matrix.shape[0])
            matrix = matrix[np.ix_(present, present)]
            names = [str(i) for i in present]
            ignore_index = self.ignore_index
        acc = ConfusionAccumulator.from_matrix(matrix, class_names=names,
                                               ignore_index=ignore_index, weighted=self.weighted)
        return ReadResult(acc, self.selection, self.num_rows, self.mode, self.source.path,
                          self.growths, self.source.shape)
