"""Numba kernels of the regression accumulator: every row's moments, added exactly.

The state must merge by plain addition (``merge``, groups and the distributed syncs add state
arrays), restore only non-negative values, stay accurate when ``y`` has a large mean and a
small spread (mean 1e9, spread 1: the raw sum of squares is 1e18 times larger than the centred
one), and be one state whatever the batches were: any split of a stream, any merge order.
So every row's terms — ``w``, ``w t``, ``w t²``, ``w p``, ``w p²``, ``w e``, ``w e²``,
``w t p``, ``w |e|`` with ``e = p - t`` (the float64 difference) — are added **exactly**, as
integers in fixed point: a row of ``LIMBS`` int64 limbs, limb ``k`` worth
``2**(EMIN + BITS * k)``, each holding ``BITS`` bits once normalised. Signed sums keep their
positive and negative terms in two rows. The views turn the limbs into Python integers and
compute every metric from exact integers, rounding once.

How a row is added without rounding: a float64 is an integer mantissa ``m < 2**53`` times a
power of two. Mantissas are cut into digits of 27 bits, so that a product of two or three of
them is a handful of int64 partial products (each below ``2**55``), each worth a known power of
two. A partial is added into a *bin* for its power of two (one integer addition, no shift);
after at most ``CHUNK`` rows, so that no bin can pass ``2**63``, the bins that can be non-zero
are carried into the limbs and cleared. Nothing is dropped: ``EMIN`` is below the smallest
product of three float64 subnormals, and a row whose weighted square ``w * max(|t|, |p|,
|e|)**2`` overflows float64 is refused, so the sum of up to ``2**63`` rows stays below the top
limb.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core.imputils import impl_ret_untracked
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

# Fixed-point layout: limb k holds bits [EMIN + BITS*k, EMIN + BITS*(k+1)) once normalised.
BITS = 31
MASK = (1 << BITS) - 1
EMIN = -3239  # <= 3 * -1074 (a product of three subnormals); EMIN + 1100 is a multiple of BITS
LIMBS = 140  # up to 2**1101: the sum of 2**63 terms below 2**1024 fits
# Format 1 of the state had EMIN = -1100 and 71 limbs: its limb k is limb k + LOW_LIMBS_ADDED.
LOW_LIMBS_ADDED = 69

# Rows of the state, per output: every signed quantity has a positive and a negative row.
S_W, S_T_POS, S_T_NEG, S_TT, S_P_POS, S_P_NEG, S_PP = range(7)
S_E_POS, S_E_NEG, S_EE, S_TP_POS, S_TP_NEG, S_AE = range(7, 13)
NUM_STATE = 13

# Status codes of `count` (the Python side words the messages).
OK = 0
BAD_TRUE = 1  # y_true not finite at (row, col)
BAD_PRED = 2  # y_pred not finite at (row, col)
BAD_DIFF = 3  # y_pred - y_true overflows at (row, col)
BAD_WEIGHT = 4  # weight NaN, infinite or negative at (row, -)
OVERFLOW = 5  # w * max(|t|, |p|, |e|)**2 overflows float64 at (row, col)
STATE_TOO_LARGE = 7  # the state holds limbs too large to add to (not written by us)

CHUNK = 256  # rows between carries of the bins: 256 partials below 2**55 stay below 2**63
DIGIT = 27
DIGIT_MASK = (1 << DIGIT) - 1
WORD = 53  # a product of two mantissas goes into two bins, 53 bits apart
HALF_MASK = (1 << (WORD - DIGIT)) - 1
# Bins: one per power of two a partial can be worth, position = exponent - EMIN. A partial of
# a valid row is worth less than 2**1024 and sits at most 4 digits above its product's lowest
# bit, so positions stay below 1024 + 4 * DIGIT - EMIN.
NUM_BINS = 1024 + 4 * DIGIT + 8 - EMIN
_FRACTION = (1 << 52) - 1
_HIDDEN = 1 << 52
_EXP_BIAS = 1075  # a float64 with exponent field x > 0 is (2**52 + fraction) * 2**(x - 1075)
_FINITE_LIMIT = 0x7FF0000000000000  # bits of +inf: finite magnitudes have fewer
_DBL_MAX = 1.7976931348623157e308
# Exponent fields (ew + 2 * ea) below this guarantee that w * a * a stays below 2**1023.
_SAFE_EXPONENTS = 3 * 1023 + 1022 - 3


@intrinsic
def _float_bits(typingctx, x):  # type: ignore[no-untyped-def]
    """The bits of a float64 as an int64 (a bitcast; no memory)."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(x), codegen


@intrinsic
def _bits_float(typingctx, x):  # type: ignore[no-untyped-def]
    """The float64 whose bits are the int64 ``x``."""
    if x != types.int64:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(x), codegen


@intrinsic
def _bits_view(typingctx, array):  # type: ignore[no-untyped-def]
    """A float64 array's bits as an int64 array of the same shape and strides (``view``
    without Numba's generic helper, which compiles a subroutine per call site). The view owns
    no reference: the caller keeps the array alive."""
    if not (isinstance(array, types.Array) and array.dtype == types.float64):
        return None
    view_type = array.copy(dtype=types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        source = context.make_array(signature.args[0])(context, builder, value=args[0])
        target = context.make_array(signature.return_type)(context, builder)
        populate_array(
            target,
            data=builder.bitcast(source.data, target.data.type),
            shape=source.shape,
            strides=source.strides,
            itemsize=source.itemsize,
            meminfo=None,
            parent=None,
        )
        return impl_ret_untracked(context, builder, signature.return_type, target._getvalue())

    return view_type(array), codegen


@numba.njit(inline="always")
def _decode(bits):  # type: ignore[no-untyped-def]
    """``(mantissa, position of its lowest bit - EMIN, negative)`` of a float64's bits."""
    field = (bits >> 52) & 0x7FF
    mantissa = (bits & _FRACTION) | (np.int64(field != 0) << 52)
    return mantissa, max(field, 1) - _EXP_BIAS - EMIN, np.int64(bits < 0)


@numba.njit(inline="always")
def _carry_bin(limbs, value, position):  # type: ignore[no-untyped-def]
    """Add ``value * 2**(EMIN + position)`` (0 <= value < 2**63) into ``limbs``, exactly."""
    k = position // BITS
    shift = position - k * BITS
    low = (value & MASK) << shift  # < 2**61
    high = (value >> BITS) << shift  # < 2**62
    limbs[k] += low & MASK
    limbs[k + 1] += (low >> BITS) + (high & MASK)
    limbs[k + 2] += high >> BITS


@numba.njit
def _flush(bins, limbs, intervals):  # type: ignore[no-untyped-def]
    """Carry the bins of ``intervals`` (rows of ``(row, first, last)`` positions) into
    ``limbs`` and clear them."""
    for r in range(intervals.shape[0]):
        q = intervals[r, 0]
        for s in range(intervals[r, 1], intervals[r, 2] + 1):
            value = bins[q, s]
            if value != 0:
                bins[q, s] = 0
                _carry_bin(limbs[q], value, s)


@numba.njit
def _intervals(found, weighted):  # type: ignore[no-untyped-def]
    """``(row, first, last)``: the bin positions each row of the bins can use in a batch whose
    exponent fields are ``found[4:12]`` (t, p, e, w: lowest non-zero, highest)."""
    pos = np.empty(8, dtype=np.int64)
    for k in range(8):
        pos[k] = max(found[4 + k], 1) - _EXP_BIAS - EMIN
    tl, th, pl, ph, el, eh, wl, wh = pos[0], pos[1], pos[2], pos[3], pos[4], pos[5], pos[6], pos[7]
    out = np.empty((26, 3), dtype=np.int64)
    n = 0
    if weighted:
        singles = ((S_T_POS, tl, th), (S_P_POS, pl, ph), (S_E_POS, el, eh))
        for q, lo, hi in singles:
            for sign in range(2):
                out[n, 0], out[n, 1], out[n, 2] = q + sign, wl + lo + EMIN, wh + hi + EMIN + WORD
                n += 1
        squares = ((S_TT, tl, th, tl, th), (S_PP, pl, ph, pl, ph), (S_EE, el, eh, el, eh))
        for q, lo, hi, lo2, hi2 in squares + ((S_TP_POS, tl, th, pl, ph),):
            for sign in range(2 if q == S_TP_POS else 1):
                out[n, 0] = q + sign
                out[n, 1] = wl + lo + lo2 + 2 * EMIN
                out[n, 2] = wh + hi + hi2 + 2 * EMIN + 4 * DIGIT
                n += 1
        out[n, 0], out[n, 1], out[n, 2] = S_W, wl, wh
        n += 1
    else:
        for q, lo, hi in ((S_T_POS, tl, th), (S_P_POS, pl, ph), (S_E_POS, el, eh)):
            for sign in range(2):
                out[n, 0], out[n, 1], out[n, 2] = q + sign, lo, hi
                n += 1
        products = ((S_TT, tl, th, tl, th), (S_PP, pl, ph, pl, ph), (S_EE, el, eh, el, eh))
        for q, lo, hi, lo2, hi2 in products + ((S_TP_POS, tl, th, pl, ph),):
            for sign in range(2 if q == S_TP_POS else 1):
                for word in (0, WORD):
                    out[n, 0] = q + sign
                    out[n, 1] = lo + lo2 + EMIN + word
                    out[n, 2] = hi + hi2 + EMIN + word
                    n += 1
    for r in range(n):
        out[r, 1] = max(out[r, 1], 0)
        out[r, 2] = min(out[r, 2], NUM_BINS - 1)
    return out[:n]


@numba.njit(cache=True)
def bins_into_limbs(bins, limbs):  # type: ignore[no-untyped-def]
    """Add bins (..., NUM_BINS) of non-negative values below 2**63 into limbs (..., LIMBS),
    exactly (the device path's bins; every bin, in any order)."""
    flat_bins = bins.reshape(-1, bins.shape[-1])
    flat_limbs = limbs.reshape(-1, LIMBS)
    for r in range(flat_bins.shape[0]):
        for s in range(flat_bins.shape[1]):
            value = flat_bins[r, s]
            if value != 0:
                _carry_bin(flat_limbs[r], value, s)


@numba.njit(inline="always")
def _normalise_row(row) -> None:  # type: ignore[no-untyped-def]
    carry = np.int64(0)
    for k in range(LIMBS - 1):
        value = row[k] + carry
        row[k] = value & MASK
        carry = value >> BITS
    row[LIMBS - 1] += carry


@numba.njit
def _check(t, p, w, weighted, found, max_error):  # type: ignore[no-untyped-def]
    """Validate a batch; fill ``found`` = (status, row, col, any positive weight, then the
    lowest and highest exponent fields of the non-zero t, p, e and weights) and
    ``max_error`` (bits of the largest |e| per output among rows of positive weight).

    The common case is reductions into scalars, which LLVM vectorises; only a batch that
    fails them is scanned again, in row-major order, for its first bad value.
    """
    n, m = t.shape
    tb = _bits_view(t)
    pb = _bits_view(p)
    magnitude = np.int64(0x7FFFFFFFFFFFFFFF)
    bad = False
    positive = not weighted and n > 0
    wlow = magnitude
    whigh = np.int64(0)
    if weighted:
        wb = _bits_view(w)
        for i in range(n):
            wi = w[i]
            bad |= (wi < 0.0) | (wi > _DBL_MAX) | (wi != wi)
            wbits = wb[i] & magnitude  # -0.0 is 0
            positive |= wi > 0.0
            wlow = min(wlow, wbits if wbits != 0 else magnitude)
            whigh = max(whigh, wbits)
    # Per variable (t, p, e): the lowest non-zero and the highest magnitude (bits).
    tlow = plow = elow = magnitude
    thigh = phigh = ehigh = np.int64(0)
    exponents = np.int64(0)  # largest (exponent field of w) + 2 * (that of max(|t|, |p|, |e|))
    for j in range(m):
        largest_error = np.int64(0)
        for i in range(n):
            ta = tb[i, j] & magnitude
            pa = pb[i, j] & magnitude
            ea = _float_bits(p[i, j] - t[i, j]) & magnitude
            thigh = max(thigh, ta)
            phigh = max(phigh, pa)
            ehigh = max(ehigh, ea)
            tlow = min(tlow, ta if ta != 0 else magnitude)
            plow = min(plow, pa if pa != 0 else magnitude)
            elow = min(elow, ea if ea != 0 else magnitude)
            if weighted:
                wfield = (wb[i] & magnitude) >> 52
                live = w[i] > 0.0
            else:
                wfield = np.int64(1023)
                live = True
            exponents = max(exponents, wfield + 2 * (max(ta, max(pa, ea)) >> 52))
            largest_error = max(largest_error, ea if live else 0)
        max_error[j] = largest_error
    bad |= max(thigh, max(phigh, ehigh)) >= _FINITE_LIMIT
    # Possibly an overflowing square (w * a * a >= 2**1023): the exact rule decides below.
    bad |= exponents >= _SAFE_EXPONENTS
    found[0] = OK
    found[1] = -1
    found[2] = -1
    found[3] = np.int64(positive)
    for k, (lo, hi) in enumerate(((tlow, thigh), (plow, phigh), (elow, ehigh), (wlow, whigh))):
        found[4 + 2 * k] = lo >> 52
        found[5 + 2 * k] = hi >> 52
    if bad:
        _first_bad(t, p, w, weighted, found)


@numba.njit
def _first_bad(t, p, w, weighted, found):  # type: ignore[no-untyped-def]
    n, m = t.shape
    for i in range(n):
        wi = w[i] if weighted else 1.0
        if not (wi >= 0.0 and wi <= _DBL_MAX):
            found[0], found[1], found[2] = BAD_WEIGHT, i, -1
            return
        for j in range(m):
            ti = t[i, j]
            pi = p[i, j]
            if not (abs(ti) <= _DBL_MAX):
                found[0], found[1], found[2] = BAD_TRUE, i, j
                return
            if not (abs(pi) <= _DBL_MAX):
                found[0], found[1], found[2] = BAD_PRED, i, j
                return
            e = pi - ti
            if not (abs(e) <= _DBL_MAX):
                found[0], found[1], found[2] = BAD_DIFF, i, j
                return
            a = max(abs(ti), max(abs(pi), abs(e)))
            if not (wi * a * a <= _DBL_MAX):
                found[0], found[1], found[2] = OVERFLOW, i, j
                return


@numba.njit
def _largest(rows):  # type: ignore[no-untyped-def]
    """The largest value of the int64 matrix ``rows`` (a loop: ``ndarray.max`` compiles
    Numba's generic reduction)."""
    most = np.int64(-(2**63))
    for r in range(rows.shape[0]):
        for k in range(rows.shape[1]):
            most = max(most, rows[r, k])
    return most


@numba.njit(inline="always")
def _two_words(c0, c1, c2):  # type: ignore[no-untyped-def]
    """``c0 + c1 * 2**27 + c2 * 2**54`` (each below 2**54) as ``low + high * 2**53``, both
    below 2**55: two bins to add instead of three."""
    return c0 + ((c1 & HALF_MASK) << DIGIT), (c1 >> (WORD - DIGIT)) + (c2 << (2 * DIGIT - WORD))


@numba.njit(inline="always")
def _product_into(bins, q, a, b, position):  # type: ignore[no-untyped-def]
    """``a * b * 2**position`` (mantissas below 2**53) into bins row ``q``: two bins."""
    a0 = a & DIGIT_MASK
    a1 = a >> DIGIT
    b0 = b & DIGIT_MASK
    b1 = b >> DIGIT
    low, high = _two_words(a0 * b0, a0 * b1 + a1 * b0, a1 * b1)
    bins[q, position] += low
    bins[q, position + WORD] += high


@numba.njit(inline="always")
def _weighted_into(bins, q, mw, m, position):  # type: ignore[no-untyped-def]
    """``w x`` (mantissas ``mw``, ``m``, worth ``2**position``) into bins row ``q`` (two
    bins); returns ``w x`` as four digits of 27 bits, for the product with ``x`` again."""
    w0 = mw & DIGIT_MASK
    w1 = mw >> DIGIT
    x0 = m & DIGIT_MASK
    x1 = m >> DIGIT
    c0 = w0 * x0
    c1 = w0 * x1 + w1 * x0
    c2 = w1 * x1
    low, high = _two_words(c0, c1, c2)
    bins[q, position] += low
    bins[q, position + WORD] += high
    g0 = c0 & DIGIT_MASK
    s = c1 + (c0 >> DIGIT)
    g1 = s & DIGIT_MASK
    s = c2 + (s >> DIGIT)
    return g0, g1, s & DIGIT_MASK, s >> DIGIT


@numba.njit(inline="always")
def _digits_times(row, g0, g1, g2, g3, m, position):  # type: ignore[no-untyped-def]
    """``(g3 g2 g1 g0) * m * 2**position`` into bins ``row`` (five partials)."""
    f0 = m & DIGIT_MASK
    f1 = m >> DIGIT
    row[position] += g0 * f0
    row[position + DIGIT] += g0 * f1 + g1 * f0
    row[position + 2 * DIGIT] += g1 * f1 + g2 * f0
    row[position + 3 * DIGIT] += g2 * f1 + g3 * f0
    row[position + 4 * DIGIT] += g3 * f1


@numba.njit
def _deposit_plain(t, p, j, start, stop, bins):  # type: ignore[no-untyped-def]
    """Rows [start, stop) of output ``j`` into ``bins`` (NUM_STATE, NUM_BINS), weight 1.

    ``w |e|`` is not binned: it is the sum of the positive and negative rows of ``w e``.
    """
    tb = _bits_view(t)
    pb = _bits_view(p)
    for i in range(start, stop):
        mt, et, nt = _decode(tb[i, j])
        mp, ep, np_ = _decode(pb[i, j])
        me, ee, ne = _decode(_float_bits(p[i, j] - t[i, j]))
        bins[S_T_POS + nt, et] += mt
        bins[S_P_POS + np_, ep] += mp
        bins[S_E_POS + ne, ee] += me
        _product_into(bins, S_TT, mt, mt, et + et + EMIN)
        _product_into(bins, S_PP, mp, mp, ep + ep + EMIN)
        _product_into(bins, S_EE, me, me, ee + ee + EMIN)
        _product_into(bins, S_TP_POS + (nt ^ np_), mt, mp, et + ep + EMIN)


@numba.njit
def _deposit_weighted(t, p, w, j, start, stop, bins):  # type: ignore[no-untyped-def]
    """Rows [start, stop) of output ``j`` into ``bins``, weighted (and ``w`` itself into row
    S_W when ``j`` is 0)."""
    tb = _bits_view(t)
    pb = _bits_view(p)
    wb = _bits_view(w)
    for i in range(start, stop):
        mw, ew, _ = _decode(wb[i])
        if j == 0:
            bins[S_W, ew] += mw
        mt, et, nt = _decode(tb[i, j])
        mp, ep, np_ = _decode(pb[i, j])
        me, ee, ne = _decode(_float_bits(p[i, j] - t[i, j]))
        # w t, then (w t) t and (w t) p
        position = ew + et + EMIN
        g0, g1, g2, g3 = _weighted_into(bins, S_T_POS + nt, mw, mt, position)
        _digits_times(bins[S_TT], g0, g1, g2, g3, mt, position + et + EMIN)
        _digits_times(bins[S_TP_POS + (nt ^ np_)], g0, g1, g2, g3, mp, position + ep + EMIN)
        position = ew + ep + EMIN
        g0, g1, g2, g3 = _weighted_into(bins, S_P_POS + np_, mw, mp, position)
        _digits_times(bins[S_PP], g0, g1, g2, g3, mp, position + ep + EMIN)
        position = ew + ee + EMIN
        g0, g1, g2, g3 = _weighted_into(bins, S_E_POS + ne, mw, me, position)
        _digits_times(bins[S_EE], g0, g1, g2, g3, me, position + ee + EMIN)


# Compile time: ``count`` is compiled when this module is imported (its signature is given),
# so a cold first update waits for it. The per-row helpers of the hot loops are inlined into
# ``_deposit_*`` and ``_check``, which ``count`` calls (each compiled once, linked). What made
# the compile slow was Numba's generic array helpers, each compiled as a subroutine at its call
# site: an array assigned into a slice (the broadcasting setitem and its shape-mismatch error,
# seconds), ``ndarray.view`` (replaced by the ``_bits_view`` intrinsic) and ``ndarray.max``
# (a loop, :func:`_largest`).
@numba.njit(
    "UniTuple(int64, 3)(float64[:, ::1], float64[:, ::1], float64[::1], boolean, "
    "int64[:, :, ::1], float64[::1], int64[:, ::1])",
    cache=True,
)
def count(t, p, w, weighted, moments, max_error, bins):  # type: ignore[no-untyped-def]
    """Add one batch into the state ``moments`` (n_outputs, NUM_STATE, LIMBS) and ``max_error``.

    ``t``, ``p``: (N, n_outputs) float64; ``w``: (N,) weights when ``weighted``; ``bins``:
    (NUM_STATE, NUM_BINS) zeros, left zero. Returns ``(status, row, col)``; ``row`` is -2 on
    success when no row had positive weight. Every check comes before the first write: on a
    non-OK status nothing was changed.
    """
    n, m = t.shape
    found = np.empty(12, dtype=np.int64)
    largest = np.empty(m, dtype=np.int64)
    _check(t, p, w, weighted, found, largest)
    if found[0] != OK:
        return found[0], found[1], found[2]
    limit = np.int64(1) << 61
    flat = moments.reshape(-1, LIMBS)
    if _largest(flat) >= limit:  # only a state restored from elsewhere gets here
        for r in range(flat.shape[0]):
            if _largest(flat[r : r + 1]) >= limit:
                return STATE_TOO_LARGE, -1, r // NUM_STATE
    if found[3] == 0:
        return OK, -2, -1
    intervals = _intervals(found, weighted)
    scratch = np.zeros((m, NUM_STATE, LIMBS), dtype=np.int64)
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        for j in range(m):
            if weighted:
                _deposit_weighted(t, p, w, j, start, stop, bins)
            else:
                _deposit_plain(t, p, j, start, stop, bins)
            _flush(bins, scratch[j], intervals)
        if (start // CHUNK) % 65536 == 65535:  # keep the limbs far from 2**63
            for j in range(m):
                for q in range(NUM_STATE):
                    _normalise_row(scratch[j, q])
    if not weighted:
        _carry_bin(scratch[0, S_W], np.int64(n), -EMIN)
    # The limbs the batch can have touched: from its lowest bin to its highest (a bin below
    # 2**63 spans three limbs from its own).
    low = -EMIN // BITS
    high = low + 2
    for r in range(intervals.shape[0]):
        if intervals[r, 1] <= intervals[r, 2]:
            low = min(low, intervals[r, 1] // BITS)
            high = max(high, intervals[r, 2] // BITS + 2)
    high = min(high, LIMBS - 1)
    for j in range(m):
        # loops, not slice assignments (compile time: see above)
        for k in range(LIMBS):
            if j > 0:
                scratch[j, S_W, k] = scratch[0, S_W, k]
            scratch[j, S_AE, k] = scratch[j, S_E_POS, k] + scratch[j, S_E_NEG, k]
        for q in range(NUM_STATE):
            # Limbs below `low` are zero in the batch; above `high` only a carry can change
            # the (canonical) state, and once it is 0 nothing does.
            carry = np.int64(0)
            k = low
            while k < LIMBS - 1:
                value = moments[j, q, k] + scratch[j, q, k] + carry
                moments[j, q, k] = value & MASK
                carry = value >> BITS
                k += 1
                if k > high and carry == 0:
                    break
            if k == LIMBS - 1:
                moments[j, q, LIMBS - 1] += scratch[j, q, LIMBS - 1] + carry
        error = _bits_float(largest[j])
        max_error[j] = max(max_error[j], error)
    return OK, -1, -1


@numba.njit("boolean(int64[:, :, ::1], int64[:, :, ::1])", cache=True)
def add_into(state, delta):  # type: ignore[no-untyped-def]
    """``state += delta`` then normalise, or return False (nothing written) if a limb would wrap.

    Both hold non-negative limbs; after normalisation every limb but the top one is below
    2**BITS, so only a state restored from elsewhere can come near 2**63.
    """
    flat_state = state.reshape(-1, LIMBS)
    flat_delta = delta.reshape(-1, LIMBS)
    limit = np.int64(1) << 61
    for r in range(flat_state.shape[0]):
        for k in range(LIMBS):
            if flat_state[r, k] >= limit or flat_delta[r, k] >= limit:
                return False
    for r in range(flat_state.shape[0]):
        carry = np.int64(0)
        for k in range(LIMBS - 1):
            value = flat_state[r, k] + flat_delta[r, k] + carry
            flat_state[r, k] = value & MASK
            carry = value >> BITS
        flat_state[r, LIMBS - 1] += flat_delta[r, LIMBS - 1] + carry
    return True


@numba.njit("void(int64[:, :, ::1])", cache=True)
def normalise_state(state):  # type: ignore[no-untyped-def]
    """Canonical limbs after a merge by plain addition (groups, syncs); the value is unchanged.

    Skips a row whose top limb could wrap (only a hostile state gets there): its value stays
    right, in a non-canonical form.
    """
    flat = state.reshape(-1, LIMBS)
    limit = np.int64(1) << 61
    for r in range(flat.shape[0]):
        if flat[r, LIMBS - 1] >= limit:
            continue
        _normalise_row(flat[r])
