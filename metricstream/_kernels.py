"""Numba kernels: the only place where labels are counted.

The kernels do arithmetic only. They take flat (or, for scores, 3-D) arrays and an ``out`` matrix,
and count into it. Allocation, dtype decisions, chunking across threads and the wording of error
messages live in :mod:`metricstream._dispatch` and :mod:`metricstream._inputs`.

Every kernel validates as it counts, so valid data pays for no extra pass. A kernel stops at the
first bad element and returns ``(status, position, counted_until)``: ``position`` is the flat
index of that element and ``counted_until`` bounds what was already counted. The caller decides how to undo what was already counted (see ``_dispatch``).

Every kernel takes ``sign`` (+1 or -1) and ``commit``:

* ``sign=-1`` re-runs a validated range to subtract exactly what it added. That is how a failed
  integer update is rolled back without a backup copy of the matrix (integer addition is exactly
  invertible; float addition is not, so float matrices use a backup or a dry run instead).
* ``commit=False`` validates without counting (a dry run).

Counting uses ``out[t, p] += w`` on the caller's matrix. Labels are compared in their own dtype
with ``0 <= x < K`` and ``int64(x) == x``; the second test is free for integer dtypes and rejects
fractional floats, while NaN fails the first test.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Status codes returned by kernels (position is the flat index of the first bad element).
OK = 0
BAD_TRUE = 1
BAD_PRED = 2
BAD_WEIGHT = 3
BAD_SCORE = 4

# Scores are scanned in tiles of this many positions so that the running argmax state is a
# fixed-size buffer (never an N-sized temporary) that stays in L1 cache.
SCORE_TILE = 256

_JIT = {"cache": True, "nogil": True}


@njit(inline="always")
def _is_label(x, num_classes):
    return x >= 0 and x < num_classes and np.int64(x) == x


@njit(inline="always")
def _is_weight(w, integral):
    if not (w >= 0 and w < np.inf):
        return False
    return (not integral) or np.int64(w) == w


@njit(**_JIT)
def count_labels(y_true, y_pred, weights, out, start, stop, sign, commit, ignore_index, has_ignore,
                 integral_weights):
    """Count pairs ``(y_true[i], y_pred[i])`` for ``i`` in ``[start, stop)`` into ``out``.

    ``weights`` is None (each pair counts ``sign``) or a flat array of the same length.
    Returns ``(status, position, counted_until)``; ``status == OK`` means every element in range was
    counted. Elements below ``counted_until`` were counted, none at or above it.
    """
    num_classes = out.shape[0]
    for i in range(start, stop):
        t = y_true[i]
        if has_ignore and t == ignore_index:
            continue
        if not _is_label(t, num_classes):
            return BAD_TRUE, i, i
        p = y_pred[i]
        if not _is_label(p, num_classes):
            return BAD_PRED, i, i
        if weights is None:
            if commit:
                out[np.int64(t), np.int64(p)] += sign
        else:
            w = weights[i]
            if not _is_weight(w, integral_weights):
                return BAD_WEIGHT, i, i
            if commit:
                out[np.int64(t), np.int64(p)] += sign * w
    return OK, stop, stop


@njit(**_JIT)
def count_argmax(y_true, scores, weights, out, start, stop, sign, commit, ignore_index, has_ignore,
                 integral_weights):
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
    best_value = np.empty(SCORE_TILE, dtype=scores.dtype)
    best_class = np.empty(SCORE_TILE, dtype=np.int64)
    if stop <= start:
        return OK, stop, stop
    for a in range(start // inner, (stop - 1) // inner + 1):
        r_lo = max(0, start - a * inner)
        r_hi = min(inner, stop - a * inner)
        for r0 in range(r_lo, r_hi, SCORE_TILE):
            width = min(SCORE_TILE, r_hi - r0)
            for j in range(width):
                v = scores[a, 0, r0 + j]
                if v != v:
                    return BAD_SCORE, (a * num_scores) * inner + r0 + j, a * inner + r0
                best_value[j] = v
                best_class[j] = 0
            for c in range(1, num_scores):
                for j in range(width):
                    v = scores[a, c, r0 + j]
                    if v > best_value[j]:
                        best_value[j] = v
                        best_class[j] = c
                    elif v != v:
                        return BAD_SCORE, (a * num_scores + c) * inner + r0 + j, a * inner + r0
            for j in range(width):
                t = y_true[a, r0 + j]
                if has_ignore and t == ignore_index:
                    continue
                if not _is_label(t, num_classes):
                    return BAD_TRUE, a * inner + r0 + j, a * inner + r0 + j
                if weights is None:
                    if commit:
                        out[np.int64(t), best_class[j]] += sign
                else:
                    w = weights[a, r0 + j]
                    if not _is_weight(w, integral_weights):
                        return BAD_WEIGHT, a * inner + r0 + j, a * inner + r0 + j
                    if commit:
                        out[np.int64(t), best_class[j]] += sign * w
    return OK, stop, stop
