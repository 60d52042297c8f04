"""The confusion kernels' plain-numpy twin, for the batches counted while they compile.

``count_batch`` here is called first by ``_dispatch.count_batch``: when the kernel that batch's
route takes is not compiled yet (see :mod:`metricstream._core.warmup`), it counts the batch with
numpy and returns the new bound of the total, leaving exactly the matrix the kernel would have
left; otherwise it returns None and the kernel counts. The ``defer_*`` functions tell the
small-batch paths of ``_dispatch`` to step aside (to the general path, which arrives here) while
their kernel compiles.

The twin counts only what it can count exactly and cheaply: integer (or bool) labels, float32 or
float64 scores (argmax, first maximum wins, or ``>= threshold`` in float64), integral or float64
weights, far from the overflow limits. Anything else, including every batch the kernel would
refuse (a bad label, weight or NaN score), returns None untouched: the kernel then counts it or
words the error, compiling at that call as it would without the twin.

Exactness: integer counts do not depend on order (``np.bincount``, or ``np.add.at`` in int64 for
weights). Float64 weights are added to the cells one at a time in stream order by the kernel
(``flat[cell] += w``); ``np.add.at`` does the same, element by element in index order, so the
sums round identically. (A float64 batch large enough for ``_dispatch`` to share between
threads is summed in private matrices by the kernel, whose rounding depends on which thread took
which chunk; the twin gives the one-thread result.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core import warmup
from .._inputs import GENERAL, LABELS, ROWS, THRESHOLD, Batch, tensor_dtype
from . import _kernels

_INF = float("inf")
# The twin counts into int64 cells only while the total stays below this (far from 2^63), and
# into float64 cells only while every cell stays an exact integer count (2^53) or, for float
# weights, far from float64 overflow.
_INT_ROOM = 2.0**62
_FLOAT_COUNT_ROOM = 2.0**52
_FLOAT_WEIGHT_ROOM = 1e300
_LABEL_KINDS = "iub"
# How binary scores are read (probabilities or logits), where the kernels know it.
_PROBABILITIES = getattr(_kernels, "PROBABILITIES", 0)
_SCORE_RULES = _PROBABILITIES | getattr(_kernels, "LOGITS", 0)
_SUSPICIOUS = getattr(_kernels, "SUSPICIOUS_MIN_SCORES", 0)
_SCORE_TYPES = (np.dtype(np.float32), np.dtype(np.float64))
_KERNELS = {
    LABELS: _kernels.count_labels,
    ROWS: _kernels.count_argmax_rows,
    THRESHOLD: _kernels.count_threshold,
    GENERAL: _kernels.count_argmax,
}


def _routes(out: np.ndarray, batch: Batch, flags: int, ignore: int) -> tuple:
    """The (kernel, arguments) pairs ``_dispatch.count_batch`` calls for ``batch``."""
    kernel = _KERNELS[batch.kind]
    if batch.kind == THRESHOLD:
        args: tuple = (batch.y_true, batch.y_pred, batch.weights, out, 0, 1, 1, flags, ignore)
        args += (batch.threshold, _INF)
    else:
        args = (batch.y_true, batch.y_pred, batch.weights, out, 0, 1, 1, flags, ignore, _INF)
    routes: tuple = ((kernel, args), (_kernels.matrix_total, (out,)))
    if batch.weights is None and out.dtype.kind != "f" and batch.size >= _PARALLEL_LABELS:
        # Batches shared between threads count unweighted labels into private int32 matrices:
        # a specialisation of its own, compiled along.
        private = np.zeros(out.shape, dtype=np.int32)
        routes += ((kernel, args[:3] + (private,) + args[4:]),)
    return routes


# ``_dispatch.PARALLEL_MIN_LABELS``: the smallest batch that may be shared between threads.
_PARALLEL_LABELS = 1 << 17


def count_batch(
    out: np.ndarray, batch: Batch, ignore_index: int | None, total: float | None
) -> float | None:
    """Count ``batch`` into ``out`` with numpy while its kernel compiles; the new bound of the
    total (as ``_dispatch.count_batch`` returns it), or None to let the kernel count."""
    if total is None:
        return None  # the caller keeps a bound per matrix; only the kernel path updates it
    # Routes whose kernels were compiled, by dtypes: the last one by identity (numpy's built-in
    # dtypes are singletons), the others in a set. Layout and writeability also decide the
    # kernel's Numba types; a route marked ready whose kernel then meets another layout
    # compiles it at the call, as it would without the twin.
    kind = batch.kind
    true_dtype = batch.y_true.dtype
    pred_dtype = batch.y_pred.dtype
    weights = batch.weights
    weight_dtype = None if weights is None else weights.dtype
    out_dtype = out.dtype
    last = _last
    if (
        true_dtype is last[0]
        and pred_dtype is last[1]
        and weight_dtype is last[2]
        and out_dtype is last[3]
        and kind == last[4]
        and batch.flags == last[5]
        and (batch.size >= _PARALLEL_LABELS) is last[6]
    ):
        return None
    big = batch.size >= _PARALLEL_LABELS  # may need the threads' specialisation too
    key = (true_dtype, pred_dtype, weight_dtype, out_dtype, kind, batch.flags, big)
    if key in _ready:
        _remember(key)
        return None
    if batch.size == 0:
        return total if total == total else _total_bound(out)  # no kernel, nothing to compile
    flags = batch.flags | (_kernels.INTEGRAL if out.dtype.kind != "f" else 0)
    ignore = 0 if ignore_index is None else ignore_index
    if not warmup.defer(_routes(out, batch, flags, ignore)):
        if not warmup.busy():
            _ready.add(key)
            _remember(key)
        return None
    return count(out, batch, ignore_index, total)


# Keys (see ``count_batch``) of the routes whose kernels are compiled in this process, and the
# last one of them, replaced as a whole (threads never see a torn one).
_ready: set[tuple] = set()
_last: tuple = (False,) * 6 + (None,)


def _remember(key: tuple) -> None:
    global _last
    _last = key


def defer_small(y_true: np.ndarray, y_pred: np.ndarray, out: np.ndarray, flags: int) -> bool:
    """Whether ``_dispatch.count_small`` should leave these arrays to the general path now."""
    kernel = _kernels.count_labels if y_pred.ndim == 1 else _kernels.count_argmax_rows
    args = (y_true, y_pred, None, out, 0, 1, 1, flags, 0, _INF)
    return warmup.defer(((kernel, args), (_kernels.matrix_total, (out,))))


def defer_threshold(
    y_true: np.ndarray, y_pred: np.ndarray, out: np.ndarray, flags: int, threshold: float
) -> bool:
    """Whether the binary small-batch path should leave these arrays to the general path now."""
    args = (y_true, y_pred, None, out, 0, 1, 1, flags, 0, threshold, _INF)
    return warmup.defer(((_kernels.count_threshold, args), (_kernels.matrix_total, (out,))))


def defer_tensors(true_type: Any, pred_type: Any, ndim: int, out: np.ndarray) -> bool:
    """Whether the small-batch path of CPU torch tensors of these torch dtypes should leave
    them to the general path now (which reads them as arrays and may count them here)."""
    true_described = tensor_dtype(true_type)
    pred_described = tensor_dtype(pred_type)
    if true_described is None or pred_described is None or true_described[1]:
        return False  # the general path takes them anyway
    if pred_described[1]:
        return False  # half-precision bits: the twin does not read them
    true_dtype, pred_dtype = true_described[0], pred_described[0]
    if ndim == 1:
        kernel = _kernels.count_labels_at
        args: tuple = (0, true_dtype, 0, pred_dtype, 0, out, 0, 1, 0, 0)
    else:
        kernel = _kernels.count_rows_at
        args = (0, true_dtype, 0, pred_dtype, 0, 1, out, 0, 1, 0, 0)
    return warmup.defer(((kernel, args), (_kernels.matrix_total, (out,))))


def _total_bound(out: np.ndarray) -> float:
    """An upper bound of the sum of the (non-negative) cells, as ``_kernels.matrix_total``."""
    return float(np.sum(out, dtype=np.float64)) * (1.0 + out.size * 2.3e-16)


def _valid_labels(labels: np.ndarray, num_classes: int) -> bool:
    if labels.size == 0:
        return True
    if labels.dtype.kind == "b":
        return num_classes >= 2 or not labels.any()
    return bool(labels.min() >= 0) and bool(labels.max() < num_classes)


def _not_ignored(labels: np.ndarray, ignore_index: int) -> np.ndarray | None:
    """The mask of labels other than ``ignore_index`` (None: no label can equal it)."""
    if labels.dtype.kind == "b":
        if ignore_index not in (0, 1):
            return None
        return labels != bool(ignore_index)
    info = np.iinfo(labels.dtype)
    if not info.min <= ignore_index <= info.max:
        return None
    return labels != labels.dtype.type(ignore_index)


def count(out: np.ndarray, batch: Batch, ignore_index: int | None, total: float) -> float | None:
    """The twin itself: count ``batch`` into ``out`` exactly as the kernel would, or return None
    (``out`` untouched) when the batch is not one it counts (see the module docstring)."""
    num_classes = out.shape[0]
    kind = batch.kind
    y_true = batch.y_true
    y_pred = batch.y_pred
    weights = batch.weights
    if batch.flags & ~(_SCORE_RULES if kind == THRESHOLD else 0):
        return None  # half-precision bits, or any other flag the twin does not read
    if y_true.dtype.kind not in _LABEL_KINDS:
        return None
    integral = out.dtype.kind != "f"
    if total != total:
        total = _total_bound(out)
    labels = y_true.reshape(-1)
    predicted: np.ndarray | None
    if kind == LABELS:
        if y_pred.dtype.kind not in _LABEL_KINDS:
            return None
        predicted = y_pred.reshape(-1)
    elif y_pred.dtype not in _SCORE_TYPES or (kind == THRESHOLD and num_classes != 2):
        return None
    elif np.isnan(y_pred).any():
        return None  # the kernel words which score
    elif kind == ROWS:
        predicted = np.argmax(y_pred, axis=1) if y_pred.shape[1] else None
    elif kind == GENERAL:
        predicted = np.argmax(y_pred, axis=1).reshape(-1) if y_pred.shape[1] else None
    else:
        if batch.flags and y_pred.size and _unit(y_pred, batch.flags):
            return None  # refused probabilities, or logits that look like probabilities
        # float32 scores are compared in float64, as the kernel does: exact against any
        # float64 threshold (numpy would compare a float32 array in float32).
        predicted = y_pred.astype(np.float64) >= np.float64(batch.threshold)
    if predicted is None or labels.shape != predicted.shape:
        return None
    size = labels.size
    # Skip ignored pairs; every prediction must be valid, ignored or not (stricter than needed
    # is safe: the kernel then decides).
    keep = None if ignore_index is None else _not_ignored(labels, ignore_index)
    if not _valid_labels(predicted, num_classes):
        return None
    kept_labels = labels if keep is None else labels[keep]
    if not _valid_labels(kept_labels, num_classes):
        return None
    kept_predicted = predicted if keep is None else predicted[keep]
    keys = kept_labels.astype(np.intp) * num_classes + kept_predicted.astype(np.intp)
    flat = out.reshape(-1)
    if weights is None:
        room = _INT_ROOM if integral else _FLOAT_COUNT_ROOM
        if not total + size <= room:
            return None
        counts = np.bincount(keys, minlength=flat.size)
        flat += counts if integral else counts.astype(np.float64)
        return total + size
    values = _weight_values(weights.reshape(-1), integral)
    if values is None:
        return None
    weight_sum = float(np.sum(values, dtype=np.float64)) * (1.0 + size * 2.3e-16)
    if not total + weight_sum <= (_INT_ROOM if integral else _FLOAT_WEIGHT_ROOM):
        return None
    kept_values = values if keep is None else values[keep]
    copies = _sub_histograms(kind, num_classes, size) if not integral else 0
    if copies:
        # The kernel's private sums (see ``_sub_histograms``): each in stream order from 0.0,
        # then added to the matrix one after the other.
        copy = np.arange(size) % copies
        copy[size - size % copies :] = 0
        if keep is not None:
            copy = copy[keep]
        for c in range(copies):
            chosen = copy == c
            sums = np.zeros(flat.size, dtype=np.float64)
            np.add.at(sums, keys[chosen], kept_values[chosen])
            flat += sums
    else:
        # Cell by cell in stream order (float64: the kernel's rounding, see the module
        # docstring).
        np.add.at(flat, keys, kept_values)
    if weights.size >= out.size:
        return _total_bound(out)
    return total + float(np.sum(weights, dtype=np.float64))


def _unit(scores: np.ndarray, flags: int) -> bool:
    """Whether the kernel would not simply count these (NaN-free) binary scores: with
    ``PROBABILITIES`` one lies outside [0, 1] (refused); with ``LOGITS`` there are at least
    ``SUSPICIOUS_MIN_SCORES`` and all lie in [0, 1] (counted with a warning)."""
    low = scores.min()
    high = scores.max()
    inside = bool(low >= 0) and bool(high <= 1)
    if flags & _PROBABILITIES:
        return not inside
    return inside and scores.size >= _SUSPICIOUS


def _sub_histograms(kind: int, num_classes: int, size: int) -> int:
    """How many private sums ``count_labels`` adds weights into for one serial call over
    ``size`` pairs (0: straight into the matrix). Pair ``i`` goes to sum ``i % copies``, except
    the last ``size % copies`` pairs, which go to sum 0 (the kernel's blocks hold a multiple of
    ``copies`` pairs; the tail of the last one is counted one by one into the first)."""
    if kind != LABELS or size <= _kernels.BLOCK or num_classes > _kernels.SUB_HISTOGRAM_MAX_CLASSES:
        return 0
    stride = num_classes * num_classes + 1
    if not _kernels.SUB_HISTOGRAM_MIN_LABELS_PER_CELL * stride <= size < 2**31:
        return 0
    return 4 if num_classes <= 16 else 2


def _weight_values(weights: np.ndarray, integral: bool) -> np.ndarray | None:
    """The weights in the matrix's arithmetic (int64 or float64), or None when one is not a
    weight the kernel accepts."""
    kind = weights.dtype.kind
    if weights.size == 0:
        return np.zeros(0, dtype=np.int64 if integral else np.float64)
    if kind in "iu":
        if weights.min() < 0 or (kind == "u" and weights.max() > np.iinfo(np.int64).max):
            return None
        return weights.astype(np.int64 if integral else np.float64)
    if kind != "f" or weights.dtype.itemsize < 4:
        return None
    values = weights.astype(np.float64)
    low = values.min()
    high = values.max()
    if not (low >= 0 and high < _INF):  # NaN fails both
        return None
    if integral:
        if not high < _kernels.MAX_INTEGRAL_WEIGHT or (np.floor(values) != values).any():
            return None
        return values.astype(np.int64)
    return values


def warm_up_routes() -> list[tuple[Any, tuple]]:
    """The specialisations that first updates of common inputs need: int64 labels, float32 and
    float64 logits, binary float32/float64 scores, into int64 counts; float64 weights into
    float64 sums."""
    labels = np.zeros(1, dtype=np.int64)
    counts = np.zeros((2, 2), dtype=np.int64)
    sums = np.zeros((2, 2), dtype=np.float64)
    fast = _kernels.INTEGRAL | _kernels.COMMIT
    routes: list[tuple[Any, tuple]] = [
        (_kernels.matrix_total, (counts,)),
        (_kernels.matrix_total, (sums,)),
        (_kernels.count_labels, (labels, labels, None, counts, 0, 1, 1, fast, 0, _INF)),
        (
            _kernels.count_labels,
            (labels, labels, labels.astype(np.float64), sums, 0, 1, 1, 1, 0, _INF),
        ),
    ]
    for dtype in _SCORE_TYPES:
        rows = np.zeros((1, 2), dtype=dtype)
        scores = np.zeros(1, dtype=dtype)
        routes.append(
            (_kernels.count_argmax_rows, (labels, rows, None, counts, 0, 1, 1, fast, 0, _INF))
        )
        routes.append(
            (_kernels.count_threshold, (labels, scores, None, counts, 0, 1, 1, fast, 0, 0.5, _INF))
        )
    return routes
