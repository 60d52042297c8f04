"""Choose a kernel, split large batches across threads, and keep failed updates atomic.

Atomicity ("a failed update leaves the accumulator exactly as it was") is guaranteed without an
extra validation pass on the normal path:

* Large batches are cut into chunks that the calling thread and pool threads take in turn. Pool
  threads count into private matrices (no atomics, no shared cache lines) that are added to the
  accumulator only after every chunk succeeded; a failure discards them. The calling thread
  counts straight into an int64 accumulator and, on failure, subtracts its own chunks again.
* Small batches into an int64 matrix are counted in place; on failure the kernel re-runs the
  already-counted prefix with ``sign=-1``, which restores the counts exactly.
* Small batches into a float64 matrix cannot be undone by subtraction (float addition is not
  invertible), so they either snapshot the matrix first when that is cheaper than the batch
  (``K*K <= N``), or validate in a dry run and then count.

Small batches (the 256-label training-loop case) run on the calling thread with no O(K²) work
and as little Python as possible (``count_small``): plain numpy arrays, or CPU torch tensors read
through their data pointers, go straight to the machine code of the kernel compiled for their
dtypes, without a ``Batch`` and without Numba's per-call dispatch (which types each of the ten
arguments on every call, a third of the call's time). Anything that path does not take,
including input the kernel rejects, goes through ``count_batch``, which words the errors.
Timings are in ``docs/performance.md``.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .._inputs import (
    LABELS,
    ROWS,
    TENSOR_TYPES,
    THRESHOLD,
    Batch,
    describe_label_error,
    describe_score_error,
    describe_weight_error,
    learn_torch,
    tensor_dtype,
)
from . import _firstuse, _kernels

# Below this many labels a batch is counted by the calling thread alone. Handing chunks to the
# pool costs a few tens of microseconds and each helper thread needs a private K×K matrix; on
# the 2-core benchmark machine two threads start to win at about 2^17 labels for K <= 100
# (benchmarks/, "threshold" table).
PARALLEL_MIN_LABELS = 1 << 17

# A helper thread zeroes and merges a private K×K matrix; that only pays off when it has at
# least this many labels per matrix cell to count (matters for K in the thousands).
PARALLEL_MIN_LABELS_PER_CELL = 4

# Large batches are cut into chunks of about this many labels (or scores), taken in turn by the
# calling thread and the pool threads, so a core that is busy with something else gets fewer.
CHUNK_LABELS = 1 << 19

# Private matrices count in int32 when every chunk a thread could take is this short: a thread
# that counts fewer than 2^31 labels cannot overflow an int32 cell, and half-size matrices
# stay in cache better for large K.
_INT32_SAFE_LABELS = (1 << 31) - 1

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_num_threads = max(1, min(os.cpu_count() or 1, 8))


def get_num_threads() -> int:
    """Number of threads used to count one large batch."""
    return _num_threads


def set_num_threads(num_threads: int) -> None:
    """Set how many threads count one large batch (1 disables threading)."""
    global _num_threads, _pool
    if isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)):
        raise TypeError(f"`num_threads` must be an int, got {type(num_threads).__name__}.")
    if num_threads < 1:
        raise ValueError(f"`num_threads` must be at least 1, got {num_threads}.")
    with _pool_lock:
        _num_threads = int(num_threads)
        if _pool is not None:
            _pool.shutdown(wait=False)
            _pool = None


def _get_pool_locked() -> ThreadPoolExecutor:
    """The pool for ``_num_threads`` workers; the caller holds ``_pool_lock``."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=_num_threads, thread_name_prefix="metricstream")
    return _pool


# Overflow bounds. int64 counts (and their total, the accumulator's N) must stay below 2^63;
# float64 sums must stay finite. The fast path compares float upper bounds of the current
# total and of the batch's weight against these limits, with a margin (2^-16 relative) far
# larger than any rounding of those float sums; only a batch that could pass a limit takes the
# exact path (``_count_exact``).
_INT64_MAX = 2**63 - 1
_INT_LIMIT = _kernels.INT_TOTAL_LIMIT
_FAST_FLAGS = _kernels.INTEGRAL | _kernels.COMMIT
_FLOAT_LIMIT = _kernels.FLOAT_TOTAL_LIMIT
_LOOKS_LIKE_PROBABILITIES = _kernels.LOOKS_LIKE_PROBABILITIES


# ``ndarray.flags.num`` bits of an array that Numba types as C-contiguous, aligned and writeable:
# the only arrays handed to the compiled entry points of ``count_small``.
_PLAIN = 0x1 | 0x100 | 0x400  # NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_WRITEABLE
_UNSEEN = object()
# Module globals rather than ``np.`` attributes on the small-batch path (each look-up through
# the module costs about 20 ns of a 1.6 µs update).
_NDARRAY = np.ndarray
_INF = float("inf")
# (y_true dtype, y_pred dtype, y_pred.ndim) -> the compiled entry point of the kernel that counts
# that combination on the small-batch path, or None when it takes ``count_batch``.
_small_entries: dict[tuple, Any] = {}
# The entry of the last combination ``count_small`` counted: (y_true dtype, y_pred dtype,
# y_pred.ndim, entry), replaced as a whole (so that threads never see a torn one).
_last_small: tuple = (None, None, -1, None)


def _remember_small(true_dtype: np.dtype, pred_dtype: np.dtype, ndim: int, entry: Any) -> None:
    global _last_small
    _last_small = (true_dtype, pred_dtype, ndim, entry)


def small_flags(ignore_index: int | None) -> int:
    """The ``flags`` of ``count_small`` for an int64 matrix with this ``ignore_index``."""
    return _FAST_FLAGS | (0 if ignore_index is None else _kernels.HAS_IGNORE)


def _parallel_rows(size: int, num_classes: int) -> bool:
    """Whether ``count_batch`` would share ``size`` rows of ``num_classes`` scores (at least
    ``PARALLEL_MIN_LABELS`` scores) between threads. Batches it counts serially anyway, a few
    thousand rows of a thousand classes, take the one-call path: measured with the caches cold,
    as between the steps of a training loop, the general path's Python (a ``Batch``, the checks,
    Numba's dispatch) cost 20-50 µs of a (256, 1000) float32 update."""
    return _num_threads > 1 and size >= PARALLEL_MIN_LABELS_PER_CELL * num_classes * num_classes


def count_small(
    out: np.ndarray, y_true: Any, y_pred: Any, flags: int, ignore: int, total: float
) -> float | None:
    """The training-loop update in one kernel call, or None to take ``count_batch`` instead.

    Handles plain arrays and C-contiguous CPU torch tensors: ``y_true`` 1-D integer labels,
    ``y_pred`` integer labels of the same length or C-contiguous float32/float64/float16 (torch:
    also bfloat16) ``(N, K)`` scores, fewer than ``PARALLEL_MIN_LABELS`` labels (scores: or any
    batch ``count_batch`` would not share between threads, see ``_parallel_rows``), into an int64
    ``out`` whose total (bounded by ``total``, NaN when unknown) stays far
    from 2^63. ``flags`` holds ``COMMIT``, ``INTEGRAL`` and ``HAS_IGNORE`` as the accumulator
    needs them. Returns the new bound of the total; None (``out`` unchanged) for anything else,
    including input the kernel rejects: ``count_batch`` then finds the same problem and words the
    error. The compiled kernel is called without Numba's dispatch (see
    ``_kernels.compiled_for``), so every type it is called with is checked here: exact ndarrays,
    dtypes by the key of ``_small_entries``, layout by the flag bits.
    """
    if type(y_true) is not _NDARRAY or type(y_pred) is not _NDARRAY:
        # CPU torch tensors, read in place through their data pointers. Only what the kernel
        # needs is asked of torch, one attribute or method at a time (40-70 ns each, about
        # 0.3 µs per tensor): ``Tensor.numpy()`` would cost 0.7 µs per tensor, as much as
        # counting 256 labels. Tensors that track gradients are read the same way (only the
        # values are read). Subclasses, other devices, negative-bit views and other layouts are
        # declined (the general path reads or refuses them): sparse and compressed tensors are
        # not contiguous or raise, and they, MKL-DNN and nested tensors have no data pointer or
        # no single shape (``RuntimeError``); the layout itself is not asked.
        tensor = TENSOR_TYPES[0]
        if type(y_true) is not tensor or type(y_pred) is not tensor:
            if tensor is None and learn_torch(y_pred):
                return count_small(out, y_true, y_pred, flags, ignore, total)
            return None
        if not (y_true.is_cpu and y_pred.is_cpu):
            return None
        try:
            true_shape = y_true.shape
            shape = y_pred.shape  # nested tensors raise here
            if (
                len(true_shape) != 1
                or y_true.is_neg()
                or y_pred.is_neg()
                or not y_true.is_contiguous()
                or not y_pred.is_contiguous()
            ):
                return None
            true_address = y_true.data_ptr()
            pred_address = y_pred.data_ptr()
        except RuntimeError:  # nested, or no storage (sparse, MKL-DNN, functorch wrappers...)
            return None
        true_type = y_true.dtype
        pred_type = y_pred.dtype
        size = true_shape[0]
        ndim = len(shape)
        last = _last_tensors
        if true_type is last[0] and pred_type is last[1] and ndim == last[2]:
            _, _, _, entry, true_dtype, pred_dtype, mark = last
        else:
            known = _tensor_entries.get((true_type, pred_type, ndim), _UNSEEN)
            if known is None:
                return None
            entry, true_dtype, pred_dtype, mark = (
                (None, None, None, 0) if known is _UNSEEN else known
            )
        if ndim == 1:
            if shape[0] != size or size >= PARALLEL_MIN_LABELS:
                return None
        elif ndim != 2 or shape[0] != size or shape[1] != len(out):
            return None
        elif size * shape[1] >= PARALLEL_MIN_LABELS and _parallel_rows(size, shape[1]):
            return None
        if entry is None and _firstuse.defer_tensors(true_type, pred_type, ndim, out):
            return None  # not compiled yet: the general path counts without it meanwhile
        if total != total:
            total = _kernels.matrix_total(out)
        if not size <= _INT_LIMIT - total:
            return None
        if entry is None:
            entry = _register_tensors(true_type, pred_type, ndim, out)
            if entry is None:
                return None
            _, true_dtype, pred_dtype, mark = _tensor_entries[(true_type, pred_type, ndim)]
        if entry is not last[3]:
            _remember_tensors(true_type, pred_type, ndim, entry, true_dtype, pred_dtype, mark)
        flags |= mark
        if ndim == 1:
            status, _, counted = entry(
                true_address,
                true_dtype,
                pred_address,
                pred_dtype,
                size,
                out,
                size,
                1,
                flags,
                ignore,
            )
            if status:  # undo the counted prefix
                entry(
                    true_address,
                    true_dtype,
                    pred_address,
                    pred_dtype,
                    size,
                    out,
                    counted,
                    -1,
                    flags,
                    ignore,
                )
                return None
            return total + size
        width = shape[1]
        status, _, counted = entry(
            true_address,
            true_dtype,
            pred_address,
            pred_dtype,
            size,
            width,
            out,
            size,
            1,
            flags,
            ignore,
        )
        if status:
            entry(
                true_address,
                true_dtype,
                pred_address,
                pred_dtype,
                size,
                width,
                out,
                counted,
                -1,
                flags,
                ignore,
            )
            return None
        return total + size
    # The dtypes first, so that inputs this path never takes (binary probabilities...) leave at
    # once: the last combination seen by identity (numpy's built-in dtypes are singletons;
    # hashing them costs more), then the registry.
    true_dtype = y_true.dtype
    pred_dtype = y_pred.dtype
    shape = y_pred.shape
    ndim = len(shape)
    last = _last_small
    if true_dtype is last[0] and pred_dtype is last[1] and ndim == last[2]:
        entry = last[3]
    else:
        entry = _small_entries.get((true_dtype, pred_dtype, ndim), _UNSEEN)
        if entry is None:
            return None
    if y_true.ndim != 1:
        return None
    size = len(y_true)
    if ndim == 1:
        if shape[0] != size or size >= PARALLEL_MIN_LABELS:
            return None
    elif ndim != 2 or shape[0] != size or shape[1] != len(out):
        return None
    elif size * shape[1] >= PARALLEL_MIN_LABELS and _parallel_rows(size, shape[1]):
        return None
    if y_true.flags.num & y_pred.flags.num & _PLAIN != _PLAIN:
        return None
    if entry is _UNSEEN and _firstuse.defer_small(y_true, y_pred, out, flags):
        return None  # not compiled yet: the general path counts without it meanwhile
    if total != total:  # unknown after a merge, reset or restore: O(K²) once
        total = _kernels.matrix_total(out)
    if not size <= _INT_LIMIT - total:
        return None
    if entry is _UNSEEN:
        # First sight of these dtypes, with arrays that passed the layout checks above.
        kernel = _kernels.count_labels if ndim == 1 else _kernels.count_argmax_rows
        args = (y_true, y_pred, None, out, 0, size, 1, flags, ignore, np.inf)
        entry = _register(_small_entries, (true_dtype, pred_dtype, ndim), kernel, args)
        if entry is None:
            return None
    if entry is not last[3]:
        _remember_small(true_dtype, pred_dtype, ndim, entry)
    status, _, counted = entry(y_true, y_pred, None, out, 0, size, 1, flags, ignore, _INF)
    if status:
        entry(y_true, y_pred, None, out, 0, counted, -1, flags, ignore, _INF)
        return None
    return total + size


# (y_true dtype, scores dtype) -> the compiled entry of ``count_threshold`` for binary scores on
# the small-batch path, or None when that combination takes ``count_batch``; and the last one.
_threshold_entries: dict[tuple, Any] = {}
_last_threshold: tuple = (None, None, None)


def small_threshold_counter(threshold: float) -> Callable[..., float | None]:
    """``count_small`` for a binary accumulator with this (checked, float) ``threshold``: numpy
    ``y_true`` 1-D integer labels and float32/float64 scores of the same shape ``(N,)``, both
    C-contiguous, aligned and writeable, fewer than ``PARALLEL_MIN_LABELS``, into an int64
    matrix far from 2^63. Returns the new bound of the total, or None (``out`` unchanged) for
    anything else, including input the kernel rejects (``count_batch`` words the error).
    CPU torch tensors are read through ``Tensor.numpy()``. Half-precision scores and ``(N, 1)``
    scores take ``count_batch``."""

    def count_small_threshold(
        out: np.ndarray, y_true: Any, y_pred: Any, flags: int, ignore: int, total: float
    ) -> float | None:
        global _last_threshold
        if type(y_true) is not _NDARRAY or type(y_pred) is not _NDARRAY:
            # CPU torch tensors through ``Tensor.numpy()`` (shares memory; scores that track
            # gradients through ``detach()`` first). It refuses tensors on another device or
            # with a negative or conjugate bit, which the general path then reads or refuses.
            tensor = TENSOR_TYPES[0]
            if tensor is None and not learn_torch(y_pred):
                return None
            tensor = TENSOR_TYPES[0]
            if type(y_true) is not tensor or type(y_pred) is not tensor:
                return None
            try:
                if y_pred.requires_grad:
                    y_pred = y_pred.detach()  # shares memory; only the values are read
                y_true = y_true.numpy()
                y_pred = y_pred.numpy()
            except (RuntimeError, TypeError):
                return None
        true_dtype = y_true.dtype
        pred_dtype = y_pred.dtype
        last = _last_threshold
        if true_dtype is last[0] and pred_dtype is last[1]:
            entry = last[2]
        else:
            entry = _threshold_entries.get((true_dtype, pred_dtype), _UNSEEN)
            if entry is None:
                return None
        if y_true.ndim != 1 or y_pred.ndim != 1:
            return None
        size = len(y_true)
        if len(y_pred) != size or size >= PARALLEL_MIN_LABELS:
            return None
        if y_true.flags.num & y_pred.flags.num & _PLAIN != _PLAIN:
            return None
        if entry is _UNSEEN and _firstuse.defer_threshold(y_true, y_pred, out, flags, threshold):
            return None  # not compiled yet: the general path counts without it meanwhile
        if total != total:  # unknown after a merge, reset or restore: O(K²) once
            total = _kernels.matrix_total(out)
        if not size <= _INT_LIMIT - total:
            return None
        if entry is _UNSEEN:
            entry = None
            if (
                true_dtype.kind in "iu"
                and true_dtype.isnative
                and pred_dtype in (np.float32, np.float64)
                and pred_dtype.isnative
            ):
                args = (y_true, y_pred, None, out, 0, size, 1, flags, ignore, threshold, _INF)
                entry = _kernels.compiled_for(_kernels.count_threshold, args)
            _threshold_entries[(true_dtype, pred_dtype)] = entry
            if entry is None:
                return None
        if entry is not last[2]:
            _last_threshold = (true_dtype, pred_dtype, entry)
        status, position, counted = entry(
            y_true, y_pred, None, out, 0, size, 1, flags, ignore, threshold, _INF
        )
        if status or position == _LOOKS_LIKE_PROBABILITIES:
            # Undo the counted prefix; the general path finds the problem and says it (or
            # counts logits that look like probabilities again, and warns).
            entry(y_true, y_pred, None, out, 0, counted, -1, flags, ignore, threshold, _INF)
            return None
        return total + size

    return count_small_threshold


# The same for CPU torch tensors, keyed by torch's dtypes:
# (y_true dtype, y_pred dtype, y_pred.ndim) -> (entry, numpy dtype of y_true, of y_pred, mark),
# or None when the general path takes that combination.
_tensor_entries: dict[tuple, Any] = {}
# The last of them: (y_true dtype, y_pred dtype, y_pred.ndim, entry, numpy dtypes, mark).
_last_tensors: tuple = (None, None, -1, None, None, None, 0)


def _remember_tensors(*last: Any) -> None:
    global _last_tensors
    _last_tensors = last


def _register_tensors(true_type: Any, pred_type: Any, ndim: int, out: np.ndarray) -> Any:
    """Register (and return) the entry point for tensors of torch dtypes ``true_type`` and
    ``pred_type`` and ``y_pred.ndim``, or None when that combination takes the general path."""
    key = (true_type, pred_type, ndim)
    true_described = tensor_dtype(true_type)
    pred_described = tensor_dtype(pred_type)
    if true_described is None or pred_described is None or true_described[1]:
        _tensor_entries[key] = None  # half-precision labels: converted by the general path
        return None
    true_dtype, pred_dtype, mark = true_described[0], pred_described[0], pred_described[1]
    kernel = _kernels.count_labels_at if ndim == 1 else _kernels.count_rows_at
    head: tuple[Any, ...] = (0, true_dtype, 0, pred_dtype, 0) + (() if ndim == 1 else (1,))
    entry = _register({}, (true_dtype, pred_dtype, ndim, mark), kernel, (*head, out, 0, 1, 0, 0))
    _tensor_entries[key] = None if entry is None else (entry, true_dtype, pred_dtype, mark)
    return entry


def _register(entries: dict, key: tuple, kernel: Any, args: tuple) -> Any:
    """Register the entry point of ``kernel`` for one (y_true dtype, y_pred dtype, y_pred.ndim),
    or None when that combination takes the general path."""
    true_dtype, pred_dtype, pred_ndim = key[:3]
    half = key[3] if len(key) > 3 else 0  # tensors: float16/bfloat16 bits as int16
    entry = None
    if true_dtype.kind in "iu" and true_dtype.isnative:
        if pred_ndim == 1 and pred_dtype.kind in "iu" and pred_dtype.isnative and not half:
            entry = _kernels.compiled_for(kernel, args)
        elif pred_ndim == 2 and (
            pred_dtype in (np.float32, np.float64) or (half and pred_dtype == np.int16)
        ):
            entry = _kernels.compiled_for(kernel, args)
        elif pred_ndim == 2 and pred_dtype == np.float16 and pred_dtype.isnative:
            bits = (args[0], args[1].view(np.int16)) + args[2:]
            entry = _half_rows(_kernels.compiled_for(kernel, bits))
    if entry is kernel and kernel in (_kernels.count_labels_at, _kernels.count_rows_at):
        entry = None  # JIT disabled: raw addresses mean nothing to Python; the general path
    entries[key] = entry
    return entry


def _half_rows(entry: Any) -> Any:
    """``entry`` (the rows kernel for int16 scores) called on numpy float16 scores: their bits,
    marked ``HALF`` (the kernel compares them through integer keys; no float32 copy)."""

    def half_rows(y_true, scores, weights, out, start, stop, sign, flags, ignore, headroom):
        bits = scores.view(np.int16)
        flags |= _kernels.HALF
        return entry(y_true, bits, weights, out, start, stop, sign, flags, ignore, headroom)

    return half_rows


def count_batch(
    out: np.ndarray,
    batch: Batch,
    ignore_index: int | None,
    total: float | None = None,
    notes: list[int] | None = None,
) -> float:
    """Add ``batch`` to ``out`` in place, or raise and leave ``out`` unchanged.

    ``notes``, if given, receives ``LOOKS_LIKE_PROBABILITIES`` when the batch's binary scores,
    read as logits (``LOGITS`` in its flags), all lie in [0, 1]: the batch is counted, and the
    caller warns once it holds no lock.

    Counts never wrap: an int64 cell or the matrix total that would reach 2^63, or a float64
    cell or total that would become infinite, raises ``ValueError`` and ``out`` is left as it
    was.

    ``total`` is the current sum of ``out`` or any upper bound of it; the return value is an
    upper bound of the new sum (exact after a near-overflow batch), to pass to the next call.
    When ``total`` is None, the bound this function returned for the same ``out`` last time is
    used (``out`` is summed, O(K²), the first time only). That is exact bookkeeping as long as
    ``out`` changes only through ``count_batch``; a caller that also writes ``out`` elsewhere
    (a merge, a reset, a load) must pass ``total`` (NaN: "unknown, sum it").
    """
    if _firstuse.warmup.enabled():  # count with numpy while the batch's kernel compiles
        counted = _firstuse.count_batch(out, batch, ignore_index, total)
        if counted is not None:
            return counted
    entry = None
    if total is None:
        entry = _known_totals.get(id(out))
        if entry is None or entry[0]() is not out:
            entry = [weakref.ref(out, _forget_total(id(out))), _kernels.matrix_total(out)]
            _known_totals[id(out)] = entry
        total = entry[1]
    if total != total:
        # Unknown (after a merge, reset or restore): sum the K² cells once here, so that the
        # bound returned is known again (the kernels would otherwise sum them on every call).
        total = _kernels.matrix_total(out)
    kind = batch.kind
    size = batch.size
    if size == 0:
        # Nothing to count (the batch's shapes were checked when it was made): no kernel call,
        # so an empty list or an empty read-only chunk compiles no specialisation of its own.
        return total
    # The training-loop case inline (each Python call level costs about 0.1 µs of a 2 µs
    # update): unweighted labels or narrow logits into int64 counts, serial, far from 2^63.
    if kind == LABELS:
        fast = size < PARALLEL_MIN_LABELS
        kernel = _kernels.count_labels
    else:
        fast = kind == ROWS and size * batch.y_pred.shape[1] < PARALLEL_MIN_LABELS
        kernel = _kernels.count_argmax_rows
    if fast and batch.weights is None and size <= _INT_LIMIT - total and out.dtype.kind == "i":
        if ignore_index is None:
            flags = _FAST_FLAGS | batch.flags
            ignore = 0
        else:
            flags = _FAST_FLAGS | _kernels.HAS_IGNORE | batch.flags
            ignore = ignore_index
        y_true, y_pred = batch.y_true, batch.y_pred
        status, position, counted = kernel(
            y_true, y_pred, None, out, 0, size, 1, flags, ignore, np.inf
        )
        if status:
            kernel(y_true, y_pred, None, out, 0, counted, -1, flags, ignore, np.inf)
            _raise(status, position, batch, out.shape[0], ignore_index, True)
        new_total = total + size
        if entry is not None:
            entry[1] = new_total
        return new_total
    exact = _count_checked(out, batch, ignore_index, total, notes)
    if exact is not None:
        new_total = float(exact)
    elif batch.weights is None:
        new_total = total + batch.size
    elif batch.weights.size >= out.size:
        # Summing the K² cells is cheaper than another pass over the weights (10^7 weights:
        # 10 ms, doubling a weighted update's time).
        new_total = _kernels.matrix_total(out)
    else:
        # Float rounding of the sum stays far inside the margin of the limits.
        new_total = total + float(np.sum(batch.weights, dtype=np.float64))
    if entry is not None:
        entry[1] = new_total
    return new_total


# Bounds of the totals of matrices counted into without a ``total`` (see ``count_batch``):
# id(out) -> [weak reference to out, bound]. An entry goes when its matrix is collected.
_known_totals: dict[int, list] = {}


def _forget_total(key: int):
    def forget(_reference: weakref.ref) -> None:
        entry = _known_totals.get(key)
        if entry is not None and entry[0]() is None:
            del _known_totals[key]

    return forget


def _count_checked(
    out: np.ndarray,
    batch: Batch,
    ignore_index: int | None,
    total: float,
    notes: list[int] | None = None,
) -> float | None:
    """``count_batch`` given a bound of the current total; returns the exact new total when the
    exact path ran, else None."""
    integral = out.dtype.kind != "f"
    if ignore_index is None:
        flags = _kernels.INTEGRAL if integral else 0
        ignore = 0
    else:
        flags = (_kernels.INTEGRAL | _kernels.HAS_IGNORE) if integral else _kernels.HAS_IGNORE
        ignore = ignore_index
    kind = batch.kind
    flags |= batch.flags
    y_true, y_pred, weights = batch.y_true, batch.y_pred, batch.weights
    size = batch.size
    headroom = (_INT_LIMIT if integral else _FLOAT_LIMIT) - total
    if weights is None and size > headroom:
        return _count_exact(out, batch, flags, ignore, ignore_index)
    if kind == LABELS:
        kernel = _kernels.count_labels
        work = size
    elif kind == ROWS:
        kernel = _kernels.count_argmax_rows
        work = size * y_pred.shape[1]
    elif kind == THRESHOLD:
        return _count_threshold(out, batch, flags, ignore, ignore_index, headroom, notes)
    else:
        kernel = _kernels.count_argmax
        work = size * y_pred.shape[1]

    if (
        work >= PARALLEL_MIN_LABELS
        and _num_threads > 1
        and size >= PARALLEL_MIN_LABELS_PER_CELL * out.size
    ):
        if headroom != headroom:  # unknown total: O(K²) is small next to this batch
            headroom = (_INT_LIMIT if integral else _FLOAT_LIMIT) - _kernels.matrix_total(out)
            if weights is None and size > headroom:
                return _count_exact(out, batch, flags, ignore, ignore_index)
        return _count_parallel(
            kernel,
            out,
            y_true,
            y_pred,
            weights,
            size,
            work,
            flags,
            ignore,
            batch,
            ignore_index,
            headroom,
        )

    commit = flags | _kernels.COMMIT
    if integral:
        status, position, counted = kernel(
            y_true, y_pred, weights, out, 0, size, 1, commit, ignore, headroom
        )
        if status:
            kernel(y_true, y_pred, weights, out, 0, counted, -1, commit, ignore, np.inf)
            if status == _kernels.OVER_BOUND:
                return _count_exact(out, batch, flags, ignore, ignore_index)
            _raise(status, position, batch, out.shape[0], ignore_index, integral)
        return None

    if out.size <= size:
        backup = out.copy()
        status, position, _ = kernel(
            y_true, y_pred, weights, out, 0, size, 1, commit, ignore, headroom
        )
        if status:
            out[...] = backup
            if status == _kernels.OVER_BOUND:
                return _count_exact(out, batch, flags, ignore, ignore_index)
            _raise(status, position, batch, out.shape[0], ignore_index, integral)
        return None
    status, position, _ = kernel(y_true, y_pred, weights, out, 0, size, 1, flags, ignore, headroom)
    if status == _kernels.OVER_BOUND:
        return _count_exact(out, batch, flags, ignore, ignore_index)
    if status:
        _raise(status, position, batch, out.shape[0], ignore_index, integral)
    kernel(y_true, y_pred, weights, out, 0, size, 1, commit, ignore, np.inf)
    return None


def _count_threshold(
    out: np.ndarray,
    batch: Batch,
    flags: int,
    ignore: int,
    ignore_index: int | None,
    headroom: float,
    notes: list[int] | None = None,
) -> float | None:
    """Binary scores against a threshold: one serial call (no K×K work to share)."""
    integral = out.dtype.kind != "f"
    threshold = batch.threshold
    commit = flags | _kernels.COMMIT
    y_true, y_pred, weights = batch.y_true, batch.y_pred, batch.weights
    size = batch.size
    backup = None if integral else out.copy()  # 2×2: cheaper than a dry run
    status, position, counted = _kernels.count_threshold(
        y_true, y_pred, weights, out, 0, size, 1, commit, ignore, threshold, headroom
    )
    if status:
        if backup is None:
            _kernels.count_threshold(
                y_true, y_pred, weights, out, 0, counted, -1, commit, ignore, threshold, np.inf
            )
        else:
            out[...] = backup
        if status == _kernels.OVER_BOUND:
            return _count_exact(out, batch, flags, ignore, ignore_index)
        _raise(status, position, batch, out.shape[0], ignore_index, integral)
    if position == _LOOKS_LIKE_PROBABILITIES and notes is not None:
        notes.append(_LOOKS_LIKE_PROBABILITIES)
    return None


def uncount_batch(out: np.ndarray, batch: Batch, ignore_index: int | None) -> None:
    """Subtract a batch that ``count_batch`` counted into ``out``: the same kernel over the
    whole batch with ``sign=-1``, which subtracts exactly what it added (int64 counts, or whole
    weights, come back bit for bit; float64 sums to within rounding, which is why a weighted
    accumulator restores a copy instead)."""
    if batch.size == 0:
        return
    flags = batch.flags | _kernels.COMMIT
    if out.dtype.kind != "f":
        flags |= _kernels.INTEGRAL
    ignore = 0
    if ignore_index is not None:
        flags |= _kernels.HAS_IGNORE
        ignore = ignore_index
    kernel = _kernel_for(batch)
    if batch.kind == THRESHOLD:
        kernel(
            batch.y_true,
            batch.y_pred,
            batch.weights,
            out,
            0,
            batch.size,
            -1,
            flags,
            ignore,
            batch.threshold,
            np.inf,
        )
    else:
        kernel(
            batch.y_true, batch.y_pred, batch.weights, out, 0, batch.size, -1, flags, ignore, np.inf
        )


def _call(kernel, out: np.ndarray, batch: Batch, start: int, stop: int, flags: int, ignore: int):
    """One unbounded kernel call on ``[start, stop)`` (the exact path checks afterwards)."""
    if batch.kind == THRESHOLD:
        return kernel(
            batch.y_true,
            batch.y_pred,
            batch.weights,
            out,
            start,
            stop,
            1,
            flags,
            ignore,
            batch.threshold,
            np.inf,
        )
    return kernel(
        batch.y_true, batch.y_pred, batch.weights, out, start, stop, 1, flags, ignore, np.inf
    )


def _kernel_for(batch: Batch):
    return {
        LABELS: _kernels.count_labels,
        ROWS: _kernels.count_argmax_rows,
        THRESHOLD: _kernels.count_threshold,
    }.get(batch.kind, _kernels.count_argmax)


def _exact_total(out: np.ndarray) -> int:
    """The exact sum of non-negative int64 cells (as a Python int; it may exceed int64)."""
    cells = out.reshape(-1)
    # High and low 32 bits summed apart cannot wrap for K up to 65535.
    high = int(np.sum(cells >> 32, dtype=np.int64))
    low = int(np.sum(cells & 0xFFFFFFFF, dtype=np.uint64))
    return (high << 32) + low


def _overflow_error(what: str) -> ValueError:
    return ValueError(
        f"this update would overflow the counts: {what}. Nothing was counted (the accumulator "
        f"is unchanged); spread the counts over several accumulators, or create one with "
        f"`weighted=True` to accumulate in float64 (exact up to 2^53)."
    )


def _count_exact(
    out: np.ndarray, batch: Batch, flags: int, ignore: int, ignore_index: int | None
) -> float:
    """The slow, exact path for a batch that might overflow: count, check, restore on failure.

    Reached only when the current total plus a bound of the batch's weight comes near 2^63
    (int64) or 1e308 (float64), so its O(N + K²) extra work never touches the normal path.
    int64: the batch is counted in pieces of total weight <= 2^61 (a single larger weight is a
    piece of its own). Cells and weights are below 2^63, so a cell that passes 2^63 - 1 during a
    piece wraps exactly once and is seen as negative afterwards; the exact total is checked
    after every piece.
    """
    integral = out.dtype.kind != "f"
    kernel = _kernel_for(batch)
    commit = flags | _kernels.COMMIT
    size = batch.size
    backup = out.copy()
    if integral:
        bounds = [0, size]
        if batch.weights is not None and size:
            cumulative = np.cumsum(batch.weights.reshape(-1), dtype=np.float64)
            bounds = [0]
            while bounds[-1] < size:
                base = cumulative[bounds[-1] - 1] if bounds[-1] else 0.0
                end = int(np.searchsorted(cumulative, base + 2.0**61, side="right"))
                bounds.append(min(size, max(end, bounds[-1] + 1)))
        for lo, hi in itertools.pairwise(bounds):
            status, position, _ = _call(kernel, out, batch, lo, hi, commit, ignore)
            if status:
                out[...] = backup
                _raise(status, position, batch, out.shape[0], ignore_index, integral)
            negative = np.flatnonzero(out.reshape(-1) < 0)
            if negative.size:
                row, column = divmod(int(negative[0]), out.shape[0])
                out[...] = backup
                raise _overflow_error(
                    f"the count of cell (true {row}, predicted {column}) would pass 2^63 - 1 = "
                    f"{_INT64_MAX} (int64), starting from {int(backup[row, column])}"
                )
            total = _exact_total(out)
            if total > _INT64_MAX:
                out[...] = backup
                raise _overflow_error(
                    f"the total count N would reach {total} or more, past 2^63 - 1 = "
                    f"{_INT64_MAX} (int64), starting from {_exact_total(backup)}"
                )
        return _exact_total(out)
    status, position, _ = _call(kernel, out, batch, 0, size, commit, ignore)
    if status:
        out[...] = backup
        _raise(status, position, batch, out.shape[0], ignore_index, integral)
    infinite = np.flatnonzero(~np.isfinite(out.reshape(-1)))
    with np.errstate(over="ignore"):
        weight_total = float(np.sum(out))
    if infinite.size or not np.isfinite(weight_total):
        out[...] = backup
        if infinite.size:
            row, column = divmod(int(infinite[0]), out.shape[0])
            what = (
                f"the weighted sum of cell (true {row}, predicted {column}) would become "
                f"infinite (float64 overflow past 1.8e308)"
            )
        else:
            what = "the total weight N would become infinite (float64 overflow past 1.8e308)"
        raise ValueError(
            f"this update would overflow the counts: {what}. Nothing was counted (the "
            f"accumulator is unchanged); rescale the weights."
        )
    return weight_total * (1.0 + out.size * 2.3e-16)


def _count_parallel(
    kernel, out, y_true, y_pred, weights, size, work, flags, ignore, batch, ignore_index, headroom
) -> float | None:
    integral = out.dtype.kind != "f"
    commit = flags | _kernels.COMMIT
    with _pool_lock:
        # Taken together under the lock: ``set_num_threads`` in another thread cannot shut
        # this pool down between reading it and submitting to it (queued chunks still run
        # after a shutdown).
        num_workers = _num_threads
        pool = _get_pool_locked()
        num_chunks = min(size, max(num_workers, -(-work // CHUNK_LABELS)))
        bounds = [size * c // num_chunks for c in range(num_chunks + 1)]
        # Every chunk may use its share of the headroom; a chunk that could pass it stops
        # with OVER_BOUND and the whole batch goes to the exact path.
        chunk_headroom = headroom / num_chunks
        # Unweighted counts of fewer than 2^31 labels per thread fit int32 cells exactly.
        private_dtype = (
            np.int32 if (weights is None and integral and size <= _INT32_SAFE_LABELS) else out.dtype
        )
        # The calling thread counts into an int64 ``out`` directly (undone exactly on
        # failure); every other worker gets a private matrix.
        direct = integral
        partials = np.zeros(
            (num_workers - 1 if direct else num_workers,) + out.shape, dtype=private_dtype
        )
        next_chunk = itertools.count()  # next() on itertools.count is atomic under the GIL
        failures: dict[int, tuple[int, int]] = {}
        first_failure = [num_chunks]
        done_direct: list[tuple[int, int]] = []

        def take_chunks(target: np.ndarray, record: list[tuple[int, int]] | None) -> None:
            while True:
                chunk = next(next_chunk)
                if chunk >= num_chunks or chunk > first_failure[0]:
                    return
                status, position, counted = kernel(
                    y_true,
                    y_pred,
                    weights,
                    target,
                    bounds[chunk],
                    bounds[chunk + 1],
                    1,
                    commit,
                    ignore,
                    chunk_headroom,
                )
                if record is not None:
                    record.append((bounds[chunk], counted))
                if status:
                    failures[chunk] = (status, position)
                    first_failure[0] = min(first_failure[0], chunk)
                    return

        helpers = [
            pool.submit(take_chunks, partials[w - 1] if direct else partials[w], None)
            for w in range(1, num_workers)
        ]
    try:
        take_chunks(out if direct else partials[0], done_direct if direct else None)
    finally:
        for future in helpers:
            future.result()

    if failures:
        if direct:
            # Subtract exactly what this thread added to ``out``: the counted part of every
            # chunk it took (all of it, or the prefix before a failure).
            for lo, counted in done_direct:
                kernel(y_true, y_pred, weights, out, lo, counted, -1, commit, ignore, np.inf)
        if any(status == _kernels.OVER_BOUND for status, _ in failures.values()):
            return _count_exact(out, batch, flags, ignore, ignore_index)
        # Chunks are in stream order, so the first failing chunk holds the first bad element.
        status, position = failures[min(failures)]
        _raise(status, position, batch, out.shape[0], ignore_index, integral)
    for partial in partials:
        out += partial
    return None


def _raise(status, position, batch: Batch, num_classes, ignore_index, integral) -> None:
    true_array, pred_array, weight_array = batch.originals
    position = int(position)
    if status == _kernels.BAD_TRUE:
        raise describe_label_error(
            "y_true",
            true_array,
            position,
            num_classes,
            ignore_index,
            batch.order,
            true_array=true_array,
            pred_array=pred_array,
        )
    if status == _kernels.BAD_PRED:
        raise describe_label_error(
            "y_pred",
            pred_array,
            position,
            num_classes,
            None,
            batch.order,
            true_array=true_array,
            pred_array=pred_array,
        )
    if status == _kernels.BAD_WEIGHT:
        assert weight_array is not None
        raise describe_weight_error(weight_array, position, integral, batch.order)
    if status == _kernels.BAD_SCORE:
        raise describe_score_error(pred_array, position)
    if status == _kernels.BAD_PROBABILITY:
        value, where = _flat_value(position, batch)
        raise ValueError(
            f"`y_pred` holds {value!r} at position {where}, but this accumulator reads binary "
            f"scores as probabilities, which lie in [0, 1]; for logits create it with "
            f"`logits=True` (the threshold stays a probability: 0.5 is a logit of 0). "
            f"Nothing was counted."
        )
    raise AssertionError(f"unknown kernel status {status}")  # pragma: no cover


def _flat_value(position: int, batch: Batch) -> tuple[float, str]:
    """The score at flat ``position`` of a threshold batch (in the batch's element order) as a
    Python float, and where it is in the user's array: an index, or a tuple of indices."""
    shape = batch.label_shape
    index = tuple(int(i) for i in np.unravel_index(position, shape, order=batch.order))
    value = batch.y_pred[position]
    if batch.y_pred.dtype == np.int16:  # float16/bfloat16 bits: the value they hold
        value = _half_value(value, batch.flags)
    where = str(index[0]) if len(index) == 1 else str(index)
    return float(value), where


def _half_value(bits: Any, flags: int) -> float:
    if flags & _kernels.BFLOAT16:
        word = np.array([int(bits) & 0xFFFF], dtype=np.uint32) << 16
        return float(word.view(np.float32)[0])
    return float(np.array([bits], dtype=np.int16).view(np.float16)[0])
