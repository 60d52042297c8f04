"""Any accumulator (or group) as a Ray Data aggregation: ``ds.aggregate(MetricAggregate(...))``.

ray is imported with this module (``pip install "metricstream[ray]"``); ``import metricstream``
never imports it.

:class:`MetricAggregate` is an ``AggregateFnV2``: ``aggregate_block`` counts one block into an
empty accumulator (Arrow blocks are read in place by :mod:`metricstream.arrow` where null-free,
class names mapped through ``class_names``), ``combine`` merges two partial states, and
``finalize`` returns the ordinary accumulator. The partial states travel between tasks as their
``to_bytes()`` serialization (an Arrow binary value, no Python objects in blocks). It works with
``Dataset.aggregate``, and per group through :func:`aggregate_by` (Ray prunes the input of a
grouped aggregation to the keys and one declared column per aggregation, so there the columns
travel packed in one struct column: :func:`pack` and ``packed=True``).

Example::

    import ray
    from metricstream import ConfusionAccumulator
    from metricstream.ray import MetricAggregate, aggregate

    ds = ray.data.read_parquet("predictions/")
    acc = aggregate(ds, ConfusionAccumulator(10), y_true="label", y_pred="pred")
    print(acc.accuracy())

    # the same, as one aggregation among others
    row = ds.aggregate(MetricAggregate(ConfusionAccumulator(10), "label", "pred"))
    acc = row["metricstream"]

For predictions made in a streaming pipeline (``map_batches`` inference), see the recipe in
``docs/engines.md``: count each batch where it is predicted and merge the small states.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypeVar

from ray.data.aggregate import AggregateFnV2
from ray.data.block import BlockAccessor

from . import ConfusionAccumulator, ScoreAccumulator
from ._core.recipes import Recipe, build, recipe_of
from .base import Accumulator, AccumulatorGroup

__all__ = ["PACKED", "MetricAggregate", "aggregate", "aggregate_by", "confusion", "pack", "scores"]

INSTALL_HINT = 'pip install "metricstream[ray]"'

T = TypeVar("T", bound="Accumulator | AccumulatorGroup")

#: The struct column :func:`pack` adds: the columns an aggregation reads, as one column. Ray
#: prunes the input of a grouped aggregation to the group keys and the one column each
#: aggregation declares (``on``), so an aggregation that reads two or three columns declares
#: this one.
PACKED = "__metricstream_columns__"


class MetricAggregate(AggregateFnV2):
    """A Ray Data aggregation that counts rows into an accumulator like ``template``.

    The result (``finalize``) equals ``template.copy().update(y_true, y_pred, weights)`` on
    the columns collected as numpy arrays, whatever the blocks: merging is exact, associative
    and commutative. Empty blocks count nothing.

    Args:
        template: an empty accumulator or :class:`~metricstream.AccumulatorGroup`; its type
            and ``config()`` are sent to the tasks (not its arrays), and it is left untouched.
        y_true: the column of true labels (numbers, or class names), or of 0/1 target lists.
        y_pred: the column of predictions: labels, names, scores, or a list column of class
            scores; or several columns, one score per class.
        weights: an optional column of per-row weights.
        class_names: the names string columns hold; default: the template's ``class_names``.
        nulls: ``"raise"`` (default): a null raises ``ValueError`` naming the column and row;
            ``"skip"``: rows with a null in any used column are dropped, never counted.
        name: the output column name (default ``"metricstream"``).
        packed: read the columns from the struct column :data:`PACKED` that :func:`pack` adds
            (and declare it as this aggregation's column): needed with ``groupby``, or beside
            other aggregations, whose column pruning would drop the columns otherwise.

    Raises:
        TypeError: ``template`` is not an accumulator or a group.
        ValueError: a template that already holds counts, a bad ``nulls``.
    """

    def __init__(
        self,
        template: Accumulator | AccumulatorGroup,
        y_true: str = "label",
        y_pred: str | Sequence[str] = "pred",
        weights: str | None = None,
        *,
        class_names: Sequence[str] | None = None,
        nulls: Literal["raise", "skip"] = "raise",
        name: str = "metricstream",
        packed: bool = False,
    ) -> None:
        if nulls not in ("raise", "skip"):
            raise ValueError(f"`nulls` must be 'raise' or 'skip', got {nulls!r}.")
        self._recipe = _recipe(template)
        self._columns = (y_true, y_pred if isinstance(y_pred, str) else list(y_pred), weights)
        self._class_names = None if class_names is None else list(class_names)
        self._nulls = nulls
        self.output_name: str = name
        self._packed = bool(packed)
        # The zero is b"" (no state yet): an empty score state would be megabytes of zeros.
        super().__init__(
            name, zero_factory=bytes, on=PACKED if packed else None, ignore_nulls=False
        )

    def aggregate_block(self, block: Any) -> bytes:
        from .arrow import update_from_table

        table = BlockAccessor.for_block(block).to_arrow()
        if table.num_rows == 0:
            return b""
        if self._packed:
            table = _unpack(table)
        y_true, y_pred, weights = self._columns
        acc = build(self._recipe)
        update_from_table(
            acc,
            table,
            y_true=y_true,
            y_pred=y_pred,
            weights=weights,
            class_names=self._class_names,
            nulls=self._nulls,  # type: ignore[arg-type]
        )
        return acc.to_bytes()

    def combine(self, current_accumulator: bytes, new: bytes) -> bytes:
        if not new:
            return current_accumulator
        if not current_accumulator:
            return new
        total = self._load(current_accumulator)
        total.merge(self._load(new))
        return total.to_bytes()

    def finalize(self, accumulator: bytes) -> Any:  # type: ignore[override]
        return self._load(accumulator) if accumulator else build(self._recipe)

    def result(self, value: Any) -> Any:
        """The accumulator from what ``Dataset.aggregate`` returned for this aggregation (the
        accumulator itself, or its serialized state where Ray kept bytes)."""
        if isinstance(value, (Accumulator, AccumulatorGroup)):
            return value
        return self.finalize(bytes(value) if value is not None else b"")

    def _load(self, data: bytes) -> Any:
        cls = AccumulatorGroup if self._recipe[0] == "group" else self._recipe[1]
        return cls.from_bytes(data, source="a Ray block's state")


def aggregate(
    ds: Any,
    template: T,
    y_true: str = "label",
    y_pred: str | Sequence[str] = "pred",
    weights: str | None = None,
    *,
    class_names: Sequence[str] | None = None,
    nulls: Literal["raise", "skip"] = "raise",
) -> T:
    """Count the rows of the Ray Dataset ``ds`` into a new accumulator (or group) configured
    like ``template``: ``ds.aggregate(MetricAggregate(...))``, unwrapped. Arguments as
    :class:`MetricAggregate`."""
    agg = MetricAggregate(template, y_true, y_pred, weights, class_names=class_names, nulls=nulls)
    result: T = agg.result(ds.aggregate(agg)[agg.output_name])
    return result


def aggregate_by(
    ds: Any,
    by: str | Sequence[str],
    template: T,
    y_true: str = "label",
    y_pred: str | Sequence[str] = "pred",
    weights: str | None = None,
    *,
    class_names: Sequence[str] | None = None,
    nulls: Literal["raise", "skip"] = "raise",
    num_partitions: int | None = None,
) -> dict[Any, T]:
    """One accumulator per group: ``{key: accumulator}`` for the values of the column ``by``
    (a tuple of values for several columns), each equal to :func:`aggregate` over that group's
    rows. Runs ``pack(ds, ...).groupby(by, num_partitions=...).aggregate(MetricAggregate(...,
    packed=True))`` (``num_partitions``: of the hash shuffle; Ray's default is 200)."""
    agg = MetricAggregate(
        template, y_true, y_pred, weights, class_names=class_names, nulls=nulls, packed=True
    )
    keys = [by] if isinstance(by, str) else list(by)
    grouped = pack(ds, y_true, y_pred, weights).groupby(by, num_partitions=num_partitions)
    rows = grouped.aggregate(agg).take_all()
    result: dict[Any, T] = {}
    for row in rows:
        key = row[keys[0]] if isinstance(by, str) else tuple(row[k] for k in keys)
        result[key] = agg.result(row[agg.output_name])
    return result


def pack(ds: Any, y_true: str, y_pred: str | Sequence[str], weights: str | None = None) -> Any:
    """``ds`` with the struct column :data:`PACKED` holding ``y_true``, ``y_pred`` (and
    ``weights``) of every row (built from the same Arrow buffers: no copy of the values), for
    :class:`MetricAggregate` ``(..., packed=True)`` in a grouped aggregation."""
    import pyarrow as pa

    columns = [y_true, *([y_pred] if isinstance(y_pred, str) else y_pred)]
    if weights is not None:
        columns.append(weights)
    columns = list(dict.fromkeys(columns))

    def add_struct(batch: Any) -> Any:
        selected = batch.select(columns)
        kind = pa.struct(list(selected.schema))
        chunks = [
            pa.StructArray.from_arrays(part.columns, fields=list(kind))
            for part in selected.to_batches()
        ]
        return batch.append_column(PACKED, pa.chunked_array(chunks, type=kind))

    return ds.map_batches(add_struct, batch_format="pyarrow", batch_size=None)


def _unpack(table: Any) -> Any:
    import pyarrow as pa

    column = table.column(PACKED)
    batches = [pa.RecordBatch.from_struct_array(chunk) for chunk in column.chunks]
    return pa.Table.from_batches(batches, schema=pa.schema(list(column.type)))


def confusion(
    ds: Any,
    y_true: str = "label",
    y_pred: str | Sequence[str] = "pred",
    num_classes: int | None = None,
    weights: str | None = None,
    *,
    class_names: Sequence[str] | None = None,
    ignore_index: int | None = None,
    weighted: bool = False,
    threshold: float | None = None,
    logits: bool = False,
    nulls: Literal["raise", "skip"] = "raise",
) -> ConfusionAccumulator:
    """The confusion matrix of two Dataset columns: :func:`aggregate` with an empty
    :class:`~metricstream.ConfusionAccumulator` (``num_classes`` defaults to
    ``len(class_names)``; labels may be class names)."""
    if num_classes is None:
        if class_names is None:
            raise ValueError("give `num_classes` (or `class_names`, one per class).")
        num_classes = len(class_names)
    template = ConfusionAccumulator(
        num_classes,
        class_names,
        ignore_index,
        weighted=weighted,
        threshold=threshold,
        logits=logits,
    )
    return aggregate(ds, template, y_true, y_pred, weights, nulls=nulls)


def scores(
    ds: Any,
    y_true: str = "label",
    y_score: str | Sequence[str] = "score",
    task: Literal["binary", "multiclass", "multilabel"] = "binary",
    num_classes: int | None = None,
    weights: str | None = None,
    *,
    class_names: Sequence[str] | None = None,
    nulls: Literal["raise", "skip"] = "raise",
    **options: Any,
) -> ScoreAccumulator:
    """Score histograms of Dataset columns: :func:`aggregate` with an empty
    :class:`~metricstream.ScoreAccumulator` of ``task`` (``options`` configure it)."""
    template = ScoreAccumulator(task, num_classes, **options)
    return aggregate(ds, template, y_true, y_score, weights, class_names=class_names, nulls=nulls)


# ---------------------------------------------------------------------------- recipes
def _recipe(template: Any) -> Recipe:
    return recipe_of(template, "in a task")
