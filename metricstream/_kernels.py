"""Numba kernels: the only place where labels are counted.

The kernels do arithmetic only. They take flat (or, for scores, 2-D/3-D) arrays and an ``out``
matrix, and count into it. Allocation, dtype decisions, chunking across threads and the wording
of error messages live in :mod:`metricstream._dispatch` and :mod:`metricstream._inputs`.

Every kernel validates as it counts, so valid data pays for no extra pass over memory. A kernel
stops at the first bad element and returns ``(status, position, counted_until)``: ``position`` is
the flat index of that element and ``counted_until`` bounds what was already counted (every
element below it was counted, none at or above it). The caller decides how to undo what was
already counted (see ``_dispatch``).

Every kernel takes ``sign`` (+1 or -1) and ``flags`` (a bit set of ``COMMIT``, ``HAS_IGNORE``,
``INTEGRAL``; packed into one int because Numba's dispatch cost grows with the argument count,
which matters for 256-label training-loop batches):

* ``sign=-1`` re-runs a validated range to subtract exactly what it added. That is how a failed
  integer update is rolled back without a backup copy of the matrix (integer addition is exactly
  invertible; float addition is not, so float matrices use a backup or a dry run instead).
* without ``COMMIT`` the kernel validates without counting (a dry run).
* ``HAS_IGNORE`` skips pairs whose true label equals ``ignore_index``.
* ``INTEGRAL`` requires whole-number weights (the matrix counts in int64).

How the label kernel is fast (measured on a 2-core AMD EPYC, see ``benchmarks/``):

* It works in blocks of ``BLOCK`` labels. Each block is first validated by a max-reduction over
  "label keys" (``uint64(label)``, so a negative label becomes huge): the loop has no branch and
  the compiler vectorises it (AVX2/AVX-512). Only when the maximum key is ``>= K`` does a scalar
  loop look for the first bad element. The block then stays in L1 for the counting loop, which
  has no checks left. Validation costs well under 10% of the count.
* Loops run over slices that start at index 0. Numba wraps negative indices, and for a loop
  ``range(start, stop)`` it cannot prove ``i >= 0``, so it inserts a test per element that blocks
  vectorisation; indexing ``y[lo:hi]`` from 0 removes it (measured: 4-5x faster validation).
* Counting indexes the flat matrix with an unsigned ``t * K + p``, which needs no wraparound test.

Scores are reduced to an argmax without any N-sized temporary. For the ``(N, C)`` logits layout
each row's argmax uses integer "sortable keys" of the float bits (a min/max reduction that
vectorises, with NaNs detected from the extremes), then one short scan for the first position of
the maximum, as ``np.argmax`` picks the first maximum.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

# Status codes returned by kernels (position is the flat index of the first bad element).
OK = 0
BAD_TRUE = 1
BAD_PRED = 2
BAD_WEIGHT = 3
BAD_SCORE = 4

# Bits of ``flags``.
COMMIT = 1
HAS_IGNORE = 2
INTEGRAL = 4

# Labels are validated and counted in blocks of this many elements: large enough for the
# vectorised check to amortise its set-up, small enough that the block stays in L1 (2 KiB of
# int64 per array) for the counting loop that follows.
BLOCK = 256
# Block for long ranges of wide labels with K > 32 (its uint32 cell buffer is 64 KiB).
BIG_BLOCK = 16384
# Cell indices are buffered as uint32, which holds K*K for K up to 65535.
MAX_BUFFERED_CLASSES = 65535
# Sub-histograms for K up to this, when a call has this many labels per matrix cell.
SUB_HISTOGRAM_MAX_CLASSES = 100
SUB_HISTOGRAM_MIN_LABELS_PER_CELL = 16

# The general scores layout (A, C, R) is scanned in tiles of this many positions so that the
# running argmax state is a fixed-size buffer (never an N-sized temporary) that stays in L1.
SCORE_TILE = 256

# Integral weights are converted to int64; larger values cannot be represented exactly.
_MAX_INTEGRAL_WEIGHT = 9.2e18

def _kernel(function):
    """``njit(nogil=True)`` with the on-disk cache when there is somewhere to write it.

    Numba caches next to the package, or in the user's cache directory (``NUMBA_CACHE_DIR``,
    else ``~/.cache``) when the package directory is read-only. With neither writable it
    refuses ``cache=True`` at decoration time; the kernels then compile in each process
    instead of making ``import metricstream`` fail.
    """
    try:
        return njit(cache=True, nogil=True)(function)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(nogil=True)(function)


# ---------------------------------------------------------------------------- element helpers
def _label_key(x, num_classes):  # pragma: no cover - replaced by the overload below
    """``uint64`` key of a label: the label itself if valid, else a value ``>= num_classes``."""


@overload(_label_key, inline="always")
def _label_key_impl(x, num_classes):
    if isinstance(x, types.Integer):
        # Negative labels wrap to huge unsigned keys, so one unsigned compare checks both ends.
        def integer_key(x, num_classes):
            return np.uint64(np.int64(x))

        return integer_key

    def float_key(x, num_classes):
        # NaN fails the first test; fractional values fail the last.
        if x >= 0 and x < num_classes and np.floor(x) == x:
            return np.uint64(x)
        return np.uint64(num_classes)

    return float_key


@njit(inline="always")
def _is_label(x, num_classes):
    return _label_key(x, num_classes) < np.uint64(num_classes)


def _weight_bad(w, integral):  # pragma: no cover - replaced by the overload below
    """1 if ``w`` is not an acceptable weight, else 0 (branch-free, so block checks vectorise)."""


@overload(_weight_bad, inline="always")
def _weight_bad_impl(w, integral):
    if isinstance(w, types.Integer):
        return lambda w, integral: np.uint8(w < 0)

    def float_bad(w, integral):
        # NaN fails ``w >= 0``; fractional or too large values fail only integral counting.
        return np.uint8((not (w >= 0)) | (w == np.inf)
                        | (integral & ((np.floor(w) != w) | (w >= _MAX_INTEGRAL_WEIGHT))))

    return float_bad


@njit(inline="always")
def _is_weight(w, integral):
    return _weight_bad(w, integral) == 0


# ---------------------------------------------------------------------------- labels
@_kernel
def count_labels(y_true, y_pred, weights, out, start, stop, sign, flags, ignore_index):
    """Count pairs ``(y_true[i], y_pred[i])`` for ``i`` in ``[start, stop)`` into ``out``.

    ``out`` is a C-contiguous K×K matrix (any numeric dtype). ``weights`` is None (each pair
    counts ``sign``) or a flat array of the same length as the labels.
    Returns ``(status, position, counted_until)``; ``status == OK`` means every element in range
    was counted. Elements below ``counted_until`` were counted, none at or above it.
    """
    num_classes = out.shape[0]
    limit = np.uint64(num_classes)
    flat = out.reshape(-1)
    commit = (flags & COMMIT) != 0
    has_ignore = (flags & HAS_IGNORE) != 0
    integral = (flags & INTEGRAL) != 0
    # Long ranges are validated a block at a time by a loop that also writes each pair's cell
    # index into a small buffer; the counting loop then reads only that buffer. Separating the
    # streaming reads of the labels from the scattered increments lets the core overlap the
    # increments' cache misses (measured, 10^7 int64 labels on one core: K=100 15.8 -> 9.0 ms,
    # K=1000 29.8 -> 13.7 ms). Wide labels with K > 32 use big blocks; narrow labels or small
    # K, where the matrix stays in L1 anyway, use small ones.
    buffered = stop - start > BLOCK and num_classes <= MAX_BUFFERED_CLASSES
    block = BLOCK
    if buffered and num_classes > 32 and y_true.itemsize + y_pred.itemsize > 2:
        block = BIG_BLOCK
    cells = np.empty(min(block, stop - start) if buffered else 0, dtype=np.uint32)
    skip = np.uint32(num_classes * num_classes if buffered else 0)
    # Small K: count into several private sub-histograms (pair j goes to copy j % copies) so
    # that repeated increments of one cell do not wait on each other's store; ignored pairs go
    # to a spare cell at the end of each copy, so that loop has no branch. Measured on one
    # core, 10^7 labels: uint8 K=10 3.9 -> 3.2 ms, int64 K=10 5.8 -> 4.3 ms. Only for ranges
    # long enough to amortise zeroing and folding the copies; int32 cells cannot overflow for
    # ranges below 2^31.
    # Weighted pairs use copies of the matrix's own dtype (float64 sums of a copy are added
    # to the matrix at the end; the float result may differ from a sequential sum in the last
    # bits, as any summation order does).
    stride = num_classes * num_classes + 1
    copies = 0
    if (buffered and commit and num_classes <= SUB_HISTOGRAM_MAX_CLASSES
            and SUB_HISTOGRAM_MIN_LABELS_PER_CELL * stride <= stop - start < 2**31):
        copies = 4 if num_classes <= 16 else 2
    sub = np.zeros(copies * stride if weights is None else 0, dtype=np.int32)
    weighted_sub = np.zeros(copies * stride if weights is not None else 0, dtype=out.dtype)
    status = OK
    position = stop
    counted = stop
    for lo in range(start, stop, block):
        hi = min(lo + block, stop)
        tb = y_true[lo:hi]
        pb = y_pred[lo:hi]
        n = hi - lo
        # Branch-free validation of the whole block (vectorised for integer labels).
        worst = np.uint64(0)
        if buffered:
            if has_ignore:
                for j in range(n):
                    t = tb[j]
                    kt = _label_key(t, num_classes)
                    kp = _label_key(pb[j], num_classes)
                    ignored = t == ignore_index
                    worst = max(worst, max(np.uint64(0) if ignored else kt, kp))
                    cells[j] = skip if ignored else np.uint32(kt * limit + kp)
            else:
                for j in range(n):
                    kt = _label_key(tb[j], num_classes)
                    kp = _label_key(pb[j], num_classes)
                    worst = max(worst, max(kt, kp))
                    cells[j] = np.uint32(kt * limit + kp)
        elif has_ignore:
            for j in range(n):
                t = tb[j]
                kt = _label_key(t, num_classes)
                if t == ignore_index:
                    kt = np.uint64(0)
                worst = max(worst, max(kt, _label_key(pb[j], num_classes)))
        else:
            for j in range(n):
                worst = max(worst, max(_label_key(tb[j], num_classes),
                                       _label_key(pb[j], num_classes)))
        bad_weights = np.uint8(0)
        if weights is not None:
            wb = weights[lo:hi]
            for j in range(n):
                bad_weights |= _weight_bad(wb[j], integral)
        if worst >= limit or bad_weights:
            # Rare path: find the first bad element of the block, in stream order.
            for j in range(n):
                t = tb[j]
                if has_ignore and t == ignore_index:
                    continue
                if not _is_label(t, num_classes):
                    status = BAD_TRUE
                elif not _is_label(pb[j], num_classes):
                    status = BAD_PRED
                elif weights is not None and not _is_weight(weights[lo + j], integral):
                    status = BAD_WEIGHT
                if status != OK:
                    position = lo + j
                    counted = lo
                    break
            if status != OK:
                break
        if not commit:
            continue
        if copies and weights is not None:
            wb = weights[lo:hi]
            j = 0
            if copies == 4:
                while j + 4 <= n:
                    weighted_sub[cells[j]] += wb[j]
                    weighted_sub[stride + cells[j + 1]] += wb[j + 1]
                    weighted_sub[2 * stride + cells[j + 2]] += wb[j + 2]
                    weighted_sub[3 * stride + cells[j + 3]] += wb[j + 3]
                    j += 4
            else:
                while j + 2 <= n:
                    weighted_sub[cells[j]] += wb[j]
                    weighted_sub[stride + cells[j + 1]] += wb[j + 1]
                    j += 2
            while j < n:
                weighted_sub[cells[j]] += wb[j]
                j += 1
        elif copies:
            j = 0
            if copies == 4:
                while j + 4 <= n:
                    sub[cells[j]] += 1
                    sub[stride + cells[j + 1]] += 1
                    sub[2 * stride + cells[j + 2]] += 1
                    sub[3 * stride + cells[j + 3]] += 1
                    j += 4
            else:
                while j + 2 <= n:
                    sub[cells[j]] += 1
                    sub[stride + cells[j + 1]] += 1
                    j += 2
            while j < n:
                sub[cells[j]] += 1
                j += 1
        elif buffered:
            if weights is None:
                if has_ignore:
                    for j in range(n):
                        cell = cells[j]
                        if cell != skip:
                            flat[cell] += sign
                else:
                    for j in range(n):
                        flat[cells[j]] += sign
            else:
                wb = weights[lo:hi]
                for j in range(n):
                    cell = cells[j]
                    if cell != skip:
                        flat[cell] += sign * wb[j]
        elif weights is None:
            if has_ignore:
                for j in range(n):
                    t = tb[j]
                    if t != ignore_index:
                        flat[_label_key(t, num_classes) * limit
                             + _label_key(pb[j], num_classes)] += sign
            else:
                for j in range(n):
                    flat[_label_key(tb[j], num_classes) * limit
                         + _label_key(pb[j], num_classes)] += sign
        else:
            wb = weights[lo:hi]
            for j in range(n):
                t = tb[j]
                if has_ignore and t == ignore_index:
                    continue
                flat[_label_key(t, num_classes) * limit
                     + _label_key(pb[j], num_classes)] += sign * wb[j]
    for copy in range(copies):
        if weights is None:
            counts = sub[copy * stride:copy * stride + stride - 1]
            for cell in range(stride - 1):
                flat[cell] += sign * counts[cell]
        else:
            sums = weighted_sub[copy * stride:copy * stride + stride - 1]
            for cell in range(stride - 1):
                flat[cell] += sign * sums[cell]
    return status, position, counted


# ---------------------------------------------------------------------------- scores
def _row_argmax(row):  # pragma: no cover - replaced by the overload below
    """``(argmax, has_nan)`` of a 1-D row; the argmax is meaningless when ``has_nan``."""


def _float_key_constants(int_type, float_type):
    bits = np.array([np.inf, -np.inf], dtype=float_type).view(int_type).astype(np.int64)
    mask = (1 << (8 * np.dtype(int_type).itemsize - 1)) - 1
    return int_type(bits[0]), int_type(int(bits[1]) ^ mask), int_type(mask)


def _make_float_row_argmax(int_type, float_type):
    pos_inf_key, neg_inf_key, mask = _float_key_constants(int_type, float_type)
    shift = int_type(8 * np.dtype(int_type).itemsize - 1)
    key_min = int_type(np.iinfo(int_type).min)
    key_max = int_type(np.iinfo(int_type).max)

    def float_row_argmax(row):
        # Sortable integer keys: for IEEE floats, flipping the magnitude bits of negative values
        # makes integer order equal float order; NaNs land above +inf or below -inf. Integer
        # min/max reductions vectorise; a float argmax with NaN semantics does not (measured:
        # 44 ns per 100-score row scalar, about 20 ns with the two branch-free passes below).
        # No early exit in here: a loop with a ``return`` inside stops LLVM from vectorising
        # the reductions, so the rare NaN and signed-zero cases are resolved by the caller.
        bits = row.view(int_type)
        n = bits.size
        hi = key_min
        lo = key_max
        for c in range(n):
            key = bits[c] ^ ((bits[c] >> shift) & mask)
            hi = max(hi, key)
            lo = min(lo, key)
        # First position of the maximum, as a branch-free min-reduction. -0.0 == +0.0 for
        # np.argmax, so when the maximum is +0.0 (key 0) the first zero of either sign wins
        # (-0.0 has key -1, the largest key below +0.0).
        also = int_type(-1) if hi == 0 else hi
        best = n
        for c in range(n):
            key = bits[c] ^ ((bits[c] >> shift) & mask)
            best = min(best, c if (key == hi) | (key == also) else n)
        return best, hi > pos_inf_key or lo < neg_inf_key

    return float_row_argmax


_float32_row_argmax = njit(inline="always")(_make_float_row_argmax(np.int32, np.float32))
_float64_row_argmax = njit(inline="always")(_make_float_row_argmax(np.int64, np.float64))


@njit(inline="always")
def _generic_row_argmax(row):
    best = 0
    best_value = row[0]
    has_nan = best_value != best_value
    for c in range(1, row.size):
        v = row[c]
        if v > best_value:
            best_value = v
            best = c
        has_nan |= v != v
    return best, has_nan


@overload(_row_argmax, inline="always")
def _row_argmax_impl(row):
    if row.dtype == types.float32 and row.layout == "C":
        return lambda row: _float32_row_argmax(row)
    if row.dtype == types.float64 and row.layout == "C":
        return lambda row: _float64_row_argmax(row)
    return lambda row: _generic_row_argmax(row)


@njit
def _first_nan(row):
    for c in range(row.size):
        if row[c] != row[c]:
            return c
    return -1


@_kernel
def count_argmax_rows(y_true, scores, weights, out, start, stop, sign, flags, ignore_index):
    """Count ``(y_true[i], argmax_c scores[i, c])`` for ``i`` in ``[start, stop)``.

    The ``(N, C)`` logits layout: ``y_true`` and ``weights`` (or None) are ``(N,)``, ``scores``
    is a C-contiguous ``(N, C)`` array. First maximum wins, as ``np.argmax``; NaN scores are
    rejected. Returns ``(status, position, counted_until)``: label and weight errors give the
    label index, NaN scores the flat index into ``scores``.
    """
    num_classes = out.shape[0]
    limit = np.uint64(num_classes)
    flat = out.reshape(-1)
    num_scores = scores.shape[1]
    commit = (flags & COMMIT) != 0
    has_ignore = (flags & HAS_IGNORE) != 0
    integral = (flags & INTEGRAL) != 0
    # Slices indexed from 0 (no per-element wraparound test, see the module docstring).
    rows = scores[start:stop]
    labels = y_true[start:stop]
    nan_row = -1
    for r in range(stop - start):
        best, has_nan = _row_argmax(rows[r])
        if has_nan:
            # Located after the loop: a call to the scalar search in here costs ~30% (LLVM
            # inlines it and the loop nest no longer vectorises as well).
            nan_row = r
            break
        t = labels[r]
        if has_ignore and t == ignore_index:
            continue
        key = _label_key(t, num_classes)
        if key >= limit:
            return BAD_TRUE, start + r, start + r
        cell = key * limit + np.uint64(best)
        if weights is None:
            if commit:
                flat[cell] += sign
        else:
            w = weights[start + r]
            if not _is_weight(w, integral):
                return BAD_WEIGHT, start + r, start + r
            if commit:
                flat[cell] += sign * w
    if nan_row >= 0:
        return (BAD_SCORE, (start + nan_row) * num_scores + _first_nan(rows[nan_row]),
                start + nan_row)
    return OK, stop, stop


@_kernel
def count_argmax(y_true, scores, weights, out, start, stop, sign, flags, ignore_index):
    """Count ``(y_true[a, r], argmax_c scores[a, c, r])`` for flat indices in ``[start, stop)``.

    ``y_true`` is ``(A, R)``, ``scores`` is ``(A, C, R)`` and ``weights`` is None or ``(A, R)``;
    a flat index ``i`` means ``(a, r) = divmod(i, R)``. The argmax is taken on the fly (first
    maximum wins, as ``np.argmax``); NaN scores are rejected rather than silently ranked.

    Returns ``(status, position, counted_until)``: label and weight errors give the flat index
    into ``y_true``, NaN scores the flat index into ``scores``. Every label with flat index below
    ``counted_until`` was counted, none at or above it.
    """
    num_classes = out.shape[0]
    num_scores = scores.shape[1]
    inner = scores.shape[2]
    commit = (flags & COMMIT) != 0
    has_ignore = (flags & HAS_IGNORE) != 0
    integral = (flags & INTEGRAL) != 0
    best_value = np.empty(SCORE_TILE, dtype=scores.dtype)
    best_class = np.empty(SCORE_TILE, dtype=np.int32)
    if stop <= start:
        return OK, stop, stop
    for a in range(start // inner, (stop - 1) // inner + 1):
        r_lo = max(0, start - a * inner)
        r_hi = min(inner, stop - a * inner)
        for r0 in range(r_lo, r_hi, SCORE_TILE):
            width = min(SCORE_TILE, r_hi - r0)
            # Running argmax over the classes, branch-free so that it vectorises; NaNs are only
            # noted here and located below (an early exit in these loops blocks vectorisation).
            values = best_value[:width]
            classes = best_class[:width]
            first = scores[a, 0, r0:r0 + width]
            nan_seen = False
            for j in range(width):
                v = first[j]
                nan_seen |= v != v
                values[j] = v
                classes[j] = 0
            for c in range(1, num_scores):
                tile = scores[a, c, r0:r0 + width]
                for j in range(width):
                    v = tile[j]
                    better = v > values[j]
                    nan_seen |= v != v
                    values[j] = v if better else values[j]
                    classes[j] = np.int32(c) if better else classes[j]
            if nan_seen:
                for c in range(num_scores):
                    tile = scores[a, c, r0:r0 + width]
                    for j in range(width):
                        if tile[j] != tile[j]:
                            return (BAD_SCORE, (a * num_scores + c) * inner + r0 + j,
                                    a * inner + r0)
            labels = y_true[a, r0:r0 + width]
            for j in range(width):
                t = labels[j]
                if has_ignore and t == ignore_index:
                    continue
                if not _is_label(t, num_classes):
                    return BAD_TRUE, a * inner + r0 + j, a * inner + r0 + j
                row = np.int64(_label_key(t, num_classes))
                if weights is None:
                    if commit:
                        out[row, classes[j]] += sign
                else:
                    w = weights[a, r0 + j]
                    if not _is_weight(w, integral):
                        return BAD_WEIGHT, a * inner + r0 + j, a * inner + r0 + j
                    if commit:
                        out[row, classes[j]] += sign * w
    return OK, stop, stop
