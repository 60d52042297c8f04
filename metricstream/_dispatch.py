"""Choose a kernel, split large batches across threads, and keep failed updates atomic.

Atomicity ("a failed update leaves the accumulator exactly as it was") is guaranteed without an
extra validation pass on the normal path:

* Large batches are counted by several threads into private matrices that are added to the
  accumulator only after every chunk succeeded; a failure discards them.
* Small batches into an int64 matrix are counted in place; on failure the kernel re-runs the
  already-counted prefix with ``sign=-1``, which restores the counts exactly.
* Small batches into a float64 matrix cannot be undone by subtraction (float addition is not
  invertible), so they either snapshot the matrix first when that is cheaper than the batch
  (``K*K <= N``), or validate in a dry run and then count.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import _kernels
from ._inputs import Batch, describe_label_error, describe_score_error, describe_weight_error

# Below this many labels a batch is counted by the calling thread: starting pool tasks costs
# tens of microseconds, which only pays off for batches of a few hundred thousand labels.
PARALLEL_MIN_LABELS = 1 << 18

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
    kernel = _kernels.count_argmax if batch.is_scores else _kernels.count_labels
    has_ignore = ignore_index is not None
    ignore = int(ignore_index) if has_ignore else 0
    integral = out.dtype.kind != "f"
    size = batch.size
    args = (batch.y_true, batch.y_pred, batch.weights)
    tail = (ignore, has_ignore, integral)

    if size >= PARALLEL_MIN_LABELS and _num_threads > 1:
        _count_parallel(kernel, out, args, tail, size, batch, ignore_index)
        return

    if integral:
        status, position, counted = kernel(*args, out, 0, size, 1, True, *tail)
        if status != _kernels.OK:
            kernel(*args, out, 0, counted, -1, True, *tail)
            _raise(status, position, batch, out.shape[0], ignore_index, integral)
        return

    num_cells = out.shape[0] * out.shape[0]
    if num_cells <= size:
        backup = out.copy()
        status, position, _ = kernel(*args, out, 0, size, 1, True, *tail)
        if status != _kernels.OK:
            out[...] = backup
            _raise(status, position, batch, out.shape[0], ignore_index, integral)
        return
    status, position, _ = kernel(*args, out, 0, size, 1, False, *tail)
    if status != _kernels.OK:
        _raise(status, position, batch, out.shape[0], ignore_index, integral)
    kernel(*args, out, 0, size, 1, True, *tail)


def _count_parallel(kernel, out, args, tail, size, batch, ignore_index) -> None:
    num_chunks = min(_num_threads, max(1, size // (PARALLEL_MIN_LABELS // 2)))
    bounds = np.linspace(0, size, num_chunks + 1).astype(np.int64)
    partials = np.zeros((num_chunks,) + out.shape, dtype=out.dtype)

    def run(chunk: int):
        return kernel(*args, partials[chunk], int(bounds[chunk]), int(bounds[chunk + 1]), 1, True,
                      *tail)

    # The calling thread takes the first chunk itself; the pool runs the rest concurrently
    # (the kernels release the GIL).
    futures = [_get_pool().submit(run, chunk) for chunk in range(1, num_chunks)]
    results = [run(0)] + [future.result() for future in futures]
    # Chunks are in stream order, so the first failing chunk holds the first bad element.
    for status, position, _ in results:
        if status != _kernels.OK:
            _raise(status, position, batch, out.shape[0], ignore_index, out.dtype.kind != "f")
    out += partials.sum(axis=0)


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
