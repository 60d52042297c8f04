"""Reading prediction files in bounded-memory chunks into one confusion matrix.

This is the engine behind ``metricstream report`` (:mod:`metricstream.cli`). It reads

* CSV / TSV (also gzip, bzip2 or xz compressed): with pyarrow's CSV parser when pyarrow is
  installed (byte ranges of ``CSV_BLOCK_BYTES`` cut after whole records by one linear scan that
  reads quotes as pyarrow does, each range parsed on all cores), else with the standard
  library's ``csv`` module in chunks of ``STDLIB_CHUNK_ROWS`` rows; a record is at most
  ``MAX_RECORD_BYTES`` long;
* Parquet (pyarrow): record batches of ``CHUNK_ROWS`` rows;
* ``.npy``: a structured array (fields are columns) or a 2-D ``(N, C)`` array (columns ``"0"``,
  ``"1"``, ...), memory-mapped and read ``CHUNK_ROWS`` rows at a time;
* ``.npz``: arrays of equal shape (any shape, e.g. ``(B, H, W)`` masks) are columns; each member
  is decompressed and read ``CHUNK_ROWS`` elements at a time, so even a compressed archive is
  never loaded whole (Fortran-ordered members are read in their own order, or, beside C-ordered
  ones, through a memory map of a temporary file). An optional ``class_names`` member names the
  classes.

Labels come in two modes, decided from the column types (the schema, or the first rows):

* **index**: both label columns are numbers, and label ``i`` is class ``i``. The number of
  classes grows while streaming: when a chunk holds a label ``>= K``, the accumulator is
  re-embedded into a zero matrix at least twice as large (its K×K counts copied into the
  top-left corner), so growth costs O(K²) in all and nothing on chunks that bring no new class.
  Labels must be below ``max_classes`` (default ``MAX_CLASSES``). At the end, classes that
  occur neither in the truth nor in the prediction are dropped, so that the report lists the
  labels present, as scikit-learn's ``unique_labels`` does. ``classes=`` fixes K and names the
  indices instead.
* **names**: a label column holds text. Truth and prediction go through one
  :class:`LabelRegistry`, so a name seen only in the predictions still gets its own row and
  column; at most ``max_classes`` distinct names are read. The final order is the sorted order
  of the names (numerically when every name is an integer), as scikit-learn sorts labels, or the
  order of ``classes=``. With ``classes=``, a column of numbers beside a text column indexes
  into the classes.

Errors are :class:`InputError`: one line naming the file, the column, and the row (counted from
1, not counting a header line) or the element position.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import functools
import io
import itertools
import math
import os
import re
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..confusion.accumulator import ConfusionAccumulator

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
# The matrix is K×K int64: 4096 classes are 128 MiB (and a few copies of it while reading and
# reporting). More classes than this are more likely identifiers than classes, so both index
# labels (``label < max_classes``) and distinct names are capped; ``--max-classes`` raises the cap.
MAX_CLASSES = 4096
MAX_INDEX_LABEL = MAX_CLASSES  # the former name
# A CSV record longer than this (an unclosed quote, or a file that is not a table) is an error
# rather than a reason to hold ever more of the file in memory.
MAX_RECORD_BYTES = 4 << 20

CSV_DELIMITERS = {".csv": ",", ".tsv": "\t", ".tab": "\t"}

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
class TooManyClasses(Exception):
    """A new class name beyond the registry's ``max_size`` (carries the name)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


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

    def __init__(
        self,
        names: Sequence[str] = (),
        *,
        frozen: bool = False,
        max_size: int | None = None,
        source: str = "`--classes`",
    ) -> None:
        self._index: dict[str, int] = {}
        self.names: list[str] = []
        for name in names:
            if name in self._index:
                raise InputError(
                    f"{source} lists {name!r} twice; class names must be unique.", usage=True
                )
            self._index[name] = len(self.names)
            self.names.append(name)
        self.frozen = frozen
        self.max_size = max_size

    def __len__(self) -> int:
        return len(self.names)

    def codes(self, dictionary: Sequence[str], ignore: str | None = None) -> np.ndarray:
        """The class index of each name in ``dictionary`` (new names are added unless frozen).

        ``ignore`` maps to ``-1``; an unknown name of a frozen registry to ``-2``; ``""`` to
        ``-3``. A new name beyond ``max_size`` names raises :class:`TooManyClasses`.
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
                    if self.max_size is not None and len(self.names) >= self.max_size:
                        raise TooManyClasses(name)
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
    order: Literal["C", "F"] = "C"  # the order elements of multi-dimensional columns are read in

    def where(self, flat_index: int) -> str:
        """'row N' (1-based) or 'element (i, j, k)' for error messages."""
        if self.shape is not None and len(self.shape) > 1:
            index = np.unravel_index(flat_index, self.shape, order=self.order)
            return f"element {tuple(int(i) for i in index)}"
        return f"row {flat_index + 1}"


def _missing_pyarrow(path: Path, what: str) -> InputError:
    return InputError(
        f"{path}: reading {what} needs pyarrow, which is not installed; "
        f"install it with `pip install pyarrow` (or `pip install 'metricstream[parquet]'`).",
        usage=True,
    )


@dataclass(frozen=True)
class OpenOptions:
    """How to open a file: the options of the command line that concern reading."""

    delimiter: str | None = None
    header: bool = True
    prefer_pyarrow: bool = True


# File formats, by suffix: each opener reads the file's header (columns and their kinds) and
# returns a Source whose ``read`` streams chunks. A new format is one function and one entry.
Opener = Callable[[Path, OpenOptions], Source]
READERS: dict[str, Opener] = {}


def register_reader(*suffixes: str) -> Callable[[Opener], Opener]:
    """Register ``opener(path, options) -> Source`` for files ending in ``suffixes``."""

    def decorate(opener: Opener) -> Opener:
        for suffix in suffixes:
            READERS[suffix] = opener
        return opener

    return decorate


# Leading bytes of formats that are not delimited text, for a clear error when such a file is
# named like a CSV file (gzip data named .csv would otherwise read as "empty" or as garbage).
_MAGIC = (
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data", "decompress it first, e.g. `unzstd FILE`"),
    (b"PK\x03\x04", "a zip archive", "name it .npz if it is a numpy archive, else unzip it"),
    (b"PAR1", "a Parquet file", "name it .parquet"),
    (b"\x93NUMPY", "a numpy array", "name it .npy"),
)


# Compressed text is decompressed as a stream (standard library codecs), whatever its name.
_COMPRESSIONS = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz"}
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz")


def _sniff(path: Path) -> tuple[str, str] | None:
    """What a file holds if its first bytes name a binary format: (description, remedy)."""
    with open(path, "rb") as file:
        head = file.read(8)
    for magic, what, remedy in _MAGIC:
        if head.startswith(magic):
            return what, remedy
    return None


def _compression(path: Path) -> str | None:
    with open(path, "rb") as file:
        head = file.read(8)
    return next((kind for magic, kind in _COMPRESSIONS.items() if head.startswith(magic)), None)


@contextlib.contextmanager
def _compressed_errors(path: Path) -> Iterator[None]:
    """Damaged or truncated compressed data, as a one-line input error."""
    import gzip
    import lzma

    try:
        yield
    except (EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile) as error:
        raise InputError(
            f"{path}: the compressed data is damaged or truncated ({error})."
        ) from None


@contextlib.contextmanager
def _open_bytes(path: Path, compression: str | None) -> Iterator[tuple[Any, Any]]:
    """``(stream, raw)``: the file's (decompressed) bytes, and the file itself for progress."""
    with open(path, "rb") as raw:
        if compression is None:
            yield raw, raw
            return
        import bz2
        import gzip
        import lzma

        stream: Any
        if compression == "gzip":
            stream = gzip.GzipFile(fileobj=raw)
        elif compression == "bz2":
            stream = bz2.BZ2File(raw)
        else:
            stream = lzma.LZMAFile(raw)
        with stream:
            yield stream, raw


@contextlib.contextmanager
def _open_text(path: Path, compression: str | None) -> Iterator[tuple[Any, Any]]:
    """``(text, raw)``: the file as UTF-8 text (a byte order mark dropped), and the raw file."""
    with _open_bytes(path, compression) as (stream, raw):
        text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
        try:
            yield text, raw
        finally:
            text.detach()


def open_source(
    path: str | os.PathLike,
    *,
    delimiter: str | None = None,
    header: bool = True,
    prefer_pyarrow: bool = True,
) -> Source:
    """Open ``path`` for chunked reading, choosing the reader from its suffix.

    Raises:
        InputError: the file does not exist, is not a regular file, its type is unknown, or
            its header is unreadable.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file.", usage=True)
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a prediction file.", usage=True)
    if not path.is_file():
        # A pipe would be read twice (once for its header) and a device may never end.
        raise InputError(
            f"{path}: is not a regular file (a pipe or a device); save the "
            f"predictions to a file first.",
            usage=True,
        )
    options = OpenOptions(delimiter, header, prefer_pyarrow)
    suffix = path.suffix.lower()
    if suffix in COMPRESSED_SUFFIXES and Path(path.stem).suffix.lower() in CSV_DELIMITERS:
        suffix = Path(path.stem).suffix.lower()  # predictions.csv.gz
    if delimiter is not None or suffix in CSV_DELIMITERS:
        with _compressed_errors(path):
            return _open_delimited(path, options)
    opener = READERS.get(suffix)
    if opener is None:
        raise InputError(
            f"{path}: unknown file type {suffix or '(no suffix)'!r}; expected one of "
            f"{', '.join(READERS)} (or pass `--delimiter` for another delimited text file).",
            usage=True,
        )
    return opener(path, options)


def _have_pyarrow() -> bool:
    try:
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------- CSV
@register_reader(*CSV_DELIMITERS)
def _open_delimited(path: Path, options: OpenOptions) -> Source:
    compression = _compression(path)
    sniffed = None if compression is not None else _sniff(path)
    if sniffed is not None:
        what, remedy = sniffed
        raise InputError(f"{path}: holds {what}, not delimited text; {remedy}.", usage=True)
    suffix = path.suffix.lower()
    if suffix in COMPRESSED_SUFFIXES:
        suffix = Path(path.stem).suffix.lower()
    sep = options.delimiter if options.delimiter is not None else CSV_DELIMITERS[suffix]
    if options.prefer_pyarrow and _have_pyarrow():
        return _open_csv_arrow(path, sep, options.header, compression)
    return _open_csv_stdlib(path, sep, options.header, compression)


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


def _utf8_error(path: Path, compression: str | None = None) -> InputError:
    """Where the first byte that is not UTF-8 is: found again in binary (only on this error)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    lines = 1
    with _open_bytes(path, compression) as (file, _):
        while True:
            block = file.read(1 << 20)
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as error:
                # the decoder may hold back a few bytes of the previous block: its error counts
                # positions in those bytes followed by this block
                pending = len(error.object) - len(block)
                bad = offset - pending + error.start
                lines += block.count(b"\n", 0, max(error.start - pending, 0))
                byte = error.object[error.start]
                return InputError(
                    f"{path}: line {lines} is not UTF-8 text (byte 0x{byte:02x} at offset "
                    f"{bad:,}); save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)."
                )
            if not block:
                break
            lines += block.count(b"\n")
            offset += len(block)
    return InputError(f"{path}: is not UTF-8 text; save the file as UTF-8.")  # pragma: no cover


@contextlib.contextmanager
def _text_errors(
    path: Path, where: Callable[[], int], compression: str | None = None
) -> Iterator[None]:
    """Turn the standard library's decoding and CSV errors into one-line input errors."""
    try:
        yield
    except UnicodeDecodeError:
        raise _utf8_error(path, compression) from None
    except csv.Error as error:
        message = str(error)
        if "field larger than field limit" in message:
            message = (
                f"a field is longer than {csv.field_size_limit():,} characters, too long "
                f"for a label (a quoted field that is never closed?)"
            )
        raise InputError(f"{path}: line {where()}: {message}.") from None


def _bounded_lines(file: Any, path: Path) -> Iterator[str]:
    """The lines of ``file``, refusing one longer than ``MAX_RECORD_BYTES`` characters."""
    number = 0
    while True:
        line = file.readline(MAX_RECORD_BYTES)
        if not line:
            return
        number += 1
        if len(line) >= MAX_RECORD_BYTES and not line.endswith(("\n", "\r")):
            raise InputError(
                f"{path}: line {number} is longer than {MAX_RECORD_BYTES >> 20} Mi "
                f"characters; a table of labels has no lines this long."
            )
        yield line


def _open_csv_stdlib(path: Path, sep: str, header: bool, compression: str | None = None) -> Source:
    with _open_text(path, compression) as (file, _):
        reader = csv.reader(_bounded_lines(file, path), delimiter=sep)
        with _text_errors(path, lambda: reader.line_num, compression):
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
        yield from _read_csv_stdlib(path, sep, header, columns, selected, as_kinds, compression)

    return Source(
        path, columns, kinds, None, path.stat().st_size, "B", read, header=header, text=True
    )


def _read_csv_stdlib(
    path: Path,
    sep: str,
    header: bool,
    columns: list[str],
    selected: list[str],
    kinds: dict[str, str],
    compression: str | None = None,
) -> Iterator[Chunk]:
    width = len(columns)
    positions = [columns.index(name) for name in selected]
    with _open_text(path, compression) as (file, raw):
        reader = csv.reader(_bounded_lines(file, path), delimiter=sep)
        with _text_errors(path, lambda: reader.line_num, compression):
            if header:
                next(reader, None)
        start = 0
        while True:
            with _text_errors(path, lambda: reader.line_num, compression):
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
            # progress in bytes of the file (compressed bytes for a compressed file)
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


def _open_csv_arrow(path: Path, sep: str, header: bool, compression: str | None = None) -> Source:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    # The types are inferred from the first whole records of up to CSV_PEEK_BYTES, parsed from
    # memory on this thread: a streaming reader over the open file left a read-ahead thread
    # behind when it failed, which aborted the interpreter at exit ("terminate called without
    # an active exception") in about one run in seven.
    with _open_bytes(path, compression) as (stream, _):
        head = bytearray(stream.read(CSV_PEEK_BYTES + 1))
    if len(head) > CSV_PEEK_BYTES:
        del head[_record_end(head, CSV_PEEK_BYTES, sep) :]
        if head.count(b"\n") <= header:  # no whole row to infer from: let the standard library
            return _open_csv_stdlib(path, sep, header, compression)  # read it, and say where
    if not any(line.strip() for line in head.splitlines()[int(header) :]):
        # No data row (an empty or header-only file): pyarrow's streaming reader, given no row
        # to infer types from, leaves a read-ahead task on its I/O thread pool, which aborted
        # the interpreter at exit ("terminate called without an active exception") in about
        # one run in four. The standard library reads the header and says what is missing.
        return _open_csv_stdlib(path, sep, header, compression)
    read_options = pacsv.ReadOptions(
        block_size=CSV_PEEK_BYTES + 1, autogenerate_column_names=not header, use_threads=False
    )
    parse_options = pacsv.ParseOptions(delimiter=sep)
    try:
        # read_csv, not the streaming open_csv: no reader object, and so no read-ahead task, is
        # left behind to abort the interpreter at exit (seen with stray quotes in a free-text
        # column, on a successful run).
        schema = pacsv.read_csv(
            pa.py_buffer(bytes(head)),
            read_options=read_options,
            parse_options=parse_options,
            convert_options=_arrow_convert_options(),
        ).schema
    except pa.ArrowInvalid as error:
        if "Empty CSV file" in str(error):
            raise InputError(
                f"{path}: the file is empty; expected a header line and rows."
            ) from None
        # The first block does not parse: let the standard library say where.
        return _open_csv_stdlib(path, sep, header, compression)
    try:
        columns = list(schema.names)
    except UnicodeDecodeError:  # pyarrow keeps header bytes that are not UTF-8 as they are
        raise _utf8_error(path, compression) from None
    kinds = {name: _arrow_kind(schema.field(name).type) for name in columns}

    def read(selected: list[str], as_kinds: dict[str, str]) -> Iterator[Chunk]:
        types = {
            name: {
                "int": pa.int64(),
                "float": pa.float64(),
                "weight": pa.float64(),
                "str": pa.dictionary(pa.int32(), pa.string()),
            }[as_kinds[name]]
            for name in selected
        }
        try:
            yield from _read_csv_arrow(path, sep, header, columns, selected, types, compression)
        except pa.ArrowInvalid as error:
            # pyarrow names neither the row nor the column of a parse or conversion error; re-read
            # with the standard library, which does (this costs time only on the error path).
            for _ in _read_csv_stdlib(path, sep, header, columns, selected, as_kinds, compression):
                pass
            raise InputError(f"{path}: {str(error).splitlines()[0]}") from None

    return Source(
        path, columns, kinds, None, path.stat().st_size, "B", read, header=header, text=True
    )


def _arrow_convert_options(**kwargs: Any) -> Any:
    import pyarrow.csv as pacsv

    # Only an empty field is missing: "NA", "null" or "nan" are class names (or, for a weight,
    # NaN, which is then rejected as a weight), not holes as pyarrow would read them by default.
    return pacsv.ConvertOptions(null_values=[""], strings_can_be_null=False, **kwargs)


def _read_csv_arrow(
    path: Path,
    sep: str,
    header: bool,
    columns: list[str],
    selected: list[str],
    types: dict[str, Any],
    compression: str | None = None,
) -> Iterator[Chunk]:
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
    with _open_bytes(path, compression) as (file, raw):
        if header:
            file.readline(MAX_RECORD_BYTES)  # (the header was checked by the peek)
        buffer = bytearray(CSV_BLOCK_BYTES)
        filled = 0
        start = 0
        while True:
            got = file.readinto(memoryview(buffer)[filled:])
            end = filled + got
            if end == 0:
                return
            cut = end if got == 0 else _record_end(buffer, end, sep)
            if cut == 0:  # one record longer than the buffer: make room and read on, up to a cap
                if len(buffer) >= MAX_RECORD_BYTES:
                    raise InputError(
                        f"{path}: row {start + 1} is longer than {MAX_RECORD_BYTES >> 20} MiB "
                        f"(a quoted field that is never closed?); a table of labels has no "
                        f"rows this long."
                    )
                buffer.extend(bytes(min(len(buffer), MAX_RECORD_BYTES - len(buffer))))
                filled = end
                continue
            data = bytes(buffer[:cut])
            buffer[: end - cut] = buffer[cut:end]
            filled = end - cut
            if data.strip():
                try:
                    table = pacsv.read_csv(
                        pa.py_buffer(data),
                        read_options=read_options,
                        parse_options=parse_options,
                        convert_options=convert_options,
                    )
                except pa.ArrowInvalid as error:
                    if "straddl" not in str(error):
                        raise
                    # a record longer than a parse block (up to MAX_RECORD_BYTES): one block
                    long_options = pacsv.ReadOptions(column_names=columns, block_size=len(data) + 1)
                    table = pacsv.read_csv(
                        pa.py_buffer(data),
                        read_options=long_options,
                        parse_options=parse_options,
                        convert_options=convert_options,
                    )
                for batch in table.to_batches():
                    chunk = {
                        name: _from_arrow(batch.column(i), path, name, start)
                        for i, name in enumerate(batch.schema.names)
                    }
                    # progress in bytes of the file (of compressed bytes read, if compressed)
                    yield Chunk(start, chunk, raw.tell() - (filled if raw is file else 0))
                    start += batch.num_rows
            if got == 0:
                return


@functools.lru_cache(maxsize=8)
def _records_pattern(sep: str) -> re.Pattern[bytes]:
    """Whole CSV records from the start of a buffer, as pyarrow's parser reads them.

    A quote opens a quoted field only at the start of a field; inside one, ``""`` is a quote
    and any other byte (newlines too) is data, up to the closing quote, after which the field
    goes on unquoted. Elsewhere a quote is an ordinary character (``tv 12"``). Possessive
    quantifiers never backtrack, so a match is linear in the buffer whatever it holds; it ends
    before the first record that is not complete (a quoted field still open at the end).
    """
    d = re.escape(sep.encode())
    # the quoted loop is unrolled (runs of non-quotes, then ""), 4x faster than byte by byte:
    # measured 60 MB/s on fully quoted rows, 30 MB/s on unquoted rows with stray quotes
    quoted = rb'"[^"]*+(?:""[^"]*+)*+"'
    field = rb"(?:" + quoted + rb"[^" + d + rb"\r\n]*+|[^\"" + d + rb"\r\n][^" + d + rb"\r\n]*+|)"
    record = field + rb"(?:" + d + field + rb")*+(?:\r\n|\n|\r)"
    return re.compile(rb"(?:" + record + rb")*+")


def _record_end(buffer: bytearray, end: int, sep: str = ",") -> int:
    """The end of the last whole record in ``buffer[:end]`` (which starts at a record start)."""
    if buffer.find(b'"', 0, end) == -1:  # the usual case: no quotes, cut after the last newline
        return buffer.rfind(b"\n", 0, end) + 1
    match = _records_pattern(sep).match(buffer, 0, end)
    return match.end() if match else 0


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
    return np.frombuffer(
        array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize
    )


# ---------------------------------------------------------------------- Parquet
@register_reader(".parquet", ".pq")
def _open_parquet(path: Path, options: OpenOptions) -> Source:
    if not _have_pyarrow():
        raise _missing_pyarrow(path, "Parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    # what a damaged footer or schema raises in pyarrow (names that are not UTF-8 included)
    damaged = (pa.ArrowException, OSError, ValueError, UnicodeDecodeError)
    try:
        file = pq.ParquetFile(path)
    except damaged as error:
        raise InputError(
            f"{path}: not a readable Parquet file ({' '.join(str(error).split())})."
        ) from None
    try:
        schema = file.schema_arrow
        columns = list(schema.names)
    except damaged as error:
        raise InputError(
            f"{path}: the schema of the Parquet file cannot be read "
            f"({' '.join(str(error).split())})."
        ) from None
    kinds = {name: _arrow_kind(schema.field(name).type) for name in columns}

    def read(selected: list[str], as_kinds: dict[str, str]) -> Iterator[Chunk]:
        import pyarrow.compute as pc

        start = 0
        batches = pq.ParquetFile(path).iter_batches(batch_size=CHUNK_ROWS, columns=selected)
        while True:
            try:
                batch = next(batches, None)
            except damaged as error:
                # a damaged page or row group, found only when it is decoded
                raise InputError(
                    f"{path}: rows after row {start:,} cannot be read (damaged "
                    f"Parquet data: {str(error).splitlines()[0]})."
                ) from None
            if batch is None:
                return
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
        return Coded(
            codes.reshape(-1), [str(v.item() if hasattr(v, "item") else v) for v in dictionary]
        )
    return np.ascontiguousarray(values)


def _load_npy(path: Path, **kwargs: Any) -> Any:
    try:
        return np.load(path, allow_pickle=False, **kwargs)
    except Exception as error:  # noqa: BLE001 - numpy parses an untrusted header many ways
        # (ValueError, SyntaxError, tokenize's TokenError, zipfile's NotImplementedError, ...)
        raise InputError(f"{path}: not a readable numpy file ({error}).") from None


@register_reader(".npy")
def _open_npy(path: Path, options: OpenOptions) -> Source:
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
            f"a .npz file with `y_true` and `y_pred` arrays instead.",
            usage=True,
        )
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


# Errors that a damaged zip member raises while it is read (a bad CRC only at its end).
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
)  # an unsupported compression method or zip version
# The most bytes of a ``class_names`` member read (names are small; the header is not trusted).
MAX_CLASS_NAMES_BYTES = 64 << 20


def _read_npy_header(file: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(file)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(file)
    return np.lib.format.read_array_header_2_0(file)  # versions 2 and 3 share the layout


def _npz_header(archive: zipfile.ZipFile, member: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    with archive.open(member) as file:
        return _read_npy_header(file)


class _MemberReader:
    """Reads consecutive elements of one .npz member without loading it whole.

    The data of a member is stored in its own order (C, or Fortran when its header says so) and
    is decompressed as a stream. ``order`` is the order elements are read in: the member's own
    (streamed), or C for a Fortran member that must match C-ordered ones, which is first
    decompressed to a temporary file and read through a memory map (bounded memory either way).
    """

    def __init__(
        self,
        path: Path | str,
        archive: zipfile.ZipFile,
        column: str,
        shape: tuple[int, ...],
        fortran: bool,
        dtype: np.dtype,
        order: str,
    ) -> None:
        self.path, self.member, self.shape, self.dtype = path, column + ".npy", shape, dtype
        self.size = math.prod(shape)
        self.file = archive.open(self.member)
        self.map: np.memmap | None = None
        self.spill: Any = None
        with self._errors():
            _read_npy_header(self.file)
            if fortran and order == "C" and self.size:
                self.spill = tempfile.TemporaryFile()
                shutil.copyfileobj(self.file, self.spill, 1 << 20)
                self.spill.flush()
                stored = self.spill.tell()
                if stored < self.size * dtype.itemsize:
                    raise self._short(stored // max(dtype.itemsize, 1))
                self.map = np.memmap(self.spill, dtype=dtype, mode="r", shape=shape, order="F")

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except InputError:
            raise
        except _ZIP_ERRORS as error:
            raise InputError(
                f"{self.path}: member {self.member!r} is damaged and cannot be read ({error})."
            ) from None

    def _short(self, elements: int) -> InputError:
        return InputError(
            f"{self.path}: member {self.member!r} ends after {elements:,} elements, "
            f"but its header announces shape {self.shape} ({self.size:,} "
            f"elements); the file is truncated or damaged."
        )

    def read(self, start: int, count: int) -> np.ndarray:
        with self._errors():
            if self.map is not None:
                index = np.unravel_index(np.arange(start, start + count), self.shape)
                return np.asarray(self.map[index])
            # Read into a new writable array (``np.frombuffer`` of the bytes read would be
            # read-only, and the kernels compile a specialisation of their own for read-only
            # input: seconds on a first run, for arrays that are private to us anyway).
            values = np.empty(count, dtype=self.dtype)
            target = values.data.cast("B")
            filled = 0
            while filled < len(target):
                got = self.file.readinto(target[filled:])  # type: ignore[attr-defined]
                if not got:
                    raise self._short(start + filled // max(self.dtype.itemsize, 1))
                filled += got
            return values

    def close(self) -> None:
        self.map = None
        self.file.close()
        if self.spill is not None:
            self.spill.close()


def _npz_class_names(
    path: Path, archive: zipfile.ZipFile, header: tuple[tuple[int, ...], bool, np.dtype]
) -> list[str]:
    shape, _, dtype = header
    if dtype.hasobject or dtype.kind not in "biuUS":
        raise InputError(
            f"{path}: member 'class_names.npy' must hold strings or numbers, got dtype {dtype}.",
            usage=True,
        )
    if len(shape) != 1 or shape[0] * dtype.itemsize > MAX_CLASS_NAMES_BYTES:
        raise InputError(
            f"{path}: member 'class_names.npy' must be one short list of names, "
            f"got shape {shape} of dtype {dtype}.",
            usage=True,
        )
    reader = _MemberReader(path, archive, "class_names", shape, False, dtype, "C")
    try:
        return [str(name) for name in reader.read(0, shape[0]).tolist()]
    finally:
        reader.close()


@register_reader(".npz")
def _open_npz(path: Path, options: OpenOptions) -> Source:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, NotImplementedError) as error:
        raise InputError(f"{path}: not a readable .npz file ({error}).") from None
    with archive:
        members = [m for m in archive.namelist() if m.endswith(".npy")]
        headers = {}
        for member in members:
            try:
                headers[member[:-4]] = _npz_header(archive, member)
            except Exception as error:  # noqa: BLE001 - an untrusted header fails many ways
                raise InputError(
                    f"{path}: member {member!r} is not a readable numpy array ({error})."
                ) from None
            if math.prod(headers[member[:-4]][0]) >= 2**62:
                raise InputError(
                    f"{path}: member {member!r} announces shape "
                    f"{headers[member[:-4]][0]}, too large to be real."
                )
        class_names = None
        if "class_names" in headers:
            class_names = _npz_class_names(path, archive, headers.pop("class_names"))
    columns = list(headers)
    kinds = {name: _numpy_kind(dtype) for name, (_, _, dtype) in headers.items()}

    def read(selected: list[str], as_kinds: dict[str, str]) -> Iterator[Chunk]:
        shapes = {headers[name][0] for name in selected}
        if len(shapes) > 1:
            described = ", ".join(f"{name!r} {headers[name][0]}" for name in selected)
            raise InputError(
                f"{path}: the selected arrays differ in shape ({described}); "
                f"they must have one shape.",
                usage=True,
            )
        for name in selected:
            if headers[name][2].hasobject:
                raise InputError(
                    f"{path}: member '{name}.npy' holds Python objects (dtype object), which are "
                    f"not read because loading them would run pickle; save the labels as "
                    f"numbers or as fixed-width strings (e.g. `np.asarray(labels, dtype=str)`)."
                )
        size = math.prod(headers[selected[0]][0])
        # Elements are counted in any order as long as every column uses the same one: when all
        # members are Fortran-ordered, stream them as stored; positions are then unravelled in
        # Fortran order.
        fortran = {headers[name][1] for name in selected}
        order: Literal["C", "F"] = "F" if fortran == {True} else "C"
        source.order = order
        with zipfile.ZipFile(path) as archive:
            readers: dict[str, _MemberReader] = {}
            try:
                for name in selected:
                    shape, is_fortran, dtype = headers[name]
                    readers[name] = _MemberReader(
                        path, archive, name, shape, is_fortran, dtype, order
                    )
                for start in range(0, size, CHUNK_ROWS):
                    count = min(CHUNK_ROWS, size - start)
                    chunk = {
                        name: _numpy_column(readers[name].read(start, count), as_kinds[name])
                        for name in selected
                    }
                    yield Chunk(start, chunk, start + count)
            finally:
                for reader in readers.values():
                    reader.close()

    shape = next(iter(headers.values()))[0] if headers else None
    total = math.prod(shape) if shape is not None else 0
    source = Source(path, columns, kinds, shape, total, "elements", read, class_names=class_names)
    return source


def iter_npz_rows(
    path: str | os.PathLike | Any, members: Sequence[str], rows: int = CHUNK_ROWS
) -> Iterator[dict[str, np.ndarray]]:
    """Consecutive row blocks of ``members`` of an .npz file, each member streamed (never
    loaded whole: memory is bounded by ``rows`` rows, however well the file compresses).

    Every member must exist and have the same number of rows (its first axis); a block holds
    ``rows`` rows of each (fewer at the end). Python objects are refused (no pickle).

    Raises:
        InputError: a missing or unreadable member, object arrays, or row counts that differ.
    """
    source = path  # a path or a binary file object (io.BytesIO, say)
    path = (
        Path(path)
        if isinstance(path, (str, os.PathLike))
        else getattr(path, "name", "<file object>")
    )
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, NotImplementedError) as error:
        raise InputError(f"{path}: not a readable .npz file ({error}).") from None
    with archive:
        names = [m[:-4] for m in archive.namelist() if m.endswith(".npy")]
        headers = {}
        for name in members:
            if name not in names:
                raise InputError(
                    f"{path}: the .npz file has no member {name!r}; its members are {names}.",
                    usage=True,
                )
            try:
                headers[name] = _npz_header(archive, name + ".npy")
            except Exception as error:  # noqa: BLE001 - an untrusted header fails many ways
                raise InputError(
                    f"{path}: member {name!r} is not a readable numpy array ({error})."
                ) from None
            shape, _, dtype = headers[name]
            if dtype.hasobject:
                raise InputError(
                    f"{path}: member {name!r} holds Python objects (dtype object), which are "
                    f"not read because loading them would run pickle."
                )
            if not shape or math.prod(shape) >= 2**62:
                raise InputError(f"{path}: member {name!r} has shape {shape}; expected rows.")
        counts = {headers[name][0][0] for name in members}
        if len(counts) > 1:
            described = ", ".join(f"{name!r} {headers[name][0]}" for name in members)
            raise InputError(
                f"{path}: the members have different numbers of rows ({described}).", usage=True
            )
        total = counts.pop() if counts else 0
        readers: dict[str, _MemberReader] = {}
        try:
            for name in members:
                shape, fortran, dtype = headers[name]
                readers[name] = _MemberReader(path, archive, name, shape, fortran, dtype, "C")
            for start in range(0, total, rows):
                count = min(rows, total - start)
                block = {}
                for name in members:
                    shape = headers[name][0]
                    width = math.prod(shape[1:])
                    values = readers[name].read(start * width, count * width)
                    block[name] = values.reshape((count, *shape[1:]))
                yield block
        finally:
            for reader in readers.values():
                reader.close()


def npz_member_shapes(path: str | os.PathLike | Any) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """``{member: (shape, dtype)}`` of an .npz file, from the members' headers alone."""
    source = path  # a path or a binary file object (io.BytesIO, say)
    path = (
        Path(path)
        if isinstance(path, (str, os.PathLike))
        else getattr(path, "name", "<file object>")
    )
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, NotImplementedError) as error:
        raise InputError(f"{path}: not a readable .npz file ({error}).") from None
    shapes = {}
    with archive:
        for member in archive.namelist():
            if not member.endswith(".npy"):
                continue
            try:
                shape, _, dtype = _npz_header(archive, member)
            except Exception as error:  # noqa: BLE001 - an untrusted header fails many ways
                raise InputError(
                    f"{path}: member {member!r} is not a readable numpy array ({error})."
                ) from None
            shapes[member[:-4]] = (shape, dtype)
    return shapes


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


def select_columns(
    source: Source, truth: str | None = None, pred: str | None = None, weight: str | None = None
) -> Selection:
    """Pick the columns: as given, else ``y_true``/``y_pred``, else the first two columns left."""
    available = source.columns
    for flag, name in (("--true", truth), ("--pred", pred), ("--weight", weight)):
        if name is not None and name not in available:
            raise InputError(
                f"{source.path}: no column {name!r} (given by `{flag}`); the file's columns are "
                f"{', '.join(repr(c) for c in available) or 'none'}.",
                usage=True,
            )
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
            f"{', '.join(repr(c) for c in available) or 'none'}.",
            usage=True,
        )
    if truth == pred:
        raise InputError(
            f"{source.path}: the truth and prediction columns are both {truth!r}.", usage=True
        )
    return Selection(truth, pred, weight)


# ---------------------------------------------------------------------- accumulation
_INT64 = np.iinfo(np.int64)


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
    ignore: str | None = None  # the ignored true label, as given
    ignored_rows: int = 0  # rows (or elements) skipped because their truth is ``ignore``
    notes: list[str] = field(default_factory=list)  # things worth a warning on stderr


def _classes_option(value: int) -> str:
    return f"pass `--max-classes {value:,}` to raise the limit".replace(",", "")


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
    max_classes: int = MAX_CLASSES,
    on_progress: Callable[[int, int, str], None] | None = None,
    source: Source | None = None,
) -> ReadResult:
    """Stream a prediction file into a :class:`ConfusionAccumulator` with bounded memory.

    Args:
        path: a .csv/.tsv, .parquet, .npy or .npz file.
        truth, pred, weight: column names (default ``y_true``/``y_pred``, else the first two).
        classes: class names in order. Text labels must be among them; integer labels index
            into them (whatever the other column holds).
        ignore: a truth label whose rows are skipped (e.g. ``"255"`` for void pixels).
        labels: ``"auto"`` (numbers are class indices, text is class names), ``"int"`` or
            ``"str"`` (read every label as a name).
        max_classes: the most classes read: integer labels must be below it, and at most this
            many distinct names are read (the matrix takes ``8 * max_classes**2`` bytes).
        on_progress: called as ``on_progress(position, total, unit)`` after each chunk.

    Raises:
        InputError: one line naming the file, the column and the row of the first problem.
    """
    if labels not in ("auto", "int", "str"):
        raise InputError(f"`--labels` must be auto, int or str, got {labels!r}.", usage=True)
    if isinstance(max_classes, bool) or not isinstance(max_classes, int) or max_classes < 1:
        raise InputError(
            f"`--max-classes` must be a positive whole number, got {max_classes!r}.", usage=True
        )
    src = (
        source
        if source is not None
        else open_source(path, delimiter=delimiter, header=header, prefer_pyarrow=prefer_pyarrow)
    )
    selection = select_columns(src, truth, pred, weight)
    classes_from = "given by `--classes`"
    if classes is None and src.class_names is not None:
        classes = src.class_names
        classes_from = "named by the file's `class_names` member"
    label_columns = (selection.truth, selection.pred)
    label_kinds = [src.kinds[selection.truth], src.kinds[selection.pred]]
    read_kinds: dict[str, str] = {}
    index_columns: set[str] = set()
    if labels == "str" or (labels == "auto" and "str" in label_kinds):
        mode = "names"
        for column, kind in zip(label_columns, label_kinds, strict=True):
            if classes is not None and labels == "auto" and kind != "str":
                # with a list of classes, numbers index into it whatever the other column holds
                read_kinds[column] = kind
                index_columns.add(column)
            else:
                read_kinds[column] = "str"
    else:
        mode = "index"
        for column, kind in zip(label_columns, label_kinds, strict=True):
            if labels == "int" and src.text:
                kind = "int"  # a value that is not an integer is then reported by its row
            elif kind == "str":
                raise InputError(
                    f"{src.path}: column {column!r} holds text, but `--labels int` "
                    f"asks for integer labels.",
                    usage=True,
                )
            read_kinds[column] = kind
    if selection.weight is not None:
        if src.kinds[selection.weight] == "str" and not src.text:
            raise InputError(
                f"{src.path}: weight column {selection.weight!r} holds text; weights "
                f"must be numbers.",
                usage=True,
            )
        read_kinds[selection.weight] = "weight"
    builder = _Builder(
        src,
        selection,
        mode,
        classes,
        ignore,
        max_classes=max_classes,
        classes_from=classes_from,
        index_columns=index_columns,
    )
    with _compressed_errors(src.path):
        for chunk in src.read(selection.names, read_kinds):
            builder.add(chunk)
            if on_progress is not None:
                on_progress(chunk.position, src.progress_total, src.progress_unit)
    return builder.finish()


def _fractional(text: str) -> bool:
    """Whether ``text`` is a finite number with a fractional part (``"0.7"``, not ``"2.0"``)."""
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and value != int(value)


def _scores_hint(source: Source, column: str, selection: Selection) -> str:
    """The end of a message about fractional labels: they are class scores, read with
    ``--scores`` (a pattern guessed from the float columns), not with ``--labels str``."""
    floats = [
        name
        for name in source.columns
        if source.kinds.get(name) == "float" and name not in (selection.truth, selection.weight)
    ]
    if column not in floats:
        floats.append(column)
    prefix = os.path.commonprefix(floats) if len(floats) > 1 else ""
    pattern = f"{prefix}*" if prefix else column
    return (
        f". If the file holds class scores (probabilities or logits, one column per class), "
        f"read them with `--scores '{pattern}'` (and `--true` for the truth column if it is "
        f"not `y_true`); `--labels str` would count every distinct score as a class."
    )


def _parse_ignore(ignore: str) -> int | None:
    """``ignore`` as an int64 label, or None when it is not an integer."""
    try:
        value = int(ignore)
    except ValueError:
        return None
    if not _INT64.min <= value <= _INT64.max:
        raise InputError(
            f"`--ignore` is {ignore}, outside the range of 64-bit integer labels "
            f"[{_INT64.min}, {_INT64.max}].",
            usage=True,
        )
    return value


class _Builder:
    """Feeds chunks to an accumulator, growing it when new classes appear."""

    def __init__(
        self,
        source: Source,
        selection: Selection,
        mode: str,
        classes: Sequence[str] | None,
        ignore: str | None,
        *,
        max_classes: int = MAX_CLASSES,
        classes_from: str = "given by `--classes`",
        index_columns: set[str] | None = None,
    ) -> None:
        self.source = source
        self.selection = selection
        self.mode = mode
        self.classes = None if classes is None else [str(c) for c in classes]
        self.classes_from = classes_from
        self.max_classes = max_classes
        self.index_columns = index_columns or set()
        self.weighted = selection.weight is not None
        self.registry: LabelRegistry | None = None
        self.num_rows = 0
        self.growths = 0
        self.ignore = ignore
        self.ignored_rows = 0
        self.fixed = self.classes is not None
        what = (
            "`--classes`"
            if classes_from.endswith("`--classes`")
            else "the file's `class_names` member"
        )
        if self.fixed and not self.classes:
            raise InputError(f"{what} is empty.", usage=True)
        if self.classes is not None and len(set(self.classes)) != len(self.classes):
            twice = next(n for n in self.classes if self.classes.count(n) > 1)
            raise InputError(
                f"{what} lists {twice!r} twice; class names must be unique.", usage=True
            )
        if self.classes is not None and len(self.classes) > max_classes:
            raise InputError(
                f"{what} holds {len(self.classes):,} classes, over the limit of "
                f"{max_classes:,}; {_classes_option(len(self.classes))}.",
                usage=True,
            )
        # the ignored truth label as an integer, for columns of numbers
        self.ignore_int = None if ignore is None else _parse_ignore(ignore)
        if mode == "names":
            self.registry = LabelRegistry(
                self.classes or (), frozen=self.fixed, max_size=None if self.fixed else max_classes
            )
            self.ignore_index: int | None = _IGNORED
        else:
            if ignore is not None and self.ignore_int is None:
                raise InputError(
                    f"`--ignore` is {ignore!r}, but the labels are integers; give an "
                    f"integer (e.g. 255) or pass `--labels str`.",
                    usage=True,
                )
            self.ignore_index = self.ignore_int
        size = len(self.classes) if self.classes else 1
        self.acc = ConfusionAccumulator(
            size, ignore_index=self.ignore_index, weighted=self.weighted
        )

    # -- growth
    def _grow(self, num_classes: int) -> None:
        """Make room for ``num_classes`` classes, doubling (so that growth costs O(K²) overall)."""
        old = self.acc.matrix
        k = old.shape[0]
        if num_classes <= k:
            return
        size = min(max(num_classes, 2 * k), max(self.max_classes, num_classes))
        try:
            matrix = np.zeros((size, size), dtype=old.dtype)
            matrix[:k, :k] = old
            self.acc = ConfusionAccumulator.from_matrix(
                matrix, ignore_index=self.ignore_index, weighted=self.weighted
            )
        except MemoryError:
            raise InputError(
                f"{self.source.path}: not enough memory for a {size:,}×{size:,} "
                f"confusion matrix ({8 * size * size / 2**30:.1f} GiB)."
            ) from None
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
            t = self._label_codes(t, sel.truth, chunk.start, self.ignore)
            p = self._label_codes(p, sel.pred, chunk.start, None)
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
                    raise self._fail(
                        sel.weight,
                        chunk.start + int(bad[0]),
                        f"weight {w[bad[0]].item()!r} is not a finite non-negative number.",
                    ) from None
            if not self.fixed and self.mode == "index":
                kept = t if self.ignore_index is None else t[t != self.ignore_index]
                top = max(int(kept.max()) if kept.size else 0, int(p.max()) if p.size else 0)
                self._grow(top + 1)
            self.acc.update(t, p, w)
        if self.ignore_index is not None:
            self.ignored_rows += int(np.count_nonzero(t == self.ignore_index))
        self.num_rows += count

    def _label_codes(self, column: Any, name: str, start: int, ignore: str | None) -> np.ndarray:
        """Class indices of a label column in names mode (names, or numbers indexing classes)."""
        if name not in self.index_columns:
            return self._codes(column, name, start, ignore)
        values = np.asarray(column)
        ignore_int = self.ignore_int if ignore is not None else None
        self._check(values, name, start, ignore_int)
        codes = values.astype(np.int64)
        if ignore_int is not None:
            codes[values == ignore_int] = _IGNORED
        return codes

    def _codes(self, column: Any, name: str, start: int, ignore: str | None) -> np.ndarray:
        assert isinstance(column, Coded) and self.registry is not None
        if self.source.kinds.get(name) == "float":
            # numbers with a fraction read as names (`--labels str`): scores, not classes
            for code, text in enumerate(column.dictionary):
                if _fractional(text):
                    row = int(np.flatnonzero(column.codes == code)[0])
                    where = self.source.where(start + row)
                    raise InputError(
                        f"{self.source.path}: column {name!r}, {where}: {text!r} is a "
                        f"fractional number, not a class name"
                        f"{_scores_hint(self.source, name, self.selection)}",
                        usage=True,
                    )
        try:
            mapping = self.registry.codes(column.dictionary, ignore)
        except TooManyClasses as error:
            code = column.dictionary.index(error.name)
            row = int(np.flatnonzero(column.codes == code)[0])
            limit = self.max_classes
            raise self._fail(
                name,
                start + row,
                f"{error.name!r} is distinct label number {limit + 1:,}, over the limit of "
                f"{limit:,} classes (a {limit:,}×{limit:,} matrix takes "
                f"{8 * limit * limit / 2**20:,.0f} MiB, and every new class makes it larger); "
                f"{_classes_option(2 * limit)}, or check that the columns are labels, not "
                f"identifiers.",
            ) from None
        bad = np.flatnonzero(mapping < _IGNORED)
        if bad.size:
            rows = np.flatnonzero(np.isin(column.codes, bad))
            if rows.size:
                row = int(rows[0])
                value = column.dictionary[column.codes[row]]
                if value == "":
                    raise self._fail(name, start + row, "the label is empty.")
                shown = ", ".join(self.registry.names[:20])
                if len(self.registry) > 20:
                    shown += f", ... ({len(self.registry):,} in all)"
                hint = ""
                if name == self.selection.truth and self.ignore is None:
                    hint = f"; pass `--ignore {value}` if it marks rows without a label"
                raise self._fail(
                    name,
                    start + row,
                    f"{value!r} is not one of the classes {self.classes_from} ({shown}){hint}.",
                )
        return mapping[column.codes]

    def _check(self, values: np.ndarray, name: str, start: int, ignore: int | None) -> None:
        """Raise for the first label that is not a usable class index."""
        limit = len(self.classes) if self.classes is not None else self.max_classes
        ok = (values >= 0) & (values < limit)
        if values.dtype.kind == "f":
            ok &= values == np.floor(values)
        if ignore is not None:
            ok |= values == ignore
        bad = np.flatnonzero(~ok)
        if not bad.size:
            return
        value = values[bad[0]].item()
        truth = name == self.selection.truth and ignore is None
        void = f"`--ignore {value}` if it marks void pixels or rows without a label"
        if isinstance(value, float) and value != value:
            message = (
                f"label {value!r} is missing (NaN); integer labels must be class indices "
                f"0, 1, 2, ...: drop or fill the rows without a label."
            )
        elif isinstance(value, float) and value != int(value):
            # a fractional number is a score, not a name: `--labels str` would count each
            # distinct score as a class
            message = (
                f"label {value!r} is not a whole number; integer labels must be class "
                f"indices (0, 1, 2, ...){_scores_hint(self.source, name, self.selection)}"
            )
        elif value < 0:
            message = (
                f"label {value!r} is negative; integer labels must be class indices "
                f"0, 1, 2, ... (pass {void + ', or ' if truth else ''}`--labels str` "
                f"to read labels as names)."
            )
        elif self.fixed:
            message = (
                f"label {value!r} is not an index into the {limit} classes "
                f"{self.classes_from}" + (f"; pass {void}." if truth else ".")
            )
        else:
            message = (
                f"label {value!r} is too large to be a class index (at most {limit - 1}); "
                f"pass {void + ', ' if truth else ''}`--max-classes "
                f"{int(value) + 1}` if the file really has that many classes, or "
                f"`--labels str` to read labels as names."
            )
        raise self._fail(name, start + int(bad[0]), message)

    # -- the end
    def finish(self) -> ReadResult:
        if self.num_rows == 0:
            raise InputError(f"{self.source.path}: no data rows to count.")
        notes: list[str] = []
        if self.mode == "names":
            assert self.registry is not None
            size = len(self.registry)
            matrix = self.acc.matrix[:size, :size]
        else:
            matrix = self.acc.matrix
        if not matrix.any():
            what = "the ignored truth label" if self.ignore is not None else "weight 0"
            raise InputError(
                f"{self.source.path}: nothing to count: every one of the "
                f"{self.num_rows:,} rows has {what}."
            )
        if self.mode == "names":
            assert self.registry is not None
            order = list(range(len(self.registry))) if self.fixed else self.registry.sorted_order()
            names = [self.registry.names[i] for i in order]
            matrix = matrix[np.ix_(order, order)]
            ignore_index = None
        elif self.fixed:
            assert self.classes is not None
            names = self.classes
            matrix = matrix.copy()
            ignore_index = self.ignore_index
        else:
            # Drop classes that occur nowhere (below the largest label seen), as scikit-learn's
            # unique_labels would not list them.
            actual, predicted = matrix.sum(axis=1), matrix.sum(axis=0)
            present = np.flatnonzero(actual + predicted > 0)
            if present.size == 0:
                present = np.arange(matrix.shape[0])
            matrix = matrix[np.ix_(present, present)]
            names = [str(i) for i in present]
            ignore_index = self.ignore_index
            void = self._void_label(present, predicted)
            if void is not None:
                others = present[present != void]
                notes.append(
                    f"true label {void} is never predicted and lies far above the other labels "
                    f"({others.min()}–{others.max()}); if it marks void pixels or rows without a "
                    f"label, pass `--ignore {void}` to leave those rows out."
                )
        acc = ConfusionAccumulator.from_matrix(
            matrix, class_names=names, ignore_index=ignore_index, weighted=self.weighted
        )
        return ReadResult(
            acc,
            self.selection,
            self.num_rows,
            self.mode,
            self.source.path,
            self.growths,
            self.source.shape,
            self.ignore,
            self.ignored_rows,
            notes,
        )

    def _void_label(self, present: np.ndarray, predicted: np.ndarray) -> int | None:
        """A true label that looks like a void marker (e.g. 255 beside classes 0-20)."""
        if self.ignore is not None or present.size < 2:
            return None
        top, second = int(present[-1]), int(present[-2])
        if predicted[top] == 0 and top >= 8 and top > 2 * (second + 1):
            return top
        return None


SUFFIXES = tuple(READERS)  # every suffix with a reader, in registration order
