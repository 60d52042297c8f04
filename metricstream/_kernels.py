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

# The general scores layout (A, C, R) is scanned in tiles of this many positions so that the
# running argmax state is a fixed-size buffer (never an N-sized temporary) that stays in L1.
SCORE_TILE = 256

# Integral weights are converted to int64; larger values cannot be represented exactly.
_MAX_INTEGRAL_WEIGHT = 9.2e18

_JIT = {"cache": True, "nogil": True}


# ---------------------------------------------------------------------------- element helpers
def _label_key(x, num_classes):  # pragma: no cover - replaced by the overload below
    """``uint64`` key of a label: the label itself if valid, otherwise a value ``>= num_classes``."""


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


@njit(inline="always")
def _is_weight(w, integral):
    if not (w >= 0 and w < np.inf):
        return False
    return (not integral) or (np.floor(w) == w and w < _MAX_INTEGRAL_WEIGHT)


# ---------------------------------------------------------------------------- labels
@njit(**_JIT)
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
    for lo in range(start, stop, BLOCK):
        hi = min(lo + BLOCK, stop)
        tb = y_true[lo:hi]
        pb = y_pred[lo:hi]
        n = hi - lo
        # Branch-free validation of the whole block (vectorised for integer labels).
        worst = np.uint64(0)
        if has_ignore:
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
        bad_weights = 0
        if weights is not None:
            wb = weights[lo:hi]
            for j in range(n):
                bad_weights += not _is_weight(wb[j], integral)
        if worst >= limit or bad_weights:
            # Rare path: find the first bad element of the block, in stream order.
            for j in range(n):
                t = tb[j]
                if has_ignore and t == ignore_index:
                    continue
                if not _is_label(t, num_classes):
                    return BAD_TRUE, lo + j, lo
                if not _is_label(pb[j], num_classes):
                    return BAD_PRED, lo + j, lo
                if weights is not None and not _is_weight(weights[lo + j], integral):
                    return BAD_WEIGHT, lo + j, lo
        if not commit:
            continue
        if weights is None:
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
    return OK, stop, stop


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
        # First position of the maximum, as a branch-free min-reduction.
        best = n
        for c in range(n):
            key = bits[c] ^ ((bits[c] >> shift) & mask)
            best = min(best, c if key == hi else n)
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


@njit
def _first_zero(row, stop):
    # -0.0 == +0.0 for np.argmax: the first zero wins, whatever its sign.
    for c in range(stop):
        if row[c] == 0:
            return c
    return stop


@njit(**_JIT)
def count_argmax_rows(y_true, scores, weights, out, start, stop, sign, flags, ignore_index):
    """Count ``(y_true[i], argmax_c scores[i, c])`` for ``i`` in ``[start, stop)``.

    The ``(N, C)`` logits layout: ``y_true`` and ``weights`` (or None) are ``(N,)``, ``scores``
    is a C-contiguous ``(N, C)`` array. First maximum wins, as ``np.argmax``; NaN scores are
    rejected. Returns ``(status, position, counted_until)``: label and weight errors give the
    label index, NaN scores the flat index into ``scores``.
    """
    num_classes = out.shape[0]
    num_scores = scores.shape[1]
    commit = (flags & COMMIT) != 0
    has_ignore = (flags & HAS_IGNORE) != 0
    integral = (flags & INTEGRAL) != 0
    for i in range(start, stop):
        scores_row = scores[i]
        best, has_nan = _row_argmax(scores_row)
        if has_nan:
            return BAD_SCORE, i * num_scores + _first_nan(scores_row), i
        if scores_row[best] == 0:
            best = _first_zero(scores_row, best)
        t = y_true[i]
        if has_ignore and t == ignore_index:
            continue
        if not _is_label(t, num_classes):
            return BAD_TRUE, i, i
        row = np.int64(_label_key(t, num_classes))
        if weights is None:
            if commit:
                out[row, best] += sign
        else:
            w = weights[i]
            if not _is_weight(w, integral):
                return BAD_WEIGHT, i, i
            if commit:
                out[row, best] += sign * w
    return OK, stop, stop


@njit(**_JIT)
def count_argmax(y_true, scores, weights, out, start, stop, sign, flags, ignore_index):
    """Count ``(y_true[a, r], argmax_c scores[a, c, r])`` for flat label indices in ``[start, stop)``.

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
    best_class = np.empty(SCORE_TILE, dtype=np.int64)
    if stop <= start:
        return OK, stop, stop
    for a in range(start // inner, (stop - 1) // inner + 1):
        r_lo = max(0, start - a * inner)
        r_hi = min(inner, stop - a * inner)
        for r0 in range(r_lo, r_hi, SCORE_TILE):
            width = min(SCORE_TILE, r_hi - r0)
            first = scores[a, 0, r0:r0 + width]
            for j in range(width):
                v = first[j]
                if v != v:
                    return BAD_SCORE, (a * num_scores) * inner + r0 + j, a * inner + r0
                best_value[j] = v
                best_class[j] = 0
            for c in range(1, num_scores):
                tile = scores[a, c, r0:r0 + width]
                for j in range(width):
                    v = tile[j]
                    if v > best_value[j]:
                        best_value[j] = v
                        best_class[j] = c
                    elif v != v:
                        return BAD_SCORE, (a * num_scores + c) * inner + r0 + j, a * inner + r0
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
                        out[row, best_class[j]] += sign
                else:
                    w = weights[a, r0 + j]
                    if not _is_weight(w, integral):
                        return BAD_WEIGHT, a * inner + r0 + j, a * inner + r0 + j
                    if commit:
                        out[row, best_class[j]] += sign * w
    return OK, stop, stop
