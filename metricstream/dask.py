"""Any accumulator (or group of accumulators) over dask arrays or dataframe columns, chunk by chunk.

Dask is imported on first use, not with this module (``pip install "metricstream[dask]"``); the
absolute ``importlib.import_module("dask")`` means this module never shadows the real package.

:func:`accumulate` pairs up the chunks of ``y_true``, ``y_pred`` (and ``weights``), feeds each
pair to its own empty copy of a template accumulator (or :class:`~metricstream.AccumulatorGroup`)
in a dask task, so each task holds one state whatever the chunk size, and sums the partial
states in a tree of ``split_every``-way merges, as dask's own reductions do. Only states travel
between workers. :func:`confusion` is the same for one
:class:`~metricstream.ConfusionAccumulator`, configured by keyword. Works on every dask
scheduler: threads, processes, and ``distributed`` clusters.

Example (the threaded scheduler)::

    import dask.array as da
    from metricstream import AccumulatorGroup, ConfusionAccumulator
    from metricstream.dask import accumulate, confusion

    y_true = da.from_npy_stack("labels/")          # on disk, chunk by chunk
    y_pred = da.from_npy_stack("logits/").argmax(axis=1)
    acc = confusion(y_true, y_pred, num_classes=10)
    print(acc.accuracy(), acc.f1(average="macro"))

    group = AccumulatorGroup(counts=ConfusionAccumulator(10),
                             weighted=ConfusionAccumulator(10, weighted=True))
    totals = accumulate(group, y_true, y_pred, weights=da.from_npy_stack("weights/"))

    df = dask.dataframe.read_parquet("predictions/")
    acc = confusion(df["label"], df["prediction"], num_classes=10)
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, Literal, TypeVar, overload

import numpy as np

from ._core.recipes import Recipe, build, recipe_of
from .base import Accumulator, AccumulatorGroup, _keywords

__all__ = ["accumulate", "confusion"]

INSTALL_HINT = 'pip install "metricstream[dask]"'

# Bound, not constrained: accumulate(ScoreAccumulator(...), ...) is a ScoreAccumulator to mypy.
T = TypeVar("T", bound=Accumulator | AccumulatorGroup)


@overload
def accumulate(
    template: T,
    y_true: Any,
    y_pred: Any,
    weights: Any = None,
    *,
    class_axis: int | None = None,
    split_every: int = 8,
    compute: Literal[True] = True,
    **compute_kwargs: Any,
) -> T: ...


@overload
def accumulate(
    template: T,
    y_true: Any,
    y_pred: Any,
    weights: Any = None,
    *,
    class_axis: int | None = None,
    split_every: int = 8,
    compute: Literal[False] = ...,
    **compute_kwargs: Any,
) -> Any: ...


def accumulate(
    template: T,
    y_true: Any,
    y_pred: Any,
    weights: Any = None,
    *,
    class_axis: int | None = None,
    split_every: int = 8,
    compute: bool = True,
    **compute_kwargs: Any,
) -> Any:
    """Feed dask collections to copies of ``template`` chunk by chunk and sum the copies.

    The result equals ``template.copy().update(y_true, y_pred, weights)`` on the computed
    arrays (float sums up to the order of additions), whatever the chunking and fan-in:
    merging is exact, associative and commutative.

    Args:
        template: an empty accumulator or :class:`~metricstream.AccumulatorGroup`; its type and
            configuration are used (it is checked, and left untouched, before any task runs).
            Each task feeds its chunk to ``update(y_true, y_pred, weights)`` of its own copy.
        y_true: a dask array of any shape, or a dask dataframe column (Series). Numpy arrays
            are accepted too (wrapped with ``dask.array.asarray``).
        y_pred: an array of the same shape (chunks are aligned to ``y_true``'s), or scores with
            one more axis (``class_axis``), which is gathered into one chunk. With Series: a
            Series partitioned like ``y_true`` (two columns of one dataframe are).
        weights: optional weights shaped like ``y_true`` (or one per row, for templates that
            are not all confusion matrices), partitioned alike.
        class_axis: the axis of ``y_pred`` holding scores when it has one more dimension than
            ``y_true``. Default: the template's ``class_axis`` setting (every member that has
            one must agree), else 1.
        split_every: how many partial states each merge task sums (the tree's fan-in).
        compute: ``True`` computes and returns the result; ``False`` returns a
            ``dask.delayed.Delayed`` that computes to it (to combine with other computations).
        **compute_kwargs: passed to ``dask.compute``, e.g. ``scheduler="threads"``. With a
            ``distributed.Client`` active, the cluster is used by default. A keyword that a
            member's ``update`` takes (``cluster_ids=`` of a
            :class:`~metricstream.BootstrapConfusionAccumulator`) goes to the updates instead:
            an array of ``y_true``'s shape, or one value per row, is chunked with ``y_true``;
            any other value is given to every chunk.

    Chunking: confusion matrices count every element as a sample, so any chunking of ``y_true``
    is kept. Other accumulators see whole rows: chunks are merged along every axis but the
    first (a multilabel ``(N, L)`` array is split into groups of rows, never of labels).

    Returns:
        An accumulator or group of the template's type (or a Delayed one).

    Raises:
        ImportError: dask is not installed; the message gives the pip command.
        TypeError: ``template`` is not an accumulator or a group; a mix of dataframe and
            array inputs.
        ValueError: a template that already holds counts, shapes or partitions that do not
            line up, or a bad label, weight or score; the message names the chunk or partition
            that held it.
    """
    recipe = _recipe(template)
    members = template.values() if isinstance(template, AccumulatorGroup) else [template]
    elementwise = all(member.input_layout == "elementwise" for member in members)
    # Keyword arguments that a member's update takes (``cluster_ids=`` of a bootstrap member)
    # are chunked with `y_true` and given to every chunk's update; the rest go to dask.compute.
    taken = set().union(*(_keywords(type(member)._prepare) for member in members))
    member_kwargs = {key: compute_kwargs.pop(key) for key in list(compute_kwargs) if key in taken}
    if class_axis is None:
        axes = {
            member.config()["class_axis"] for member in members if "class_axis" in member.config()
        }
        if len(axes) > 1:
            raise ValueError(
                f"the template's members hold different `class_axis` settings "
                f"{sorted(axes)}; pass `class_axis=` to say where the scores are."
            )
        class_axis = axes.pop() if axes else 1
    return _reduce(
        recipe,
        y_true,
        y_pred,
        weights,
        class_axis=class_axis,
        num_scores=None,
        elementwise=elementwise,
        split_every=split_every,
        compute=compute,
        compute_kwargs=compute_kwargs,
        member_kwargs=member_kwargs,
    )


def confusion(
    y_true: Any,
    y_pred: Any,
    num_classes: int,
    weights: Any = None,
    *,
    class_names: Sequence[str] | None = None,
    ignore_index: int | None = None,
    weighted: bool = False,
    class_axis: int = 1,
    split_every: int = 8,
    compute: bool = True,
    **compute_kwargs: Any,
) -> Any:
    """Count the confusion matrix of dask collections; equal to one in-memory ``update``.

    :func:`accumulate` with an empty :class:`~metricstream.ConfusionAccumulator` configured by
    ``num_classes``, ``class_names``, ``ignore_index``, ``weighted`` and ``class_axis``.

    Args:
        y_true: true labels: a dask array of any shape, or a dask dataframe column (Series).
            Numpy arrays are accepted too (wrapped with ``dask.array.asarray``).
        y_pred: predicted labels of the same shape (chunks are aligned to ``y_true``'s), or
            scores with one more axis (``class_axis``) holding ``num_classes`` scores; that axis
            is gathered into one chunk. With Series: a Series partitioned like ``y_true`` (two
            columns of one dataframe are).
        num_classes, class_names, ignore_index, weighted, class_axis: the accumulator's
            configuration, as for :class:`~metricstream.ConfusionAccumulator`.
        weights: optional per-sample weights, shaped and partitioned like ``y_true``.
        split_every: how many partial accumulators each merge task sums (the tree's fan-in).
        compute: ``True`` computes and returns the accumulator; ``False`` returns a
            ``dask.delayed.Delayed`` that computes to it (to combine with other computations).
        **compute_kwargs: passed to ``dask.compute``, e.g. ``scheduler="threads"``. With a
            ``distributed.Client`` active, the cluster is used by default.

    Returns:
        A :class:`~metricstream.ConfusionAccumulator` (or a Delayed one).

    Raises:
        ImportError: dask is not installed; the message gives the pip command.
        TypeError: a mix of dataframe and array inputs, or non-numeric data.
        ValueError: shapes or partitions that do not line up, or a bad label, weight or score;
            the message names the chunk or partition that held it.
    """
    from .confusion.accumulator import ConfusionAccumulator

    # Validates the configuration before any task runs.
    template = ConfusionAccumulator(
        num_classes, class_names, ignore_index, weighted=weighted, class_axis=class_axis
    )
    return _reduce(
        _recipe(template),
        y_true,
        y_pred,
        weights,
        class_axis=template.class_axis,
        num_scores=num_classes,
        elementwise=True,
        split_every=split_every,
        compute=compute,
        compute_kwargs=compute_kwargs,
    )


# ---------------------------------------------------------------------------- the reduction
def _recipe(template: Any) -> Recipe:
    return recipe_of(template, "in the first task", ": `acc.merge(accumulate(...))`")


def _reduce(
    recipe: Recipe,
    y_true: Any,
    y_pred: Any,
    weights: Any,
    *,
    class_axis: int,
    num_scores: int | None,
    elementwise: bool,
    split_every: int,
    compute: bool,
    compute_kwargs: dict[str, Any],
    member_kwargs: dict[str, Any] | None = None,
) -> Any:
    dask = _import("dask")
    member_kwargs = member_kwargs or {}
    if isinstance(split_every, bool) or not isinstance(split_every, int) or split_every < 2:
        raise ValueError(f"`split_every` must be an int of at least 2, got {split_every!r}.")

    if any(_is_dask_frame(x) for x in (y_true, y_pred, weights)):
        pieces = _frame_pieces(dask, y_true, y_pred, weights, member_kwargs)
    else:
        pieces = _array_pieces(
            dask, y_true, y_pred, weights, num_scores, class_axis, elementwise, member_kwargs
        )

    count = dask.delayed(_count_piece, pure=True)
    merge = dask.delayed(_merge, pure=True)
    level = [count(t, p, w, recipe, where, extra) for t, p, w, where, extra in pieces]
    if not level:
        level = [dask.delayed(build, pure=True)(recipe)]
    while len(level) > 1:
        level = [merge(*level[i : i + split_every]) for i in range(0, len(level), split_every)]
    (total,) = level
    if not compute:
        return total
    (result,) = dask.compute(total, **compute_kwargs)
    return result


# ---------------------------------------------------------------------------- tasks
def _count_piece(
    y_true: Any, y_pred: Any, weights: Any, recipe: Recipe, where: str, extra: dict[str, Any]
) -> Any:
    acc = build(recipe)
    try:
        acc.update(y_true, y_pred, weights, **extra)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{error} (The position is counted within {where}.)") from error
    return acc


def _merge(*partials: Any) -> Any:
    # Copy first: a task must not modify its inputs (dask may hold them, or rerun this task).
    total = partials[0].copy()
    for partial in partials[1:]:
        total.merge(partial)
    return total


# ---------------------------------------------------------------------------- pairing chunks
def _array_pieces(
    dask: Any,
    y_true: Any,
    y_pred: Any,
    weights: Any,
    num_scores: int | None,
    class_axis: int,
    elementwise: bool,
    member_kwargs: dict[str, Any],
) -> list[tuple]:
    da = _import("dask.array")
    y_true, y_pred = da.asarray(y_true), da.asarray(y_pred)
    weights = None if weights is None else da.asarray(weights)
    shape = y_true.shape
    if not elementwise and y_true.ndim > 1:
        # Whole rows: split the first axis only (labels of one sample stay together).
        y_true = _align(y_true, (y_true.chunks[0], *((n,) for n in shape[1:])), "y_true")
    scores = "scores" if num_scores is None else f"{num_scores} class scores"
    if y_pred.ndim == y_true.ndim:
        if y_pred.shape != shape:
            raise ValueError(
                f"`y_true` has shape {shape} and `y_pred` has shape {y_pred.shape}; `y_pred` must "
                f"have the same shape (labels) or one more dimension holding {scores}."
            )
        y_pred = _align(y_pred, y_true.chunks, "y_pred")
        scores_axis = None
    elif y_pred.ndim == y_true.ndim + 1:
        axis = class_axis + y_pred.ndim if class_axis < 0 else class_axis
        if not 0 <= axis < y_pred.ndim:
            raise ValueError(
                f"`class_axis` is {class_axis}, but `y_pred` (scores) has only "
                f"{y_pred.ndim} dimensions."
            )
        rest = y_pred.shape[:axis] + y_pred.shape[axis + 1 :]
        if rest != shape or (num_scores is not None and y_pred.shape[axis] != num_scores):
            expected = "" if num_scores is None else f" and `num_classes` is {num_scores}"
            raise ValueError(
                f"`y_pred` looks like scores of shape {y_pred.shape} with classes on axis {axis}, "
                f"but `y_true` has shape {shape}{expected}."
            )
        chunks = list(y_true.chunks)
        chunks.insert(axis, (y_pred.shape[axis],))  # every score of a sample in one chunk
        y_pred = _align(y_pred, tuple(chunks), "y_pred")
        scores_axis = axis
    else:
        raise ValueError(
            f"`y_true` has shape {shape} and `y_pred` has shape {y_pred.shape}; `y_pred` must "
            f"have the same shape (labels) or one more dimension holding {scores}."
        )
    if weights is not None:
        if weights.shape == shape:
            weights = _align(weights, y_true.chunks, "weights")
        elif (
            not elementwise
            and weights.ndim == 1
            and len(shape) > 1
            and (weights.shape[0] == shape[0])
        ):
            weights = _align(weights, (y_true.chunks[0],), "weights")  # one weight per row
        else:
            rows = "" if elementwise else f" or ({shape[0] if shape else 0},) (one per row)"
            raise ValueError(
                f"`weights` has shape {weights.shape}, but `y_true` has shape "
                f"{shape}; give weights of shape {shape}{rows}."
            )

    # Member keyword arguments: arrays of y_true's shape, or one value per row, are chunked
    # like y_true; anything else (one cluster id for the whole call, say) goes to every chunk.
    chunked: dict[str, Any] = {}
    fixed: dict[str, Any] = {}
    for key, value in member_kwargs.items():
        if not (hasattr(value, "shape") and hasattr(value, "ndim")) or value.ndim == 0:
            fixed[key] = value
            continue
        value = da.asarray(value)
        if value.shape == shape:
            chunked[key] = _align(value, y_true.chunks, key)
        elif value.ndim == 1 and len(shape) >= 1 and value.shape[0] == shape[0]:
            chunked[key] = _align(value, (y_true.chunks[0],), key)
        else:
            raise ValueError(
                f"`{key}` has shape {value.shape}, but `y_true` has shape {shape}; give one "
                f"value per element of `y_true` or per row ({shape[0] if shape else 0},)."
            )

    # One merged, optimized graph for all inputs, so a shared source is read once.
    collections = [y_true, y_pred] if weights is None else [y_true, y_pred, weights]
    collections += list(chunked.values())
    optimized = dask.optimize(*collections)
    true_blocks = optimized[0].to_delayed(optimize_graph=False)
    pred_blocks = optimized[1].to_delayed(optimize_graph=False)
    if scores_axis is not None:
        pred_blocks = np.take(pred_blocks, 0, axis=scores_axis)
    weight_blocks = None if weights is None else optimized[2].to_delayed(optimize_graph=False)
    extra_blocks = {
        key: block.to_delayed(optimize_graph=False)
        for key, block in zip(chunked, optimized[len(optimized) - len(chunked) :], strict=True)
    }
    starts: list[Any] = [
        np.concatenate([[0], np.cumsum(c)[:-1]]) if c else [] for c in y_true.chunks
    ]
    pieces = []
    for index in np.ndindex(true_blocks.shape):
        start = tuple(int(starts[d][i]) for d, i in enumerate(index))
        where = f"dask chunk {index} of `y_true`, which starts at index {start}"
        if weight_blocks is None:
            weight = None
        elif weight_blocks.ndim == true_blocks.ndim:
            weight = weight_blocks[index]
        else:
            weight = weight_blocks[index[:1]]
        extra = dict(fixed)
        for key, blocks in extra_blocks.items():
            extra[key] = blocks[index] if blocks.ndim == true_blocks.ndim else blocks[index[:1]]
        pieces.append((true_blocks[index], pred_blocks[index], weight, where, extra))
    return pieces


def _align(array: Any, chunks: tuple, name: str) -> Any:
    if array.chunks == chunks:
        return array
    if any(np.isnan(size) for sizes in (*array.chunks, *chunks) for size in sizes):
        raise ValueError(
            f"`{name}` and `y_true` have unknown chunk sizes that may differ; call "
            f"`.compute_chunk_sizes()` on both first (or build both from one dataframe)."
        )
    return array.rechunk(chunks)


def _frame_pieces(
    dask: Any, y_true: Any, y_pred: Any, weights: Any, member_kwargs: dict[str, Any]
) -> list[tuple]:
    inputs = {"y_true": y_true, "y_pred": y_pred}
    if weights is not None:
        inputs["weights"] = weights
    fixed = {key: value for key, value in member_kwargs.items() if not _is_dask_frame(value)}
    inputs.update({key: value for key, value in member_kwargs.items() if key not in fixed})
    for name, value in inputs.items():
        if not _is_dask_frame(value) or getattr(value, "ndim", 1) != 1:
            raise TypeError(
                f"`{name}` is a {type(value).__name__}; with dask dataframes, pass columns "
                f"(dask Series) for `y_true`, `y_pred` and `weights`, e.g. df['label']."
            )
    npartitions = {name: value.npartitions for name, value in inputs.items()}
    if len(set(npartitions.values())) > 1:
        raise ValueError(
            f"the columns have different numbers of partitions ({npartitions}); pass columns of "
            f"one dataframe, or repartition them alike."
        )
    known = [value.divisions for value in inputs.values() if value.known_divisions]
    if len(known) == len(inputs) and len(set(known)) > 1:
        raise ValueError(
            "the columns are partitioned at different index divisions; pass columns of one "
            "dataframe, or repartition them alike."
        )
    # Each column optimized on its own: dask's column projection then reads only that column.
    parts = {name: value.to_delayed(optimize_graph=True) for name, value in inputs.items()}
    pieces = []
    for i in range(len(parts["y_true"])):
        where = f"dask dataframe partition {i}"
        weight = parts["weights"][i] if weights is not None else None
        extra = dict(fixed)
        for key in member_kwargs:
            if key not in fixed:
                extra[key] = parts[key][i]
        pieces.append((parts["y_true"][i], parts["y_pred"][i], weight, where, extra))
    return pieces


def _is_dask_frame(value: Any) -> bool:
    module = type(value).__module__ or ""
    return module.startswith("dask.dataframe") or module.startswith("dask_expr")


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(f"metricstream.dask needs dask ({error}); {INSTALL_HINT}.") from error
