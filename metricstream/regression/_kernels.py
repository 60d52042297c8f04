"""Numba kernels of the regression accumulator: one batch's moments, as exact fixed-point sums.

The state must merge by plain addition (``merge``, groups and the distributed syncs add state
arrays), restore only non-negative values, and stay accurate when ``y`` has a large mean and a
small spread (mean 1e9, spread 1: the raw sum of squares is 1e18 times larger than the centred
one). Float sums about zero lose everything there, and sums about a per-batch shift cannot be
added across shards. So every moment is kept as an **exact** number in fixed point: a row of
``LIMBS`` int64 limbs, limb ``k`` worth ``2**(EMIN + BITS * k)``, each holding ``BITS`` bits once
normalised. Adding two states limb by limb adds the numbers exactly, in any order; the views turn
the limbs into Python integers and compute every metric from exact integers, rounding once.

One batch is summarised in float64 first, centred on its first counted row (two passes: means,
then centred second moments; blocks of rows summed plainly, block sums with compensation), and
only its summary is deposited exactly:
``sum(w * y**2) = M2 + W * (c + d)**2`` with ``c`` the shift and ``d`` the mean offset, every
product expanded without rounding (mantissa products split with Veltkamp's method). The batch's
rounding is relative to its own centred moments, so a large mean costs nothing; a constant
column gives exactly zero variance; and a sum that would not fit is refused before anything is
written.
"""

from __future__ import annotations

import math

import numba
import numpy as np

# Fixed-point layout: limb k holds bits [EMIN + BITS*k, EMIN + BITS*(k+1)) once normalised.
BITS = 31
MASK = (1 << BITS) - 1
EMIN = -1100  # below the smallest float64 (2**-1074): what is dropped cannot change a result
LIMBS = 71  # up to 2**1101: 41 bits of headroom above the largest single deposit
TOP = 1060  # a batch whose exact sums reach 2**TOP is refused (it would overflow any metric)

# The quantities of one batch, per output (signed while the batch is summarised).
W, T, TT, P, PP, E, EE, TP, AE = range(9)
NUM_BATCH = 9
# Rows of the state, per output: every signed quantity has a positive and a negative row.
S_W, S_T_POS, S_T_NEG, S_TT, S_P_POS, S_P_NEG, S_PP = range(7)
S_E_POS, S_E_NEG, S_EE, S_TP_POS, S_TP_NEG, S_AE = range(7, 13)
NUM_STATE = 13
# Batch quantity -> (state row for its positive part, state row for its negative part).
ROUTE = np.array(
    [
        [S_W, S_W],
        [S_T_POS, S_T_NEG],
        [S_TT, S_TT],
        [S_P_POS, S_P_NEG],
        [S_PP, S_PP],
        [S_E_POS, S_E_NEG],
        [S_EE, S_EE],
        [S_TP_POS, S_TP_NEG],
        [S_AE, S_AE],
    ],
    dtype=np.int64,
)

# Status codes of `summarise` (the Python side words the messages).
OK = 0
BAD_TRUE = 1  # y_true not finite at (row, col)
BAD_PRED = 2  # y_pred not finite at (row, col)
BAD_DIFF = 3  # y_pred - y_true overflows at (row, col)
BAD_WEIGHT = 4  # weight NaN, infinite or negative at (row, -)
OVERFLOW = 5  # the batch's sums for output col overflow float64
TOO_LARGE = 6  # an exact sum of output col would reach 2**TOP
STATE_TOO_LARGE = 7  # the state holds limbs too large to add to (not written by us)

BLOCK = 32  # rows summed plainly before a compensated addition
_SPLITTER = 134217729.0  # 2**27 + 1: Veltkamp's constant for float64


@numba.njit
def _two_sum(s: float, x: float) -> tuple[float, float]:
    total = s + x
    back = total - s
    return total, (s - (total - back)) + (x - back)


@numba.njit
def _two_prod(a: float, b: float) -> tuple[float, float]:
    """``a * b == hi + lo`` exactly (no FMA needed; |a|, |b| < 1, so nothing overflows)."""
    hi = a * b
    c = _SPLITTER * a
    a1 = c - (c - a)
    a2 = a - a1
    c = _SPLITTER * b
    b1 = c - (c - b)
    b2 = b - b1
    return hi, ((a1 * b1 - hi) + a1 * b2 + a2 * b1) + a2 * b2


@numba.njit
def _put(row: np.ndarray, x: float, exponent: int) -> bool:
    """Add ``x * 2**exponent`` (x a nonzero double, any sign) into ``row`` exactly.

    Limbs may go negative here; `_normalise` settles the carries. Bits below 2**EMIN are
    dropped. Returns False when the value reaches 2**TOP.
    """
    fraction, exp = math.frexp(abs(x))
    mantissa = np.int64(fraction * 9007199254740992.0)  # exact: 53 bits
    position = exp + exponent - 53 - EMIN
    if position + 53 > TOP - EMIN:
        return False
    if position < 0:
        if position <= -53:
            return True
        mantissa >>= -position
        position = 0
    k = position // BITS
    shift = position - k * BITS
    sign = np.int64(1) if x >= 0 else np.int64(-1)
    # Two pieces, so that no shifted piece passes 2**62: 31 low bits, then the rest (22 bits).
    piece = (mantissa & MASK) << shift
    row[k] += sign * (piece & MASK)
    row[k + 1] += sign * (piece >> BITS)
    piece = (mantissa >> BITS) << shift
    row[k + 1] += sign * (piece & MASK)
    row[k + 2] += sign * (piece >> BITS)
    return True


@numba.njit
def _put_product(row: np.ndarray, a: float, b: float, c: float) -> bool:
    """Add ``a * b * c`` into ``row`` exactly (four doubles after two exact products)."""
    if a == 0.0 or b == 0.0 or c == 0.0:
        return True
    fa, ea = math.frexp(a)
    fb, eb = math.frexp(b)
    fc, ec = math.frexp(c)
    exponent = ea + eb + ec
    hi, lo = _two_prod(fa, fb)
    p1, p2 = _two_prod(hi, fc)
    ok = _put(row, p1, exponent)
    if p2 != 0.0:
        ok &= _put(row, p2, exponent)
    if lo != 0.0:
        q1, q2 = _two_prod(lo, fc)
        ok &= _put(row, q1, exponent)
        if q2 != 0.0:
            ok &= _put(row, q2, exponent)
    return ok


@numba.njit
def _put_square_about(row: np.ndarray, m2: float, w: float, c: float, d: float) -> bool:
    """``m2 + w * (c + d)**2``: a centred second moment moved back to zero, exactly."""
    ok = True
    if m2 != 0.0:
        ok &= _put(row, m2, 0)
    ok &= _put_product(row, w, c, c)
    ok &= _put_product(row, w, c, d)
    ok &= _put_product(row, w, c, d)  # twice: 2 * w could overflow
    ok &= _put_product(row, w, d, d)
    return ok


@numba.njit(cache=True)
def _normalise(rows: np.ndarray) -> None:
    """Carry every row of ``rows`` (..., LIMBS) into canonical limbs in [0, 2**BITS).

    A row whose value is negative is left negated, with its sign moved to the caller: the top
    limb is then negative before negation, which `summarise` checks. The top limb keeps what
    passes it (no carry out).
    """
    flat = rows.reshape(-1, LIMBS)
    for r in range(flat.shape[0]):
        carry = np.int64(0)
        for k in range(LIMBS - 1):
            value = flat[r, k] + carry
            flat[r, k] = value & MASK
            carry = value >> BITS
        flat[r, LIMBS - 1] += carry


@numba.njit(cache=True)
def _check(t, p, w, weighted):  # type: ignore[no-untyped-def]
    """Every value, in row-major order: ``(status, row, col, first row of positive weight)``."""
    n, m = t.shape
    first = -1
    for i in range(n):
        wi = w[i] if weighted else 1.0
        if not (math.isfinite(wi) and wi >= 0.0):
            return BAD_WEIGHT, i, -1, first
        if first < 0 and wi > 0.0:
            first = i
        for j in range(m):
            if not math.isfinite(t[i, j]):
                return BAD_TRUE, i, j, first
            if not math.isfinite(p[i, j]):
                return BAD_PRED, i, j, first
            if not math.isfinite(p[i, j] - t[i, j]):
                return BAD_DIFF, i, j, first
    return OK, -1, -1, first


@numba.njit(cache=True)
def _summarise_output(t, p, w, weighted, j, first, scratch):  # type: ignore[no-untyped-def]
    """Deposit output ``j`` of a checked batch into ``scratch`` (NUM_BATCH, LIMBS), signed.

    Returns ``(status, max |error|)``. Two passes (means, then centred second moments)
    centred on row ``first``.
    """
    n = t.shape[0]
    ct = t[first, j]
    cp = p[first, j]
    ce = p[first, j] - t[first, j]
    # Each block of BLOCK rows is summed plainly (short dependency chains), and the block sums
    # are added with compensation: the error stays below BLOCK ulps of the sums of magnitudes.
    total_w = st = sp = se = sa = 0.0
    cw = cst = csp = cse = csa = 0.0
    largest = 0.0
    for start in range(first, n, BLOCK):
        bw = bt = bp = be = ba = 0.0
        for i in range(start, min(start + BLOCK, n)):
            wi = w[i] if weighted else 1.0
            ti = t[i, j]
            pi = p[i, j]
            ei = pi - ti
            if wi > 0.0 and abs(ei) > largest:
                largest = abs(ei)
            bw += wi
            bt += wi * (ti - ct)
            bp += wi * (pi - cp)
            be += wi * (ei - ce)
            ba += wi * abs(ei)
        total_w, err = _two_sum(total_w, bw)
        cw += err
        st, err = _two_sum(st, bt)
        cst += err
        sp, err = _two_sum(sp, bp)
        csp += err
        se, err = _two_sum(se, be)
        cse += err
        sa, err = _two_sum(sa, ba)
        csa += err
    total_w += cw
    dt = (st + cst) / total_w
    dp = (sp + csp) / total_w
    de = (se + cse) / total_w
    sa += csa
    mt = mp = me = mc = 0.0
    cmt = cmp = cme = cmc = 0.0
    for start in range(first, n, BLOCK):
        bt = bp = be = bc = 0.0
        for i in range(start, min(start + BLOCK, n)):
            wi = w[i] if weighted else 1.0
            a = (t[i, j] - ct) - dt
            b = (p[i, j] - cp) - dp
            e = ((p[i, j] - t[i, j]) - ce) - de
            bt += wi * a * a
            bp += wi * b * b
            be += wi * e * e
            bc += wi * a * b
        mt, err = _two_sum(mt, bt)
        cmt += err
        mp, err = _two_sum(mp, bp)
        cmp += err
        me, err = _two_sum(me, be)
        cme += err
        mc, err = _two_sum(mc, bc)
        cmc += err
    mt += cmt
    mp += cmp
    me += cme
    mc += cmc
    for value in (total_w, dt, dp, de, sa, mt, mp, me, mc):
        if not math.isfinite(value):
            return OVERFLOW, largest
    ok = _put(scratch[W], total_w, 0)
    ok &= _put_product(scratch[T], total_w, ct, 1.0)
    ok &= _put_product(scratch[T], total_w, dt, 1.0)
    ok &= _put_square_about(scratch[TT], mt, total_w, ct, dt)
    ok &= _put_product(scratch[P], total_w, cp, 1.0)
    ok &= _put_product(scratch[P], total_w, dp, 1.0)
    ok &= _put_square_about(scratch[PP], mp, total_w, cp, dp)
    ok &= _put_product(scratch[E], total_w, ce, 1.0)
    ok &= _put_product(scratch[E], total_w, de, 1.0)
    ok &= _put_square_about(scratch[EE], me, total_w, ce, de)
    # sum(w t p) = C + W (ct + dt)(cp + dp)
    if mc != 0.0:
        ok &= _put(scratch[TP], mc, 0)
    ok &= _put_product(scratch[TP], total_w, ct, cp)
    ok &= _put_product(scratch[TP], total_w, ct, dp)
    ok &= _put_product(scratch[TP], total_w, dt, cp)
    ok &= _put_product(scratch[TP], total_w, dt, dp)
    if sa != 0.0:
        ok &= _put(scratch[AE], sa, 0)
    return (OK if ok else TOO_LARGE), largest


@numba.njit(
    "UniTuple(int64, 3)(float64[:, ::1], float64[:, ::1], float64[::1], boolean, "
    "int64[:, :, ::1], float64[::1])",
    cache=True,
)
def count(t, p, w, weighted, moments, max_error):  # type: ignore[no-untyped-def]
    """Add one batch into the state ``moments`` (n_outputs, NUM_STATE, LIMBS) and ``max_error``.

    ``t``, ``p``: (N, n_outputs) float64; ``w``: (N,) weights when ``weighted``. Returns
    ``(status, row, col)``; ``row`` is -2 on success when no row had positive weight. Every
    check comes before the first write: on a non-OK status nothing was changed.
    """
    n, m = t.shape
    status, row, col, first = _check(t, p, w, weighted)
    if status != OK:
        return status, row, col
    if first < 0:
        return OK, -2, -1
    limit = np.int64(1) << 61
    flat = moments.reshape(-1, LIMBS)
    for r in range(flat.shape[0]):
        for k in range(LIMBS):
            if flat[r, k] >= limit:  # only a state restored from elsewhere gets here
                return STATE_TOO_LARGE, -1, r // NUM_STATE
    scratch = np.zeros((m, NUM_BATCH, LIMBS), dtype=np.int64)
    largest = np.empty(m)
    for j in range(m):
        status, largest[j] = _summarise_output(t, p, w, weighted, j, first, scratch[j])
        if status != OK:
            return status, -1, j
    for j in range(m):
        _normalise(scratch[j])
        for q in range(NUM_BATCH):
            negative = scratch[j, q, LIMBS - 1] < 0
            if negative:
                for k in range(LIMBS):
                    scratch[j, q, k] = -scratch[j, q, k]
                _normalise(scratch[j, q : q + 1])
            target = ROUTE[q, 1] if negative else ROUTE[q, 0]
            carry = np.int64(0)
            for k in range(LIMBS - 1):
                value = moments[j, target, k] + scratch[j, q, k] + carry
                moments[j, target, k] = value & MASK
                carry = value >> BITS
            moments[j, target, LIMBS - 1] += scratch[j, q, LIMBS - 1] + carry
        max_error[j] = max(max_error[j], largest[j])
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
        carry = np.int64(0)
        for k in range(LIMBS - 1):
            value = flat[r, k] + carry
            flat[r, k] = value & MASK
            carry = value >> BITS
        flat[r, LIMBS - 1] += carry
