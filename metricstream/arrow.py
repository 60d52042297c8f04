"""Arrow-native input: columns and tables from pyarrow, Polars, DuckDB and anything else that
speaks the Arrow PyCapsule protocol (``__arrow_c_array__``, ``__arrow_c_stream__``).

pyarrow is imported with this module, and this module only when Arrow data comes in
(``pip install "metricstream[arrow]"``): ``import metricstream`` imports neither.

* :func:`to_numpy` reads one column as the ndarray the kernels count: a null-free numeric chunk
  is read in place (no copy; the ndarray points at the Arrow buffer), list and fixed-size-list
  columns of numbers become ``(N, C)`` score rows (or multilabel targets), and string or
  dictionary columns of class names become class indices through ``class_names``.
* :func:`update` feeds Arrow columns (arrays, chunked arrays, Polars Series) to any accumulator
  or :class:`~metricstream.AccumulatorGroup`, chunk by chunk, mapping names through the
  accumulator's own ``class_names``.
* :func:`update_from_table` streams the record batches of a table-like source (a pyarrow
  ``Table``, ``RecordBatch`` or ``RecordBatchReader``, a Polars ``DataFrame``, a DuckDB relation)
  through an accumulator with memory bounded by one batch.

``acc.update(pa_array, pa_array)`` works too (through :func:`to_numpy`, without names): only
:func:`update` and :func:`update_from_table` know the accumulator's ``class_names``.

Nulls are never counted: by default a null raises ``ValueError`` naming the column and the row;
``nulls="skip"`` drops every row in which any of the given columns is null (that filter is a
copy, made only for chunks that hold nulls).

Example:
    >>> import pyarrow as pa
    >>> from metricstream import ConfusionAccumulator
    >>> from metricstream.arrow import update_from_table
    >>> table = pa.table({"label": ["cat", "dog", "dog"], "pred": ["cat", "cat", "dog"]})
    >>> acc = ConfusionAccumulator(2, class_names=["cat", "dog"])
    >>> update_from_table(acc, table, y_true="label", y_pred="pred").accuracy()
    0.6666666666666666
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal, TypeVar

import numpy as np

from .base import Accumulator, AccumulatorGroup

__all__ = ["to_numpy", "update", "update_from_table", "record_batches"]

INSTALL_HINT = 'pip install "metricstream[arrow]"'

Nulls = Literal["raise", "skip"]
T = TypeVar("T", bound="Accumulator | AccumulatorGroup")


def _import_pyarrow() -> Any:
    try:
        return importlib.import_module("pyarrow")
    except ImportError as error:
        raise ImportError(f"metricstream.arrow needs pyarrow ({error}); {INSTALL_HINT}.") from error


def column_as_numpy(value: Any, name: str) -> np.ndarray | None:
    """The hook of ``acc.update``: an Arrow column as an ndarray (:func:`to_numpy` without class
    names, nulls refused), or None when pyarrow is not installed (the caller then tries the
    array protocols)."""
    try:
        importlib.import_module("pyarrow")
    except ImportError:
        return None
    return to_numpy(value, name)


# ---------------------------------------------------------------------------- one column
def to_numpy(
    column: Any,
    name: str = "column",
    *,
    class_names: Sequence[str] | None = None,
) -> np.ndarray:
    """One Arrow column as the ndarray an accumulator counts.

    * integer, float (float16 included) and boolean columns: their values; a single null-free
      chunk of numbers is read **in place** (the result's data pointer is the Arrow buffer's),
      several chunks are concatenated (a copy: use :func:`update` to count chunk by chunk);
    * list and fixed-size-list columns of numbers, all rows of one length ``C``: an ``(N, C)``
      array (class scores, or multilabel targets), in place for one null-free chunk;
    * string and dictionary columns: class indices, ``class_names.index(value)`` row by row.

    Args:
        column: a pyarrow ``Array`` or ``ChunkedArray``, or anything exporting
            ``__arrow_c_array__`` or ``__arrow_c_stream__`` of one column (a Polars Series).
        name: what messages call the column.
        class_names: the names that string columns hold, index ``i`` for ``class_names[i]``.

    Raises:
        ImportError: pyarrow is not installed.
        TypeError: a table instead of a column, a column of another type (decimal, dates,
            structs...), or a string column without ``class_names``.
        ValueError: a null (use :func:`update` with ``nulls="skip"`` to drop such rows), a name
            that is not among ``class_names``, or list rows of different lengths; the message
            names the value and its row.
    """
    chunked = _chunked(column, name)
    if chunked.null_count:
        position = _first_null(chunked)
        raise ValueError(
            f"`{name}` holds a null at row {position}; nulls are never counted. Drop those rows "
            f"first, or pass the columns to `metricstream.arrow.update(..., nulls='skip')` (or "
            f"`update_from_table(..., nulls='skip')`), which skips them."
        )
    names = None if class_names is None else _names_array(class_names)
    pieces = []
    offset = 0
    for chunk in chunked.chunks:
        pieces.append(_chunk_values(chunk, name, names, offset))
        offset += len(chunk)
    if len(pieces) == 1:
        return pieces[0]
    if not pieces:
        return _chunk_values(_pa_empty(chunked.type), name, names, 0)
    return np.concatenate(pieces)


def _chunked(value: Any, name: str) -> Any:
    """``value`` as a pyarrow ChunkedArray (no copy), or TypeError."""
    pa = _import_pyarrow()
    if isinstance(value, pa.ChunkedArray):
        chunked = value
    elif isinstance(value, pa.Array):
        chunked = pa.chunked_array([value], type=value.type)
    elif isinstance(value, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)):
        chunked = None
    elif hasattr(value, "__arrow_c_array__"):
        chunked = pa.chunked_array([pa.array(value)])
    elif hasattr(value, "__arrow_c_stream__"):
        chunked = pa.chunked_array(value)
    else:
        raise TypeError(
            f"`{name}` must be an Arrow array or chunked array (or export "
            f"`__arrow_c_array__`/`__arrow_c_stream__`), got {type(value).__name__}."
        )
    if chunked is None or pa.types.is_struct(chunked.type):
        raise TypeError(
            f"`{name}` is a table ({type(value).__name__}), not a column; pass one column, or "
            f"the table to `metricstream.arrow.update_from_table(acc, table, y_true=..., "
            f"y_pred=...)`."
        )
    return chunked


def _pa_empty(arrow_type: Any) -> Any:
    pa = _import_pyarrow()
    return pa.array([], type=arrow_type)


def _first_null(column: Any) -> int:
    offset = 0
    for chunk in getattr(column, "chunks", [column]):
        if chunk.null_count:
            valid = chunk.is_valid().to_numpy(zero_copy_only=False)
            return offset + int(np.flatnonzero(~valid)[0])
        offset += len(chunk)
    return -1


def _names_array(class_names: Sequence[str]) -> Any:
    pa = _import_pyarrow()
    if isinstance(class_names, str) or not all(isinstance(n, str) for n in class_names):
        raise TypeError(f"`class_names` must be a sequence of strings, got {class_names!r}.")
    return pa.array(list(class_names), type=pa.string())


def _chunk_values(chunk: Any, name: str, names: Any, offset: int) -> np.ndarray:
    """One null-free chunk as an ndarray (``offset``: its first row, for messages)."""
    pa = _import_pyarrow()
    kind = chunk.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return chunk.to_numpy(zero_copy_only=True)
    if pa.types.is_boolean(kind):
        return chunk.to_numpy(zero_copy_only=False)  # Arrow packs booleans in bits: a copy
    if pa.types.is_dictionary(kind):
        return _dictionary_values(chunk, name, names, offset)
    if _is_text(kind):
        return _name_indices(chunk, name, names, offset)
    if pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _list_values(chunk, name, offset)
    if pa.types.is_null(kind) and len(chunk) == 0:
        return np.empty(0, dtype=np.int64)
    raise TypeError(
        f"`{name}` is an Arrow column of type {kind}; give integers, floats, booleans, class "
        f"names (strings or a dictionary of them) or lists of numbers (class scores)."
    )


def _is_text(kind: Any) -> bool:
    pa = _import_pyarrow()
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or getattr(pa.types, "is_string_view", lambda _: False)(kind)
    )


def _need_names(name: str, names: Any, kind: Any) -> None:
    if names is None:
        raise TypeError(
            f"`{name}` holds class names (Arrow type {kind}), but no `class_names` are known to "
            f"map them to indices: create the accumulator with `class_names=[...]` and pass the "
            f"columns through `metricstream.arrow.update` or `update_from_table` (which read "
            f"them), or give `class_names=` there."
        )


def _unknown_name(name: str, value: Any, position: int, names: Any) -> ValueError:
    shown = names.to_pylist()
    listed = shown if len(shown) <= 20 else [*shown[:20], "..."]
    return ValueError(
        f"`{name}` holds class name {value!r} at row {position}, which is not among the "
        f"accumulator's `class_names` {listed}; add it to `class_names` (and `num_classes`) or "
        f"drop those rows."
    )


def _name_indices(chunk: Any, name: str, names: Any, offset: int) -> np.ndarray:
    pa = _import_pyarrow()
    pc = importlib.import_module("pyarrow.compute")
    _need_names(name, names, chunk.type)
    if not pa.types.is_string(chunk.type):
        chunk = chunk.cast(pa.string())  # large and view strings: one value set type
    found = pc.index_in(chunk, value_set=names)
    if found.null_count:
        position = _first_null(found)
        raise _unknown_name(name, chunk[position].as_py(), offset + position, names)
    return found.to_numpy(zero_copy_only=False)


def _dictionary_values(chunk: Any, name: str, names: Any, offset: int) -> np.ndarray:
    indices = chunk.indices.to_numpy(zero_copy_only=False)
    dictionary = chunk.dictionary
    if _is_text(dictionary.type):
        # Map the (few) distinct names once, then gather: one int per row.
        _need_names(name, names, chunk.type)
        pc = importlib.import_module("pyarrow.compute")
        pa = _import_pyarrow()
        if not pa.types.is_string(dictionary.type):
            dictionary = dictionary.cast(pa.string())
        found = pc.index_in(dictionary, value_set=names).fill_null(-1)
        mapping = found.to_numpy(zero_copy_only=False).astype(np.int64)
        values = mapping[indices]
        if values.size and values.min() < 0:
            position = int(np.flatnonzero(values < 0)[0])
            raise _unknown_name(
                name, dictionary[indices[position]].as_py(), offset + position, names
            )
        return values
    decoded = _chunk_values(dictionary, name, None, 0)
    return decoded[indices]


def _list_values(chunk: Any, name: str, offset: int) -> np.ndarray:
    pa = _import_pyarrow()
    rows = len(chunk)
    values = chunk.flatten()  # the rows' values only (slices respected), no copy
    if values.null_count:
        raise ValueError(
            f"`{name}` holds a null inside the list at row "
            f"{offset + _list_row_of_null(chunk, values)}; nulls are never counted (drop the row)."
        )
    if pa.types.is_fixed_size_list(chunk.type):
        width = chunk.type.list_size
    else:
        offsets = chunk.offsets.to_numpy(zero_copy_only=False)
        lengths = np.diff(offsets)
        width = int(lengths[0]) if rows else 0
        if rows and (lengths != width).any():
            row = int(np.flatnonzero(lengths != width)[0])
            raise ValueError(
                f"`{name}` holds lists of different lengths: {width} values at row {offset} and "
                f"{int(lengths[row])} at row {offset + row}; give one score per class in every "
                f"row."
            )
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise TypeError(
            f"`{name}` is a list column of {values.type}; lists must hold numbers (class "
            f"scores or 0/1 targets)."
        )
    flat = values.to_numpy(zero_copy_only=True)
    return flat.reshape(rows, width)


def _list_row_of_null(chunk: Any, values: Any) -> int:
    pa = _import_pyarrow()
    position = _first_null(values)
    if pa.types.is_fixed_size_list(chunk.type):
        return position // chunk.type.list_size
    offsets = chunk.offsets.to_numpy(zero_copy_only=False)
    return int(np.searchsorted(offsets - offsets[0], position, side="right") - 1)


# ---------------------------------------------------------------------------- columns -> update
def update(
    target: T,
    y_true: Any,
    y_pred: Any,
    weights: Any = None,
    *,
    class_names: Sequence[str] | None = None,
    nulls: Nulls = "raise",
) -> T:
    """Count Arrow columns into ``target`` chunk by chunk; returns ``target``.

    Equal to ``target.update(y_true, y_pred, weights)`` on the columns as numpy arrays (names
    mapped to ``class_names.index(name)``), without ever concatenating the chunks: each
    stretch of rows on which every column has one chunk is read in place and counted. The
    update is atomic: on any error (a null, an unknown name, a bad label) ``target`` is left
    exactly as it was.

    Args:
        target: an accumulator or :class:`~metricstream.AccumulatorGroup`.
        y_true, y_pred, weights: columns of equal length: pyarrow arrays or chunked arrays (any
            chunking each), or anything exporting ``__arrow_c_array__``/``__arrow_c_stream__``
            (a Polars Series). ``y_pred`` may be a list column of class scores.
        class_names: the names string and dictionary columns hold; default: the accumulator's
            ``class_names`` (in a group, the members' names, which must agree).
        nulls: ``"raise"`` (default): a null raises ``ValueError`` naming the column and row;
            ``"skip"``: rows where any column is null are dropped, never counted.

    Raises:
        TypeError, ValueError: as :func:`to_numpy` and ``target.update``; positions are rows of
        the columns.
    """
    _check_target(target)
    _check_nulls(nulls)
    columns = {"y_true": _chunked(y_true, "y_true"), "y_pred": _chunked(y_pred, "y_pred")}
    if weights is not None:
        columns["weights"] = _chunked(weights, "weights")
    lengths = {key: len(value) for key, value in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"the columns have different lengths {lengths}; give one row each.")
    names = _target_names(target, class_names)
    return _count_stretches(target, _aligned(columns), names, nulls)


def _check_target(target: Any) -> None:
    if not isinstance(target, (Accumulator, AccumulatorGroup)):
        raise TypeError(
            f"the target must be an accumulator or an AccumulatorGroup, got "
            f"{type(target).__name__}."
        )


def _check_nulls(nulls: Any) -> None:
    if nulls not in ("raise", "skip"):
        raise ValueError(f"`nulls` must be 'raise' or 'skip', got {nulls!r}.")


def _target_names(target: Any, class_names: Sequence[str] | None) -> Any:
    if class_names is not None:
        return _names_array(class_names)
    members = target.values() if isinstance(target, AccumulatorGroup) else [target]
    found = {
        tuple(names) for m in members if (names := getattr(m, "class_names", None)) is not None
    }
    if len(found) > 1:
        raise ValueError(
            f"the group's members hold different `class_names` {sorted(found)}; pass "
            f"`class_names=` to say how names map to indices."
        )
    return _names_array(list(found.pop())) if found else None


def _aligned(columns: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(first row, {column: Array}) stretches on which every column has one chunk (slices of the
    chunks: no copy)."""
    chunk_lists = {key: [c for c in column.chunks if len(c)] for key, column in columns.items()}
    length = len(next(iter(columns.values())))
    cursors = dict.fromkeys(columns, 0)  # chunk index
    inside = dict.fromkeys(columns, 0)  # row within that chunk
    row = 0
    while row < length:
        step = min(len(chunk_lists[k][cursors[k]]) - inside[k] for k in columns)
        yield row, {k: chunk_lists[k][cursors[k]].slice(inside[k], step) for k in columns}
        row += step
        for k in columns:
            inside[k] += step
            if inside[k] == len(chunk_lists[k][cursors[k]]):
                cursors[k] += 1
                inside[k] = 0


def _count_stretches(
    target: T, stretches: Iterable[tuple[int, dict[str, Any]]], names: Any, nulls: Nulls
) -> T:
    # Count into an empty twin and merge it at the end: one merge makes the whole stream
    # atomic (a bad row in the last batch leaves `target` as it was).
    twin: Any = None
    for start, arrays in stretches:
        if twin is None:
            twin = target.copy().reset()
        _count_arrays(twin, start, arrays, names, nulls)
    if twin is not None:
        target.merge(twin)
    return target


def _count_arrays(acc: Any, start: int, arrays: dict[str, Any], names: Any, nulls: Nulls) -> None:
    pc = importlib.import_module("pyarrow.compute")
    rows = None  # table rows of the kept rows, when nulls were skipped
    if any(array.null_count for array in arrays.values()):
        if nulls == "raise":
            key, array = next((k, a) for k, a in arrays.items() if a.null_count)
            raise ValueError(
                f"`{key}` holds a null at row {start + _first_null(array)}; nulls are never "
                f"counted. Pass `nulls='skip'` to drop rows with a null, or fill them first."
            )
        masks = [array.is_valid() for array in arrays.values()]
        valid = masks[0]
        for mask in masks[1:]:
            valid = pc.and_(valid, mask)
        rows = np.flatnonzero(valid.to_numpy(zero_copy_only=False)) + start
        arrays = {key: array.filter(valid) for key, array in arrays.items()}
        if not len(rows):
            return
    values = {}
    for key, array in arrays.items():
        try:
            values[key] = _chunk_values(array, key, names, start)
        except ValueError as error:
            if rows is None:
                raise
            raise ValueError(
                f"{error} (Counted among the rows kept after skipping nulls.)"
            ) from error
    try:
        acc.update(values["y_true"], values["y_pred"], values.get("weights"))
    except (TypeError, ValueError) as error:
        if rows is not None:
            where = f"the rows kept after skipping nulls, from row {int(rows[0])}"
        else:
            where = f"the rows from row {start}"
        raise type(error)(f"{error} (The position is counted within {where}.)") from error


# ---------------------------------------------------------------------------- tables
def record_batches(source: Any, columns: Sequence[str] | None = None) -> Iterator[Any]:
    """The record batches of a table-like Arrow source, one at a time.

    ``source``: a pyarrow ``Table``, ``RecordBatch`` or ``RecordBatchReader``, or anything
    exporting ``__arrow_c_stream__`` (a Polars DataFrame, a DuckDB relation, a pandas
    DataFrame) or ``__arrow_c_array__`` of a struct (one record batch). ``columns`` selects
    columns of a Table or RecordBatch before iterating (a stream is read whole per batch:
    select its columns at the source, e.g. ``duckdb.sql("select label, pred from ...")``).
    """
    pa = _import_pyarrow()
    if isinstance(source, pa.Table):
        table = source.select(list(columns)) if columns is not None else source
        yield from table.to_batches()
        return
    if isinstance(source, pa.RecordBatch):
        yield source.select(list(columns)) if columns is not None else source
        return
    if isinstance(source, pa.RecordBatchReader):
        reader = source
    elif hasattr(source, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(source)
    elif hasattr(source, "__arrow_c_array__"):
        batch = pa.record_batch(source)
        yield batch.select(list(columns)) if columns is not None else batch
        return
    else:
        raise TypeError(
            f"`table` must be a pyarrow Table, RecordBatch or RecordBatchReader, or export "
            f"`__arrow_c_stream__` (a Polars DataFrame, a DuckDB relation), got "
            f"{type(source).__name__}."
        )
    with reader:
        yield from reader


def update_from_table(
    target: T,
    table: Any,
    y_true: str = "label",
    y_pred: str | Sequence[str] = "pred",
    weights: str | None = None,
    *,
    class_names: Sequence[str] | None = None,
    nulls: Nulls = "raise",
) -> T:
    """Stream the record batches of ``table`` through ``target``; returns ``target``.

    Equal to ``target.update(y_true, y_pred, weights)`` on the named columns as numpy arrays,
    with at most one record batch in memory at a time (a ``RecordBatchReader`` or DuckDB
    relation larger than memory is read batch by batch). Null-free numeric columns are read in
    place. The update is atomic: the batches are counted into an empty copy of ``target``,
    merged into it at the end, so a bad row anywhere leaves ``target`` as it was.

    Args:
        target: an accumulator or :class:`~metricstream.AccumulatorGroup`.
        table: a pyarrow ``Table``, ``RecordBatch`` or ``RecordBatchReader``, or anything
            exporting ``__arrow_c_stream__`` (Polars ``DataFrame``, DuckDB relation; a Polars
            ``LazyFrame`` after ``.collect()``).
        y_true: the column of true labels (integers, or class names), or of 0/1 target lists
            for multilabel accumulators.
        y_pred: the column of predictions: labels, names, scores, or a list column of class
            scores; or several column names, one score column per class, stacked into rows
            (a copy).
        weights: an optional column of per-row weights.
        class_names: the names string and dictionary columns hold; default: the accumulator's
            ``class_names`` (in a group, the members' names, which must agree).
        nulls: ``"raise"`` (default) or ``"skip"`` rows where any used column is null.

    Raises:
        KeyError: a column that the table lacks (the message lists its columns).
        TypeError, ValueError: as :func:`update`; positions are rows of the whole table.
    """
    _check_target(target)
    _check_nulls(nulls)
    pred_columns: list[str] = [y_pred] if isinstance(y_pred, str) else list(y_pred)
    if not pred_columns:
        raise ValueError("`y_pred` names no column; give one column name (or one per class).")
    wanted = [y_true, *pred_columns] + ([weights] if weights is not None else [])
    names = _target_names(target, class_names)

    def stretches() -> Iterator[tuple[int, dict[str, Any]]]:
        start = 0
        pa = _import_pyarrow()
        for batch in record_batches(table, None):
            missing = [c for c in wanted if c not in batch.schema.names]
            if missing:
                raise KeyError(
                    f"the table has no column {missing[0]!r}; its columns are {batch.schema.names}."
                )
            arrays = {"y_true": batch.column(y_true)}
            if len(pred_columns) == 1:
                arrays["y_pred"] = batch.column(pred_columns[0])
            else:
                arrays["y_pred"] = _stacked(pa, batch, pred_columns)
            if weights is not None:
                arrays["weights"] = batch.column(weights)
            if batch.num_rows:
                yield start, arrays
            start += batch.num_rows

    return _count_stretches(target, stretches(), names, nulls)


def _stacked(pa: Any, batch: Any, columns: list[str]) -> Any:
    """Several score columns as one fixed-size-list column (rows of C scores; a copy)."""
    parts = [batch.column(c) for c in columns]
    if any(p.null_count for p in parts):
        validity = np.ones(batch.num_rows, dtype=bool)
        for p in parts:
            validity &= p.is_valid().to_numpy(zero_copy_only=False)
        mask = pa.array(~validity)
    else:
        mask = None
    values = np.column_stack([p.fill_null(0).to_numpy(zero_copy_only=False) for p in parts])
    flat = pa.array(values.reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, len(columns), mask=mask)
