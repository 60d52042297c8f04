"""Numba kernels of the score accumulator: arithmetic only.

Every score is reduced to a *bin* by an order-preserving integer key of its float32 value ``f``
(float64 scores are rounded to float32 first), with ``u`` the bits of a float32, ``m`` those of
its magnitude, and a *layout* that says how many low bits of ``m`` each range of magnitudes
drops (the ``shift`` code: one number for all, or a few packed, see :func:`key_layout` and
:func:`logit_layout`). The ranges are whole binades, so a bin never straddles two of them:

* **any range** (binary and multilabel logits; ``eps`` is None): negative scores below zero in
  reverse order of magnitude, then ``+0`` (``-0.0`` counts as ``+0.0``) and the positive
  scores, infinities included. The default keeps 10 fraction bits (float16's) for ``2**-6 <=
  |x| < 2**7``, where logits and log-probabilities live, 7 (bfloat16's) out to ``2**-64`` and
  ``2**64``, and 4 beyond: 60,160 bins. One shift everywhere is the sortable key's top bits
  (``shift = 16``: exactly the bfloat16 values);
* **probabilities** in ``[0, 1]``: bin 0 holds ``p = 0``; for ``0 < p < 1/2`` the bin is
  ``1 + g(u(p))``; for ``p >= 1/2`` the same key of ``1 - p`` (exact in float32), mirrored, and
  ``p = 1`` has the last bin. Confident classifiers put their scores near 1, where float32
  ``p`` itself is coarse but ``1 - p`` is fine: this resolves ``1 - p`` as finely as ``p``
  near 0. The default keeps 10 fraction bits for ``2**-16 <= p < 1/2``, 9 for ``1 - p`` and
  7 below ``2**-16``, in 41,347 bins: every float16 and every bfloat16 probability has a bin
  of its own;
* **explicit thresholds** ``t_1 < ... < t_m``: the number of thresholds ``<= score`` (a
  binary search), so bin ``j >= 1`` holds ``t_j <= score < t_{j+1}``.

A score is *exact* when it is its bin's only possible value (the dropped bits are zero and a
float64 score was a float32; or the score equals the threshold). ``inexact[c]`` counts the
scores that were not: when it is 0, every bin of class ``c`` holds one value and every curve
of that class is exact.

The kernels add one batch of an ``(N, C)`` score matrix to the state arrays and return
``(status, position)``: ``status`` is ``OK`` or the kind of the first bad element and
``position`` its flat index in the ``(N, C)`` layout (row ``* C +`` column), or the row for a
bad multiclass label or an all ``-inf`` row. Weights are validated and converted to the state's
dtype by the caller (one per row), or are None. Rows are validated ``chunk`` at a time, each
chunk before any of it is counted (a validation loop over a cache-resident chunk is cheaper
than checks inside the counting loop). A failure returns ``(status, position, counted_until)``:
the rows before ``counted_until`` were counted and the caller undoes them; with ``chunk >=
stop - start`` nothing was counted.

:func:`count_multiclass` counts a block of at most ``BLOCK_ROWS`` rows in passes, each a plain
loop the compiler vectorises: flat checks of the labels and scores; per row the true class,
weight and true score; the block copied class by class; class by class the keys ``2 * bin +
[c == t]``, the exact scores and each row's rank, tie, maximum and Brier statistics; the
histogram increments class by class (one class's bins at a time stay in cache); per row the
rank, calibration and loss counts. Unweighted multiclass probabilities of at most
``ROW_LANES`` (16) classes take :func:`count_small_rows`: a row is one vector register (a
masked load, nothing past the row read), its keys and statistics computed lane-parallel
(:func:`_probability_row`); the whole batch is validated before any of it is counted, and the
state arrays are reached through one int64 table of addresses.

Multiclass logits are keyed by their softmax probability ``exp(s_c - top) / total`` (one-vs-rest
ranking is not invariant under the softmax, so the logits' own keys would give other curves).
Rows of probabilities must sum to one within ``ROW_SUM_TOLERANCE`` (``BAD_SUM``); a batch of
logits that all lie in [0, 1] (multiclass: rows summing to one) returns ``OK`` with the position
``LOOKS_LIKE_PROBABILITIES``, for the caller to warn. The log loss of one sample from logits is
clipped at ``LOG_LOSS_BOUND`` (-log of float64's eps, as scikit-learn clips float64
probabilities), so that a -inf true-class logit leaves the sums finite. With a non-empty ``log``
each addition to a confidence sum first records the cell and its value before, so that a group
can undo the float sums exactly. The softmax, sigmoid and log loss use an exp and a log1p of
plain float64 arithmetic (:func:`_exp_nonpositive`, :func:`_log1p_unit`: within 1 ulp of
numpy's), because ``np.exp`` and ``np.log1p`` in a Numba loop are library calls that keep the
loop from vectorising.

SIMD and its plain twins: the fast paths use LLVM intrinsics written here (vector rows, masked
loads, ``llvm.fma``, prefetch, an 8 x 8 transposing copy, 32-bit integer arithmetic, bit casts).
Each has a plain-Numba twin of the same result (``PLAIN_TWINS``), and every kernel exists twice:
as written, and compiled again with the twins in place of the intrinsics (:func:`plain`). The
tests pin the two to the same bits; ``METRICSTREAM_PLAIN_KERNELS=1`` or
``metricstream.plain_kernels(True)`` makes the accumulator use the plain ones, a way around a
miscompile in some future Numba or LLVM. Measurements and the variants that were tried and not
kept: ``docs/performance.md`` (score kernels).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from .._core import llvm as _llvm

OK = 0
BAD_TRUE = 1
BAD_SCORE = 4
# Rows of a multiclass batch whose logits are all -inf have no softmax.
BAD_ROW = 5
# Rows of multiclass probabilities that do not sum to one (within ROW_SUM_TOLERANCE).
BAD_SUM = 6
# A multiclass row of probabilities may be off one by this much: bfloat16 rounding of a softmax
# (8 significant bits, toward zero) moves a row's sum by less than 2**-7 = 0.0078, and float32
# or float64 probabilities by far less. Per-class sigmoids, unnormalised scores and truncated
# rows are off by more.
ROW_SUM_TOLERANCE = 0.01
# With ``OK``, the position 1 says that every score of a batch of logits lay in [0, 1] (and for
# multiclass every row summed to one): probabilities, most likely.
LOOKS_LIKE_PROBABILITIES = 1
# Log loss of one sample from logits is clipped at -log(eps) of float64, as scikit-learn's
# ``log_loss`` clips the float64 probabilities (a -inf true-class logit loses this much).
LOG_LOSS_BOUND = -math.log(2.0**-52)
# Labels compared with ignore_index: 2**63 has no int64 value.
_TWO_63 = 2.0**63


# Bits of ``flags``. Whether scores are logits (``eps`` is None: no clipping), whether bins
# come from explicit thresholds (``thresholds`` is not None) and whether rows are weighted are
# told by the argument types instead: Numba compiles one version per type, which drops the
# unused branches of the inner loop (measured, 256x10: 23 -> 13 us; see "Compile time:").
HAS_IGNORE = 1

_SIGN = np.uint32(0x80000000)
# float32 bits of 0.5 and of 2**-24 (the smallest non-zero 1 - p of a float32 p >= 0.5).
_HALF_BITS = 0x3F000000
_MIN_COMPLEMENT_BITS = 0x33800000
# float32 bits of 2**-16: below it float16 probabilities (subnormal) have at most 7 fraction bits.
_TINY_BITS = 0x37800000


@njit
def key_layout(shift):
    """The probability key layout of a ``shift`` code: ``(fine, fine_low, tiny, coarse,
    coarse_low, offset, base, last, complement, complement_low)`` (``*_low``: the masks of the
    dropped bits).

    A code below 32 drops ``shift`` low bits everywhere (``tiny = 0``). A code ``fine + 32 *
    coarse + 1024 * complement`` keys ``p < 1/2`` by ``g(t) = t >> coarse`` below ``tiny =
    bits(2**-16)`` and ``offset + ((t - tiny) >> fine)`` from it up (``t`` the bits of ``p``),
    and ``p >= 1/2`` by ``bits(1 - p) >> complement``. The default, ``(16, 13, 14)``, keeps
    the fraction bits of float16 (10) where float16 has them, of bfloat16 (7) below ``2**-16``,
    and 9 for ``1 - p``, whose float16 values are multiples of ``2**-11``: every float16 and
    every bfloat16 probability has a bin of its own. ``base = bits(2**-24) >> complement`` and
    ``last`` as in :func:`probability_key_layout`."""
    code = np.int64(shift)
    if code < 32:
        fine = np.uint32(code)
        coarse = fine
        complement = fine
        tiny = np.uint32(0)
        offset = np.int64(0)
    else:
        fine = np.uint32(code & 31)
        coarse = np.uint32((code >> 5) & 31)
        complement = np.uint32((code >> 10) & 31)
        tiny = np.uint32(_TINY_BITS)
        offset = (np.int64(_TINY_BITS - 1) >> np.int64(coarse)) + 1
    fine_low = np.uint32((np.uint32(1) << fine) - np.uint32(1))
    coarse_low = np.uint32((np.uint32(1) << coarse) - np.uint32(1))
    complement_low = np.uint32((np.uint32(1) << complement) - np.uint32(1))
    zero = np.int64(0)
    layout = (fine, fine_low, tiny, coarse, coarse_low, offset, zero, zero, complement, zero)
    middle = np.int64(_magnitude_bin(np.uint32(_HALF_BITS), layout))
    base = np.int64(_MIN_COMPLEMENT_BITS) >> np.int64(complement)
    top = np.int64(_HALF_BITS) >> np.int64(complement)
    last = middle + 2 + top - base
    return (
        fine,
        fine_low,
        tiny,
        coarse,
        coarse_low,
        offset,
        base,
        last,
        complement,
        complement_low,
    )


# Magnitude bits of |x| = 2**-64, 2**-6, 2**7 and 2**64: the edges of the logit layout's
# regions (outer, middle, fine, middle, outer).
_LOGIT_EDGES = (
    np.uint32(0x1F800000),
    np.uint32(0x3C800000),
    np.uint32(0x43000000),
    np.uint32(0x5F800000),
)


@njit
def logit_layout(shift):
    """The key layout of logits for a ``shift`` code: ``(fine, middle, outer, half)``.

    A code below 32 drops ``shift`` low bits of the sortable key everywhere (65,536 bins at
    16: exactly the bfloat16 values). A code ``fine + 32 * middle + 1024 * outer`` drops
    ``fine`` bits of the magnitude where logits and log-probabilities live, ``2**-6 <= |x| <
    2**7``, ``middle`` bits for ``2**-64 <= |x| < 2**-6`` and ``2**7 <= |x| < 2**64``, and
    ``outer`` bits beyond. Bins ``0 .. half - 1`` hold the negative scores, ``half ..
    2 half - 1`` zero and the positive ones."""
    code = np.int64(shift)
    if code < 32:
        fine = np.uint32(code)
        middle = fine
        outer = fine
    else:
        fine = np.uint32(code & 31)
        middle = np.uint32((code >> 5) & 31)
        outer = np.uint32((code >> 10) & 31)
    layout = (fine, middle, outer, np.int64(0))
    half = np.int64(_logit_magnitude_bin(np.uint32(0x7FFFFFFF), layout)) + 1
    return (fine, middle, outer, half)


@njit(inline="always")
def probability_key_layout(shift):
    """``(base, last)`` of the probability key of a ``shift`` code (see :func:`key_layout`):
    bins ``0`` (p = 0), ``1 .. M`` (0 < p < 1/2, ``M = g(bits(1/2))``), then ``M + 1 ..
    last - 1`` for ``1 - p`` from 1/2 down to ``2**-24`` (``bits(1 - p) >> complement`` from
    ``bits(1/2) >> complement`` down to ``base``), ``last`` (p = 1)."""
    layout = key_layout(shift)
    return layout[6], layout[7]


@njit(inline="always")
def _magnitude_bin(t, layout):
    """``g(t)`` of :func:`key_layout`: the bin of a non-negative float32's bits ``t``,
    branch-free (32-bit lanes)."""
    fine, tiny, coarse, offset = layout[0], layout[2], layout[3], layout[5]
    below = np.int32(_shift_right32(t, coarse))
    above = _add32(np.int32(offset), np.int32(_shift_right32(_subu32(t, tiny), fine)))
    return below if t < tiny else above


@njit(inline="always")
def _magnitude_exact(t, layout):
    """Whether ``t`` is its bin's own value (the bits :func:`_magnitude_bin` drops are 0)."""
    fine_low, tiny, coarse_low = layout[1], layout[2], layout[4]
    dropped = (t & coarse_low) if t < tiny else (np.uint32(t - tiny) & fine_low)
    return dropped == 0


_NEGATIVE_ZERO = np.uint32(0x80000000)
_LN2 = math.log(2.0)
# The running product of probabilities >= 2**-52 is scaled up by 2**500 below 2**-500: it stays
# a normal float (>= 2**-552), and the scaling is exact.
_HUGE_EXPONENT = 500
_HUGE = 2.0**_HUGE_EXPONENT
_TINY = 2.0**-_HUGE_EXPONENT
# Rows of a block counted class by class (its scratch stays in L1 at 10 classes).
BLOCK_ROWS = 256
# Histograms of more bytes than this are prefetched PREFETCH_CLASSES classes ahead.
PREFETCH_BYTES = 1 << 23
PREFETCH_CLASSES = 2


def _kernel(function):
    """``njit(nogil=True)``, cached on disk when there is somewhere to write the cache."""
    try:
        return njit(cache=True, nogil=True)(function)
    except RuntimeError:  # no writable cache location
        return njit(nogil=True)(function)


def compiled_for(kernel, args):
    """The machine code of ``kernel`` for the Numba types of ``args``, callable directly.

    Compiles (or loads from the on-disk cache) that specialisation if needed. Calling the
    result skips Numba's dispatch, which types every argument on each call (about 0.35 us of
    an 18-argument call). It checks no type: the caller passes only arguments of exactly these
    Numba types afterwards (arrays of the same dtype, dimensions, layout, alignment and
    writeability; scalars of the same Python type). With the JIT disabled
    (``NUMBA_DISABLE_JIT=1``) it is the kernel itself.
    """
    compile_signature = getattr(kernel, "compile", None)
    if compile_signature is None:
        return kernel
    from numba import typeof

    return compile_signature(tuple(typeof(argument) for argument in args))


@njit(inline="always")
def _threshold_bin(v, thresholds):
    """``(bin, exact)`` of the score ``v``: the number of thresholds ``<= v``."""
    lo = 0
    hi = thresholds.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if thresholds[mid] <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo, lo > 0 and thresholds[lo - 1] == v


@intrinsic
def _float32_bits(typingctx, value):
    """The bits of a float32 as a uint32 (a register move; numba has no scalar view)."""
    if not isinstance(value, types.Float) or value.bitwidth != 32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def _shift_right32(typingctx, value, shift):
    """``value >> shift`` of two uint32 in 32-bit arithmetic (Numba widens integer
    arithmetic to 64 bits, which halves the lanes of a vectorised loop)."""
    if value != types.uint32 or shift != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        return builder.lshr(args[0], args[1])

    return types.uint32(types.uint32, types.uint32), codegen


def _arithmetic32(kind, operation):
    """An intrinsic: ``operation`` of two integers of Numba type ``kind`` in 32-bit arithmetic,
    wrapping (Numba widens 32-bit sums and differences to 64 bits: in a vectorised loop the
    key's adds and subtracts then ran in half as many lanes, with conversions between)."""

    def typer(typingctx, a, b):
        if a != kind or b != kind:
            return None

        def codegen(context, builder, signature, args):
            return getattr(builder, operation)(args[0], args[1])

        return kind(kind, kind), codegen

    return intrinsic(typer)


_add32 = _arithmetic32(types.int32, "add")
_sub32 = _arithmetic32(types.int32, "sub")
_subu32 = _arithmetic32(types.uint32, "sub")


@njit(inline="always")
def _key_bin(v, logit):
    """``(bin, exact)`` of any score (logits): :func:`_logit_key` with a 64-bit bin."""
    b, exact = _logit_key(v, logit)
    return np.int64(b), exact


@njit(inline="always")
def _probability_bin(v, layout):
    """``(bin, exact)`` of a probability: the key of ``p`` below 1/2, of ``1 - p`` above."""
    base, last = layout[6], layout[7]
    f = np.float32(v)
    if f < np.float32(0.5):
        if f == 0:
            return np.int64(0), f == v
        u = _float32_bits(f)
        return np.int64(_magnitude_bin(u, layout)) + 1, _magnitude_exact(u, layout) and f == v
    y = np.float32(1.0) - f  # exact (Sterbenz): a multiple of 2**-24
    if y == 0:
        return last, f == v
    u = _float32_bits(y)
    bin_ = last - 1 - np.int64(_shift_right32(u, layout[8])) + base
    return bin_, (u & layout[9]) == 0 and f == v


@njit(inline="always")
def _bin_of(v, layout, logit, thresholds, threshold_mode, probabilities):
    # (``threshold_mode``, see :func:`_mode`: pruned also where the plain twins call this)
    if threshold_mode is not None:
        return _threshold_bin(v, thresholds)
    if probabilities:
        return _probability_bin(v, layout)
    return _key_bin(v, logit)


@njit(inline="always")
def _label_ok(t, limit):
    return t >= 0 and t < limit and np.floor(t) == t


def _ignored(t, ignore_index):  # pragma: no cover - replaced by the overload below
    """Whether label ``t`` equals the int64 ``ignore_index`` exactly: integers as integers
    (a uint64 label 2**63 never equals 2**63 - 1), floats only when ``ignore_index`` is a
    float64 value (2**53 + 1 is none), never through a float64 detour."""


@overload(_ignored, inline="always")
def _ignored_impl(t, ignore_index):
    if isinstance(t, types.Integer) and not t.signed and t.bitwidth == 64:
        return lambda t, ignore_index: (ignore_index >= 0) & (np.uint64(max(ignore_index, 0)) == t)
    if isinstance(t, types.Integer):
        return lambda t, ignore_index: np.int64(t) == ignore_index

    def float_ignored(t, ignore_index):
        f = np.float64(ignore_index)
        below = f < _TWO_63  # select before converting: 2**63 has no int64 value
        exact = below & (np.int64(f * np.float64(below)) == ignore_index)
        return exact & (t == f)

    return float_ignored


@njit(inline="always")
def _score_ok(v, probabilities):
    if probabilities:
        return v >= 0 and v <= 1
    return v == v and v != np.inf


@njit(inline="always")
def _fine_bin(q, fine_bins):
    f = np.int64(q * fine_bins)
    if f >= fine_bins:  # a confidence of exactly 1.0 belongs to the last bin
        f = fine_bins - 1
    elif f < 0:
        f = 0
    return f


@njit(inline="always")
def _clip_log(p, eps):
    if p < eps:
        p = eps
    elif p > 1.0 - eps:
        p = 1.0 - eps
    return np.log(p)


@njit
def _check_row(labels, scores, i, has_ignore, ignore_index, probabilities):
    """``(status, position)`` of row ``i`` of a multiclass batch (``OK`` for ignored rows)."""
    num_classes = scores.shape[1]
    t = labels[i]
    if has_ignore and _ignored(t, ignore_index):
        return OK, 0
    if not _label_ok(t, num_classes):
        return BAD_TRUE, i
    top = -np.inf
    total = 0.0
    for c in range(num_classes):
        v = scores[i, c]
        if not _score_ok(v, probabilities):
            return BAD_SCORE, i * num_classes + c
        if v > top:
            top = v
        total += np.float64(v)
    if not probabilities and top == -np.inf:
        return BAD_ROW, i
    if probabilities and not abs(total - 1.0) <= ROW_SUM_TOLERANCE:
        return BAD_SUM, i
    return OK, 0


@njit
def _rows_look_valid(labels, scores, lo, hi, has_ignore, ignore_index, probabilities):
    """Branch-free check of rows ``[lo, hi)``, which the compiler vectorises: False when some
    label or score is bad (then ``_check_row`` finds the first one). About 1 us of a 256x10
    update (2 us row by row with early exits)."""
    num_classes = scores.shape[1]
    ok = True
    for i in range(lo, hi):
        t = labels[i]
        ok &= (_ignored(t, ignore_index) & has_ignore) | (
            (t >= 0) & (t < num_classes) & (np.floor(t) == t)
        )
    # One flat loop over the chunk's scores, "all good" as a conjunction: vectorised, 0.06 ns a
    # score (a 2-D loop accumulating "some bad" took 0.4 ns).
    flat = scores.reshape(-1)
    for j in range(lo * num_classes, hi * num_classes):
        v = flat[j]
        if probabilities:
            ok &= (v >= 0) & (v <= 1)
        else:
            ok &= (v == v) & (v != np.inf)
    block = scores[lo:hi]
    if not probabilities:  # a row of -inf logits has no softmax
        for i in range(hi - lo):
            top = -np.inf
            for c in range(num_classes):
                top = max(top, block[i, c])
            ok &= top != -np.inf
    else:  # a row of probabilities sums to one (ignored rows may hold anything)
        for i in range(hi - lo):
            total = 0.0
            for c in range(num_classes):
                total += np.float64(block[i, c])
            ignored = _ignored(labels[lo + i], ignore_index) & has_ignore
            ok &= ignored | (abs(total - 1.0) <= ROW_SUM_TOLERANCE)
    return ok


@njit(inline="always")
def _probability_key(v, layout):
    """``(bin, exact)`` as :func:`_probability_bin` for a valid probability, without branches
    (so that a loop of it vectorises)."""
    base, last = layout[6], layout[7]
    f = np.float32(v)
    u = np.uint32(_float32_bits(f) & np.uint32(0x7FFFFFFF))  # -0.0 counts as +0.0
    y = np.float32(1.0) - f
    uy = _float32_bits(y)
    lower = _add32(_magnitude_bin(u, layout), np.int32(u != 0))
    upper = _sub32(np.int32(last - 1 + base), np.int32(_shift_right32(uy, layout[8])))
    upper = np.int32(last) if uy == 0 else upper
    below = f < np.float32(0.5)
    exact = _magnitude_exact(u, layout) if below else ((uy & layout[9]) == 0)
    return (lower if below else upper), exact & (f == v)


@njit(inline="always")
def _logit_magnitude_bin(m, logit):
    """The bin of a magnitude ``m`` (float32 bits without the sign) under a logit layout:
    the full bins of each region below ``m`` plus ``m``'s place in its own region (the
    regions' edges are whole binades, so for one shift everywhere this is ``m >> shift``)."""
    fine, middle, outer, _ = logit
    e1, e2, e3, e4 = _LOGIT_EDGES
    total = _shift_right32(min(m, e1), outer)
    total += _shift_right32(np.uint32(min(max(m, e1), e2) - e1), middle)
    total += _shift_right32(np.uint32(min(max(m, e2), e3) - e2), fine)
    total += _shift_right32(np.uint32(min(max(m, e3), e4) - e3), middle)
    total += _shift_right32(np.uint32(max(m, e4) - e4), outer)
    uniform = _shift_right32(m, fine)  # also for shifts above 23, where edges fall inside bins
    return np.int32(uniform) if fine == outer else np.int32(total)


@njit(inline="always")
def _logit_magnitude_exact(m, logit):
    """Whether the bits :func:`_logit_magnitude_bin` drops from ``m`` are all 0."""
    fine, middle, outer, _ = logit
    e1, e2, e3, e4 = _LOGIT_EDGES
    one = np.uint32(1)
    shift = middle if m < e2 else (fine if m < e3 else middle)
    shift = outer if (m < e1 or m >= e4) else shift
    edge = np.uint32(0) if m < e1 else (e1 if m < e2 else (e2 if m < e3 else e3))
    edge = e4 if m >= e4 else edge
    edge = np.uint32(0) if fine == outer else edge
    shift = fine if fine == outer else shift
    return (np.uint32(m - edge) & np.uint32((one << shift) - one)) == 0


@njit(inline="always")
def _logit_key(v, logit):
    """``(bin, exact)`` of a logit (any score), without branches: negative scores below
    ``half``, in reverse order of magnitude, then ``+0`` (``-0.0`` counts as ``+0.0``) and the
    positive scores from ``half`` up (see :func:`logit_layout`)."""
    f = np.float32(v)
    u = _float32_bits(f)
    u = np.uint32(0) if u == _NEGATIVE_ZERO else u
    m = np.uint32(u & np.uint32(0x7FFFFFFF))
    g = _logit_magnitude_bin(m, logit)
    half = np.int32(logit[3])
    b = (half - np.int32(1) - g) if (u & _SIGN) != 0 else (half + g)
    return b, _logit_magnitude_exact(m, logit) & (f == v)


@njit(inline="always")
def _valid_score(v, probabilities):
    if probabilities:
        return (v >= 0) & (v <= 1)
    return (v == v) & (v != np.inf)


@njit
def _labels_look_valid(labels, lo, hi, num_classes, has_ignore, ignore_index):
    """Branch-free check of the labels of rows ``[lo, hi)`` (vectorised)."""
    ok = True
    for i in range(lo, hi):
        t = labels[i]
        ok &= (_ignored(t, ignore_index) & has_ignore) | (
            (t >= 0) & (t < num_classes) & (np.floor(t) == t)
        )
    return ok


@njit
def _log_of_product(product, exponent, sign):
    """``-sign * log(product * 2**exponent)``: the log loss of the factors multiplied in."""
    return -sign * (np.log(product) + exponent * _LN2)


@njit
def _class_statistics(
    columns, c, n, true_score, target, counts, keys, exact_count, greater, tied_before,
    tied_after, top, row_sum, square, layout, thresholds, probability_mode, threshold_mode,
):  # fmt: skip
    """Class ``c`` of a block of :func:`count_multiclass` (rows ``r < n`` of ``columns``): for
    probabilities its keys and exact scores, and each row's rank, tie, maximum, sum and (for
    probabilities) Brier statistics, set for ``c == 0`` and added to after. Returns ``(ok,
    unit)``: whether every score was valid, and (logits) every score in [0, 1]."""
    probabilities = probability_mode is not None
    first = c == 0
    c32 = np.int32(c)
    ok = True
    unit = not probabilities
    if not probabilities:
        for r in range(n):
            v = columns[c, r]
            ok &= _valid_score(v, probabilities)  # ignored rows hold 0 here
            unit &= (v >= 0) & (v <= 1)
    else:
        exact_scores = np.int32(0)
        for r in range(n):
            v = columns[c, r]
            if threshold_mode is not None:
                b, exact = _threshold_bin(v, thresholds)
            else:
                b, exact = _probability_key(v, layout)
            b32 = np.int32(b)
            keys[c, r] = _add32(_add32(b32, b32), np.int32(target[r] == c32))
            exact_scores += np.int32(exact) & counts[r]
            ok &= _valid_score(v, probabilities)  # ignored rows hold 0 here
        exact_count[c] = exact_scores
    for r in range(n):
        v = columns[c, r]
        s = true_score[r]
        t = target[r]
        equal = v == s
        above = np.int32(v > s)
        before = np.int32(equal & (c32 < t))
        after = np.int32(equal & (c32 > t))
        greater[r] = above if first else greater[r] + above
        tied_before[r] = before if first else tied_before[r] + before
        tied_after[r] = after if first else tied_after[r] + after
    for r in range(n):
        v = columns[c, r]
        top[r] = v if first or v > top[r] else top[r]
        row_sum[r] = np.float64(v) if first else row_sum[r] + np.float64(v)
        if probabilities:
            d = np.float64(v) - np.float64(target[r] == c32)
            square[r] = d * d if first else square[r] + d * d
    return ok, unit


@njit
def _row_counts(
    n, target, row_weight, greater, tied_after, fine, correct, ranks_flat, num_classes,
    cal_counts, cal_conf, log, logging, logged, inverse, top, true_score, factor, square,
    clip_start, log_sum, brier_sum, probability_mode,
):  # fmt: skip
    """The rank and calibration increments of the rows ``r < n`` of a block of
    :func:`count_multiclass`, and their Brier and (logits) log-loss terms added to
    ``brier_sum`` and ``log_sum`` in row order. Returns ``(logged, log_sum, brier_sum)``."""
    probabilities = probability_mode is not None
    optimistic = num_classes * num_classes
    for r in range(n):
        ti = target[r]
        if ti < 0:
            continue
        w = row_weight[r]
        wf = np.float64(w)
        g = np.int64(greater[r])
        ranks_flat[np.uint64(ti * num_classes + g + tied_after[r])] += w
        ranks_flat[np.uint64(optimistic + ti * num_classes + g)] += w
        f = np.uint64(fine[r])
        cal_counts[f, 0] += w
        cal_counts[f, 1] += w * np.int64(correct[r])
        if logging:  # the cell's value before, for an exact undo
            log[logged] = np.float64(f)
            log[logged + 1] = cal_conf[f]
            logged += 2
        if not probabilities:
            cal_conf[f] += wf * inverse[r]
            gap = np.float64(top[r]) - np.float64(true_score[r])
            if gap > clip_start:  # rare: the loss may reach the bound
                log_sum += wf * min(gap + np.log(factor[r]), LOG_LOSS_BOUND)
                factor[r] = 1.0  # (its log is counted here)
            else:
                log_sum += wf * gap
        else:
            cal_conf[f] += wf * np.float64(top[r])
        brier_sum += wf * square[r]
    return logged, log_sum, brier_sum


@njit
def _softmax_keys(
    columns, n, top, inverse, target, counts, keys, exact_count, layout, thresholds,
    threshold_mode,
):  # fmt: skip
    """The keys and exact scores of a block of logits (see :func:`count_multiclass`), class by
    class, from each probability ``exp(s_c - top) * inverse``."""
    for c in range(columns.shape[0]):
        exact_scores = np.int32(0)
        c32 = np.int32(c)
        for r in range(n):
            e = _exp_nonpositive(np.float64(columns[c, r]) - np.float64(top[r]))
            q = e * inverse[r]
            if threshold_mode is not None:
                b, exact = _threshold_bin(q, thresholds)
            else:
                b, exact = _probability_key(q, layout)
            b32 = np.int32(b)
            keys[c, r] = _add32(_add32(b32, b32), np.int32(target[r] == c32))
            exact_scores += np.int32(exact) & counts[r]
        exact_count[c] = exact_scores


# Compile time: a kernel's branches on ``eps is None``, ``thresholds is not None`` and
# ``weights is None`` are pruned by Numba before typing only where that argument *is* None
# (its dead-branch pruning resolves ``arg is None`` for a None-typed argument, not for a float
# or an array), so every specialisation for probabilities also typed and lowered the logits
# path, with thresholds also the key path, and weighted also the running product. So
# ``count_multiclass`` and ``count_elementwise`` are thin entries that call their body with
# three modes from :func:`_mode`, None or the literal 1, on which a branch ``mode is None`` is
# pruned both ways: each specialisation compiles one path. The passes that do not depend on
# the weights and the unweighted product (:func:`_class_statistics`, :func:`_softmax_keys`,
# :func:`_row_counts`, :func:`_softmax_statistics`, :func:`_logit_block`, the key layouts) and
# the paths a valid batch does not take or takes once a chunk (:func:`_check_row`,
# :func:`_rows_look_valid`, :func:`_log_of_product`) are plain ``njit``
# functions, called rather than inlined into Numba's IR: ``inline="always"`` copies a callee's
# IR at every call site and types and lowers each copy again, while a called function is
# compiled once per signature, shared by the specialisations that differ only in what it does
# not see, and linked (LLVM may still inline it). Numba's type inference grows faster than
# the size of a function, so smaller bodies also type faster. The per-element helpers inside
# the vectorised loops (keys, exp, log1p, the SIMD intrinsics) stay inlined: a call there
# would keep the loop from vectorising. So does :func:`_check_chunk`, the row-by-row check of
# ``count_elementwise`` that every batch runs: called, a 10**6 binary update took a third
# longer. Literal constants passed to called functions are
# ``np.int64`` (a literal argument compiles a ``Literal[int]`` specialisation of its own).
def _mode(value):
    """None when ``value`` is None, else 1: in compiled code the literal 1 (an overload inlined
    as a constant), a type that a body's branch ``mode is None`` is pruned by, both ways
    (``value is None`` is pruned only where it is None; see "Compile time:")."""
    return None if value is None else 1


@overload(_mode, inline="always")
def _mode_overload(value):
    if isinstance(value, types.NoneType):
        return lambda value: None
    return lambda value: 1


@_kernel
def count_multiclass(
    labels,
    scores,
    weights,
    curves,
    inexact,
    ranks,
    cal_counts,
    cal_conf,
    sums,
    thresholds,
    shift,
    start,
    stop,
    chunk,
    sign,
    flags,
    ignore_index,
    eps,
    log,
):
    """Count rows ``[start, stop)`` of a multiclass batch, one-vs-rest per class.

    ``labels`` ``(N,)``, ``scores`` ``(N, C)``, ``weights`` ``(N,)`` or None. Per counted
    row with true class ``t`` and weight ``w`` (times ``sign``):

    * ``curves[c, bin(s_c), c == t] += w`` for every class ``c``, and ``inexact[c] += 1`` when
      ``s_c`` is not its bin's value;
    * ``ranks[0, t, g + h] += w`` and ``ranks[1, t, g] += w``, where ``g`` counts the classes
      scored strictly above ``s_t`` and ``h`` the classes ``c > t`` scored equal to it
      (scikit-learn's stable-sort rank, then the optimistic rank);
    * with the top-label confidence ``q`` (``max_c s_c``, or the largest softmax probability
      for logits) and ``correct`` (the first argmax is ``t``: no class scores above ``s_t``
      and none before ``t`` ties it): ``cal_counts[fine(q)] += (w, w * correct)`` and
      ``cal_conf[fine(q)] += w * q``;
    * ``sums += w * (sum_c (p_c - [c == t])^2, -log(clip(p_t, eps, 1 - eps)))`` (for logits,
      ``p`` is the softmax and the loss is ``min(logsumexp(s) - s_t, LOG_LOSS_BOUND)``;
      without weights, probabilities add ``-log`` of the product of the clipped ``p_t``).

    For logits, ``bin(s_c)`` is the bin of the softmax probability ``p_c``. Rows of
    probabilities must sum to one (``BAD_SUM``). ``log``: empty, or ``2 * (stop - start)``
    float64 receiving (cell, value before) of each confidence sum added to.

    Rows go through in blocks of at most ``BLOCK_ROWS``, class by class (see the module
    notes). A chunk of at most one block is validated in the block's own passes; a longer
    one by a validation pass first. Returns ``(status, position, counted_until)``: ``OK``,
    ``LOOKS_LIKE_PROBABILITIES`` or 0, and ``stop``; or the first bad element and the first
    row not counted.
    """
    return _count_multiclass_body(
        labels,
        scores,
        weights,
        curves,
        inexact,
        ranks,
        cal_counts,
        cal_conf,
        sums,
        thresholds,
        shift,
        start,
        stop,
        chunk,
        sign,
        flags,
        ignore_index,
        eps,
        log,
        _mode(eps),
        _mode(thresholds),
        _mode(weights),
    )


@njit
def _count_multiclass_body(
    labels,
    scores,
    weights,
    curves,
    inexact,
    ranks,
    cal_counts,
    cal_conf,
    sums,
    thresholds,
    shift,
    start,
    stop,
    chunk,
    sign,
    flags,
    ignore_index,
    eps,
    log,
    probability_mode,
    threshold_mode,
    weight_mode,
):
    """The body of :func:`count_multiclass`, compiled for the modes of :func:`_mode`:
    ``probability_mode``, ``threshold_mode`` and ``weight_mode`` say whether ``eps``,
    ``thresholds`` and ``weights`` are given (see "Compile time:")."""
    num_classes = scores.shape[1]
    fine_bins = cal_counts.shape[0]
    has_ignore = (flags & HAS_IGNORE) != 0
    # Constants of the specialisation: the branches on them are pruned (see "Compile time:").
    probabilities = probability_mode is not None
    weighted = weight_mode is not None
    layout = key_layout(shift)
    stride = 2 * curves.shape[1]
    hist = curves.reshape(-1)
    prefetch = hist.nbytes > PREFETCH_BYTES
    ranks_flat = ranks.reshape(-1)
    block = max(1, min(BLOCK_ROWS, chunk, stop - start))
    # Scratch of one block: its scores class by class, their keys (2 * bin + is true class),
    # and per row the true class (-1: not counted), weight, true score and statistics.
    # (Four allocations, sliced: an allocation costs about 70 ns. One allocation viewed as
    # the four dtypes saved 0.1 us of a 256 x 10 update and cost 0.5 s of compile.)
    # (For logits, EXP_LANES elements past each scratch array: _softmax_lanes reads and writes
    # whole vectors of rows.)
    pad = 0 if probabilities else EXP_LANES
    ints = np.empty((num_classes + 7) * block + num_classes + pad, np.int32)
    keys = ints[: num_classes * block].reshape((num_classes, block))
    counts = ints[num_classes * block : (num_classes + 1) * block]
    greater = ints[(num_classes + 1) * block : (num_classes + 2) * block]
    tied_before = ints[(num_classes + 2) * block : (num_classes + 3) * block]
    tied_after = ints[(num_classes + 3) * block : (num_classes + 4) * block]
    fine = ints[(num_classes + 4) * block : (num_classes + 5) * block]
    correct = ints[(num_classes + 5) * block : (num_classes + 6) * block]
    target = ints[(num_classes + 6) * block : (num_classes + 7) * block]
    exact_count = ints[(num_classes + 7) * block :]
    values = np.empty((num_classes + 2) * block + pad, scores.dtype)
    columns = values[: num_classes * block].reshape((num_classes, block))
    true_score = values[num_classes * block : (num_classes + 1) * block]
    top = values[(num_classes + 1) * block :]
    # For logits, also each row's softmax denominator and the block's exps class by class
    # (when short rows make that scratch small; long ones compute each exp twice instead).
    # ``factor``: per row, the clipped true-class probability, or for logits the softmax
    # denominator (the log loss is ``-log`` of the one, ``top - s_t + log`` of the other).
    width = block + pad
    floats = np.empty((3 if probabilities else 4) * width)
    square = floats[:width]
    factor = floats[width : 2 * width]
    row_sum = floats[2 * width : 3 * width]
    inverse = floats[3 * width :]
    # Whether every score of logits lay in [0, 1] with rows summing to one: probabilities.
    unit = not probabilities
    row_weight = np.empty(block, hist.dtype)
    # Without weights, the log loss of probabilities is the log of the running product of
    # the clipped true-class probabilities, kept a normal float by exact power-of-two
    # scaling: one log a call instead of one a row; for logits, the log of the product of the
    # softmax denominators (>= 1, scaled down), which is added (``log_sign``).
    product = 1.0
    exponent = np.int64(0)
    log_sign = sign if probabilities else -sign
    brier_sum = 0.0
    log_sum = 0.0
    # Beyond this gap between the top and the true logit the loss may reach LOG_LOSS_BOUND
    # (the log of the softmax denominator adds at most log C).
    clip_start = LOG_LOSS_BOUND - np.log(np.float64(num_classes))
    # ``log``, when not empty, receives (cell, value before) of every confidence sum added to.
    logging = log.shape[0] > 0
    logged = np.int64(0)
    for lo in range(start, stop, chunk):
        hi = min(lo + chunk, stop)
        if hi - lo > block and not _rows_look_valid(
            labels, scores, lo, hi, has_ignore, ignore_index, probabilities
        ):
            for i in range(lo, hi):
                status, position = _check_row(
                    labels, scores, i, has_ignore, ignore_index, probabilities
                )
                if status != OK:
                    sums[0] += brier_sum
                    sums[1] += log_sum + _log_of_product(product, exponent, log_sign)
                    return status, position, lo
        for blo in range(lo, hi, block):
            n = min(blo + block, hi) - blo
            # Labels checked without branches (vectorised); scores in the key pass below
            # (measured, 256x10: a flat pass of its own cost 1.5 us).
            ok = _labels_look_valid(labels, blo, blo + n, num_classes, has_ignore, ignore_index)
            # Rows: the true class (-1: ignored), weight (0 when ignored) and true score.
            # (Branch-free: 256x10, 0.9 -> 0.3 us.)
            for r in range(n):
                t = labels[blo + r]
                skip = _ignored(t, ignore_index) & has_ignore
                # Clipped before the conversion: a bad label (found below; NaN, inf) must not
                # read outside the row.
                ti = np.int32(min(max(t, 0), num_classes - 1)) if t == t else np.int32(0)
                target[r] = np.int32(-1) if skip else ti
                counts[r] = np.int32(1) - np.int32(skip)
                if not weighted:
                    w = sign
                else:
                    w = weights[blo + r] * sign
                row_weight[r] = 0 if skip else w
            skipped = False
            if has_ignore:
                for r in range(n):
                    skipped |= counts[r] == 0
            for r in range(n):
                true_score[r] = scores[blo + r, max(target[r], np.int32(0))]
            # The block class by class: contiguous rows for the passes below. Read row by row
            # when a row is short (256x10: 0.7 us faster), class by class when it is long
            # (256x1000: 0.15 ms faster, the 1 MB scratch written in order).
            if num_classes <= 64:
                for r in range(n):
                    for c in range(num_classes):
                        columns[c, r] = scores[blo + r, c]
            else:
                _copy_columns(scores, blo, n, columns)
            if skipped:  # ignored rows' scores may be anything: give them a valid bin
                for r in range(n):
                    if counts[r] == 0:
                        for c in range(num_classes):
                            columns[c, r] = 0
            # Class by class, vectorised over the block's rows: keys, exact scores, and the
            # rank, tie, maximum and Brier statistics of each row.
            # (Logits are keyed by their softmax probability once the row's softmax is known,
            # below: one-vs-rest ranking is not invariant under the softmax.)
            for c in range(num_classes):
                valid, in_unit = _class_statistics(
                    columns, c, n, true_score, target, counts, keys, exact_count, greater,
                    tied_before, tied_after, top, row_sum, square, layout, thresholds,
                    probability_mode, threshold_mode,
                )  # fmt: skip
                ok &= valid
                unit &= in_unit
            if not probabilities:  # a row of -inf logits has no softmax
                for r in range(n):
                    ok &= (counts[r] == 0) | (top[r] != -np.inf)
                    unit &= abs(row_sum[r] - 1.0) <= ROW_SUM_TOLERANCE
            else:  # a row of probabilities sums to one
                for r in range(n):
                    ok &= (counts[r] == 0) | (abs(row_sum[r] - 1.0) <= ROW_SUM_TOLERANCE)
            if not ok:
                for i in range(blo, blo + n):
                    status, position = _check_row(
                        labels, scores, i, has_ignore, ignore_index, probabilities
                    )
                    if status != OK:
                        sums[0] += brier_sum
                        sums[1] += log_sum + _log_of_product(product, exponent, log_sign)
                        return status, position, lo
            if not probabilities:
                # The softmax of each row (denominator, top-label confidence, Brier term),
                # then each class's keys from its probability ``exp(s_c - top) / total``.
                _softmax_statistics(columns, top, true_score, target, n, factor, inverse, square)
                _softmax_keys(
                    columns, n, top, inverse, target, counts, keys, exact_count, layout,
                    thresholds, threshold_mode,
                )  # fmt: skip
            # Histograms class by class: one class's bins at a time stay in cache.
            counted = 0
            for r in range(n):
                counted += counts[r]
            for c in range(num_classes):
                inexact[c] += sign * (counted - exact_count[c])
                offset = c * stride
                if prefetch and c + PREFETCH_CLASSES < num_classes:
                    # Histograms far larger than the caches: the cells of the class two ahead
                    # are fetched meanwhile (256 x 1000, state evicted between updates: 1.1 ->
                    # 0.8-0.85 ms; with the state in cache 5% slower, hence only here).
                    ahead = offset + PREFETCH_CLASSES * stride
                    for r in range(n):
                        _prefetch(hist, np.uint64(ahead + keys[c + PREFETCH_CLASSES, r]))
                        hist[np.uint64(offset + keys[c, r])] += row_weight[r]
                else:
                    for r in range(n):
                        hist[np.uint64(offset + keys[c, r])] += row_weight[r]
            # Per row, without branches (vectorised): the top-label confidence's fine bin,
            # whether the first argmax is the true class, the log-loss factor.
            if not probabilities:
                for r in range(n):
                    fine[r] = np.int32(_fine_bin(inverse[r], fine_bins))
                    correct[r] = np.int32((greater[r] == 0) & (tied_before[r] == 0))
                    factor[r] = factor[r] if target[r] >= 0 else 1.0
            else:
                for r in range(n):
                    q = np.float64(top[r])
                    fine[r] = np.int32(_fine_bin(q, fine_bins))
                    correct[r] = np.int32((greater[r] == 0) & (tied_before[r] == 0))
                    p = min(max(np.float64(true_score[r]), eps), 1.0 - eps)
                    factor[r] = p if target[r] >= 0 else 1.0
            # Per row: the rank and calibration increments and the Brier sum (in one loop
            # rather than one each: 0.35 us less).
            logged, log_sum, brier_sum = _row_counts(
                n, target, row_weight, greater, tied_after, fine, correct, ranks_flat,
                num_classes, cal_counts, cal_conf, log, logging, logged, inverse, top,
                true_score, factor, square, clip_start, log_sum, brier_sum, probability_mode,
            )  # fmt: skip
            # The log loss as a product of eight factors at a time (each in [2**-52, 1], or
            # for logits in [1, C]: a product within 2**+-500 stays normal), so that the
            # running product's dependency chain is one multiplication per eight rows (0.9 us
            # less than one per row).
            if not weighted:
                r = 0
                while r + 8 <= n:
                    eight = ((factor[r] * factor[r + 1]) * (factor[r + 2] * factor[r + 3])) * (
                        (factor[r + 4] * factor[r + 5]) * (factor[r + 6] * factor[r + 7])
                    )
                    product, exponent = _rescaled(product * eight, exponent, probabilities)
                    r += 8
                while r < n:
                    product, exponent = _rescaled(product * factor[r], exponent, probabilities)
                    r += 1
            else:
                for r in range(n):
                    if target[r] >= 0:
                        term = np.float64(row_weight[r]) * np.log(factor[r])
                        log_sum += -term if probabilities else term
    sums[0] += brier_sum
    sums[1] += log_sum + _log_of_product(product, exponent, log_sign)
    return OK, LOOKS_LIKE_PROBABILITIES if unit and stop > start else 0, stop


# Rows and classes of one tile of the transposing copy of wide float32 rows.
TILE = 8


@intrinsic
def _transpose_tile(typingctx, scores, row, col, columns, at):
    """``columns[col + k, at + j] = scores[row + j, col + k]`` for ``j, k < TILE``: eight
    32-byte loads, the 8 x 8 transpose in 24 lane shuffles, eight 32-byte stores (a scalar copy
    costs a load, a store and an index product per element). Both arrays float32 with
    contiguous rows (the caller checks ``scores``' second stride)."""
    if not (
        isinstance(scores, types.Array)
        and isinstance(columns, types.Array)
        and scores.ndim == 2
        and columns.ndim == 2
        and scores.dtype == types.float32
        and columns.dtype == types.float32
    ):
        return None
    signature = types.void(scores, row, col, columns, at)

    def codegen(context, builder, signature, args):
        kinds = signature.args
        source = context.make_array(kinds[0])(context, builder, value=args[0])
        target = context.make_array(kinds[3])(context, builder, value=args[3])
        i, j, a = (context.cast(builder, args[k], kinds[k], types.intp) for k in (1, 2, 4))
        row_stride = cgutils.unpack_tuple(builder, source.strides, 2)[0]
        column_stride = cgutils.unpack_tuple(builder, target.strides, 2)[0]
        byte = ir.IntType(8).as_pointer()
        vector = ir.VectorType(_F32, TILE)
        intp = context.get_value_type(types.intp)
        four = ir.Constant(intp, 4)
        # (Unaligned arrays, which Numba also passes here, promise no alignment.)
        read_align = 4 if kinds[0].aligned else 1
        write_align = 4 if kinds[3].aligned else 1

        def at_bytes(base, offset):
            pointer = builder.gep(builder.bitcast(base, byte), [offset])
            return builder.bitcast(pointer, vector.as_pointer())

        start = builder.mul(j, four)
        rows = []
        for k in range(TILE):
            line = builder.mul(builder.add(i, ir.Constant(intp, k)), row_stride)
            address = at_bytes(source.data, builder.add(line, start))
            rows.append(builder.load(address, align=read_align))

        def shuffle(x, y, order):
            return builder.shuffle_vector(x, y, ir.Constant(ir.VectorType(_I32, TILE), order))

        low, high = [0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15]
        pairs_low, pairs_high = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
        halves_low, halves_high = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]
        t = []
        for k in range(0, TILE, 2):
            t += [shuffle(rows[k], rows[k + 1], low), shuffle(rows[k], rows[k + 1], high)]
        u = []
        for k in (0, 4):
            u += [
                shuffle(t[k], t[k + 2], pairs_low),
                shuffle(t[k], t[k + 2], pairs_high),
                shuffle(t[k + 1], t[k + 3], pairs_low),
                shuffle(t[k + 1], t[k + 3], pairs_high),
            ]
        out = [shuffle(u[k], u[k + 4], halves_low) for k in range(4)]
        out += [shuffle(u[k], u[k + 4], halves_high) for k in range(4)]
        first = builder.mul(a, four)
        for k in range(TILE):
            line = builder.mul(builder.add(j, ir.Constant(intp, k)), column_stride)
            address = at_bytes(target.data, builder.add(line, first))
            builder.store(out[k], address, align=write_align)
        return context.get_dummy_value()

    return signature, codegen


def _copy_columns(scores, first, n, columns):
    """``columns[c, r] = scores[first + r, c]`` for ``r < n`` and every class ``c``: the block
    class by class, for rows of more than 64 classes."""


@overload(_copy_columns, inline="always")
def _copy_columns_overload(scores, first, n, columns):
    if scores.dtype == types.float32 and columns.dtype == types.float32:
        # Tiles of 8 x 8, a class's tiles down the block (their rows stay in L1 for the next
        # class); what is left over of the rows and classes element by element. The scalar
        # copy was about a quarter of a 256 x 1000 update on Zen 3 (a load, a store and an
        # index product per element).
        def tiled(scores, first, n, columns):
            num_classes = scores.shape[1]
            if scores.strides[1] != 4:
                for c in range(num_classes):
                    for r in range(n):
                        columns[c, r] = scores[first + r, c]
                return
            rows = n - n % TILE
            classes = num_classes - num_classes % TILE
            for c in range(0, classes, TILE):
                for r in range(0, rows, TILE):
                    _transpose_tile(scores, first + r, c, columns, r)
            for c in range(classes):
                for r in range(rows, n):
                    columns[c, r] = scores[first + r, c]
            for c in range(classes, num_classes):
                for r in range(n):
                    columns[c, r] = scores[first + r, c]

        return tiled

    def plain(scores, first, n, columns):
        for c in range(scores.shape[1]):
            for r in range(n):
                columns[c, r] = scores[first + r, c]

    return plain


@njit(inline="always")
def _check_elements(targets, scores, i, has_ignore, ignore_index, probabilities):
    """``(status, position)`` of row ``i`` of a binary/multilabel batch."""
    num_labels = scores.shape[1]
    for c in range(num_labels):
        y = targets[i, c]
        if has_ignore and _ignored(y, ignore_index):
            continue
        if not (y == 0 or y == 1):
            return BAD_TRUE, i * num_labels + c
        if not _score_ok(scores[i, c], probabilities):
            return BAD_SCORE, i * num_labels + c
    return OK, 0


@njit(inline="always")
def _check_chunk(targets, scores, lo, hi, has_ignore, ignore_index, probabilities):
    """``(status, position)`` of the first bad element of rows ``[lo, hi)`` of a binary or
    multilabel batch, row by row (see :func:`_check_elements`); ``(OK, 0)`` when none is.
    Inlined: every batch runs it (see "Compile time:")."""
    for i in range(lo, hi):
        status, position = _check_elements(
            targets, scores, i, has_ignore, ignore_index, probabilities
        )
        if status != OK:
            return status, position
    return OK, 0


@njit
def _logit_block(flat, base, end, sigmoid, softplus, keys, logit, threshold_mode):
    """For the logits ``flat[base:end]``: their sigmoid and ``log1p(exp(-|s|))``, and without
    thresholds their key bins (``2 * bin + exact``), into ``sigmoid``, ``softplus`` and
    ``keys`` from 0: one flat loop that vectorises."""
    for j in range(end - base):
        x = np.float64(flat[base + j])
        x = x if x == x else 0.0  # ignored targets' scores may be NaN
        e = _exp_nonpositive(-abs(x))
        sigmoid[j] = _divide(1.0 if x >= 0 else e, 1.0 + e)
        softplus[j] = _log1p_unit(e)
        if threshold_mode is None:
            b, exact = _logit_key(flat[base + j], logit)
            keys[j] = np.int32(2) * b + np.int32(exact)


@_kernel
def count_elementwise(
    targets,
    scores,
    weights,
    curves,
    inexact,
    cal_counts,
    cal_conf,
    sums,
    thresholds,
    shift,
    start,
    stop,
    chunk,
    sign,
    flags,
    ignore_index,
    eps,
    log,
):
    """Count rows ``[start, stop)`` of a binary (C = 1) or multilabel batch.

    ``targets`` (0/1) and ``scores`` are ``(N, C)``, ``weights`` ``(N,)`` (one weight per row,
    shared by its labels) or None. Per counted element with target ``y``, probability ``q``
    (the score, or its sigmoid for logits) and weight ``w``: ``curves[c, bin(s), y] += w``;
    ``cal_counts[fine(q)] += (w, w * y)``; ``cal_conf[fine(q)] += w * q``;
    ``sums += w * ((q - y)^2, log loss)``, the log loss being ``-log(clip(q))`` or
    ``-log(clip(1 - q))`` for probabilities (without weights: ``-log`` of the running product,
    one ``log`` a call) and ``max(s, 0) - s * y + log(1 + exp(-|s|))`` for logits. Rows are
    validated ``chunk`` at a time before they are counted; returns
    ``(status, position, counted_until)`` as :func:`count_multiclass`.
    """
    return _count_elementwise_body(
        targets,
        scores,
        weights,
        curves,
        inexact,
        cal_counts,
        cal_conf,
        sums,
        thresholds,
        shift,
        start,
        stop,
        chunk,
        sign,
        flags,
        ignore_index,
        eps,
        log,
        _mode(eps),
        _mode(thresholds),
        _mode(weights),
    )


@njit
def _count_elementwise_body(
    targets,
    scores,
    weights,
    curves,
    inexact,
    cal_counts,
    cal_conf,
    sums,
    thresholds,
    shift,
    start,
    stop,
    chunk,
    sign,
    flags,
    ignore_index,
    eps,
    log,
    probability_mode,
    threshold_mode,
    weight_mode,
):
    """The body of :func:`count_elementwise`; the modes as in :func:`_count_multiclass_body`."""
    num_labels = scores.shape[1]
    fine_bins = cal_counts.shape[0]
    has_ignore = (flags & HAS_IGNORE) != 0
    # Constants of the specialisation, as in count_multiclass.
    probabilities = probability_mode is not None
    has_thresholds = threshold_mode is not None
    weighted = weight_mode is not None
    layout = key_layout(shift)
    logit = logit_layout(shift)
    brier_sum = 0.0
    log_sum = 0.0
    product = 1.0  # without weights, as in count_multiclass: one log a call
    exponent = np.int64(0)
    # For logits, the sigmoid and log1p(exp(-|s|)) of a block of rows, in a flat loop of its
    # own that vectorises (np.exp and np.log1p here were scalar library calls: binary 10**5
    # logits, 3.5 -> 2.3 ms).
    block = 0 if probabilities else max(1, min(BLOCK_ROWS, chunk, stop - start))
    sigmoid = np.empty(block * num_labels)
    softplus = np.empty(block * num_labels)
    # and their key bins (2 * bin + exact), vectorised there too
    keys = np.empty(block * num_labels, np.int32)
    flat = scores.reshape(-1)
    unit = not probabilities
    seen = 0
    logging = log.shape[0] > 0
    logged = 0
    for lo in range(start, stop, chunk):
        hi = min(lo + chunk, stop)
        status, position = _check_chunk(
            targets, scores, lo, hi, has_ignore, ignore_index, probabilities
        )
        if status != OK:
            sums[0] += brier_sum
            sums[1] += log_sum + _log_of_product(product, exponent, sign)
            return status, position, lo
        step = max(1, hi - lo) if probabilities else block  # probabilities: the chunk at once
        for blo in range(lo, hi, step):
            bhi = min(blo + step, hi)
            if not probabilities:
                _logit_block(
                    flat, blo * num_labels, bhi * num_labels, sigmoid, softplus, keys, logit,
                    threshold_mode,
                )  # fmt: skip
            for i in range(blo, bhi):
                if not weighted:
                    w = sign
                else:
                    w = weights[i] * sign
                wf = np.float64(w)
                for c in range(num_labels):
                    y = targets[i, c]
                    if has_ignore and _ignored(y, ignore_index):
                        continue
                    yi = 1 if y == 1 else 0
                    v = scores[i, c]
                    j = (i - blo) * num_labels + c
                    if not probabilities and not has_thresholds:
                        key = keys[j]
                        b, exact = key >> 1, (key & 1) != 0
                    else:
                        b, exact = _bin_of(
                            v, layout, logit, thresholds, threshold_mode, probabilities
                        )
                    curves[c, b, yi] += w
                    if not exact:
                        inexact[c] += sign
                    x = np.float64(v)
                    if not probabilities:
                        q = sigmoid[j]
                        # (not ``- x * y``: a -inf logit of a negative target loses 0, not NaN)
                        above = max(x, 0.0)
                        loss = (above - x if yi == 1 else above) + softplus[j]
                        # clipped as scikit-learn clips float64 probabilities (-inf: finite)
                        loss = min(loss, LOG_LOSS_BOUND)
                        unit &= (x >= 0.0) & (x <= 1.0)
                        seen += 1
                    else:
                        q = x
                        if not weighted:
                            p = x if yi == 1 else 1.0 - x
                            product *= min(max(p, eps), 1.0 - eps)
                            if product < _TINY:  # scaled by a power of two: exact
                                product *= _HUGE
                                exponent -= _HUGE_EXPONENT
                            loss = 0.0
                        else:
                            loss = -_clip_log(x, eps) if yi == 1 else -_clip_log(1.0 - x, eps)
                    d = q - yi
                    f = _fine_bin(q, fine_bins)
                    cal_counts[f, 0] += w
                    if yi == 1:
                        cal_counts[f, 1] += w
                    if logging:  # the cell's value before, for an exact undo
                        log[logged] = np.float64(f)
                        log[logged + 1] = cal_conf[f]
                        logged += 2
                    cal_conf[f] += wf * q
                    brier_sum += wf * d * d
                    log_sum += wf * loss
    sums[0] += brier_sum
    sums[1] += log_sum + _log_of_product(product, exponent, sign)
    # Logits all in [0, 1] (at least 32 of them): probabilities, most likely.
    return OK, LOOKS_LIKE_PROBABILITIES if unit and seen >= 32 else 0, stop


# ---------------------------------------------------------------- exp of the softmax and sigmoid
# ``np.exp`` in a Numba loop is a call of the scalar libm function (no SVML here), which keeps
# the loop from vectorising (with a log and divisions per row, about 18 of the 30 us of a
# 256 x 10 logits update). The exp below is plain float64 arithmetic, which LLVM vectorises:
# ``x = k ln2 + r`` with ``|r| <= ln2 / 2`` (Cody-Waite: ``k * LN2_HI`` is exact, so ``r`` is
# ``x - k ln2`` to an ulp of ``r``), ``e**r - 1 - r`` by its Taylor polynomial to degree 13
# (truncation below 4e-18; Estrin's scheme in fused multiply-adds), and ``2**k`` from exponent
# bits, in two steps so that subnormal results are rounded once. Within 1 ulp of np.exp's
# (the tests check millions of arguments), ``exp(0) == 1`` and ``exp(-inf) == 0`` exactly.

_EXP_LOG2E = 1.0 / math.log(2.0)
# fdlibm's split of ln2: the high part has 32 significant bits, so ``k * _EXP_LN2_HI`` is
# exact for the ``|k| <= 1076`` used here.
_EXP_LN2_HI = 6.93147180369123816490e-01
_EXP_LN2_LO = 1.90821492927058770002e-10
# exp(x) for x below this is 0 in float64 (half the smallest subnormal, 2**-1075, rounds to 0).
_EXP_LOWEST = -746.0
_EXP_COEFFICIENTS = tuple(1.0 / math.factorial(n) for n in range(2, 14))


@intrinsic
def _float64_from_bits(typingctx, bits):
    """The float64 of the bits of an int64 (a register move; numba has no scalar view)."""
    if bits != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """``a * b + c`` of three float64 rounded once (``llvm.fma``: one instruction, which the
    loop vectoriser keeps; Numba does not contract a multiplication and an addition)."""
    if a != types.float64 or b != types.float64 or c != types.float64:
        return None

    def codegen(context, builder, signature, args):
        double = ir.DoubleType()
        function = _llvm.declare(builder, "llvm.fma.f64", double, [double, double, double])
        return builder.call(function, list(args))

    return types.float64(types.float64, types.float64, types.float64), codegen


@intrinsic
def _divide(typingctx, a, b):
    """``a / b`` of two float64, IEEE (Numba's ``/`` tests for a zero divisor to raise
    ZeroDivisionError, a branch that keeps a loop from vectorising)."""
    if a != types.float64 or b != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.fdiv(args[0], args[1])

    return types.float64(types.float64, types.float64), codegen


@njit(inline="always")
def _exp_nonpositive(x):
    """``exp(x)`` of a float64 ``x <= 0`` (``-inf`` included; not NaN), within 1 ulp, without
    branches or calls (so that a loop of it vectorises)."""
    x = max(x, _EXP_LOWEST)
    k = np.floor(_fma(x, _EXP_LOG2E, 0.5))
    r = _fma(-k, _EXP_LN2_LO, _fma(-k, _EXP_LN2_HI, x))
    # (e**r - 1 - r) / r**2 by Estrin's scheme in fused multiply-adds: a dependency chain of
    # 5 operations instead of Horner's 11.
    c = _EXP_COEFFICIENTS
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    b0 = _fma(_fma(c[3], r, c[2]), r2, _fma(c[1], r, c[0]))
    b1 = _fma(_fma(c[7], r, c[6]), r2, _fma(c[5], r, c[4]))
    b2 = _fma(_fma(c[11], r, c[10]), r2, _fma(c[9], r, c[8]))
    q = _fma(b2, r8, _fma(b1, r4, b0))
    p = 1.0 + _fma(r2, q, r)
    ki = np.int64(k)
    half = ki >> np.int64(1)  # 2**k as 2**half * 2**(k - half): both normal for k >= -1076
    return (p * _float64_from_bits((half + np.int64(1023)) << np.int64(52))) * _float64_from_bits(
        (ki - half + np.int64(1023)) << np.int64(52)
    )


@njit(inline="always")
def _rescaled(product, exponent, probabilities):
    """``(product, exponent)`` of a running product ``product * 2**exponent`` kept within
    ``2**+-500`` by exact power-of-two scaling: up when probabilities made it small, down
    when softmax denominators (logits) made it large."""
    if not probabilities:
        if product > _HUGE:
            return product * _TINY, exponent + _HUGE_EXPONENT
    elif product < _TINY:
        return product * _HUGE, exponent - _HUGE_EXPONENT
    return product, exponent


# Rows of a block whose softmax terms are computed at once: one 512-bit vector of float64
# (LLVM's loop vectoriser keeps to 256 bits on this machine: 1.25 ns an exp; explicit 8-lane
# vectors, 0.75 ns).
EXP_LANES = 8


def _float64_call(builder, name, vector, arguments):
    """``llvm.<name>`` (``floor``, ``fma``) of float64 vectors."""
    suffix = f"v{vector.type.count}f64"
    function = _llvm.declare(
        builder, f"llvm.{name}.{suffix}", vector.type, [vector.type] * len(arguments)
    )
    return builder.call(function, arguments)


def _exp_lanes(builder, x):
    """:func:`_exp_nonpositive` of each lane of a float64 vector (the same operations in the
    same order, so the same results)."""
    lanes = x.type.count

    def constant(value):
        return ir.Constant(x.type, [value] * lanes)

    def fma(a, b, c):
        return _float64_call(builder, "fma", a, [a, b, c])

    longs = ir.VectorType(ir.IntType(64), lanes)
    lowest = constant(_EXP_LOWEST)
    x = builder.select(builder.fcmp_ordered(">", x, lowest), x, lowest)
    k = _float64_call(builder, "floor", x, [fma(x, constant(_EXP_LOG2E), constant(0.5))])
    minus_k = builder.fneg(k)
    r = fma(minus_k, constant(_EXP_LN2_LO), fma(minus_k, constant(_EXP_LN2_HI), x))
    c = [constant(value) for value in _EXP_COEFFICIENTS]
    r2 = builder.fmul(r, r)
    r4 = builder.fmul(r2, r2)
    r8 = builder.fmul(r4, r4)
    b0 = fma(fma(c[3], r, c[2]), r2, fma(c[1], r, c[0]))
    b1 = fma(fma(c[7], r, c[6]), r2, fma(c[5], r, c[4]))
    b2 = fma(fma(c[11], r, c[10]), r2, fma(c[9], r, c[8]))
    q = fma(b2, r8, fma(b1, r4, b0))
    p = builder.fadd(constant(1.0), fma(r2, q, r))
    ki = builder.fptosi(k, longs)
    half = builder.ashr(ki, ir.Constant(longs, [1] * lanes))
    bias = ir.Constant(longs, [1023] * lanes)
    shift = ir.Constant(longs, [52] * lanes)
    low = builder.bitcast(builder.shl(builder.add(half, bias), shift), x.type)
    high = builder.bitcast(builder.shl(builder.add(builder.sub(ki, half), bias), shift), x.type)
    return builder.fmul(builder.fmul(p, low), high)


@intrinsic
def _softmax_lanes(typingctx, columns, top, target, c, r, totals, square):
    """Rows ``r .. r + EXP_LANES - 1`` of class ``c`` (all of them read and written): with
    ``e = exp(columns[c, row] - top[row])``, ``totals[row] += e`` and ``square[row] += e**2``
    unless ``target[row] == c`` (both set instead of added for ``c == 0``)."""
    float_arrays = (columns, top)
    if (
        not all(isinstance(a, types.Array) and a.layout == "C" for a in (*float_arrays, target))
        or columns.ndim != 2
        or columns.dtype not in (types.float32, types.float64)
        or top.dtype != columns.dtype
        or target.dtype != types.int32
        or totals != square
        or not isinstance(totals, types.Array)
        or totals.dtype != types.float64
        or not isinstance(c, types.Integer)
        or not isinstance(r, types.Integer)
    ):
        return None
    signature = types.void(columns, top, target, c, r, totals, square)

    def codegen(context, builder, signature, args):
        kinds = signature.args
        double = ir.DoubleType()
        doubles = ir.VectorType(double, EXP_LANES)
        index = [context.cast(builder, args[j], kinds[j], types.intp) for j in (3, 4)]
        c_index, row = index

        def lanes_of(j, offset):
            array = context.make_array(kinds[j])(context, builder, value=args[j])
            element = context.get_data_type(kinds[j].dtype)
            vector = ir.VectorType(element, EXP_LANES)
            pointer = builder.bitcast(builder.gep(array.data, [offset]), vector.as_pointer())
            return pointer, context.get_abi_sizeof(element)

        columns_array = context.make_array(kinds[0])(context, builder, value=args[0])
        stride = cgutils.unpack_tuple(builder, columns_array.shape, 2)[1]
        at = builder.add(builder.mul(c_index, stride), row)
        pointer, align = lanes_of(0, at)
        v = builder.load(pointer, align=align)
        pointer, align = lanes_of(1, row)
        level = builder.load(pointer, align=align)
        if kinds[0].dtype == types.float32:
            v = builder.fpext(v, doubles)
            level = builder.fpext(level, doubles)
        e = _exp_lanes(builder, builder.fsub(v, level))
        pointer, align = lanes_of(2, row)
        target_lanes = builder.load(pointer, align=align)
        c32 = builder.trunc(c_index, ir.IntType(32))
        splat = builder.insert_element(
            ir.Constant(target_lanes.type, ir.Undefined), c32, ir.Constant(ir.IntType(32), 0)
        )
        splat = builder.shuffle_vector(
            splat, splat, ir.Constant(ir.VectorType(ir.IntType(32), EXP_LANES), [0] * EXP_LANES)
        )
        is_true = builder.icmp_signed("==", target_lanes, splat)
        zero = ir.Constant(doubles, [0.0] * EXP_LANES)
        squares = builder.select(is_true, zero, builder.fmul(e, e))
        first = builder.icmp_signed("==", c_index, ir.Constant(c_index.type, 0))
        for j, term in ((5, e), (6, squares)):
            pointer, align = lanes_of(j, row)
            old = builder.load(pointer, align=align)
            new = builder.select(first, term, builder.fadd(old, term))
            builder.store(new, pointer, align=align)
        return context.get_dummy_value()

    return signature, codegen


@njit
def _softmax_statistics(columns, top, true_score, target, n, totals, inverse, square):
    """Per row ``r < n`` of a block of logits held class by class (``columns``; row maxima
    ``top``, true-class scores ``true_score``): ``totals[r] = sum_c e_c`` with ``e_c =
    exp(s_c - top)``, the softmax denominator; ``inverse[r] = 1 / totals[r]``, the top-label
    confidence; and the Brier term ``square[r] = sum_c (p_c - [c == t])^2``, computed as
    ``inverse**2 * sum_{c != t} e_c**2 + (1 - p_t)**2``: one pass over the scores, without
    keeping their exps (all terms non-negative, each within a few ulp of the quotients').
    Class by class, ``EXP_LANES`` rows at a time (the arrays hold that many elements past
    ``n``); each row adds its classes in order, as a row-by-row loop would."""
    for c in range(columns.shape[0]):
        for r in range(0, n, EXP_LANES):
            _softmax_lanes(columns, top, target, c, r, totals, square)
    # One division a row, not a score (a division per score was 2 us of 256 x 10).
    for r in range(n):
        inverse[r] = _divide(1.0, totals[r])
        p = _exp_nonpositive(np.float64(true_score[r]) - np.float64(top[r])) * inverse[r]
        square[r] = square[r] * (inverse[r] * inverse[r]) + (1.0 - p) * (1.0 - p)


# fdlibm's log: log(1 + f) = 2s + s R(s**2) with s = f / (2 + f), R minimax for |s| <= 0.1716.
_LOG_COEFFICIENTS = (
    6.666666666666735130e-01,
    3.999999999940941908e-01,
    2.857142874366239149e-01,
    2.222219843214978396e-01,
    1.818357216161805012e-01,
    1.531383769920937332e-01,
    1.479819860511658591e-01,
)
_SQRT2_MINUS_1 = math.sqrt(2.0) - 1.0


@njit(inline="always")
def _log1p_unit(e):
    """``log1p(e)`` of a float64 ``0 <= e <= 1``, within 1 ulp, without branches or calls.

    fdlibm's reduction: above ``sqrt(2) - 1``, ``log1p(e) = ln2 + log1p(f)`` with ``f = (e -
    1) / 2`` (exact), so that ``|f| <= sqrt(2) - 1`` and ``|s| <= 0.1716``; then ``log1p(f)
    = f - (f**2 / 2 - s (f**2 / 2 + R))``, all of it from the exact ``f``."""
    high = e > _SQRT2_MINUS_1
    k = 1.0 if high else 0.0
    f = (e - 1.0) * 0.5 if high else e
    s = _divide(f, 2.0 + f)
    z = s * s
    w = z * z
    c = _LOG_COEFFICIENTS
    odd = w * _fma(w, _fma(w, c[5], c[3]), c[1])
    even = z * _fma(w, _fma(w, _fma(w, c[6], c[4]), c[2]), c[0])
    r = odd + even
    half_square = 0.5 * f * f
    return k * _EXP_LN2_HI - ((half_square - (s * (half_square + r) + k * _EXP_LN2_LO)) - f)


@_kernel
def log1p_unit(x, out):
    """``out[i] = log1p(x[i])`` for float64 ``0 <= x <= 1`` (see :func:`_log1p_unit`); for
    tests."""
    for i in range(x.shape[0]):
        out[i] = _log1p_unit(x[i])


@_kernel
def exp_nonpositive(x, out):
    """``out[i] = exp(x[i])`` for float64 ``x <= 0`` (see :func:`_exp_nonpositive`); for tests."""
    for i in range(x.shape[0]):
        out[i] = _exp_nonpositive(x[i])


# ---------------------------------------------------------------- rows of at most 16 classes
# A row of at most ROW_LANES probabilities is one vector register: read with a masked load
# (nothing past the row is read), its keys, exactness, rank counts, maximum and Brier terms are
# computed lane-parallel in LLVM vector operations (which Numba's loops do not produce for short
# rows), without the block being copied class by class first.
ROW_LANES = 16
_I1 = ir.IntType(1)
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)
_F32 = ir.FloatType()
_F64 = ir.DoubleType()
# The int64 ``table`` of :func:`count_small_rows`: addresses of the state arrays and scratch,
# then the fixed settings (one array argument instead of twelve: Numba unboxes an array
# argument in about 45 ns).
TABLE_CURVES = 0
TABLE_INEXACT = 1
TABLE_RANKS = 2
TABLE_CALIBRATION = 3
TABLE_CONFIDENCE = 4
TABLE_LOSSES = 5
TABLE_SCRATCH = 6
TABLE_BINS = 7
TABLE_FINE_BINS = 8
TABLE_SHIFT = 9
TABLE_FLAGS = 10
TABLE_IGNORE = 11
TABLE_CLASSES = 12
# The address of a float64 undo log of 2 * rows elements, or 0 (see count_multiclass' ``log``).
TABLE_LOG = 13
TABLE_SIZE = 14
# count_small_rows' answer when the arrays are not contiguous, aligned and of matching shapes.
NOT_TAKEN = -1
# Rows of a block of count_small_rows, and its int32 scratch: the keys of the block (ROW_LANES a
# row), then the exact scores of each class (ROW_LANES int16).
ROW_BLOCK = 128
SCRATCH_KEYS = 0
SCRATCH_EXACT = ROW_LANES * ROW_BLOCK
# Then each counted row's calibration bin (``2 * bin + correct``, int32) and its top score
# (float64, two int32 slots): the row pass prefetches the calibration cells and the counts are
# added after it. Applied at once, each row's cell came from L3 on a machine whose L2 cannot
# hold the 0.6 MB of calibration state (Zen 3, 512 KB: 256 x 10 with a new batch each update
# 13.2-14.1 -> 11.0-12.2 us; the same batch again, all in cache, unchanged).
SCRATCH_CALIBRATION = SCRATCH_EXACT + ROW_LANES // 2
SCRATCH_TOP = SCRATCH_CALIBRATION + ROW_BLOCK
SCRATCH_SIZE = SCRATCH_TOP + 2 * ROW_BLOCK


def _vector(element):
    return ir.VectorType(element, ROW_LANES)


def _splat(builder, value):
    vector = _vector(value.type)
    one = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, one, ir.Constant(_vector(_I32), [0] * ROW_LANES))


_declare = _llvm.declare


@intrinsic
def _prefetch(typingctx, array, index):
    """Prefetch ``array[index]`` (for writing, into all cache levels); no effect otherwise."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None
    signature = types.void(array, index)

    def codegen(context, builder, signature, args):
        kinds = signature.args
        data = context.make_array(kinds[0])(context, builder, value=args[0]).data
        i = context.cast(builder, args[1], kinds[1], types.intp)
        byte = ir.IntType(8).as_pointer()
        fetch = _declare(builder, "llvm.prefetch.p0i8", ir.VoidType(), [byte, _I32, _I32, _I32])
        address = builder.bitcast(builder.gep(data, [i]), byte)
        write, locality, data_cache = (ir.Constant(_I32, value) for value in (1, 3, 1))
        builder.call(fetch, [address, write, locality, data_cache])
        return context.get_dummy_value()

    return signature, codegen


_masked_load = _llvm.masked_load


def _count_lanes(builder, lanes):
    """The number of true lanes of a vector of i1, as an int32."""
    count = _declare(builder, "llvm.ctpop.i16", _I16, [_I16])
    return builder.zext(builder.call(count, [builder.bitcast(lanes, _I16)]), _I32)


def _reduce_lanes(builder, vector, combine):
    """``combine`` of all lanes by a halving tree, from lane 0."""
    width = ROW_LANES
    while width > 1:
        width //= 2
        order = [i + width if i < width else i for i in range(ROW_LANES)]
        upper = builder.shuffle_vector(vector, vector, ir.Constant(_vector(_I32), order))
        vector = combine(upper, vector)
    return builder.extract_element(vector, ir.Constant(_I32, 0))


def _scores_type(scores):
    return (
        isinstance(scores, types.Array)
        and scores.ndim == 2
        and scores.layout == "C"
        and scores.dtype in (types.float32, types.float64)
    )


@intrinsic
def _probability_row(typingctx, scores, row, target, layout, scratch, at):
    """One row of ``(N, C)`` probabilities, ``C <= ROW_LANES``, valid, with true class
    ``target``, the ``at``-th counted row of its block: stores ``2 * bin + [c == target]`` of
    each class at ``scratch[SCRATCH_KEYS + ROW_LANES * at:]`` (lanes past ``C`` undefined) and
    adds the exact scores to the int16 counts at ``scratch[SCRATCH_EXACT:]``. Returns
    ``(greater, before, after, top, true, square)``: the classes scored above the true score,
    equal to it before and after ``target``, the largest score, the true score and the sum of
    the squares of the other scores (float64, the squares of float32 scores exact)."""
    if not _scores_type(scores):
        return None
    result = types.Tuple((types.int32,) * 3 + (types.float64,) * 3)
    signature = result(scores, row, target, layout, scratch, at)

    def codegen(context, builder, signature, args):
        kinds = signature.args
        array = context.make_array(kinds[0])(context, builder, value=args[0])
        element = context.get_data_type(kinds[0].dtype)
        align = context.get_abi_sizeof(element) if kinds[0].aligned else 1
        classes = cgutils.unpack_tuple(builder, array.shape, 2)[1]
        i = context.cast(builder, args[1], kinds[1], types.intp)
        pointer = builder.gep(array.data, [builder.mul(i, classes)])
        t = builder.trunc(context.cast(builder, args[2], kinds[2], types.intp), _I32)
        # The key layout (see key_layout), each part splat over the lanes as 32 bits.
        parts = [builder.extract_value(args[3], j) for j in range(10)]
        fine, fine_low, tiny, coarse, coarse_low, first, base_bin, last_bin, comp, comp_low = (
            builder.trunc(part, _I32) if part.type != _I32 else part for part in parts
        )
        k = context.cast(builder, args[5], kinds[5], types.intp)
        data = context.make_array(kinds[4])(context, builder, value=args[4]).data
        ints = _vector(_I32)
        iota = ir.Constant(ints, list(range(ROW_LANES)))
        zero = ir.Constant(ints, [0] * ROW_LANES)
        inside = builder.icmp_signed("<", iota, _splat(builder, builder.trunc(classes, _I32)))
        # Lanes past the row read as 0: a valid probability, never counted.
        floats = _vector(element)
        nothing = ir.Constant(floats, [0.0] * ROW_LANES)
        v = _masked_load(builder, pointer, inside, nothing, align)
        f = v if element == _F32 else builder.fptrunc(v, _vector(_F32))
        # The probability key (see _probability_key): of p below 1/2, of 1 - p above.
        u = builder.and_(builder.bitcast(f, ints), _splat(builder, ir.Constant(_I32, 0x7FFFFFFF)))
        y = builder.fsub(ir.Constant(_vector(_F32), [1.0] * ROW_LANES), f)
        uy = builder.bitcast(y, ints)
        tiny_lanes = _splat(builder, tiny)

        def magnitude_bin(t: ir.Value) -> ir.Value:  # _magnitude_bin, lane by lane
            below_tiny = builder.icmp_unsigned("<", t, tiny_lanes)
            above = builder.lshr(builder.sub(t, tiny_lanes), _splat(builder, fine))
            above = builder.add(above, _splat(builder, first))
            return builder.select(below_tiny, builder.lshr(t, _splat(builder, coarse)), above)

        lower = builder.add(
            magnitude_bin(u), builder.zext(builder.icmp_unsigned("!=", u, zero), ints)
        )
        top_upper = builder.sub(builder.add(last_bin, base_bin), ir.Constant(_I32, 1))
        upper = builder.sub(_splat(builder, top_upper), builder.lshr(uy, _splat(builder, comp)))
        upper = builder.select(
            builder.icmp_unsigned("==", uy, zero), _splat(builder, last_bin), upper
        )
        below = builder.fcmp_ordered("<", f, ir.Constant(_vector(_F32), [0.5] * ROW_LANES))
        bins = builder.select(below, lower, upper)
        is_true = builder.icmp_signed("==", iota, _splat(builder, t))
        key = builder.add(builder.add(bins, bins), builder.zext(is_true, ints))
        offset = builder.add(
            ir.Constant(k.type, SCRATCH_KEYS), builder.mul(k, ir.Constant(k.type, ROW_LANES))
        )
        builder.store(key, builder.bitcast(builder.gep(data, [offset]), ints.as_pointer()), align=4)
        dropped = builder.select(  # _magnitude_exact, lane by lane
            builder.icmp_unsigned("<", u, tiny_lanes),
            builder.and_(u, _splat(builder, coarse_low)),
            builder.and_(builder.sub(u, tiny_lanes), _splat(builder, fine_low)),
        )
        dropped = builder.select(below, dropped, builder.and_(uy, _splat(builder, comp_low)))
        exact = builder.icmp_unsigned("==", dropped, zero)
        if element != _F32:  # a float64 score is exact only if it was a float32
            exact = builder.and_(
                exact, builder.fcmp_ordered("==", builder.fpext(f, _vector(_F64)), v)
            )
        shorts = _vector(_I16)
        counts = builder.bitcast(
            builder.gep(data, [ir.Constant(k.type, SCRATCH_EXACT)]), shorts.as_pointer()
        )
        builder.store(
            builder.add(builder.load(counts, align=4), builder.zext(exact, shorts)), counts, align=4
        )
        # The true score read from memory, not from the vector (no store-to-load stall).
        true = builder.load(builder.gep(pointer, [t]))
        level = _splat(builder, true)
        above = builder.and_(builder.fcmp_ordered(">", v, level), inside)
        equal = builder.and_(builder.fcmp_ordered("==", v, level), inside)
        before = builder.and_(equal, builder.icmp_signed("<", iota, _splat(builder, t)))
        after = builder.and_(equal, builder.icmp_signed(">", iota, _splat(builder, t)))
        greater = _count_lanes(builder, above)
        # The largest score is the true score unless some score is above it.
        with builder.if_else(builder.icmp_signed("==", greater, ir.Constant(_I32, 0))) as (
            when_top,
            otherwise,
        ):
            with when_top:
                from_true = builder.block
            with otherwise:
                largest = _reduce_lanes(
                    builder, v, lambda a, b: builder.select(builder.fcmp_ordered(">", a, b), a, b)
                )
                from_max = builder.block
        top = builder.phi(element)
        top.add_incoming(true, from_true)
        top.add_incoming(largest, from_max)
        # The squared errors of the other classes (the true one's is added by the caller).
        rest = builder.select(is_true, nothing, v)
        rest = rest if element == _F64 else builder.fpext(rest, _vector(_F64))
        square = _reduce_lanes(builder, builder.fmul(rest, rest), builder.fadd)
        if element != _F64:
            top = builder.fpext(top, _F64)
            true = builder.fpext(true, _F64)
        counts = [greater, _count_lanes(builder, before), _count_lanes(builder, after)]
        return context.make_tuple(builder, signature.return_type, [*counts, top, true, square])

    return signature, codegen


@intrinsic
def _row_total(typingctx, scores, row):
    """The sum of row ``row`` of ``(N, C)`` scores, ``C <= ROW_LANES`` (one masked vector load
    and a halving tree of additions, in the scores' float type)."""
    if not _scores_type(scores):
        return None
    signature = types.float64(scores, row)

    def codegen(context, builder, signature, args):
        kinds = signature.args
        array = context.make_array(kinds[0])(context, builder, value=args[0])
        element = context.get_data_type(kinds[0].dtype)
        align = context.get_abi_sizeof(element) if kinds[0].aligned else 1
        classes = cgutils.unpack_tuple(builder, array.shape, 2)[1]
        i = context.cast(builder, args[1], kinds[1], types.intp)
        pointer = builder.gep(array.data, [builder.mul(i, classes)])
        iota = ir.Constant(_vector(_I32), list(range(ROW_LANES)))
        inside = builder.icmp_signed("<", iota, _splat(builder, builder.trunc(classes, _I32)))
        nothing = ir.Constant(_vector(element), [0.0] * ROW_LANES)
        v = _masked_load(builder, pointer, inside, nothing, align)
        total = _reduce_lanes(builder, v, builder.fadd)
        return total if element == _F64 else builder.fpext(total, _F64)

    return signature, codegen


@njit(inline="always")
def _rows_sum_to_one(labels, scores, has_ignore, ignore_index):
    """Every counted row of at most ``ROW_LANES`` probabilities sums to one within
    ``ROW_SUM_TOLERANCE`` (a float32 sum of 16 probabilities is within 1e-6 of the exact)."""
    ok = True
    for i in range(scores.shape[0]):
        ok &= (abs(_row_total(scores, i) - 1.0) <= ROW_SUM_TOLERANCE) | (
            _ignored(labels[i], ignore_index) & has_ignore
        )
    return ok


@njit(inline="always")
def _probabilities_look_valid(flat):
    """Branch-free: every score in ``[0, 1]`` (vectorised)."""
    ok = True
    for j in range(flat.shape[0]):
        v = flat[j]
        ok &= (v >= 0) & (v <= 1)
    return ok


@_kernel
def count_small_rows(y_true, y_pred, table, eps):
    """Count a multiclass batch of probabilities with at most ``ROW_LANES`` classes, unweighted,
    into the state arrays at the addresses of ``table`` (int64, ``TABLE_*`` positions; the
    caller keeps them alive and holds the accumulator's lock, which guards the scratch).

    ``y_true`` ``(N,)`` and ``y_pred`` ``(N, C)`` may be any arrays of the compiled dtypes
    (see :func:`small_rows_for`): returns ``NOT_TAKEN`` unless they are contiguous, aligned and
    ``C`` is the table's number of classes. Counts as :func:`count_multiclass` with ``sign``
    1. Every row is validated before any is counted: returns 0, or ``status + 8 * position``
    of the first bad element (nothing counted). Rows go through in blocks of ``ROW_BLOCK``: one
    pass row by row (a row's keys and statistics from one vector, see
    :func:`_probability_row`), then the block's histogram increments class by class.
    """
    if not _small_rows_fit(y_true, y_pred, table):
        return NOT_TAKEN
    rows = y_true.shape[0]
    num_classes = y_pred.shape[1]
    # The same memory as C-contiguous arrays (the loops below index without strides).
    labels = carray(_llvm.pointer_to(y_true.ctypes.data, y_true.dtype), rows)
    scores = carray(_llvm.pointer_to(y_pred.ctypes.data, y_pred.dtype), (rows, num_classes))
    num_bins = table[TABLE_BINS]
    fine_bins = table[TABLE_FINE_BINS]
    stride = 2 * num_bins
    hist = carray(_llvm.pointer_to(table[TABLE_CURVES], np.int64), num_classes * stride)
    inexact = carray(_llvm.pointer_to(table[TABLE_INEXACT], np.int64), num_classes)
    ranks = carray(_llvm.pointer_to(table[TABLE_RANKS], np.int64), 2 * num_classes * num_classes)
    cal_counts = carray(_llvm.pointer_to(table[TABLE_CALIBRATION], np.int64), 2 * fine_bins)
    cal_conf = carray(_llvm.pointer_to(table[TABLE_CONFIDENCE], np.float64), fine_bins)
    sums = carray(_llvm.pointer_to(table[TABLE_LOSSES], np.float64), 2)
    scratch = carray(_llvm.pointer_to(table[TABLE_SCRATCH], np.int32), SCRATCH_SIZE)
    exact = carray(_llvm.pointer_to(table[TABLE_SCRATCH] + 4 * SCRATCH_EXACT, np.int16), ROW_LANES)
    cal_bin = carray(
        _llvm.pointer_to(table[TABLE_SCRATCH] + 4 * SCRATCH_CALIBRATION, np.int32), ROW_BLOCK
    )
    cal_top = carray(
        _llvm.pointer_to(table[TABLE_SCRATCH] + 4 * SCRATCH_TOP, np.float64), ROW_BLOCK
    )
    # An undo log (see count_multiclass' ``log``) when the table names one.
    logging = table[TABLE_LOG] != 0
    log = carray(
        _llvm.pointer_to(table[TABLE_LOG] if logging else table[TABLE_LOSSES], np.float64),
        2 * rows if logging else 0,
    )
    return _count_small_rows_into(
        labels, scores, table, eps, hist, inexact, ranks, cal_counts, cal_conf, sums, scratch,
        exact, cal_bin, cal_top, log,
    )  # fmt: skip


@njit(inline="always")
def _small_rows_fit(y_true, y_pred, table):
    """Whether :func:`count_small_rows` takes these arrays: contiguous, aligned, shapes that
    match the table's classes."""
    rows = y_true.shape[0]
    num_classes = y_pred.shape[1]
    return not (
        y_pred.shape[0] != rows
        or num_classes != table[TABLE_CLASSES]
        or (rows > 1 and y_true.strides[0] != y_true.itemsize)
        or y_pred.strides[1] != y_pred.itemsize
        or (rows > 1 and y_pred.strides[0] != num_classes * y_pred.itemsize)
        or y_true.ctypes.data % y_true.itemsize != 0
        or y_pred.ctypes.data % y_pred.itemsize != 0
    )


@njit(inline="always")
def _count_small_rows_into(
    labels, scores, table, eps, hist, inexact, ranks, cal_counts, cal_conf, sums, scratch,
    exact, cal_bin, cal_top, log,
):  # fmt: skip
    """The counting of :func:`count_small_rows` into flat C-contiguous state arrays; ``exact``,
    ``cal_bin`` and ``cal_top`` are the int16, int32 and float64 views of ``scratch`` at
    ``SCRATCH_EXACT``, ``SCRATCH_CALIBRATION`` and ``SCRATCH_TOP``."""
    rows = labels.shape[0]
    num_classes = scores.shape[1]
    fine_bins = table[TABLE_FINE_BINS]
    stride = 2 * table[TABLE_BINS]
    shift = table[TABLE_SHIFT]
    has_ignore = (table[TABLE_FLAGS] & HAS_IGNORE) != 0
    ignore_index = table[TABLE_IGNORE]
    ok = _labels_look_valid(labels, 0, rows, num_classes, has_ignore, ignore_index)
    ok &= _probabilities_look_valid(scores.reshape(-1))
    ok &= _rows_sum_to_one(labels, scores, has_ignore, ignore_index)
    if not ok:
        for i in range(rows):
            status, position = _check_row(labels, scores, i, has_ignore, ignore_index, True)
            if status != OK:
                return status + 8 * position
    layout = key_layout(shift)
    optimistic = num_classes * num_classes
    product = 1.0
    exponent = np.int64(0)
    brier = 0.0
    logging = log.shape[0] > 0
    logged = 0
    for lo in range(0, rows, ROW_BLOCK):
        n = 0
        exact[:] = 0
        for i in range(lo, min(lo + ROW_BLOCK, rows)):
            t = labels[i]
            if has_ignore and _ignored(t, ignore_index):
                continue
            ti = np.intp(t)
            g, before, after, top, true, square = _probability_row(
                scores, i, ti, layout, scratch, n
            )
            row = ti * num_classes + g
            ranks[np.uint64(row + after)] += 1
            ranks[np.uint64(optimistic + row)] += 1
            f = _fine_bin(top, fine_bins)
            cal_bin[n] = np.int32(2 * f + ((g == 0) & (before == 0)))
            cal_top[n] = top
            _prefetch(cal_counts, 2 * f)
            _prefetch(cal_conf, f)
            n += 1
            miss = 1.0 - true
            brier += miss * miss + square
            # The log loss as in count_multiclass: one log a call.
            product *= min(max(true, eps), 1.0 - eps)
            if product < _TINY:  # scaled by a power of two: exact
                product *= _HUGE
                exponent -= _HUGE_EXPONENT
        for r in range(n):  # the calibration counts, their cells prefetched
            b = cal_bin[r]
            f = np.uint64(b >> 1)
            cal_counts[2 * f] += 1
            cal_counts[2 * f + 1] += b & 1
            if logging:
                log[logged] = np.float64(f)
                log[logged + 1] = cal_conf[f]
                logged += 2
            cal_conf[f] += cal_top[r]
        # Histograms class by class: one class's bins at a time stay in cache.
        for c in range(num_classes):
            offset = c * stride
            for r in range(n):
                hist[np.uint64(offset + scratch[SCRATCH_KEYS + ROW_LANES * r + c])] += 1
            inexact[c] += n - exact[c]
    sums[0] += brier
    sums[1] += _log_of_product(product, exponent, np.int64(1))
    return 0


def small_rows_for(labels, scores):
    """The machine code of :func:`count_small_rows` for labels and scores of these numpy
    dtypes (any layout, read-only or not), callable directly: the caller checks the dtypes and
    that ``y_true`` has one dimension and ``y_pred`` two (the machine code checks the rest)."""
    compile_signature = getattr(count_small_rows, "compile", None)
    if compile_signature is None:  # NUMBA_DISABLE_JIT
        return count_small_rows
    from numba import from_dtype

    def any_array(dtype, ndim):
        return types.Array(from_dtype(dtype), ndim, "A", readonly=True, aligned=False)

    table = types.Array(types.int64, 1, "C")
    return compile_signature((any_array(labels, 1), any_array(scores, 2), table, types.float64))


@_kernel
def check_weights(weights, whole):
    """``(first, total)`` of float64 ``weights``: ``first`` is the index of the first weight
    that is not finite and non-negative (or, with ``whole``, not a whole number), -1 when every
    weight is; ``total`` their sum, in order. One branch-free pass the compiler vectorises,
    then a scalar search only when some weight is bad."""
    ok = True
    total = 0.0
    for i in range(weights.shape[0]):
        w = weights[i]
        good = (w >= 0.0) & (w != np.inf)  # NaN fails the first comparison
        if whole:
            good &= np.floor(w) == w
        ok &= good
        total += w
    if ok:
        return -1, total
    for i in range(weights.shape[0]):
        w = weights[i]
        if not ((w >= 0.0) & (w != np.inf)) or (whole and np.floor(w) != w):
            return i, total
    return -1, total  # pragma: no cover - some weight failed above


@_kernel
def bin_index(value, shift, thresholds, logits):
    """The bin of one float64 ``value`` (as the counting kernels bin a score)."""
    layout = key_layout(shift)
    logit = logit_layout(shift)
    if thresholds is not None:
        return _threshold_bin(value, thresholds)[0]
    if logits:
        return _key_bin(value, logit)[0]
    return _probability_bin(value, layout)[0]


# ---------------------------------------------------------------- plain twins
# Each intrinsic above has a twin in plain Numba code that returns the same bits (the tests
# pin them together), and :func:`plain` compiles every kernel of this module again with the
# twins in their place. Slower (no vector registers, no fused multiply-adds in hardware), but
# free of hand-written LLVM IR: the way around a miscompile in some future Numba or LLVM.


@njit
def _float32_bits_plain(value):
    """:func:`_float32_bits` from the float's sign, exponent and fraction (``math.frexp``)."""
    x = np.float64(value)
    sign = np.uint32(0x80000000) if math.copysign(1.0, x) < 0 else np.uint32(0)
    a = abs(x)
    if a != a:
        return sign | np.uint32(0x7FC00000)
    if a == np.inf:
        return sign | np.uint32(0x7F800000)
    if a == 0:
        return sign
    m, e = math.frexp(a)  # a = m * 2**e, 1/2 <= m < 1
    if e >= -125:  # a normal float32: biased exponent e + 126, 23 fraction bits
        return sign | np.uint32(((e + 126) << 23) | (np.int64(m * 16777216.0) - 8388608))
    return sign | np.uint32(np.int64(a * 2.0**149))  # subnormal: a multiple of 2**-149


@njit
def _shift_right32_plain(value, shift):
    return np.uint32(np.uint64(value) >> np.uint64(shift))


@njit
def _add32_plain(a, b):
    return np.int32(np.int64(a) + np.int64(b))  # the conversion keeps the low 32 bits


@njit
def _sub32_plain(a, b):
    return np.int32(np.int64(a) - np.int64(b))


@njit
def _subu32_plain(a, b):
    return np.uint32(np.int64(a) - np.int64(b))


@njit
def _divide_plain(a, b):
    # (Numba's ``/`` raises on a zero divisor; every divisor of these kernels is at least 1.)
    return a / b


@njit
def _float64_from_bits_plain(bits):
    """:func:`_float64_from_bits` from the exponent and fraction fields (``math.ldexp``)."""
    field = (bits >> np.int64(52)) & np.int64(0x7FF)
    fraction = bits & np.int64((1 << 52) - 1)
    if field == 0x7FF:
        magnitude = np.inf if fraction == 0 else np.nan
    elif field == 0:
        magnitude = math.ldexp(np.float64(fraction), -1074)
    else:
        magnitude = math.ldexp(np.float64(fraction + np.int64(1 << 52)), np.intp(field - 1075))
    return -magnitude if bits < 0 else magnitude


# A fused multiply-add from float64 operations (Boldo and Melquiond, "Emulation of FMA and
# correctly rounded sums: proved algorithms using rounding to odd", IEEE TC 2008): the exact
# product as two floats (Veltkamp's split, Dekker's product), two exact sums, the low parts
# added rounded to odd, and one rounding to nearest. Correctly rounded while no partial result
# underflows, which the arguments of these kernels' fused multiply-adds never make matter.
_SPLITTER = 134217729.0  # 2**27 + 1


@njit
def _two_sum(a, b):
    s = a + b
    t = s - a
    return s, (a - (s - t)) + (b - t)


@njit
def _two_product(a, b):
    p = a * b
    c = _SPLITTER * a
    a_high = c - (c - a)
    a_low = a - a_high
    d = _SPLITTER * b
    b_high = d - (d - b)
    b_low = b - b_high
    return p, ((a_high * b_high - p) + a_high * b_low + a_low * b_high) + a_low * b_low


@njit
def _odd_sum(a, b):
    """``a + b`` rounded to odd: the float of odd significand next to the exact sum when that
    sum is not a float."""
    s, error = _two_sum(a, b)
    if error == 0 or not abs(s) < np.inf:
        return s
    m, e = math.frexp(s)
    units = np.int64(m * 9007199254740992.0) if e >= -1021 else np.int64(math.ldexp(s, 1074))
    if units & 1:
        return s
    return np.nextafter(s, np.inf if error > 0 else -np.inf)


@njit
def _fma_plain(a, b, c):
    """:func:`_fma` (``a * b + c`` rounded once) without the ``llvm.fma`` intrinsic."""
    product = a * b
    if not (abs(product) < np.inf and abs(c) < np.inf):
        return product + c
    high, low = _two_product(a, b)
    t_high, t_low = _two_sum(c, low)
    v_high, v_low = _two_sum(high, t_high)
    result = v_high + _odd_sum(t_low, v_low)
    if result == 0:  # an exact zero: its sign as IEEE rounds a * b + c (a * b is exact then)
        return product + c
    return result


@njit
def _copy_columns_plain(scores, first, n, columns):
    for c in range(scores.shape[1]):
        for r in range(n):
            columns[c, r] = scores[first + r, c]


@njit
def _prefetch_plain(array, index):
    pass


@njit
def _softmax_lanes_plain(columns, top, target, c, r, totals, square):
    """:func:`_softmax_lanes` row by row (rows past the block are not read: the intrinsic's
    are scratch that nothing uses)."""
    stop = min(r + EXP_LANES, columns.shape[1], target.shape[0])
    c32 = np.int32(c)
    for row in range(r, stop):
        e = _exp_nonpositive(np.float64(columns[c, row]) - np.float64(top[row]))
        term = 0.0 if target[row] == c32 else e * e
        if c == 0:
            totals[row] = e
            square[row] = term
        else:
            totals[row] = totals[row] + e
            square[row] = square[row] + term


@njit
def _lane(scores, row, j):
    """Lane ``j`` of row ``row`` as a masked vector load reads it: +0 past the row (a valid
    row's scores are finite, so ``v - v`` is +0 of the scores' float type)."""
    v = scores[row, 0]
    return scores[row, j] if j < scores.shape[1] else v - v


@njit
def _tree_sum(x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15):
    """The sum of 16 lanes in the order of :func:`_reduce_lanes`' halving tree."""
    a0, a1, a2, a3 = x0 + x8, x1 + x9, x2 + x10, x3 + x11
    a4, a5, a6, a7 = x4 + x12, x5 + x13, x6 + x14, x7 + x15
    return ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))


@njit
def _row_total_plain(scores, row):
    """:func:`_row_total` with the same order of additions, in the scores' float type."""
    s = scores
    return np.float64(
        _tree_sum(
            _lane(s, row, 0), _lane(s, row, 1), _lane(s, row, 2), _lane(s, row, 3),
            _lane(s, row, 4), _lane(s, row, 5), _lane(s, row, 6), _lane(s, row, 7),
            _lane(s, row, 8), _lane(s, row, 9), _lane(s, row, 10), _lane(s, row, 11),
            _lane(s, row, 12), _lane(s, row, 13), _lane(s, row, 14), _lane(s, row, 15),
        )
    )  # fmt: skip


@njit
def _square_lane(scores, row, j, target):
    v = np.float64(_lane(scores, row, j))
    return 0.0 if j == target else v * v


@njit
def _probability_row_plain(scores, row, target, layout, scratch, at):
    """:func:`_probability_row` class by class, the squared errors added in its order."""
    num_classes = scores.shape[1]
    true = scores[row, target]
    exact = scratch.view(np.int16)[2 * SCRATCH_EXACT : 2 * SCRATCH_EXACT + ROW_LANES]
    greater = np.int32(0)
    before = np.int32(0)
    after = np.int32(0)
    largest = scores[row, 0]
    for c in range(num_classes):
        v = scores[row, c]
        b, is_exact = _probability_key(v, layout)
        scratch[SCRATCH_KEYS + ROW_LANES * at + c] = np.int32(2 * b + (c == target))
        exact[c] += np.int16(is_exact)
        greater += np.int32(v > true)
        before += np.int32((v == true) & (c < target))
        after += np.int32((v == true) & (c > target))
        largest = v if v > largest else largest
    top = true if greater == 0 else largest
    s, t = scores, target
    square = _tree_sum(
        _square_lane(s, row, 0, t), _square_lane(s, row, 1, t), _square_lane(s, row, 2, t),
        _square_lane(s, row, 3, t), _square_lane(s, row, 4, t), _square_lane(s, row, 5, t),
        _square_lane(s, row, 6, t), _square_lane(s, row, 7, t), _square_lane(s, row, 8, t),
        _square_lane(s, row, 9, t), _square_lane(s, row, 10, t), _square_lane(s, row, 11, t),
        _square_lane(s, row, 12, t), _square_lane(s, row, 13, t), _square_lane(s, row, 14, t),
        _square_lane(s, row, 15, t),
    )  # fmt: skip
    return greater, before, after, np.float64(top), np.float64(true), square


# Intrinsic (or SIMD overload) -> its plain twin, by the global name the kernels call it by.
PLAIN_TWINS = {
    "_float32_bits": _float32_bits_plain,
    "_shift_right32": _shift_right32_plain,
    "_add32": _add32_plain,
    "_sub32": _sub32_plain,
    "_subu32": _subu32_plain,
    "_divide": _divide_plain,
    "_float64_from_bits": _float64_from_bits_plain,
    "_fma": _fma_plain,
    "_copy_columns": _copy_columns_plain,  # (the 8 x 8 transposing tiles of _transpose_tile)
    "_softmax_lanes": _softmax_lanes_plain,
    "_prefetch": _prefetch_plain,
    "_probability_row": _probability_row_plain,
    "_row_total": _row_total_plain,
}


@_kernel
def count_small_rows_arrays(
    y_true,
    y_pred,
    table,
    eps,
    curves,
    inexact,
    ranks,
    calibration,
    confidence,
    losses,
    scratch,
    log,
):
    """:func:`count_small_rows` with the state arrays as arguments instead of addresses (the
    settings still from ``table``): the plain twin's way in (see :func:`plain`), as reading an
    array from an address takes an intrinsic. The arrays are the accumulator's, C-contiguous;
    ``log`` empty or ``2 * N`` float64."""
    if not _small_rows_fit(y_true, y_pred, table):
        return NOT_TAKEN
    return _count_small_rows_into(
        np.ascontiguousarray(y_true),
        np.ascontiguousarray(y_pred),
        table,
        eps,
        curves.reshape(-1),
        inexact,
        ranks.reshape(-1),
        calibration.reshape(-1),
        confidence,
        losses,
        scratch,
        scratch.view(np.int16)[2 * SCRATCH_EXACT : 2 * SCRATCH_EXACT + ROW_LANES],
        scratch[SCRATCH_CALIBRATION : SCRATCH_CALIBRATION + ROW_BLOCK],
        scratch.view(np.float64)[SCRATCH_TOP // 2 : SCRATCH_TOP // 2 + ROW_BLOCK],
        log,
    )


_PLAIN: list[object] = []


def plain():
    """This module's kernels compiled with the plain twins in place of the intrinsics: a
    namespace of ``count_multiclass``, ``count_elementwise``, ``count_small_rows_arrays``,
    ``check_weights``, ``bin_index``, ``exp_nonpositive``, ``log1p_unit`` (and the helpers),
    each computing the same bits as this module's own, compiled on first use (and cached on
    disk beside them)."""
    if _PLAIN:
        return _PLAIN[0]
    import types as _types

    from numba.core.dispatcher import Dispatcher

    namespace = dict(globals())
    namespace.update(PLAIN_TWINS)
    twins = set(PLAIN_TWINS.values())
    for name, value in globals().items():
        if (
            not isinstance(value, Dispatcher)
            or value in twins
            or value.py_func.__module__ != __name__
        ):
            continue
        function = value.py_func
        clone = _types.FunctionType(
            function.__code__, namespace, function.__name__, function.__defaults__
        )
        clone.__qualname__ = f"{function.__qualname__}__plain"
        clone.__doc__ = function.__doc__
        if name == "count_small_rows":  # reads its arrays from addresses: no plain twin
            namespace[name] = None
            continue
        if value.targetoptions.get("inline") == "always":
            # (Called, not inlined at Numba's level: that compiles in a fraction of the time,
            # and speed is not what the twins are for.)
            namespace[name] = njit(clone)
        else:
            namespace[name] = _kernel(clone)
    kernels = _types.SimpleNamespace(**namespace)
    _PLAIN.append(kernels)
    return kernels
