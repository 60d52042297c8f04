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
and as little Python as possible: one kernel call with the flags packed into a single int.
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import _kernels
from ._inputs import Batch, describe_label_error, describe_score_error, describe_weight_error

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


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=_num_threads, thread_name_prefix="metricstream")
        return _pool


def count_batch(out: np.ndarray, batch: Batch, ignore_index: int | None) -> None:
    """Add ``batch`` to ``out`` in place, or raise and leave ``out`` unchanged."""
    integral = out.dtype.kind != "f"
    if ignore_index is None:
        flags = _kernels.INTEGRAL if integral else 0
        ignore = 0
    else:
        flags = (_kernels.INTEGRAL | _kernels.HAS_IGNORE) if integral else _kernels.HAS_IGNORE
        ignore = ignore_index
    y_true, y_pred, weights = batch.y_true, batch.y_pred, batch.weights
    if not batch.is_scores:
        kernel = _kernels.count_labels
    elif y_pred.shape[2] == 1:
        # (N, C) logits: one contiguous row of scores per label.
        kernel = _kernels.count_argmax_rows
        y_true = y_true.reshape(-1)
        y_pred = y_pred.reshape(y_pred.shape[0], y_pred.shape[1])
        if weights is not None:
            weights = weights.reshape(-1)
    else:
        kernel = _kernels.count_argmax
    size = batch.size
    # Work per label: one pair, or a row of C scores.
    work = size * y_pred.shape[1] if batch.is_scores else size

    if work >= PARALLEL_MIN_LABELS and _num_threads > 1 and \
            size >= PARALLEL_MIN_LABELS_PER_CELL * out.size:
        _count_parallel(kernel, out, y_true, y_pred, weights, size, work, flags, ignore, batch,
                        ignore_index)
        return

    commit = flags | _kernels.COMMIT
    if integral:
        status, position, counted = kernel(y_true, y_pred, weights, out, 0, size, 1, commit,
                                           ignore)
        if status:
            kernel(y_true, y_pred, weights, out, 0, counted, -1, commit, ignore)
            _raise(status, position, batch, out.shape[0], ignore_index, integral)
        return

    if out.size <= size:
        backup = out.copy()
        status, position, _ = kernel(y_true, y_pred, weights, out, 0, size, 1, commit, ignore)
        if status:
            out[...] = backup
            _raise(status, position, batch, out.shape[0], ignore_index, integral)
        return
    status, position, _ = kernel(y_true, y_pred, weights, out, 0, size, 1, flags, ignore)
    if status:
        _raise(status, position, batch, out.shape[0], ignore_index, integral)
    kernel(y_true, y_pred, weights, out, 0, size, 1, commit, ignore)


def _count_parallel(kernel, out, y_true, y_pred, weights, size, work, flags, ignore, batch,
                    ignore_index) -> None:
    integral = out.dtype.kind != "f"
    commit = flags | _kernels.COMMIT
    num_workers = _num_threads
    num_chunks = min(size, max(num_workers, -(-work // CHUNK_LABELS)))
    bounds = [size * c // num_chunks for c in range(num_chunks + 1)]
    # Unweighted counts of fewer than 2^31 labels per thread fit int32 cells exactly.
    private_dtype = np.int32 if (weights is None and integral and size <= _INT32_SAFE_LABELS) \
        else out.dtype
    # The calling thread counts into an int64 ``out`` directly (undone exactly on failure);
    # every other worker gets a private matrix.
    direct = integral
    partials = np.zeros((num_workers - 1 if direct else num_workers,) + out.shape,
                        dtype=private_dtype)
    next_chunk = itertools.count()  # next() on itertools.count is atomic under the GIL
    failures: dict[int, tuple[int, int]] = {}
    first_failure = [num_chunks]
    done_direct: list[tuple[int, int]] = []

    def take_chunks(target: np.ndarray, record: list[tuple[int, int]] | None) -> None:
        while True:
            chunk = next(next_chunk)
            if chunk >= num_chunks or chunk > first_failure[0]:
                return
            status, position, counted = kernel(y_true, y_pred, weights, target, bounds[chunk],
                                               bounds[chunk + 1], 1, commit, ignore)
            if record is not None:
                record.append((bounds[chunk], counted))
            if status:
                failures[chunk] = (status, position)
                first_failure[0] = min(first_failure[0], chunk)
                return

    pool = _get_pool()
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
                kernel(y_true, y_pred, weights, out, lo, counted, -1, commit, ignore)
        # Chunks are in stream order, so the first failing chunk holds the first bad element.
        status, position = failures[min(failures)]
        _raise(status, position, batch, out.shape[0], ignore_index, integral)
    for partial in partials:
        out += partial


def _raise(status, position, batch: Batch, num_classes, ignore_index, integral) -> None:
    true_array, pred_array, weight_array = batch.originals
    position = int(position)
    if status == _kernels.BAD_TRUE:
        raise describe_label_error("y_true", true_array, position, num_classes, ignore_index,
                                   batch.order)
    if status == _kernels.BAD_PRED:
        raise describe_label_error("y_pred", pred_array, position, num_classes, None, batch.order)
    if status == _kernels.BAD_WEIGHT:
        assert weight_array is not None
        raise describe_weight_error(weight_array, position, integral, batch.order)
    if status == _kernels.BAD_SCORE:
        raise describe_score_error(pred_array, position)
    raise AssertionError(f"unknown kernel status {status}")  # pragma: no cover
