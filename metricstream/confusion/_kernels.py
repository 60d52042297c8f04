"""Numba kernels: the only place where labels are counted.

The kernels do arithmetic only. They take flat (or, for scores, 2-D/3-D) arrays and an ``out``
matrix, and count into it. Allocation, dtype decisions, chunking across threads and the wording
of error messages live in :mod:`metricstream.confusion._dispatch` and :mod:`metricstream._inputs`.

Every kernel validates as it counts, so valid data pays for no extra pass over memory. A kernel
stops at the first bad element and returns ``(status, position, counted_until)``: ``position`` is
the flat index of that element and ``counted_until`` bounds what was already counted (every
element below it was counted, none at or above it). The caller decides how to undo what was
already counted (see ``_dispatch``).

Every kernel takes ``sign`` (+1 or -1), ``flags`` (a bit set of ``COMMIT``, ``HAS_IGNORE``,
``INTEGRAL``, ``HALF``, ``BFLOAT16``; packed into one int because Numba's dispatch cost grows with
the argument count, which matters for 256-label training-loop batches) and ``headroom``:

* ``sign=-1`` re-runs a validated range to subtract exactly what it added. That is how a failed
  integer update is rolled back without a backup copy of the matrix (integer addition is exactly
  invertible; float addition is not, so float matrices use a backup or a dry run instead).
* without ``COMMIT`` the kernel validates without counting (a dry run).
* ``HAS_IGNORE`` skips pairs whose true label equals ``ignore_index``.
* ``INTEGRAL`` requires whole-number weights below 2^63 (the matrix counts in int64).
* ``HALF``/``BFLOAT16``: an int16 score array holds the bits of float16/bfloat16 values (numpy
  has no bfloat16, and reading the bits avoids an N-sized float32 copy); they are compared
  through the same sortable integer keys as float32 scores.
* ``headroom`` bounds the total weight one call may add (the caller's distance from int64
  overflow or from float64 infinity, see ``_dispatch``). A weighted call sums its weights as it
  validates them and stops with ``OVER_BOUND`` before counting a block that would pass the bound;
  the caller then takes an exact, slower path. Unweighted calls are bounded by their length.
  A NaN ``headroom`` means "unknown": the kernel sums ``out`` first (O(K²), no extra dispatch,
  which is what a small-K training-loop update without a tracked total can afford).

How the label kernel is fast (the measurements behind each choice are in
``docs/performance.md``, "Confusion kernels: measurements and what was not kept"):

* It works in blocks of ``BLOCK`` labels. Each block is first validated by a max-reduction over
  "label keys" (``uint64(label)``, so a negative label becomes huge): the loop has no branch and
  the compiler vectorises it (AVX2/AVX-512). Only when the maximum key is ``>= K`` does a scalar
  loop look for the first bad element. The block then stays in L1 for the counting loop, which
  has no checks left, so validation costs a small part of the count.
* Loops run over slices that start at index 0. Numba wraps negative indices, and for a loop
  ``range(start, stop)`` it cannot prove ``i >= 0``, so it inserts a test per element that blocks
  vectorisation; indexing ``y[lo:hi]`` from 0 removes it.
* Counting indexes the flat matrix with an unsigned ``t * K + p``, which needs no wraparound test.

Scores are reduced to an argmax without any N-sized temporary. Rows of the ``(N, C)`` logits
layout in float32/float64 (more than two scores) are read as vectors of ``VECTOR_LANES`` scores
(LLVM intrinsics; masked loads, nothing past a row is read). Wide rows, and every row of arrays
beyond the cache, in one pass: per lane the running maximum and the position it was first seen
at, then the smallest position among the lanes holding the maximum. Narrower rows in the cache:
a max-reduction, then the first lane equal to the maximum from the bit mask of a vector compare
(an early exit). Both note NaNs in the same pass and give the first maximum, as ``np.argmax``
(-0.0 equals +0.0). Rows of two scores take one compare. Other score
dtypes (float16/bfloat16 bits, integers) with few classes (``C <= TILE_MAX_CLASSES``) look for
NaNs first in one flat, vectorised pass over a tile of rows; then each row is reduced by a
branch-free loop of one compare and two selects per score (the core runs the chains of
consecutive rows side by side), or, for float16/bfloat16 bits in calls too large for the cache,
through a copied tile of keys (``_make_tile_argmax``). With more classes each row's argmax is one
max-reduction over "packed keys": an integer "sortable key" of the bits in the high half and
``C - 1 - c`` in the low half, so that the maximum holds the largest score and, among equal
scores, the first position; NaNs are detected from the extreme keys.

``ignore_index`` is compared exactly: a uint64 label 2^63 never equals ``ignore_index`` 2^63 - 1,
and a float label 2^53 never equals 2^53 + 1 (Numba would compare both pairs through float64).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from .._core import flags as _flags
from .._core import llvm as _llvm

# Status codes returned by kernels (position is the flat index of the first bad element).
OK = 0
BAD_TRUE = 1
BAD_PRED = 2
BAD_WEIGHT = 3
BAD_SCORE = 4
# The weights of the call would pass ``headroom``; nothing of the block was counted.
OVER_BOUND = 5
# A score outside [0, 1] where ``PROBABILITIES`` says scores are probabilities.
BAD_PROBABILITY = 6
# The ``position`` of an ``OK`` from ``count_threshold`` with ``LOGITS`` when every score of the
# call (at least ``SUSPICIOUS_MIN_SCORES`` of them) lies in [0, 1]: probabilities, most likely.
LOOKS_LIKE_PROBABILITIES = -1
SUSPICIOUS_MIN_SCORES = 32

# Bits of ``flags`` (shared with the input layer).
COMMIT, HAS_IGNORE, INTEGRAL, HALF, BFLOAT16 = (
    _flags.COMMIT,
    _flags.HAS_IGNORE,
    _flags.INTEGRAL,
    _flags.HALF,
    _flags.BFLOAT16,
)

# Bits of ``flags`` that only ``count_threshold`` reads (above the input layer's bits): the
# scores are probabilities, refused outside [0, 1] (``BAD_PROBABILITY``); or logits, noted when
# they all lie in [0, 1] (``LOOKS_LIKE_PROBABILITIES``). Neither: only NaN is refused.
PROBABILITIES = 32
LOGITS = 64

# Key of +inf among the sortable int16 keys of float16 and bfloat16 bits (NaNs lie beyond it),
# and of 1.0 (the key of a non-negative value is its bits; -0.0 has the key of +0.0).
FLOAT16_INF_KEY = 0x7C00
BFLOAT16_INF_KEY = 0x7F80
FLOAT16_ONE_KEY = 0x3C00
BFLOAT16_ONE_KEY = 0x3F80

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
# Bytes of the single 16-bit sub-histogram used above 16 classes (see ``count_labels``).
NARROW_SUB_BYTES = 24 << 10

# The general scores layout (A, C, R) is scanned in tiles of this many positions so that the
# running argmax state is a fixed-size buffer (never an N-sized temporary) that stays in L1.
SCORE_TILE = 256

# (N, C) logits are reduced ROW_TILE rows at a time; rows of at most TILE_MAX_CLASSES scores
# with one branch-free compare-and-select loop per row, wider rows with one max-reduction over
# packed keys (one pass instead of a per-row two-pass search; below 17 classes the select loop
# is faster still, see ``_make_rows_argmax``).
TILE_MAX_CLASSES = 16
ROW_TILE = 64
# Validated rows are counted COUNT_TILE at a time (a multiple of ROW_TILE), in one loop of
# independent increments after their argmax: the increments of a cold matrix (K = 1000: 8 MB,
# evicted between the steps of a training loop) miss the cache, and a long loop of them
# overlaps the misses. Counted per ROW_TILE, the misses of each short loop came one after the
# other between the rows' reads. Rows of at most TILE_MAX_CLASSES classes (a matrix in L1, no
# misses to overlap) are still counted per ROW_TILE.
COUNT_TILE = 1024
# float16/bfloat16 rows of calls with more scores than this (512 KiB of float32, beyond a
# training loop's cache-resident batch) are reduced through a copied tile of keys.
IN_PLACE_SCORES = 1 << 17
# float32/float64 rows of score arrays larger than this (256 KiB of float32; the whole array,
# not one thread's chunk of it) are taken to come from memory, as do rows of at least
# LONG_ROW_SCORES scores: they
# are reduced in one pass with no early exit (see ``_long_row_argmax``); a mispredicted exit per
# row stalls the stream of rows from memory. Narrower rows in the cache keep the early exit.
# The bound is well below the 1 MiB L2 cache: between the steps of a training loop an array of
# a few hundred KiB has left it.
STREAMING_SCORES = 1 << 16
LONG_ROW_SCORES = 256

# Limits of a matrix's total (see ``_dispatch``): int64 below 2^63 with a 2^-16 margin that
# covers the rounding of float bounds; float64 finite.
INT_TOTAL_LIMIT = 2.0**63 * (1.0 - 2.0**-16)
FLOAT_TOTAL_LIMIT = 1e308

# Integral weights are converted to int64; larger values cannot be represented exactly.
MAX_INTEGRAL_WEIGHT = _flags.MAX_INTEGRAL_WEIGHT
_INT64_MAX = 2**63 - 1
_TWO_63 = 9.223372036854775808e18


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


def compiled_for(kernel, args):
    """The machine code of ``kernel`` for the Numba types of ``args``, callable directly.

    Compiles (or loads from the on-disk cache) the specialisation now if needed. Calling the
    result skips Numba's per-call dispatch, which types every argument and looks the signature
    up on each call, a third of a ``count_labels`` call on 256 labels. The result checks no
    type: the caller must pass only arguments
    of exactly these Numba types afterwards (arrays of the same dtype, dimensions, layout,
    alignment and writeability; scalars of the same Python type). With the JIT disabled
    (``NUMBA_DISABLE_JIT=1``) it is the kernel itself.
    """
    compile_signature = getattr(kernel, "compile", None)
    if compile_signature is None:
        return kernel
    from numba import typeof

    return compile_signature(tuple(typeof(argument) for argument in args))


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
    if isinstance(w, types.Integer) and not w.signed and w.bitwidth == 64:
        # A uint64 weight of 2^63 or more has no int64 value (2^64 - 1 is not -1).
        return lambda w, integral: np.uint8(integral & (w > np.uint64(_INT64_MAX)))
    if isinstance(w, types.Integer):
        return lambda w, integral: np.uint8(w < 0)

    def float_bad(w, integral):
        # NaN fails ``w >= 0``; fractional or too large values fail only integral counting.
        return np.uint8(
            (not (w >= 0))
            | (w == np.inf)
            | (integral & ((np.floor(w) != w) | (w >= MAX_INTEGRAL_WEIGHT)))
        )

    return float_bad


@njit(inline="always")
def _is_weight(w, integral):
    return _weight_bad(w, integral) == 0


def _weight_value(w, cells):  # pragma: no cover - replaced by the overload below
    """A validated weight in the matrix's arithmetic: int64 for integer cells, else float64.

    Adding a float to an int64 cell would go through float64 and round cells above 2^53.
    """


@overload(_weight_value, inline="always")
def _weight_value_impl(w, cells):
    if isinstance(cells.dtype, types.Integer):
        return lambda w, cells: np.int64(w)
    return lambda w, cells: np.float64(w)


def _is_ignored(t, ignore_index):  # pragma: no cover - replaced by the overload below
    """Whether label ``t`` equals the int64 ``ignore_index`` exactly (no float64 detour)."""


@overload(_is_ignored, inline="always")
def _is_ignored_impl(t, ignore_index):
    if isinstance(t, types.Integer) and not t.signed and t.bitwidth == 64:
        return lambda t, ignore_index: (ignore_index >= 0) & (np.uint64(ignore_index) == t)
    if isinstance(t, types.Integer):
        return lambda t, ignore_index: np.int64(t) == ignore_index

    def float_ignored(t, ignore_index):
        # Equal only when ``ignore_index`` is a float64 value (exactly), and ``t`` is that value.
        f = np.float64(ignore_index)
        # 2^63 (the float64 of 2^63 - 1) has no int64 value: select before converting.
        below = f < _TWO_63
        exact = below & (np.int64(f * np.float64(below)) == ignore_index)
        return exact & (t == f)

    return float_ignored


# ---------------------------------------------------------------------------- labels
@njit(inline="always")
def _count_block(
    y_true, y_pred, flat, num_classes, start, stop, sign, commit, has_ignore, ignore_index, headroom
):
    """``count_labels`` of at most ``BLOCK`` unweighted pairs, with no buffer: one branch-free
    validation pass (vectorised), a scan for the first bad pair only when there is one, then
    the count."""
    if stop - start > headroom:
        return OVER_BOUND, start, start
    limit = np.uint64(num_classes)
    tb = y_true[start:stop]
    pb = y_pred[start:stop]
    n = stop - start
    worst = np.uint64(0)
    if has_ignore:
        for j in range(n):
            t = tb[j]
            kt = _label_key(t, num_classes)
            if _is_ignored(t, ignore_index):
                kt = np.uint64(0)
            worst = max(worst, max(kt, _label_key(pb[j], num_classes)))
    else:
        for j in range(n):
            worst = max(worst, max(_label_key(tb[j], num_classes), _label_key(pb[j], num_classes)))
    if worst >= limit:
        for j in range(n):
            t = tb[j]
            if has_ignore and _is_ignored(t, ignore_index):
                continue
            if not _is_label(t, num_classes):
                return BAD_TRUE, start + j, start
            if not _is_label(pb[j], num_classes):
                return BAD_PRED, start + j, start
    if commit:
        if has_ignore:
            for j in range(n):
                t = tb[j]
                if not _is_ignored(t, ignore_index):
                    flat[_label_key(t, num_classes) * limit + _label_key(pb[j], num_classes)] += (
                        sign
                    )
        else:
            for j in range(n):
                flat[_label_key(tb[j], num_classes) * limit + _label_key(pb[j], num_classes)] += (
                    sign
                )
    return OK, stop, stop


@_kernel
def count_labels(y_true, y_pred, weights, out, start, stop, sign, flags, ignore_index, headroom):
    """Count pairs ``(y_true[i], y_pred[i])`` for ``i`` in ``[start, stop)`` into ``out``.

    ``out`` is a C-contiguous K×K matrix (any numeric dtype). ``weights`` is None (each pair
    counts ``sign``) or a flat array of the same length as the labels; a weighted call stops
    with ``OVER_BOUND`` before a block that would take its weight total past ``headroom``.
    Returns ``(status, position, counted_until)``; ``status == OK`` means every element in range
    was counted. Elements below ``counted_until`` were counted, none at or above it.
    """
    num_classes = out.shape[0]
    limit = np.uint64(num_classes)
    flat = out.reshape(-1)
    commit = (flags & COMMIT) != 0
    has_ignore = (flags & HAS_IGNORE) != 0
    integral = (flags & INTEGRAL) != 0
    if weights is None and stop - start <= BLOCK:
        # One unweighted block (the training-loop batch) needs none of the buffers below:
        # allocating them cost a fifth of a 256-label call.
        headroom = _resolve_headroom(out, headroom, integral)
        return _count_block(
            y_true,
            y_pred,
            flat,
            num_classes,
            start,
            stop,
            sign,
            commit,
            has_ignore,
            ignore_index,
            headroom,
        )
    # Long ranges are validated a block at a time by a loop that also writes each pair's cell
    # index into a small buffer; the counting loop then reads only that buffer. Separating the
    # streaming reads of the labels from the scattered increments lets the core overlap the
    # increments' cache misses. Wide labels with K > 32 use big blocks; narrow labels or small
    # K, where the matrix stays in L1 anyway, use small ones.
    buffered = stop - start > BLOCK and num_classes <= MAX_BUFFERED_CLASSES
    block = BLOCK
    if buffered and num_classes > 32 and y_true.itemsize + y_pred.itemsize > 2:
        block = BIG_BLOCK
    cells = np.empty(min(block, stop - start) if buffered else 0, dtype=np.uint32)
    skip = np.uint32(num_classes * num_classes if buffered else 0)
    # Small K: count into several private sub-histograms (pair j goes to copy j % copies) so
    # that repeated increments of one cell do not wait on each other's store; ignored pairs go
    # to a spare cell at the end of each copy, so that loop has no branch. Only for ranges
    # long enough to amortise zeroing and folding the copies; int32 cells cannot overflow for
    # ranges below 2^31.
    # Weighted pairs use copies of the matrix's own dtype (float64 sums of a copy are added
    # to the matrix at the end; the float result may differ from a sequential sum in the last
    # bits, as any summation order does).
    stride = num_classes * num_classes + 1
    copies = 0
    if (
        buffered
        and commit
        and num_classes <= SUB_HISTOGRAM_MAX_CLASSES
        and SUB_HISTOGRAM_MIN_LABELS_PER_CELL * stride <= stop - start < 2**31
    ):
        copies = 4 if num_classes <= 16 else 2
    # Wider K: one copy of 16-bit counters instead, small enough for L1 (K = 100: 20 KB, where
    # two int32 copies took 80 KB of L2); repeats of a cell are rare among K² > 256 cells, and
    # the copy is added to the matrix (and zeroed) before any of its counters could pass 65535.
    narrow = copies == 2 and weights is None and stride * 2 <= NARROW_SUB_BYTES
    if narrow:
        copies = 0
    sub16 = np.zeros(stride if narrow else 0, dtype=np.uint16)
    since_flush = 0
    sub = np.zeros(copies * stride if weights is None else 0, dtype=np.int32)
    weighted_sub = np.zeros(copies * stride if weights is not None else 0, dtype=out.dtype)
    status = OK
    position = stop
    counted = stop
    weight_total = 0.0
    headroom = _resolve_headroom(out, headroom, integral)
    if weights is None and stop - start > headroom:
        return OVER_BOUND, start, start
    per_weight = _per_weight_bound(headroom, stop - start)
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
                    ignored = _is_ignored(t, ignore_index)
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
                if _is_ignored(t, ignore_index):
                    kt = np.uint64(0)
                worst = max(worst, max(kt, _label_key(pb[j], num_classes)))
        else:
            for j in range(n):
                worst = max(
                    worst, max(_label_key(tb[j], num_classes), _label_key(pb[j], num_classes))
                )
        bad_weights = np.uint8(0)
        big_weights = np.uint8(0)
        if weights is not None:
            wb = weights[lo:hi]
            for j in range(n):
                bad_weights |= _weight_bad(wb[j], integral)
                big_weights |= np.uint8(np.float64(wb[j]) > per_weight)
        if worst >= limit or bad_weights:
            # Rare path: find the first bad element of the block, in stream order.
            for j in range(n):
                t = tb[j]
                if has_ignore and _is_ignored(t, ignore_index):
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
        if weights is not None:
            weight_total += _block_weight_bound(weights[lo:hi], big_weights, per_weight)
            if weight_total > headroom:
                status = OVER_BOUND
                position = lo
                counted = lo
                break
        if not commit:
            continue
        if copies and weights is not None:
            wb = weights[lo:hi]
            j = 0
            if copies == 4:
                while j + 4 <= n:
                    weighted_sub[cells[j]] += _weight_value(wb[j], out)
                    weighted_sub[stride + cells[j + 1]] += _weight_value(wb[j + 1], out)
                    weighted_sub[2 * stride + cells[j + 2]] += _weight_value(wb[j + 2], out)
                    weighted_sub[3 * stride + cells[j + 3]] += _weight_value(wb[j + 3], out)
                    j += 4
            else:
                while j + 2 <= n:
                    weighted_sub[cells[j]] += _weight_value(wb[j], out)
                    weighted_sub[stride + cells[j + 1]] += _weight_value(wb[j + 1], out)
                    j += 2
            while j < n:
                weighted_sub[cells[j]] += _weight_value(wb[j], out)
                j += 1
        elif narrow:
            for j in range(n):
                sub16[cells[j]] += np.uint16(1)
            since_flush += n
            if since_flush + block > 65535:
                for cell in range(stride - 1):
                    flat[cell] += sign * np.int64(sub16[cell])
                    sub16[cell] = 0
                since_flush = 0
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
                        flat[cell] += sign * _weight_value(wb[j], out)
        elif weights is None:
            if has_ignore:
                for j in range(n):
                    t = tb[j]
                    if not _is_ignored(t, ignore_index):
                        flat[
                            _label_key(t, num_classes) * limit + _label_key(pb[j], num_classes)
                        ] += sign
            else:
                for j in range(n):
                    flat[
                        _label_key(tb[j], num_classes) * limit + _label_key(pb[j], num_classes)
                    ] += sign
        else:
            wb = weights[lo:hi]
            for j in range(n):
                t = tb[j]
                if has_ignore and _is_ignored(t, ignore_index):
                    continue
                flat[_label_key(t, num_classes) * limit + _label_key(pb[j], num_classes)] += (
                    sign * _weight_value(wb[j], out)
                )
    if narrow and since_flush:
        for cell in range(stride - 1):
            flat[cell] += sign * np.int64(sub16[cell])
    for copy in range(copies):
        if weights is None:
            counts = sub[copy * stride : copy * stride + stride - 1]
            for cell in range(stride - 1):
                flat[cell] += sign * counts[cell]
        else:
            sums = weighted_sub[copy * stride : copy * stride + stride - 1]
            for cell in range(stride - 1):
                flat[cell] += sign * sums[cell]
    return status, position, counted


# ---------------------------------------------------------------------------- weight bounds
@njit(inline="always")
def _resolve_headroom(out, headroom, integral):
    """``headroom``, or when it is NaN, the distance of ``out``'s total from the limit."""
    if headroom == headroom:
        return headroom
    flat = out.reshape(-1)
    total = 0.0
    for i in range(flat.size):
        total += np.float64(flat[i])
    total *= 1.0 + flat.size * 2.3e-16
    return (INT_TOTAL_LIMIT if integral else FLOAT_TOTAL_LIMIT) - total


@njit(inline="always")
def _per_weight_bound(headroom, length):
    """Half the headroom spread over the call: blocks whose weights all stay below it need no
    sum (one more compare in the vectorised validation loop), and together they use at most half
    of the headroom."""
    return 0.5 * headroom / max(length, 1)


@njit(inline="always")
def _block_weight_bound(block, big, per_weight):
    """An upper bound of the block's weight total (ignored pairs' weights included)."""
    if not big:
        return block.size * per_weight
    total = 0.0
    for j in range(block.size):
        total += np.float64(block[j])
    # Rounding of the float sum (relative n * 2^-53 at most): stay above the exact total.
    return total * (1.0 + block.size * 2.3e-16)


@_kernel
def matrix_total(out):
    """An upper bound of the sum of the matrix's (non-negative) cells, as a float64."""
    flat = out.reshape(-1)
    total = 0.0
    for i in range(flat.size):
        total += np.float64(flat[i])
    # Rounding of the float sum (relative K² * 2^-53 at most): stay above the exact total.
    return total * (1.0 + flat.size * 2.3e-16)


# ---------------------------------------------------------------------------- scores
# Sortable integer keys: for IEEE floats (and float16/bfloat16 bits), flipping the magnitude bits
# of negative values makes integer order equal float order; NaNs land above the key of +inf or
# below the key of -inf. Subtracting one from negative keys gives -0.0 the key of +0.0 (np.argmax
# treats them as equal, so the first zero of either sign wins) and keeps -inf at -key(+inf).
@njit(inline="always")
def _sortable(bits, shift, mask):
    b = np.int64(bits)
    key = b ^ ((b >> shift) & mask)
    return key - (key >> shift)


@njit(inline="always")
def _half_key(bits):
    return _sortable(bits, 15, 0x7FFF)


_FLOAT32_INF_KEY = 0x7F800000
_FLOAT64_INF_KEY = 0x7FF0000000000000


def _make_key_row_argmax(int_type, shift, mask):
    def key_row_argmax(row, inf_key):
        # Two branch-free passes (no early exit in the first: a ``return`` or ``break`` inside
        # stops LLVM from vectorising the reductions): the extreme keys, then the first position
        # of the maximum, searched 64 keys at a time with a vectorised compare per block.
        bits = row.view(int_type)
        n = bits.size
        hi = np.int64(-(2**63))
        lo = np.int64(2**63 - 1)
        for c in range(n):
            key = _sortable(bits[c], shift, mask)
            hi = max(hi, key)
            lo = min(lo, key)
        best = n
        for c0 in range(0, n, 64):
            part = bits[c0 : min(c0 + 64, n)]
            found = False
            for c in range(part.size):
                found |= _sortable(part[c], shift, mask) == hi
            if found:
                for c in range(part.size):
                    if _sortable(part[c], shift, mask) == hi:
                        best = c0 + c
                        break
                break
        return best, (hi > inf_key) | (lo < -inf_key)

    return key_row_argmax


def _make_packed_row_argmax(int_type, shift, mask):
    def packed_row_argmax(row, inf_key):
        # One branch-free max-reduction of (key << 32) | (n - 1 - c): the largest key wins, and
        # among equal keys the smallest position. Keys of 32-bit floats need 33 bits at most.
        bits = row.view(int_type)
        n = bits.size
        best = np.int64(-(2**63))
        lo = np.int64(2**62)
        for c in range(n):
            key = _sortable(bits[c], shift, mask)
            lo = min(lo, key)
            best = max(best, (key << 32) | (n - 1 - c))
        hi = best >> 32
        return n - 1 - (best & 0xFFFFFFFF), (hi > inf_key) | (lo < -inf_key)

    return packed_row_argmax


_float32_row_argmax = njit(inline="always")(_make_packed_row_argmax(np.int32, 31, 0x7FFFFFFF))
_float64_row_argmax = njit(inline="always")(_make_key_row_argmax(np.int64, 63, 0x7FFFFFFFFFFFFFFF))
_half_row_argmax = njit(inline="always")(_make_packed_row_argmax(np.int16, 15, 0x7FFF))


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


# Float rows read as vectors of VECTOR_LANES scores (masked loads: nothing past the row's end is
# read), through LLVM vector intrinsics that Numba's loops do not produce on their own for short
# rows. One row's argmax is a max-reduction, a compare with the maximum and a count of trailing
# zeros of the equal lanes' bit mask (the first maximum, as ``np.argmax``; -0.0 equals +0.0).
VECTOR_LANES = 16
_I1 = ir.IntType(1)
_I32 = ir.IntType(32)


def _vector_row(row):
    return (
        isinstance(row, types.Array)
        and row.ndim == 1
        and row.layout == "C"
        and row.dtype in (types.float32, types.float64)
    )


def _splat(builder, value):
    vector = ir.VectorType(value.type, VECTOR_LANES)
    one = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(
        one, one, ir.Constant(ir.VectorType(_I32, VECTOR_LANES), [0] * VECTOR_LANES)
    )


_declare = _llvm.declare


def _masked_load(builder, pointer, count, passthru, align):
    """Lanes ``[0, count)`` of the vector at ``pointer``; the other lanes are ``passthru`` and
    their memory is not read (``count`` is an int32, at most ``VECTOR_LANES``)."""
    iota = ir.Constant(ir.VectorType(_I32, VECTOR_LANES), list(range(VECTOR_LANES)))
    mask = builder.icmp_signed("<", iota, _splat(builder, count))
    return _llvm.masked_load(builder, pointer, mask, passthru, align)


def _row_data(context, builder, row_type, row):
    """(pointer to the first score, row length, element type, load alignment) of a 1-D row."""
    array = context.make_array(row_type)(context, builder, value=row)
    element = context.get_data_type(row_type.dtype)
    align = context.get_abi_sizeof(element) if row_type.aligned else 1
    return array.data, builder.extract_value(array.shape, 0), element, align


def _lanes_reduce(builder, vector, better):
    """The lane that wins every ``better(builder, a, b)`` (a vector of i1: take ``a``) of a
    halving tree of compares, returned from lane 0."""
    width = VECTOR_LANES
    while width > 1:
        width //= 2
        order = [i + width if i < width else i for i in range(VECTOR_LANES)]
        upper = builder.shuffle_vector(
            vector, vector, ir.Constant(ir.VectorType(_I32, VECTOR_LANES), order)
        )
        vector = builder.select(better(builder, upper, vector), upper, vector)
    return builder.extract_element(vector, ir.Constant(_I32, 0))


def _lanes_max(builder, vector):
    """The maximum of a NaN-free float vector's lanes."""
    return _lanes_reduce(builder, vector, lambda b, x, y: b.fcmp_ordered(">", x, y))


def _first_lane(builder, lanes):
    """Index of the first true lane of a vector of i1 (``VECTOR_LANES`` when none is)."""
    bits = builder.bitcast(lanes, ir.IntType(VECTOR_LANES))
    count = _declare(
        builder,
        f"llvm.cttz.i{VECTOR_LANES}",
        ir.IntType(VECTOR_LANES),
        [ir.IntType(VECTOR_LANES), _I1],
    )
    return builder.call(count, [bits, ir.Constant(_I1, 0)])


def _any_lane(builder, lanes):
    bits = builder.bitcast(lanes, ir.IntType(VECTOR_LANES))
    return builder.icmp_unsigned("!=", bits, ir.Constant(ir.IntType(VECTOR_LANES), 0))


@intrinsic
def _short_row_argmax(typingctx, row):
    """Argmax of a float row of at most ``VECTOR_LANES`` scores in one masked load; -1 when the
    row holds a NaN."""
    if not _vector_row(row):
        return None

    def codegen(context, builder, signature, args):
        data, length, element, align = _row_data(context, builder, signature.args[0], args[0])
        vector = ir.VectorType(element, VECTOR_LANES)
        # Lanes past the row read as -inf: they never beat a score, and when every score is
        # -inf the first score still comes first.
        low = ir.Constant(vector, [float("-inf")] * VECTOR_LANES)
        scores = _masked_load(builder, data, builder.trunc(length, _I32), low, align)
        has_nan = _any_lane(builder, builder.fcmp_unordered("uno", scores, scores))
        best = _lanes_max(builder, scores)
        first = _first_lane(builder, builder.fcmp_ordered("==", scores, _splat(builder, best)))
        intp = context.get_value_type(types.intp)
        return builder.select(has_nan, ir.Constant(intp, -1), builder.zext(first, intp))

    return types.intp(row), codegen


@intrinsic
def _row_max(typingctx, row):
    """The largest score of a float row (-inf when empty), NaN when the row holds a NaN."""
    if not _vector_row(row):
        return None

    def codegen(context, builder, signature, args):
        data, length, element, align = _row_data(context, builder, signature.args[0], args[0])
        vector = ir.VectorType(element, VECTOR_LANES)
        low = ir.Constant(vector, [float("-inf")] * VECTOR_LANES)
        lanes = ir.VectorType(_I1, VECTOR_LANES)
        best = cgutils.alloca_once_value(builder, low)
        nan = cgutils.alloca_once_value(builder, ir.Constant(lanes, [0] * VECTOR_LANES))
        width = ir.Constant(length.type, VECTOR_LANES)
        whole = builder.udiv(length, width)

        def take(scores):
            current = builder.load(best)
            larger = builder.fcmp_ordered(">", scores, current)
            builder.store(builder.select(larger, scores, current), best)
            unordered = builder.fcmp_unordered("uno", scores, scores)
            builder.store(builder.or_(builder.load(nan), unordered), nan)

        with cgutils.for_range(builder, whole) as loop:
            start = builder.gep(data, [builder.mul(loop.index, width)])
            take(builder.load(builder.bitcast(start, vector.as_pointer()), align=align))
        done = builder.mul(whole, width)
        rest = builder.trunc(builder.sub(length, done), _I32)
        take(_masked_load(builder, builder.gep(data, [done]), rest, low, align))
        result = _lanes_max(builder, builder.load(best))
        has_nan = _any_lane(builder, builder.load(nan))
        return builder.select(has_nan, ir.Constant(element, float("nan")), result)

    return row.dtype(row), codegen


@intrinsic
def _first_equal(typingctx, row, start, value):
    """The first of the ``VECTOR_LANES`` positions from ``start`` (within the row) whose score
    equals ``value``, counted from ``start``; ``VECTOR_LANES`` when none does."""
    if not _vector_row(row) or not isinstance(start, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        data, length, element, align = _row_data(context, builder, signature.args[0], args[0])
        vector = ir.VectorType(element, VECTOR_LANES)
        begin = context.cast(builder, args[1], signature.args[1], types.intp)
        rest = builder.sub(length, begin)
        width = ir.Constant(rest.type, VECTOR_LANES)
        count = builder.select(builder.icmp_signed("<", rest, width), rest, width)
        nan = ir.Constant(vector, [float("nan")] * VECTOR_LANES)  # equals nothing
        scores = _masked_load(
            builder, builder.gep(data, [begin]), builder.trunc(count, _I32), nan, align
        )
        target = context.cast(builder, args[2], signature.args[2], signature.args[0].dtype)
        first = _first_lane(builder, builder.fcmp_ordered("==", scores, _splat(builder, target)))
        return builder.zext(first, context.get_value_type(types.intp))

    return types.intp(row, start, row.dtype), codegen


def _lanes_min(builder, vector):
    """The minimum of an integer vector's lanes."""
    return _lanes_reduce(builder, vector, lambda b, x, y: b.icmp_signed("<", x, y))


@intrinsic
def _long_row_argmax(typingctx, row):
    """Argmax of a float row of more than ``VECTOR_LANES`` scores in one pass; -1 when the row
    holds a NaN. float32 rows: fewer than 2^31 scores (positions are int32 lanes)."""
    if not _vector_row(row):
        return None

    def codegen(context, builder, signature, args):
        data, length, element, align = _row_data(context, builder, signature.args[0], args[0])
        vector = ir.VectorType(element, VECTOR_LANES)
        # Positions as wide as the scores, so that a lane's compare selects its position.
        index = ir.IntType(32 if element == ir.FloatType() else 64)
        positions = ir.VectorType(index, VECTOR_LANES)
        lanes = ir.VectorType(_I1, VECTOR_LANES)
        # Per lane: the largest score so far and the start of the vector that held it first
        # (strictly larger replaces, so a lane keeps its first maximum).
        best = cgutils.alloca_once_value(
            builder, ir.Constant(vector, [float("-inf")] * VECTOR_LANES)
        )
        where = cgutils.alloca_once_value(builder, ir.Constant(positions, [0] * VECTOR_LANES))
        nan = cgutils.alloca_once_value(builder, ir.Constant(lanes, [0] * VECTOR_LANES))
        width = ir.Constant(length.type, VECTOR_LANES)

        def take(start):
            address = builder.bitcast(builder.gep(data, [start]), vector.as_pointer())
            scores = builder.load(address, align=align)
            current = builder.load(best)
            larger = builder.fcmp_ordered(">", scores, current)
            builder.store(builder.select(larger, scores, current), best)
            offset = builder.trunc(start, index) if index.width < start.type.width else start
            builder.store(
                builder.select(larger, _splat(builder, offset), builder.load(where)), where
            )
            unordered = builder.fcmp_unordered("uno", scores, scores)
            builder.store(builder.or_(builder.load(nan), unordered), nan)

        with cgutils.for_range(builder, builder.udiv(length, width)) as loop:
            take(builder.mul(loop.index, width))
        # A partial last vector is read as the row's last VECTOR_LANES scores, overlapping
        # scores already read: a score read twice is recorded, if at all, at its own position,
        # and never before an equal score at a smaller position.
        zero = ir.Constant(length.type, 0)
        with builder.if_then(builder.icmp_unsigned("!=", builder.urem(length, width), zero)):
            take(builder.sub(length, width))
        top = builder.load(best)
        maximum = _lanes_max(builder, top)
        # The first maximum: the smallest position among the lanes holding the maximum (-0.0
        # equals +0.0). A lane never replaced holds -inf at position 0 + lane, a score of the
        # row, which is -inf whenever that lane holds the maximum.
        found = builder.add(builder.load(where), ir.Constant(positions, list(range(VECTOR_LANES))))
        never = ir.Constant(positions, [(1 << (index.width - 1)) - 1] * VECTOR_LANES)
        holds = builder.fcmp_ordered("==", top, _splat(builder, maximum))
        first = _lanes_min(builder, builder.select(holds, found, never))
        intp = context.get_value_type(types.intp)
        first = builder.sext(first, intp) if index.width < intp.width else first
        has_nan = _any_lane(builder, builder.load(nan))
        return builder.select(has_nan, ir.Constant(intp, -1), first)

    return types.intp(row), codegen


@njit(inline="always")
def _vector_row_argmax(row, streaming):
    """First position of the largest score of a C-contiguous float32/float64 row; -1 when the
    row holds a NaN. ``streaming``: the rows come from memory rather than from the cache."""
    if row.size <= VECTOR_LANES:
        return _short_row_argmax(row)
    if (streaming or row.size >= LONG_ROW_SCORES) and row.size < 1 << 31:
        return _long_row_argmax(row)
    # Rows in the cache of fewer than LONG_ROW_SCORES scores: the maximum, then the first
    # vector holding it (an early exit, faster here than tracking positions).
    best = _row_max(row)
    if best != best:
        return -1
    for start in range(0, row.size, VECTOR_LANES):
        found = _first_equal(row, start, best)
        if found < VECTOR_LANES:
            return start + found
    return -1  # not reached: the maximum is one of the scores


def _vector_rows_argmax(block, classes, streaming):  # pragma: no cover - see the overload
    """Argmax of every row of a ``(w, C)`` float32/float64 block into ``classes[:w]``, through
    ``_vector_row_argmax``; returns the first row holding a NaN, or ``w``. -1 for blocks of
    other dtypes or layouts, which the caller reduces otherwise."""


@overload(_vector_rows_argmax, inline="always")
def _vector_rows_argmax_impl(block, classes, streaming):
    if block.layout == "C" and block.dtype in (types.float32, types.float64):

        def vector_rows_argmax(block, classes, streaming):
            for j in range(block.shape[0]):
                best = _vector_row_argmax(block[j], streaming)
                if best < 0:
                    return j
                classes[j] = best
            return block.shape[0]

        return vector_rows_argmax
    return lambda block, classes, streaming: -1


def _row_argmax(row, inf_key):  # pragma: no cover - replaced by the overload below
    """``(argmax, has_nan)`` of a 1-D row; the argmax is meaningless when ``has_nan``.

    ``inf_key`` is the key of +inf when an int16 row holds float16/bfloat16 bits, else 0.
    """


@overload(_row_argmax, inline="always")
def _row_argmax_impl(row, inf_key):
    if row.dtype == types.float32 and row.layout == "C":
        return lambda row, inf_key: _float32_row_argmax(row, _FLOAT32_INF_KEY)
    if row.dtype == types.float64 and row.layout == "C":
        return lambda row, inf_key: _float64_row_argmax(row, _FLOAT64_INF_KEY)
    if row.dtype == types.int16 and row.layout == "C":

        def int16_row_argmax(row, inf_key):
            if inf_key:
                return _half_row_argmax(row, inf_key)
            return _generic_row_argmax(row)

        return int16_row_argmax
    return lambda row, inf_key: _generic_row_argmax(row)


def _score_nan(x, inf_key):  # pragma: no cover - replaced by the overload below
    """Whether a score (or, with ``inf_key``, the float16/bfloat16 bits in an int16) is NaN."""


@overload(_score_nan, inline="always")
def _score_nan_impl(x, inf_key):
    if isinstance(x, types.Float):
        return lambda x, inf_key: x != x
    if x == types.int16:

        def half_nan(x, inf_key):
            key = _half_key(x)
            return (inf_key != 0) & ((key > inf_key) | (key < -inf_key))

        return half_nan
    return lambda x, inf_key: False


@njit
def _first_nan(row, inf_key):
    for c in range(row.size):
        if _score_nan(row[c], inf_key):
            return c
    return -1


def _rows_argmax(block, classes, inf_key, copy):  # pragma: no cover
    """Argmax of every row of a ``(w, C)`` block into ``classes[:w]``; returns whether any score
    is NaN (the classes are then meaningless). First maximum wins, as ``np.argmax``. With ``copy``
    (the call is too large for the cache) float16/bfloat16 bits are reduced through a copied
    tile of keys (see ``_make_tile_argmax``)."""


def _make_rows_argmax(key):
    def rows_argmax(block, classes, inf_key):
        width = block.shape[0]
        num_scores = block.shape[1]
        # NaNs first, over the block's contiguous scores: a flat, branch-free loop that
        # vectorises, so that the per-row loop below needs no NaN test.
        scores = block.reshape(-1)
        nan_seen = False
        for i in range(scores.size):
            nan_seen |= _score_nan(scores[i], inf_key)
        if num_scores == 2:
            # Two columns: one compare per row (the second wins only when strictly larger).
            for j in range(width):
                classes[j] = np.int32(key(block[j, 1]) > key(block[j, 0]))
            return nan_seen
        # One row at a time, branch-free (a compare and two selects per score), so that the
        # core overlaps the rows' independent dependency chains (faster than a tile reduced
        # column by column, which gathers the strided scores).
        for j in range(width):
            row = block[j]
            best = key(row[0])
            label = np.int32(0)
            for c in range(1, num_scores):
                v = key(row[c])
                better = v > best
                best = v if better else best
                label = np.int32(c) if better else label
            classes[j] = label
        return nan_seen

    return rows_argmax


@njit(inline="always")
def _identity(x):
    return x


_plain_rows_argmax = njit(inline="always")(_make_rows_argmax(_identity))
_half_rows_argmax = njit(inline="always")(_make_rows_argmax(_half_key))


def _make_tile_argmax(key):
    def tile_argmax(block, scratch, values, classes, inf_key):
        # A tile of rows copied into a column-major scratch buffer as integer keys (sequential
        # reads; the key computation vectorises), then reduced column by column, each row's
        # running maximum an independent lane. For float16/bfloat16 bits of calls too large
        # for the cache this beats the per-row loop, whose chain then includes each key's
        # computation.
        width = block.shape[0]
        num_scores = block.shape[1]
        nan_seen = False
        for j in range(width):
            row = block[j]
            for c in range(num_scores):
                x = row[c]
                nan_seen |= _score_nan(x, inf_key)
                scratch[c, j] = key(x)
        first = scratch[0]
        for j in range(width):
            values[j] = first[j]
            classes[j] = 0
        for c in range(1, num_scores):
            column = scratch[c]
            label = np.int32(c)
            for j in range(width):
                v = column[j]
                better = v > values[j]
                values[j] = v if better else values[j]
                classes[j] = label if better else classes[j]
        return nan_seen

    return tile_argmax


_half_tile_argmax = njit(inline="always")(_make_tile_argmax(_half_key))


@overload(_rows_argmax, inline="always")
def _rows_argmax_impl(block, classes, inf_key, copy):
    if block.dtype == types.int16:

        def int16_rows_argmax(block, classes, inf_key, copy):
            if inf_key:
                if copy and block.shape[1] > 2:
                    # The tile's buffers are allocated here, beside the loops that use them:
                    # LLVM then knows that they do not overlap ``classes``.
                    scratch = np.empty((TILE_MAX_CLASSES, ROW_TILE), dtype=np.int64)
                    values = np.empty(ROW_TILE, dtype=np.int64)
                    return _half_tile_argmax(block, scratch, values, classes, inf_key)
                return _half_rows_argmax(block, classes, inf_key)
            return _plain_rows_argmax(block, classes, inf_key)

        return int16_rows_argmax

    return lambda block, classes, inf_key, copy: _plain_rows_argmax(block, classes, inf_key)


@njit(inline="always")
def _inf_key(flags):
    if flags & BFLOAT16:
        return BFLOAT16_INF_KEY
    if flags & HALF:
        return FLOAT16_INF_KEY
    return 0


# Compile time: ``count_argmax_rows`` calls :func:`_tile_classes` for the argmax of each tile
# of rows, a plain ``njit`` function rather than code inlined into Numba's IR (``inline="always"``
# copies a callee's IR at every call site, and types and lowers each copy again). The argmax
# depends only on the scores' type: called, it is compiled once per scores dtype and linked into
# every specialisation (each label dtype, weighted or not, ``count_rows_at``), and one call per
# tile of ``ROW_TILE`` rows costs nothing measurable. So is ``count_argmax``'s search for the
# first NaN (:func:`_first_nan_at`), a path a valid batch never runs. ``count_labels_at`` and
# ``count_rows_at`` pass ``np.int64(0)`` as ``start``: a literal 0 compiled a ``Literal[int]``
# specialisation of the kernel of their own instead of sharing numpy's. The label and threshold
# kernels keep their helpers inlined: a called helper that receives their arrays (even on a path
# never run, such as the sum of the matrix for a NaN ``headroom`` or the scan for the first bad
# pair) measured markedly slower on long calls, whose loops LLVM then optimised less well.
@njit
def _tile_classes(block, classes, inf_key, copy, streaming):
    """The argmax of every row of a ``(n, C)`` tile of ``count_argmax_rows`` into
    ``classes[:n]``; returns the first row holding a NaN, or ``n``."""
    n = block.shape[0]
    num_scores = block.shape[1]
    # float32/float64 rows of more than two scores as vectors (two: one compare per row,
    # below); -1 for the other dtypes.
    nan_row = _vector_rows_argmax(block, classes, streaming) if num_scores > 2 else -1
    if nan_row >= 0:
        return nan_row
    if num_scores <= TILE_MAX_CLASSES:
        if _rows_argmax(block, classes, inf_key, copy):
            for j in range(n):
                if _first_nan(block[j], inf_key) >= 0:
                    return j
        return n
    for j in range(n):
        best, has_nan = _row_argmax(block[j], inf_key)
        if has_nan:
            return j
        classes[j] = best
    return n


@_kernel
def count_argmax_rows(
    y_true, scores, weights, out, start, stop, sign, flags, ignore_index, headroom
):
    """Count ``(y_true[i], argmax_c scores[i, c])`` for ``i`` in ``[start, stop)``.

    The ``(N, C)`` logits layout: ``y_true`` and ``weights`` (or None) are ``(N,)``, ``scores``
    is a C-contiguous ``(N, C)`` array (int16 holding float16/bfloat16 bits with ``HALF`` or
    ``BFLOAT16``). First maximum wins, as ``np.argmax``; NaN scores are rejected. Returns
    ``(status, position, counted_until)``: label and weight errors give the label index, NaN
    scores the flat index into ``scores``.
    """
    num_classes = out.shape[0]
    limit = np.uint64(num_classes)
    flat = out.reshape(-1)
    num_scores = scores.shape[1]
    commit = (flags & COMMIT) != 0
    has_ignore = (flags & HAS_IGNORE) != 0
    integral = (flags & INTEGRAL) != 0
    inf_key = _inf_key(flags)
    headroom = _resolve_headroom(out, headroom, integral)
    if weights is None and stop - start > headroom:
        return OVER_BOUND, start, start
    per_weight = _per_weight_bound(headroom, stop - start)
    weight_total = 0.0
    # The argmax of up to COUNT_TILE validated rows waits in ``pending`` and is counted in one
    # loop (see COUNT_TILE); rows from ``counted`` on are not counted yet.
    tile = COUNT_TILE if num_classes > TILE_MAX_CLASSES else ROW_TILE
    pending = np.empty(min(tile, max(stop - start, 0)), dtype=np.int32)
    copy = (stop - start) * num_scores > IN_PLACE_SCORES
    streaming = scores.size > STREAMING_SCORES
    counted = start
    for lo in range(start, stop, ROW_TILE):
        hi = min(lo + ROW_TILE, stop)
        n = hi - lo
        # Slices indexed from 0 (no per-element wraparound test, see the module docstring).
        block = scores[lo:hi]
        labels = y_true[lo:hi]
        classes = pending[lo - counted : hi - counted]
        # float32/float64 rows of more than two scores as vectors (two: one compare per row,
        # below); -1 for the other dtypes.
        nan_row = _tile_classes(block, classes, inf_key, copy, streaming)
        # Rows are validated before any of the tile is counted (and the tile before any row
        # of ``pending`` is), in stream order; a NaN row is reported before a bad label in the
        # same row, as the argmax comes first.
        big_weights = np.uint8(0)
        scan = nan_row
        if weights is None:
            # Unweighted: one branch-free pass over the tile's label keys (it vectorises); the
            # loop below looks for the first bad label only when there is one.
            worst = np.uint64(0)
            for j in range(n):
                t = labels[j]
                key = _label_key(t, num_classes)
                if has_ignore:
                    key = np.uint64(0) if _is_ignored(t, ignore_index) else key
                worst = max(worst, key)
            if worst < limit:
                scan = 0
        for j in range(scan):
            t = labels[j]
            if has_ignore and _is_ignored(t, ignore_index):
                continue
            if _label_key(t, num_classes) >= limit:
                return BAD_TRUE, lo + j, counted
            if weights is not None:
                w = weights[lo + j]
                if not _is_weight(w, integral):
                    return BAD_WEIGHT, lo + j, counted
                big_weights |= np.uint8(np.float64(w) > per_weight)
        if nan_row < n:
            return (
                BAD_SCORE,
                (lo + nan_row) * num_scores + _first_nan(block[nan_row], inf_key),
                counted,
            )
        if weights is not None:
            weight_total += _block_weight_bound(weights[lo:hi], big_weights, per_weight)
            if weight_total > headroom:
                return OVER_BOUND, counted, counted
        if hi - counted < pending.size and hi < stop:
            continue
        if commit:
            rows = y_true[counted:hi]
            for j in range(hi - counted):
                t = rows[j]
                if has_ignore and _is_ignored(t, ignore_index):
                    continue
                cell = _label_key(t, num_classes) * limit + np.uint64(pending[j])
                if weights is None:
                    flat[cell] += sign
                else:
                    flat[cell] += sign * _weight_value(weights[counted + j], out)
        counted = hi
    return OK, stop, stop


@njit
def _first_nan_at(scores, a, r0, width):
    """The flat index into ``(A, C, R)`` ``scores`` of the first NaN (in ``count_argmax``'s
    order: by class, then position) of the positions ``[r0, r0 + width)`` of ``a``."""
    num_scores = scores.shape[1]
    inner = scores.shape[2]
    for c in range(num_scores):
        tile = scores[a, c, r0 : r0 + width]
        for j in range(width):
            if tile[j] != tile[j]:
                return (a * num_scores + c) * inner + r0 + j
    return -1  # not reached: the caller saw a NaN


@_kernel
def count_argmax(y_true, scores, weights, out, start, stop, sign, flags, ignore_index, headroom):
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
    headroom = _resolve_headroom(out, headroom, integral)
    if weights is None and stop - start > headroom:
        return OVER_BOUND, start, start
    best_value = np.empty(SCORE_TILE, dtype=scores.dtype)
    best_class = np.empty(SCORE_TILE, dtype=np.int32)
    weight_total = 0.0
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
            first = scores[a, 0, r0 : r0 + width]
            nan_seen = False
            for j in range(width):
                v = first[j]
                nan_seen |= v != v
                values[j] = v
                classes[j] = 0
            for c in range(1, num_scores):
                tile = scores[a, c, r0 : r0 + width]
                for j in range(width):
                    v = tile[j]
                    better = v > values[j]
                    nan_seen |= v != v
                    values[j] = v if better else values[j]
                    classes[j] = np.int32(c) if better else classes[j]
            if nan_seen:
                return BAD_SCORE, _first_nan_at(scores, a, r0, width), a * inner + r0
            labels = y_true[a, r0 : r0 + width]
            for j in range(width):
                t = labels[j]
                if has_ignore and _is_ignored(t, ignore_index):
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
                    weight_total += np.float64(w)
                    if weight_total > headroom:
                        return OVER_BOUND, a * inner + r0 + j, a * inner + r0 + j
                    if commit:
                        out[row, classes[j]] += sign * _weight_value(w, out)
    return OK, stop, stop


# ---------------------------------------------------------------------------- thresholds
def _at_least(x, threshold):  # pragma: no cover - replaced by the overload below
    """1 if score ``x`` >= ``threshold`` else 0. For int16 (float16/bfloat16 bits) the threshold
    is the key of the smallest representable value >= the user's threshold."""


@overload(_at_least, inline="always")
def _at_least_impl(x, threshold):
    if isinstance(x, types.Float):
        # float32 scores are compared in float64: exact against any float64 threshold.
        return lambda x, threshold: np.uint64(np.float64(x) >= threshold)
    return lambda x, threshold: np.uint64(_half_key(x) >= np.int64(threshold))


def _score_bounds(scores, flags):  # pragma: no cover - replaced by the overload below
    """``(lo, hi, unit_lo, unit_hi)`` for the scores' element type: a score ``x`` is refused
    unless ``lo <= x <= hi`` (NaN never is), and lies in [0, 1] when ``unit_lo <= x <=
    unit_hi``. With ``PROBABILITIES`` the two ranges are [0, 1]; otherwise every number (-inf
    and +inf included). float16/bfloat16 bits in int16 are bounded by their sortable keys."""


@overload(_score_bounds, inline="always")
def _score_bounds_impl(scores, flags):
    dtype = scores.dtype
    if isinstance(dtype, types.Float):
        # Bounds of the scores' own type (0, 1 and the infinities are exact in each): float32
        # compares stay float32, as wide as the vectors allow.
        as_type = np.float32 if dtype == types.float32 else np.float64

        def float_bounds(scores, flags):
            unit_lo, unit_hi = as_type(0.0), as_type(1.0)
            if flags & PROBABILITIES:
                return unit_lo, unit_hi, unit_lo, unit_hi
            return as_type(-np.inf), as_type(np.inf), unit_lo, unit_hi

        return float_bounds

    def key_bounds(scores, flags):
        inf_key = np.int64(_inf_key(flags))
        one_key = np.int64(BFLOAT16_ONE_KEY if flags & BFLOAT16 else FLOAT16_ONE_KEY)
        if flags & PROBABILITIES:
            return np.int64(0), one_key, np.int64(0), one_key
        if inf_key == 0:  # not half-precision bits: nothing to refuse
            return np.int64(-(2**62)), np.int64(2**62), np.int64(0), one_key
        return -inf_key, inf_key, np.int64(0), one_key

    return key_bounds


def _outside(x, lo, hi):  # pragma: no cover - replaced by the overload below
    """Whether score ``x`` is NaN or outside ``[lo, hi]`` (bounds from ``_score_bounds``)."""


@overload(_outside, inline="always")
def _outside_impl(x, lo, hi):
    if isinstance(x, types.Float):
        return lambda x, lo, hi: not ((x >= lo) & (x <= hi))
    if x == types.int16:

        def half_outside(x, lo, hi):
            key = _half_key(x)
            return (key < lo) | (key > hi)  # NaN keys lie beyond the keys of -inf and +inf

        return half_outside
    return lambda x, lo, hi: False


@intrinsic
def _float_bits(typingctx, x):
    """The bits of a float32 or float64 as an unsigned integer of the same width."""
    if not isinstance(x, types.Float):
        return None
    width = x.bitwidth
    signature = (types.uint64 if width == 64 else types.uint32)(x)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(width))

    return signature, codegen


def _bad_score(x, lo, hi, probabilities):  # pragma: no cover - replaced by the overload below
    """The per-score test of a block of ``count_threshold``: NaN, or with ``probabilities``
    maybe outside [0, 1] (``_outside`` then decides, in the block's second look)."""


@overload(_bad_score, inline="always")
def _bad_score_impl(x, lo, hi, probabilities):
    if isinstance(x, types.Float):
        one = np.uint64(0x3FF0000000000000) if x.bitwidth == 64 else np.uint32(0x3F800000)

        def float_bad(x, lo, hi, probabilities):
            # One unsigned compare of the bits, as cheap as the NaN test: NaN, a negative
            # number and anything above 1 have bits above those of 1.0; so has -0.0, which
            # ``_outside`` then accepts (a block holding one takes the scalar look).
            if probabilities:
                return _float_bits(x) > one
            return x != x

        return float_bad
    return lambda x, lo, hi, probabilities: _outside(x, lo, hi)


@_kernel
def count_threshold(
    y_true, scores, weights, out, start, stop, sign, flags, ignore_index, threshold, headroom
):
    """Count ``(y_true[i], scores[i] >= threshold)`` for ``i`` in ``[start, stop)`` (binary).

    ``y_true``, ``scores`` (float, or int16 holding float16/bfloat16 bits with ``HALF`` or
    ``BFLOAT16``) and ``weights`` (or None) are 1-D; ``out`` is 2×2. NaN scores are rejected
    (``BAD_SCORE``), and with ``PROBABILITIES`` scores outside [0, 1] (``BAD_PROBABILITY``), in
    the same vectorised test; a bad score is reported before a bad label at the same position.
    ``threshold`` is what the scores are compared with: a probability, or for logits the
    smallest logit whose sigmoid reaches the probability (the caller's). With ``LOGITS``, an
    ``OK`` call of at least ``SUSPICIOUS_MIN_SCORES`` scores all in [0, 1] returns the position
    ``LOOKS_LIKE_PROBABILITIES`` (the caller warns); that check reads a block only while every
    score before it lay in [0, 1], so logits pay for one block. Returns
    ``(status, position, counted_until)`` with positions into the labels.
    """
    num_classes = out.shape[0]
    limit = np.uint64(num_classes)
    flat = out.reshape(-1)
    commit = (flags & COMMIT) != 0
    has_ignore = (flags & HAS_IGNORE) != 0
    integral = (flags & INTEGRAL) != 0
    inf_key = _inf_key(flags)
    probabilities = (flags & PROBABILITIES) != 0
    score_lo, score_hi, unit_lo, unit_hi = _score_bounds(scores, flags)
    # Whether every score so far lies in [0, 1], for logits only.
    unit = (flags & LOGITS) != 0 and stop - start >= SUSPICIOUS_MIN_SCORES
    headroom = _resolve_headroom(out, headroom, integral)
    if weights is None and stop - start > headroom:
        return OVER_BOUND, start, start
    per_weight = _per_weight_bound(headroom, stop - start)
    weight_total = 0.0
    for lo in range(start, stop, BLOCK):
        hi = min(lo + BLOCK, stop)
        n = hi - lo
        tb = y_true[lo:hi]
        sb = scores[lo:hi]
        worst = np.uint64(0)
        bad_seen = False
        # Unweighted blocks are counted from four sums taken in the same branch-free
        # (vectorised) pass as the checks: the pairs counted, the true labels, the predictions
        # and their products (labels 0 and 1 once the block is valid; ignored pairs add 0). A
        # loop of increments into the four cells of a 2×2 matrix waits on each increment's
        # store.
        sum_true = np.uint64(0)
        sum_pred = np.uint64(0)
        sum_both = np.uint64(0)
        kept = np.uint64(0)
        for j in range(n):
            t = tb[j]
            kt = _label_key(t, num_classes)
            keep = np.uint64(1)
            if has_ignore:
                ignored = _is_ignored(t, ignore_index)
                kt = np.uint64(0) if ignored else kt
                keep = np.uint64(0) if ignored else keep
            worst = max(worst, kt)
            x = sb[j]
            bad_seen |= _bad_score(x, score_lo, score_hi, probabilities)
            if weights is None:
                predicted = _at_least(x, threshold) & keep
                sum_true += kt
                sum_pred += predicted
                sum_both += kt & predicted
                kept += keep
        bad_weights = np.uint8(0)
        big_weights = np.uint8(0)
        if weights is not None:
            wb = weights[lo:hi]
            for j in range(n):
                bad_weights |= _weight_bad(wb[j], integral)
                big_weights |= np.uint8(np.float64(wb[j]) > per_weight)
        if unit:
            away = False
            for j in range(n):
                away |= _outside(sb[j], unit_lo, unit_hi)
            unit = not away
        if worst >= limit or bad_seen or bad_weights:
            for j in range(n):
                if _score_nan(sb[j], inf_key):
                    return BAD_SCORE, lo + j, lo
                if probabilities and _outside(sb[j], score_lo, score_hi):
                    return BAD_PROBABILITY, lo + j, lo
                t = tb[j]
                if has_ignore and _is_ignored(t, ignore_index):
                    continue
                if not _is_label(t, num_classes):
                    return BAD_TRUE, lo + j, lo
                if weights is not None and not _is_weight(weights[lo + j], integral):
                    return BAD_WEIGHT, lo + j, lo
        if weights is not None:
            weight_total += _block_weight_bound(weights[lo:hi], big_weights, per_weight)
            if weight_total > headroom:
                return OVER_BOUND, lo, lo
        if not commit:
            continue
        if weights is None and num_classes == 2:
            both = np.int64(sum_both)
            true_only = np.int64(sum_true) - both
            pred_only = np.int64(sum_pred) - both
            flat[0] += sign * (np.int64(kept) - both - true_only - pred_only)
            flat[1] += sign * pred_only
            flat[2] += sign * true_only
            flat[3] += sign * both
            continue
        for j in range(n):
            t = tb[j]
            if has_ignore and _is_ignored(t, ignore_index):
                continue
            cell = _label_key(t, num_classes) * limit + _at_least(sb[j], threshold)
            if weights is None:
                flat[cell] += sign
            else:
                flat[cell] += sign * _weight_value(weights[lo + j], out)
    return OK, LOOKS_LIKE_PROBABILITIES if unit else stop, stop


# ---------------------------------------------------------------------------- memory of tensors


@_kernel
def count_labels_at(
    true_address, true_dtype, pred_address, pred_dtype, size, out, stop, sign, flags, ignore_index
):
    """``count_labels`` of ``size`` labels at ``true_address`` and ``pred_address`` (contiguous,
    of numpy dtypes ``true_dtype`` and ``pred_dtype``), unweighted, counted on ``[0, stop)``.

    For CPU torch tensors read in place (see ``_inputs.tensor_memory``): the caller guarantees
    that the memory holds that many elements and stays alive during the call.
    """
    y_true = carray(_llvm.pointer_to(true_address, true_dtype), size)
    y_pred = carray(_llvm.pointer_to(pred_address, pred_dtype), size)
    # ``np.int64(0)``: a literal 0 would compile a ``Literal[int]`` specialisation of its own
    # rather than share the one that numpy arrays of these dtypes use.
    return count_labels(
        y_true, y_pred, None, out, np.int64(0), stop, sign, flags, ignore_index, np.inf
    )


@_kernel
def count_rows_at(
    true_address,
    true_dtype,
    scores_address,
    scores_dtype,
    size,
    num_scores,
    out,
    stop,
    sign,
    flags,
    ignore_index,
):
    """``count_argmax_rows`` of ``size`` labels and C-contiguous ``(size, num_scores)`` scores at
    these addresses, unweighted, counted on ``[0, stop)`` (see ``count_labels_at``)."""
    y_true = carray(_llvm.pointer_to(true_address, true_dtype), size)
    scores = carray(_llvm.pointer_to(scores_address, scores_dtype), (size, num_scores))
    return count_argmax_rows(
        y_true, scores, None, out, np.int64(0), stop, sign, flags, ignore_index, np.inf
    )
