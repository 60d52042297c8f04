"""Any accumulator (or group) over the rows of a Spark DataFrame, with DataFrame APIs only.

pyspark is imported with this module (``pip install "metricstream[spark]"``); ``import
metricstream`` never imports it.

Each partition is counted in one Python worker by ``DataFrame.mapInArrow``: the Arrow record
batches Spark hands the worker are read in place by :mod:`metricstream.arrow` (class names
mapped through ``class_names``, nulls refused or skipped) into one accumulator, and only its
serialized state (``to_bytes()``) leaves the worker, as one row of a binary column. The states
are merged

* on the driver (``merge="driver"``): the partition states are collected and summed, for small
  states (a confusion matrix of a few hundred classes or fewer);
* on the cluster first (``merge="tree"``): states are summed in groups of ``fan_in`` partitions
  by a grouped ``applyInArrow`` (Spark 3.5: ``applyInPandas``), twice, so the driver receives
  one state per ``fan_in**2`` partitions: for large states (hundreds of classes, score
  histograms) or many partitions.

``merge="auto"`` (the default) picks the tree when one state is 256 KiB or more. Nothing here
uses RDDs, so the same calls run on Spark Connect.

Example::

    from metricstream.spark import confusion, scores

    predictions = model.transform(test)          # label, prediction, probability columns
    acc = confusion(predictions, "label", "prediction", num_classes=10)
    print(acc.accuracy(), acc.f1(average="weighted"))
    roc = scores(predictions, "label", "probability", task="binary")
    print(roc.auroc())
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from typing import Any, Literal, TypeVar

import pyarrow as pa

from . import ConfusionAccumulator, MultilabelAccumulator, ScoreAccumulator
from ._core.recipes import Recipe, build, recipe_of
from .base import Accumulator, AccumulatorGroup

__all__ = ["accumulate", "confusion", "multilabel", "scores"]

INSTALL_HINT = 'pip install "metricstream[spark]"'

T = TypeVar("T", bound="Accumulator | AccumulatorGroup")
Merge = Literal["auto", "driver", "tree"]

# One state at least this large is merged on the cluster by default (a 181-class int64 matrix).
TREE_STATE_BYTES = 256 * 1024


def accumulate(
    template: T,
    df: Any,
    y_true: str,
    y_pred: str | Sequence[str],
    weights: str | None = None,
    *,
    class_names: Sequence[str] | None = None,
    nulls: Literal["raise", "skip"] = "raise",
    merge: Merge = "auto",
    fan_in: int = 16,
) -> T:
    """Count the rows of ``df`` into a new accumulator (or group) configured like ``template``.

    The result equals ``template.copy().update(y_true, y_pred, weights)`` on the columns
    collected as numpy arrays (float sums up to the order of additions), whatever the
    partitioning: merging is exact, associative and commutative.

    Args:
        template: an empty accumulator or :class:`~metricstream.AccumulatorGroup`, rebuilt on
            each worker from its type and ``config()``; it is left untouched.
        df: a Spark DataFrame (classic or Spark Connect).
        y_true: the column of true labels: numbers (Spark ML's double labels), or strings
            mapped through ``class_names``; for multilabel accumulators an array column of 0/1.
        y_pred: the column of predictions: labels, class names, a score, an array or ML
            ``Vector`` column of class scores (``probability``, ``rawPrediction``; the argmax
            counts in a confusion matrix); or several columns, one score per class.
        weights: an optional column of per-row weights (a ``weightCol``).
        class_names: the names that string columns hold; default: the template's
            ``class_names``.
        nulls: ``"raise"`` (default): a null raises ``ValueError`` naming the column, the row
            within its partition and the partition; ``"skip"``: rows with a null in any used
            column are dropped, never counted.
        merge: ``"driver"``, ``"tree"`` or ``"auto"`` (see the module docstring).
        fan_in: how many states each cluster-side merge task sums (``merge="tree"``).

    Returns:
        A new accumulator or group of the template's type and configuration.

    Raises:
        TypeError: ``template`` is not an accumulator or a group, or a column of a type the
            accumulator cannot read.
        ValueError: a template that holds counts, a missing column, a bad ``merge``/``fan_in``,
            or a bad row (null, unknown class name, label out of range...): the message of the
            worker's error, naming the row within the Spark partition.
    """
    recipe = _recipe(template)
    if merge not in ("auto", "driver", "tree"):
        raise ValueError(f"`merge` must be 'auto', 'driver' or 'tree', got {merge!r}.")
    if isinstance(fan_in, bool) or not isinstance(fan_in, int) or fan_in < 2:
        raise ValueError(f"`fan_in` must be an int of at least 2, got {fan_in!r}.")
    if nulls not in ("raise", "skip"):
        raise ValueError(f"`nulls` must be 'raise' or 'skip', got {nulls!r}.")
    pred_columns: list[str] = [y_pred] if isinstance(y_pred, str) else list(y_pred)
    wanted = [y_true, *pred_columns] + ([weights] if weights is not None else [])
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        raise ValueError(
            f"the DataFrame has no column {missing[0]!r}; its columns are {df.columns}."
        )
    binary = _binary_scores(template)
    selected = df.select(*[_arrow_column(df, c, binary) for c in dict.fromkeys(wanted)])
    names = None if class_names is None else list(class_names)
    counter = _PartitionCounter(recipe, y_true, pred_columns, weights, names, nulls)
    states = selected.mapInArrow(counter, "pid int, state binary")
    if merge == "tree" or (merge == "auto" and _state_bytes(template) >= TREE_STATE_BYTES):
        for level in (1, 2):
            size = fan_in**level
            bucketed = states.withColumn("bucket", (states["pid"] / size).cast("int"))
            grouped = bucketed.groupBy("bucket")
            arrow = hasattr(grouped, "applyInArrow")
            apply = grouped.applyInArrow if arrow else grouped.applyInPandas
            states = apply(_group_merger(recipe, arrow), "pid int, state binary")
    rows = _collect(states)
    total = build(recipe)
    cls = type(total)
    for row in rows:
        total.merge(cls.from_bytes(bytes(row["state"]), source="a Spark partition's state"))
    return total


def confusion(
    df: Any,
    y_true: str = "label",
    y_pred: str | Sequence[str] = "prediction",
    num_classes: int | None = None,
    weights: str | None = None,
    *,
    class_names: Sequence[str] | None = None,
    ignore_index: int | None = None,
    weighted: bool | None = None,
    threshold: float | None = None,
    logits: bool = False,
    nulls: Literal["raise", "skip"] = "raise",
    merge: Merge = "auto",
    fan_in: int = 16,
) -> ConfusionAccumulator:
    """The K×K confusion matrix of two DataFrame columns (and every metric it yields).

    :func:`accumulate` with an empty :class:`~metricstream.ConfusionAccumulator`. Spark's
    ``MulticlassMetrics(...).confusionMatrix()`` is this matrix restricted to the labels that
    occur; ``MulticlassClassificationEvaluator`` metrics are its views, e.g. ``"accuracy"`` =
    ``acc.accuracy()``, ``"weightedPrecision"`` = ``acc.precision(average="weighted",
    zero_division=0)`` (weighted = by true-class support; a class never predicted has
    precision 0/0, counted as 0 as Spark does).

    Args:
        df: a Spark DataFrame.
        y_true: the label column (numbers, or class names with ``class_names``).
        y_pred: the prediction column: labels or names, or an array/ML ``Vector`` column of
            ``num_classes`` scores whose argmax is counted (first maximum on ties), or one
            score column per class.
        num_classes: K; default ``len(class_names)``.
        weights: an optional weight column (``weightCol``).
        class_names, ignore_index, threshold, logits: as
            :class:`~metricstream.ConfusionAccumulator`.
        weighted: count float64 weights; default: whenever ``weights`` is given (Spark's
            weights may be fractional).
        nulls, merge, fan_in: as :func:`accumulate`.
    """
    if num_classes is None:
        if class_names is None:
            raise ValueError("give `num_classes` (or `class_names`, one per class).")
        num_classes = len(class_names)
    template = ConfusionAccumulator(
        num_classes,
        class_names,
        ignore_index,
        weighted=weights is not None if weighted is None else weighted,
        threshold=threshold,
        logits=logits,
    )
    return accumulate(
        template, df, y_true, y_pred, weights, nulls=nulls, merge=merge, fan_in=fan_in
    )


def scores(
    df: Any,
    y_true: str = "label",
    y_score: str | Sequence[str] = "probability",
    task: Literal["binary", "multiclass", "multilabel"] = "binary",
    num_classes: int | None = None,
    weights: str | None = None,
    *,
    class_names: Sequence[str] | None = None,
    nulls: Literal["raise", "skip"] = "raise",
    merge: Merge = "auto",
    fan_in: int = 16,
    **options: Any,
) -> ScoreAccumulator:
    """Score histograms (ROC/PR curves, AUROC, AP, calibration, top-k) of DataFrame columns.

    :func:`accumulate` with an empty :class:`~metricstream.ScoreAccumulator` of ``task``.
    For ``task="binary"`` an array or ML ``Vector`` column (``probability``) gives its
    element 1, the positive class's score; a numeric column is read as it is. ``options``
    (``bins``, ``logits``, ``weighted``, ``ignore_index``, ...) configure the accumulator;
    ``weighted`` defaults to whether ``weights`` is given. ``class_names`` maps string labels to
    indices.

    Spark's ``BinaryClassificationMetrics(...).areaUnderROC`` equals ``auroc()`` when the
    scores are exact in the histogram (``exact()``, e.g. float16 probabilities) and Spark does
    not bin them (fewer than ``2 * numBins`` = 2000 distinct scores; beyond, Spark's area is
    approximate and this one stays exact); its ``areaUnderPR`` is the trapezoidal area under
    the PR curve, not the average precision (the step area that ``average_precision()`` and
    scikit-learn compute).
    """
    options.setdefault("weighted", weights is not None)
    template = ScoreAccumulator(task, num_classes, **options)
    return accumulate(
        template,
        df,
        y_true,
        y_score,
        weights,
        class_names=class_names,
        nulls=nulls,
        merge=merge,
        fan_in=fan_in,
    )


def multilabel(
    df: Any,
    y_true: str,
    y_pred: str,
    num_labels: int,
    weights: str | None = None,
    *,
    nulls: Literal["raise", "skip"] = "raise",
    merge: Merge = "auto",
    fan_in: int = 16,
    **options: Any,
) -> MultilabelAccumulator:
    """Per-label counts of array columns: ``y_true`` 0/1 targets, ``y_pred`` 0/1 predictions or
    scores (``options`` such as ``threshold``, ``label_names``, ``weighted`` configure the
    :class:`~metricstream.MultilabelAccumulator`; ``weighted`` defaults to whether ``weights``
    is given). Each row holds ``num_labels`` values in both columns."""
    options.setdefault("weighted", weights is not None)
    template = MultilabelAccumulator(num_labels, **options)
    return accumulate(
        template, df, y_true, y_pred, weights, nulls=nulls, merge=merge, fan_in=fan_in
    )


# ---------------------------------------------------------------------------- columns
def _binary_scores(template: Any) -> bool:
    members = template.values() if isinstance(template, AccumulatorGroup) else [template]
    return any(isinstance(m, ScoreAccumulator) and m.task == "binary" for m in members) and all(
        isinstance(m, ScoreAccumulator) and m.task == "binary" for m in members
    )


def _arrow_column(df: Any, name: str, binary: bool) -> Any:
    """The column as Arrow can carry it: ML vectors as arrays (``vector_to_array``), and for
    binary scores the positive class's element of a vector or array."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType

    column = F.col(name)
    data_type = df.schema[name].dataType
    is_vector = type(data_type).__name__ == "VectorUDT"
    if is_vector:
        from pyspark.ml.functions import vector_to_array

        column = vector_to_array(column)
    if binary and (is_vector or isinstance(data_type, ArrayType)):
        column = column[1]
    return column.alias(name)


# ---------------------------------------------------------------------------- worker side
class _PartitionCounter:
    """``mapInArrow`` function: one partition's record batches -> one row (partition id, state).

    A class rather than a closure so that the pickled function is small and names what it
    carries."""

    def __init__(
        self,
        recipe: Recipe,
        y_true: str,
        y_pred: list[str],
        weights: str | None,
        class_names: list[str] | None,
        nulls: str,
    ) -> None:
        self.recipe = recipe
        self.y_true = y_true
        self.y_pred = y_pred if len(y_pred) > 1 else y_pred[0]
        self.weights = weights
        self.class_names = class_names
        self.nulls = nulls

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        from .arrow import update_from_table

        context = TaskContext.get()
        pid = context.partitionId() if context is not None else 0
        batches = iter(batches)
        first = next((b for b in batches if b.num_rows), None)
        if first is None:
            return  # an empty partition sends nothing
        reader = pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], batches))
        acc = build(self.recipe)
        try:
            update_from_table(
                acc,
                reader,
                y_true=self.y_true,
                y_pred=self.y_pred,
                weights=self.weights,
                class_names=self.class_names,
                nulls=self.nulls,  # type: ignore[arg-type]
            )
        except (TypeError, ValueError, KeyError) as error:
            raise type(error)(f"{error} [rows counted within Spark partition {pid}]") from error
        yield _state_batch([pid], [acc.to_bytes()])


def _group_merger(recipe: Recipe, arrow: bool) -> Any:
    """The grouped-map function: the states of one bucket -> their sum (one row); on Arrow
    tables (``applyInArrow``, Spark 4) or pandas frames (``applyInPandas``, Spark 3.5). A plain
    function: Spark reads its signature to decide whether it takes the group key."""

    def merged(pids: Any, blobs: Any) -> tuple[int, bytes]:
        total = build(recipe)
        cls = type(total)
        for blob in blobs:
            total.merge(cls.from_bytes(bytes(blob), source="a Spark partition's state"))
        return int(min(pids)), total.to_bytes()

    def merge_table(table: Any) -> Any:
        pid, state = merged(table.column("pid").to_pylist(), table.column("state").to_pylist())
        return pa.Table.from_batches([_state_batch([pid], [state])])

    def merge_frame(frame: Any) -> Any:
        import pandas as pd

        pid, state = merged(list(frame["pid"]), list(frame["state"]))
        return pd.DataFrame({"pid": [pid], "state": [state]})

    return merge_table if arrow else merge_frame


def _state_batch(pids: list[int], states: list[bytes]) -> Any:
    return pa.RecordBatch.from_arrays(
        [pa.array(pids, pa.int32()), pa.array(states, pa.binary())], names=["pid", "state"]
    )


# ---------------------------------------------------------------------------- driver side
_WORKER_ERROR = re.compile(r"^(ValueError|TypeError|KeyError): (.*)$", re.MULTILINE)


def _collect(states: Any) -> list[Any]:
    """``states.collect()``, with a worker's ValueError/TypeError raised as itself."""
    try:
        return list(states.collect())
    except Exception as error:  # Spark wraps worker errors (PythonException, Py4JJavaError...)
        found = _WORKER_ERROR.findall(str(error))
        if not found:
            raise
        kind, message = found[-1]
        exception = {"ValueError": ValueError, "TypeError": TypeError, "KeyError": ValueError}
        raise exception[kind](message.strip().strip("\"'")) from error


def _state_bytes(template: Any) -> int:
    members = template.values() if isinstance(template, AccumulatorGroup) else [template]
    return sum(a.nbytes for m in members for a in m.state_arrays().values())


def _recipe(template: Any) -> Recipe:
    return recipe_of(template, "on a worker")
