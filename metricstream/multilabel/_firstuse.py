"""The multilabel kernels' plain-numpy twin, for the batches counted while they compile.

Each specialisation of the dense kernels costs seconds of CPU to compile (``count_routed``, the
one-call path of ``MultilabelAccumulator.update``, and ``count_plain`` many seconds). While the
kernels a batch needs are neither compiled in this process nor in Numba's on-disk cache (see
:mod:`metricstream._core.warmup`, which then compiles them on a background thread):

* :func:`stand_in` gives ``_route`` a route whose "kernel" is a :class:`StandIn`: called as
  ``count_routed`` is, it returns the same codes and leaves the same state; once no background
  compile is left, it puts the compiled route in its place and calls it;
* :func:`count_dense` counts a batch of ``_count_dense`` (the general path: lists, tensors,
  strided arrays, large batches, weights, ``ignore_index``, co-occurrence) in place of
  ``count_plain``, ``count_dense``, ``count_dense_masked`` and ``count_cooccurrence``, or
  returns False and the kernels count.

Exactness: integer states (unweighted, or whole-number weights) are sums whatever their order.
Float64 sums are made in the kernels' order: ``np.add.at`` adds element by element in index
order, rows in stream order, as the kernels' loops do: per label into local sums added to the
state at the end, per sample straight into the state, the sample totals into local sums.

The twin counts only what the kernels count: every truth 0, 1 (or the masked value), every
indicator 0 or 1, no NaN score (and on the one-call path, probabilities in [0, 1]). Anything
else is declined with the state untouched: the kernel then compiles at that call and words the
error as always. Label sets are counted as dense indicators (:func:`count_sets`, up to 2^24
entries a batch); larger ones, and the co-occurrence of more than 2048 labels, take their
kernels, which compile at their first call as before.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .._core import warmup
from . import _kernels as _k

# NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED: the matrices ``count_routed`` counts.
_PLAIN = 0x1 | 0x100
# Rows are counted in chunks of about this many entries (bounded temporaries).
_CHUNK_ENTRIES = 1 << 20
# Co-occurrence pairs are made as an (rows, L, L) mask: at most this many labels.
_MAX_COOCCURRENCE_LABELS = 2048
_INF = float("inf")


# ---------------------------------------------------------------------------- the count itself
def valid(y_true: np.ndarray, y_pred: np.ndarray, mask_value: Any, low: float, high: float) -> bool:
    """Whether the kernels count every entry: a truth 0, 1 or ``mask_value`` (None: no
    masking; ``y_true`` is unsigned, so a negative value reads as a large one), an indicator 0
    or 1, a score in ``[low, high]`` (never NaN)."""
    if y_true.size == 0:
        return True
    if mask_value is None:
        if y_true.max() > 1:
            return False
    elif ((y_true > 1) & (y_true != mask_value)).any():
        return False
    if y_pred.dtype.kind == "f":
        return bool(y_pred.min() >= low) and bool(y_pred.max() <= high)  # NaN fails both
    return bool(y_pred.max() <= 1)


def count(
    arrays: dict[str, np.ndarray],
    layout: np.ndarray,
    y_true: np.ndarray,
    y_pred: np.ndarray,
    weights: np.ndarray | None,
    threshold: Any,
    mask_value: Any,
    direct: bool = False,
) -> None:
    """Add a batch the kernels count (see :func:`valid`) into ``arrays`` as they do.

    ``y_pred`` holds unsigned indicators or float scores, positive when ``score >= threshold``
    in the scores' own precision (``threshold`` is of their type, as the kernels receive it);
    ``weights`` one weight per sample of the state's dtype, or None; ``mask_value`` the
    unsigned true value left out (``labels`` row 3 counts it), or None. ``direct``: the
    per-label weights go straight into the state, as ``count_sets`` adds them (its true
    positives as ``w * hit`` for every true label), not into local sums first.
    """
    labels = arrays["labels"]
    per_sample = arrays["per_sample"]
    cooccurrence = arrays.get("cooccurrence")
    n, num_labels = y_true.shape
    dtype = per_sample.dtype
    masked = mask_value is not None
    scores = y_pred.dtype.kind == "f"
    card_true, card_pred, by_pred, by_true, by_union = (int(x) for x in layout[:5])
    betas = [
        tuple(int(x) for x in layout[6 + 3 * k : 9 + 3 * k]) for k in range(len(layout) // 3 - 2)
    ]
    # Per label: local sums from 0 (the kernels' buffers), added to the state at the end.
    local = np.zeros((4 if masked else 3, num_labels), dtype=dtype)
    # Per batch: the samples' total and judged weight (local sums), judged samples of weight 0.
    totals = np.zeros(2, dtype=dtype)
    zero_weight = 0
    judged_count = 0
    step = max(1, _CHUNK_ENTRIES // num_labels)
    if cooccurrence is not None:
        step = max(1, _CHUNK_ENTRIES // (num_labels * num_labels))
    for start in range(0, n, step):
        t = y_true[start : start + step]
        p = y_pred[start : start + step]
        rows = t.shape[0]
        w = None if weights is None else weights[start : start + step]
        truth = t == 1 if masked else t.astype(bool)
        positive = p >= threshold if scores else p.astype(bool)
        known = None
        if masked:
            known = t != mask_value
            positive &= known
        hits = truth & positive
        tps = np.count_nonzero(hits, axis=1)
        aps = np.count_nonzero(truth, axis=1)
        pps = np.count_nonzero(positive, axis=1)
        # ---- per label
        parts = [hits, truth, positive] + ([] if known is None else [~known])
        for row, part in enumerate(parts):
            if w is None:
                local[row] += np.count_nonzero(part, axis=0)
            elif direct:
                at, column = np.nonzero(truth if row == 0 else part)  # in stream order
                added = w[at] * hits[at, column] if row == 0 else w[at]
                np.add.at(labels[row], column, added)
            else:
                at, column = np.nonzero(part)  # in stream order
                np.add.at(local[row], column, w[at])
        # ---- per sample: judged samples of non-zero weight, in stream order
        judged = np.ones(rows, dtype=bool) if known is None else known.any(axis=1)
        judged_count += int(np.count_nonzero(judged))
        if w is None:
            chosen = judged
            values = np.ones(rows, dtype=dtype)
        else:
            np.add.at(totals, np.zeros(rows, dtype=np.intp), w)
            np.add.at(totals, np.ones(int(np.count_nonzero(judged)), dtype=np.intp), w[judged])
            zero = judged & (w == 0)
            zero_weight += int(np.count_nonzero(zero))
            chosen = judged & ~zero
            values = w
        union = aps + pps - tps
        cells = [
            (_k.EXACT, chosen & (tps == aps) & (tps == pps), None),
            (_k.NEITHER, chosen & (union == 0), None),
            (card_true, chosen, aps),
            (card_pred, chosen, pps),
        ]
        for offset, rows_in, key in cells:
            at = np.flatnonzero(rows_in)
            cell = np.full(at.shape, offset, dtype=np.int64)
            if key is not None:
                cell += key[at]
            np.add.at(per_sample, cell, values[at])
        # true positives by each denominator: only samples with some (``tps != 0``)
        at = np.flatnonzero(chosen & (tps != 0))
        products = values[at] * tps[at].astype(dtype)
        keys = [(by_pred, pps), (by_true, aps), (by_union, union)]
        keys += [(offset, a * aps + b * pps) for a, b, offset in betas]
        for offset, key in keys:
            np.add.at(per_sample, offset + key[at], products)
        # ---- co-occurrence of true labels (every row, weight 0 included)
        if cooccurrence is not None:
            pairs = truth[:, :, None] & truth[:, None, :]
            if w is None:
                cooccurrence += np.count_nonzero(pairs, axis=0)
            else:
                at, first, second = np.nonzero(pairs)  # in stream order
                np.add.at(cooccurrence, (first, second), w[at])
    if weights is None or not direct:
        labels[: local.shape[0]] += local
    if weights is None:
        per_sample[_k.ROWS] += n
        per_sample[_k.JUDGED] += judged_count
    else:
        per_sample[_k.ROWS] += totals[0]
        per_sample[_k.JUDGED] += totals[1]
        per_sample[_k.ZERO_WEIGHT] += zero_weight
    per_sample[_k.COUNT] += n


# ---------------------------------------------------------------------------- update's route
# (y_true view, y_pred dtype) pairs whose ``count_routed`` and ``plain_buffer_size`` are
# compiled in this process: ``_route`` takes the kernel without asking again.
_routes_ready: set[tuple[np.dtype, np.dtype]] = set()


def _route_kernels(
    accumulator: Any, true_view: np.dtype, pred_dtype: np.dtype, threshold: Any
) -> tuple:
    """The (kernel, arguments) pairs that ``_route`` compiles for these dtypes."""
    num_labels = accumulator._num_labels
    true = np.zeros((1, num_labels), dtype=true_view)
    pred = np.zeros((1, num_labels), dtype=pred_dtype)
    return (
        (_k.count_routed, (true, pred, threshold, accumulator._table)),
        (_k.plain_buffer_size, (num_labels,)),
    )


def stand_in(
    accumulator: Any,
    dtypes: tuple[np.dtype, np.dtype],
    true_view: np.dtype,
    pred_view: np.dtype | None,
    threshold: Any,
) -> tuple | None:
    """The route that ``MultilabelAccumulator._route`` returns for matrices of ``dtypes`` while
    ``count_routed`` compiles for them (its compile then queued), or None: take the kernel."""
    pred_dtype = pred_view if pred_view is not None else dtypes[1]
    key = (true_view, pred_dtype)
    if key in _routes_ready:
        return None
    if not warmup.defer(_route_kernels(accumulator, true_view, pred_dtype, threshold)):
        if not warmup.busy():
            _routes_ready.add(key)
        return None
    route = (
        None if true_view == dtypes[0] else true_view,
        None if pred_view is None or pred_view == dtypes[1] else pred_view,
        StandIn(accumulator, dtypes),
        threshold,
        accumulator._table,
    )
    accumulator._routes[dtypes] = route
    return route


class StandIn:
    """``count_routed`` in numpy for one accumulator and pair of dtypes: the same arguments,
    the same return codes and the same state (see
    :func:`metricstream.multilabel._kernels.count_routed`)."""

    __slots__ = ("_owner", "_dtypes")

    def __init__(self, accumulator: Any, dtypes: tuple[np.dtype, np.dtype]) -> None:
        self._owner = weakref.ref(accumulator)
        self._dtypes = dtypes

    def __call__(self, y_true: np.ndarray, y_pred: np.ndarray, threshold: Any, table: Any) -> int:
        accumulator = self._owner()
        if accumulator is None:  # pragma: no cover - only its accumulator calls it
            return _k.NOT_PLAIN
        if not warmup.busy():
            return self._hand_over(accumulator, y_true, y_pred, threshold, table)
        return self.count(accumulator, y_true, y_pred, threshold, table)

    def count(
        self, accumulator: Any, y_true: np.ndarray, y_pred: np.ndarray, threshold: Any, table: Any
    ) -> int:
        """The count itself, as ``count_routed`` makes it (its return codes)."""
        need = y_true.shape[0] * int(table[_k.ROUTE_GROWTH])
        if need > table[_k.ROUTE_ROOM]:
            return _k.OVERFLOW
        arrays = accumulator._arrays
        if not (
            y_true.shape[1] == accumulator._num_labels
            and y_pred.shape == y_true.shape
            and y_true.flags.num & y_pred.flags.num & _PLAIN == _PLAIN
        ):
            return _k.NOT_PLAIN
        scores = y_pred.dtype.kind == "f"
        logits = accumulator._logits
        low, high = (-_INF, _INF) if logits or not scores else (0.0, 1.0)
        if not valid(y_true, y_pred, None, low, high):
            return _k.BAD_SCORE if scores else _k.BAD_TRUE  # the general path words it
        count(arrays, accumulator._layout, y_true, y_pred, None, threshold, None)
        table[_k.ROUTE_ROOM] -= need
        if (
            logits
            and scores
            and y_pred.size >= _k.SUSPICIOUS_MIN_SCORES
            and y_pred.min() >= 0
            and y_pred.max() <= 1
        ):
            return _k.SUSPICIOUS  # counted; ``update`` warns
        return _k.OK

    def _hand_over(
        self, accumulator: Any, y_true: np.ndarray, y_pred: np.ndarray, threshold: Any, table: Any
    ) -> int:
        """No compile is left: the accumulator's route for these dtypes becomes the kernel's
        (compiled, or loaded from the cache, or compiled now if the background compile failed),
        which counts this batch."""
        true_dtype, pred_dtype = self._dtypes
        empty = (0, accumulator._num_labels)
        accumulator._routes.pop(self._dtypes, None)
        route = accumulator._route(np.empty(empty, true_dtype), np.empty(empty, pred_dtype))
        accumulator._last_route = (true_dtype, pred_dtype, route)
        if route is None:  # pragma: no cover - these dtypes had a route a moment ago
            return _k.NOT_PLAIN
        kernel = route[2]
        if isinstance(kernel, StandIn):  # a compile was queued again meanwhile
            return kernel.count(accumulator, y_true, y_pred, threshold, table)
        return int(kernel(y_true, y_pred, route[3], route[4]))


# ---------------------------------------------------------------------------- the general path
# Keys of the batches (see ``count_dense``) whose kernels are compiled in this process, and the
# last one of them (replaced as a whole). Layout and writeability also decide the kernels' Numba
# types: a key marked ready whose kernel then meets another layout compiles it at the call, as
# it would without the twin.
_dense_ready: set[tuple] = set()
_dense_last: tuple = (None,) * 5


def _dense_kernels(
    arrays: dict[str, np.ndarray], batch: Any, threshold: Any, layout: np.ndarray
) -> tuple:
    """The (kernel, arguments) pairs that ``_count_dense`` calls for ``batch``."""
    labels = arrays["labels"]
    per_sample = arrays["per_sample"]
    flags = batch.flags
    t, p, w = batch.y_true, batch.y_pred, batch.weights
    if not flags and per_sample.dtype.kind != "f":
        routes: tuple = ((_k.count_plain, (t, p, threshold, layout, labels, per_sample, 1)),)
    elif flags & _k.MASKED:
        args = (t, p, w, threshold, batch.mask_value, flags, layout, labels, per_sample)
        routes = ((_k.count_dense_masked, args),)
    else:
        routes = ((_k.count_dense, (t, p, w, threshold, flags, layout, labels, per_sample)),)
    cooccurrence = arrays.get("cooccurrence")
    if cooccurrence is not None:
        routes += ((_k.count_cooccurrence, (t, w, flags, cooccurrence)),)
    return routes


def count_dense(
    arrays: dict[str, np.ndarray], batch: Any, threshold: Any, layout: np.ndarray
) -> bool:
    """Count a batch of ``MultilabelAccumulator._count_dense`` into ``arrays`` with numpy
    while its kernels compile; False (nothing counted) to let the kernels count it."""
    global _dense_last
    y_true = batch.y_true
    y_pred = batch.y_pred
    flags = batch.flags & (_k.HAS_WEIGHTS | _k.MASKED)
    last = _dense_last
    if (
        y_true.dtype is last[0]
        and y_pred.dtype is last[1]
        and batch.weights.dtype is last[2]
        and flags == last[3]
        and len(arrays) == last[4]
    ):
        return False
    key = (y_true.dtype, y_pred.dtype, batch.weights.dtype, flags, len(arrays))
    if key in _dense_ready:
        _dense_last = key
        return False
    if not warmup.defer(_dense_kernels(arrays, batch, threshold, layout)):
        if not warmup.busy():
            _dense_ready.add(key)
            _dense_last = key
        return False
    num_labels = arrays["labels"].shape[1]
    if y_true.ndim != 2 or y_pred.shape != y_true.shape or y_true.shape[1] != num_labels:
        return False
    weighted = batch.flags & _k.HAS_WEIGHTS
    cooccurrence = arrays.get("cooccurrence")
    if cooccurrence is not None and num_labels > _MAX_COOCCURRENCE_LABELS:
        return False
    mask_value = batch.mask_value if batch.flags & _k.MASKED else None
    if not valid(y_true, y_pred, mask_value, -_INF, _INF):
        return False
    weights = batch.weights if weighted else None
    count(arrays, layout, y_true, y_pred, weights, threshold, mask_value)
    return True


# ---------------------------------------------------------------------------- label sets
# Label sets are counted as dense indicators of at most this many entries (else their kernel).
_MAX_SETS_ENTRIES = 1 << 24
_sets_ready: set[tuple] = set()


def count_sets(arrays: dict[str, np.ndarray], batch: Any, layout: np.ndarray) -> bool:
    """Count a batch of ``MultilabelAccumulator._count_sets`` (label sets, CSR) into ``arrays``
    with numpy while ``count_sets`` compiles; False (nothing counted) to let the kernel count
    it (compiled; a label listed twice in a sample, which it refuses; or too large a batch)."""
    true, pred, weights = batch.true, batch.pred, batch.weights
    labels = arrays["labels"]
    cooccurrence = arrays.get("cooccurrence")
    key = (weights.dtype, labels.dtype, cooccurrence is None)
    if key in _sets_ready:
        return False
    none = np.zeros((0, 0), dtype=labels.dtype) if cooccurrence is None else cooccurrence
    args: tuple = (true.indptr, true.indices, pred.indptr, pred.indices, weights, batch.flags)
    args += (layout, labels, arrays["per_sample"], none, np.zeros(0, dtype=np.uint8))
    if not warmup.defer(((_k.count_sets, args),)):
        if not warmup.busy():
            _sets_ready.add(key)
        return False
    n = len(true)
    num_labels = labels.shape[1]
    if n * num_labels > _MAX_SETS_ENTRIES or (
        cooccurrence is not None and num_labels > _MAX_COOCCURRENCE_LABELS
    ):
        return False
    dense = []
    for sets in (true, pred):
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(sets.indptr))
        cells = rows * num_labels + sets.indices
        matrix = np.zeros(n * num_labels, dtype=np.uint8)
        np.add.at(matrix, cells, 1)
        if cells.size and matrix.max() > 1:
            return False  # a label listed twice: the kernel words it
        dense.append(matrix.reshape(n, num_labels))
    weighted = batch.flags & _k.HAS_WEIGHTS
    count(arrays, layout, dense[0], dense[1], weights if weighted else None, 0.0, None, True)
    return True


# ---------------------------------------------------------------------------- the score check
# dtypes of the scores whose ``outside_unit`` is compiled in this process, and the last of them.
_unit_ready: set[np.dtype] = set()
_unit_last: Any = None


def outside_unit(flat: np.ndarray) -> bool:
    """:func:`metricstream.multilabel._kernels.outside_unit` (whether a 1-D float array holds
    a value below 0 or above 1, or a NaN), in numpy while it compiles."""
    global _unit_last
    dtype = flat.dtype
    if dtype is not _unit_last and warmup.enabled():
        if dtype not in _unit_ready:
            if warmup.defer(((_k.outside_unit, (flat,)),)):
                if flat.size == 0:
                    return False
                return not (bool(flat.min() >= 0) and bool(flat.max() <= 1))  # NaN fails both
            if warmup.busy():
                return bool(_k.outside_unit(flat))
            _unit_ready.add(dtype)
        _unit_last = dtype
    return bool(_k.outside_unit(flat))
