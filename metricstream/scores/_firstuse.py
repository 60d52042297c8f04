"""The score kernels' plain-numpy twin, for the batches counted while they compile.

A :class:`~metricstream.ScoreAccumulator` counts with one of three Numba kernels
(``count_elementwise``: binary and multilabel; ``count_small_rows``: multiclass probabilities of
at most 16 classes; ``count_multiclass``: the other multiclass batches), each several seconds of
compile at its first call on a machine whose Numba cache is empty. While the kernel a batch
needs is not compiled yet (see :mod:`metricstream._core.warmup`), :func:`count` counts the batch
here with numpy and leaves exactly the state the kernel would have left: integer counts equal,
float64 sums (confidence, Brier score, log loss, weighted histograms) equal bit for bit.
:func:`defer_fast` tells the small-batch path of ``ScoreAccumulator.update`` to step aside (to
the general path, which arrives here) meanwhile, and :func:`check_weights` checks and sums
weights while their kernel compiles.

Exactness: a float sum is the kernel's only when it is added in the kernel's order. The kernels
add each confidence cell, histogram cell and rank cell one row (binary, multilabel: one score)
at a time in stream order, as ``np.add.at`` does; the Brier and log-loss sums of one call from
0.0 row by row, as ``np.add.accumulate``; the log loss of unweighted probabilities (and the
softmax denominators of logits) as a running product rescaled by exact powers of two, in groups
of eight rows in ``count_multiclass`` (:func:`_eights`), reproduced here step by step
(:func:`_running_product`). The exp and log1p of the softmax and sigmoid are the kernels' own
float64 arithmetic (:func:`_exp_nonpositive`, :func:`_log1p_unit`) with their fused
multiply-adds done exactly (:func:`_fma`, the rounding-to-odd emulation of the kernels' plain
twins); the logs that the kernels take with ``np.log`` are taken with :func:`math.log`, the same
C library function (numpy's vectorised log differs in the last bit for some arguments).

The twin counts only what it can count exactly and cheaply: integer, boolean or float labels
and targets, float32 or float64 scores, no plain-kernel switch, batches small enough to count
in well under a second. Anything else, and every batch the kernel would refuse or warn about (a
bad label, target, score, weight or row sum, logits that look like probabilities), returns
False with the state untouched: the kernel then counts it or words the error, compiling at that
call as it would without the twin.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._core import flags as _flags
from .._core import warmup
from . import _kernels as _k

__all__ = [
    "bin_index",
    "check_weights",
    "count",
    "defer_fast",
    "key_layout",
    "logit_layout",
    "probability_key_layout",
]

_SCORE_TYPES = (np.dtype(np.float32), np.dtype(np.float64))
_EPS = {dtype: float(np.finfo(dtype).eps) for dtype in _SCORE_TYPES}
# ``accumulator._CHUNK_ROWS``: the rows the small-batch path of ``update`` takes at once.
_CHUNK_ROWS = 4096
_NO_LOG = np.empty(0)
# The most scores (rows x classes) one batch may hold for the twin to count it: beyond, the
# kernel compiles at the call. (The twin's exact exp costs about 2 us a logit, a probability
# about 0.1-0.2 us: at most about half a second for a batch at these bounds, against seconds
# of compile.)
MAX_SCORES = 1 << 20
MAX_LOGIT_SCORES = 1 << 18
# Rows of a window of the running product (see ``_running_product``).
_WINDOW = 1024
_INF = float("inf")


# ---------------------------------------------------------------------- layouts
def _magnitude_bin(t: int, layout: tuple[int, ...]) -> int:
    """``_kernels._magnitude_bin`` of one non-negative float32's bits ``t``."""
    fine, tiny, coarse, offset = layout[0], layout[2], layout[3], layout[5]
    if t < tiny:
        return t >> coarse
    return offset + ((t - tiny) >> fine)


def key_layout(shift: int) -> tuple[int, ...]:
    """``_kernels.key_layout`` in Python (the same integers): ``(fine, fine_low, tiny, coarse,
    coarse_low, offset, base, last, complement, complement_low)``. Called from Python, the
    kernel version is compiled in every process (it is inlined into the kernels, not cached)."""
    code = int(shift)
    if code < 32:
        fine = coarse = complement = code
        tiny = 0
        offset = 0
    else:
        fine = code & 31
        coarse = (code >> 5) & 31
        complement = (code >> 10) & 31
        tiny = _k._TINY_BITS
        offset = ((_k._TINY_BITS - 1) >> coarse) + 1

    def low(bits: int) -> int:
        return ((1 << bits) - 1) & 0xFFFFFFFF

    partial = (fine, low(fine), tiny, coarse, low(coarse), offset, 0, 0, complement, 0)
    middle = _magnitude_bin(_k._HALF_BITS, partial)
    base = _k._MIN_COMPLEMENT_BITS >> complement
    top = _k._HALF_BITS >> complement
    last = middle + 2 + top - base
    return (
        fine,
        low(fine),
        tiny,
        coarse,
        low(coarse),
        offset,
        base,
        last,
        complement,
        low(complement),
    )


def probability_key_layout(shift: int) -> tuple[int, int]:
    """``_kernels.probability_key_layout`` in Python: ``(base, last)``."""
    layout = key_layout(shift)
    return layout[6], layout[7]


_LOGIT_EDGES = tuple(int(edge) for edge in _k._LOGIT_EDGES)


def _logit_magnitude_bin(m: int, fine: int, middle: int, outer: int) -> int:
    e1, e2, e3, e4 = _LOGIT_EDGES
    if fine == outer:
        return m >> fine
    total = min(m, e1) >> outer
    total += (min(max(m, e1), e2) - e1) >> middle
    total += (min(max(m, e2), e3) - e2) >> fine
    total += (min(max(m, e3), e4) - e3) >> middle
    total += (max(m, e4) - e4) >> outer
    return total


def logit_layout(shift: int) -> tuple[int, int, int, int]:
    """``_kernels.logit_layout`` in Python: ``(fine, middle, outer, half)``."""
    code = int(shift)
    if code < 32:
        fine = middle = outer = code
    else:
        fine, middle, outer = code & 31, (code >> 5) & 31, (code >> 10) & 31
    half = _logit_magnitude_bin(0x7FFFFFFF, fine, middle, outer) + 1
    return fine, middle, outer, half


# ---------------------------------------------------------------------- float arithmetic
def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = a + b
    t = s - a
    return s, (a - (s - t)) + (b - t)


_SPLITTER = 134217729.0  # 2**27 + 1


def _two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = a * b
    c = _SPLITTER * a
    a_high = c - (c - a)
    a_low = a - a_high
    d = _SPLITTER * b
    b_high = d - (d - b)
    b_low = b - b_high
    return p, ((a_high * b_high - p) + a_high * b_low + a_low * b_high) + a_low * b_low


def _odd_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` rounded to odd (``_kernels._odd_sum``, element by element)."""
    s, error = _two_sum(a, b)
    m, e = np.frexp(s)
    finite = np.abs(s) < _INF
    units = np.where(
        e >= -1021,
        np.where(finite, m * 9007199254740992.0, 0.0),
        np.ldexp(np.where(finite, s, 0.0), 1074),
    ).astype(np.int64)
    keep = (error == 0) | ~finite | ((units & 1) != 0)
    away = np.nextafter(s, np.where(error > 0, _INF, -_INF))
    return np.where(keep, s, away)


def _fma(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` rounded once, element by element: ``_kernels._fma_plain`` (Boldo and
    Melquiond's emulation; the plain twin the tests pin to the hardware's fused multiply-add)."""
    a, b, c = np.broadcast_arrays(
        np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(c, np.float64)
    )
    product = a * b
    high, low = _two_product(a, b)
    t_high, t_low = _two_sum(c, low)
    v_high, v_low = _two_sum(high, t_high)
    result = v_high + _odd_sum(t_low, v_low)
    plain = product + c
    special = ~((np.abs(product) < _INF) & (np.abs(c) < _INF)) | (result == 0)
    return np.where(special, plain, result)


def _bits_float64(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.int64).view(np.float64)


def _exp_nonpositive(x: np.ndarray) -> np.ndarray:
    """``_kernels._exp_nonpositive`` of float64 ``x <= 0`` (not NaN), the same operations."""
    x = np.maximum(x, _k._EXP_LOWEST)
    k = np.floor(_fma(x, _k._EXP_LOG2E, 0.5))
    r = _fma(-k, _k._EXP_LN2_LO, _fma(-k, _k._EXP_LN2_HI, x))
    c = _k._EXP_COEFFICIENTS
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    b0 = _fma(_fma(c[3], r, c[2]), r2, _fma(c[1], r, c[0]))
    b1 = _fma(_fma(c[7], r, c[6]), r2, _fma(c[5], r, c[4]))
    b2 = _fma(_fma(c[11], r, c[10]), r2, _fma(c[9], r, c[8]))
    q = _fma(b2, r8, _fma(b1, r4, b0))
    p = 1.0 + _fma(r2, q, r)
    ki = k.astype(np.int64)
    half = ki >> 1
    low = _bits_float64((half + 1023) << 52)
    high = _bits_float64((ki - half + 1023) << 52)
    return (p * low) * high


def _log1p_unit(e: np.ndarray) -> np.ndarray:
    """``_kernels._log1p_unit`` of float64 ``0 <= e <= 1``, the same operations."""
    high = e > _k._SQRT2_MINUS_1
    k = np.where(high, 1.0, 0.0)
    f = np.where(high, (e - 1.0) * 0.5, e)
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    c = _k._LOG_COEFFICIENTS
    odd = w * _fma(w, _fma(w, c[5], c[3]), c[1])
    even = z * _fma(w, _fma(w, _fma(w, c[6], c[4]), c[2]), c[0])
    r = odd + even
    half_square = 0.5 * f * f
    return k * _k._EXP_LN2_HI - ((half_square - (s * (half_square + r) + k * _k._EXP_LN2_LO)) - f)


def _logs(values: np.ndarray) -> np.ndarray:
    """``np.log`` as the kernels take it (the C library's ``log``, as :func:`math.log`)."""
    return np.fromiter(map(math.log, values.tolist()), np.float64, values.size)


def _sequential_sum(terms: np.ndarray) -> float:
    """``total = 0.0; total += term`` for each term in order."""
    if terms.size == 0:
        return 0.0
    return float(np.add.accumulate(np.concatenate(([0.0], terms)))[-1])


def _running_product(steps: np.ndarray, logits: bool) -> tuple[float, int]:
    """``(product, exponent)`` of ``product *= step`` from 1.0 in order, rescaled after each
    step as ``_kernels._rescaled`` does (by 2**500 when it fell below 2**-500; for logits, by
    2**-500 when it rose above 2**500). Each window's products are ``np.multiply.accumulate``
    (in order); those up to the first that needs rescaling are the kernel's, the rest are
    computed again from the rescaled one."""
    product = 1.0
    exponent = 0
    i = 0
    while i < steps.size:
        window = steps[i : i + _WINDOW]
        with np.errstate(over="ignore", under="ignore"):  # (past the first rescale: unused)
            running = np.multiply.accumulate(np.concatenate(([product], window)))[1:]
        crossed = np.flatnonzero(running > _k._HUGE if logits else running < _k._TINY)
        if crossed.size == 0:
            product = float(running[-1])
            i += window.size
            continue
        j = int(crossed[0])
        if logits:
            product = float(running[j]) * _k._TINY
            exponent += _k._HUGE_EXPONENT
        else:
            product = float(running[j]) * _k._HUGE
            exponent -= _k._HUGE_EXPONENT
        i += j + 1
    return product, exponent


def _eights(factors: np.ndarray) -> np.ndarray:
    """The steps of ``count_multiclass``' running product: each group of eight rows multiplied
    as a tree, then the rows left over one by one (its blocks hold a multiple of 8 rows)."""
    whole = factors.size - factors.size % 8
    f = factors[:whole].reshape(-1, 8)
    eight = ((f[:, 0] * f[:, 1]) * (f[:, 2] * f[:, 3])) * (
        (f[:, 4] * f[:, 5]) * (f[:, 6] * f[:, 7])
    )
    return np.concatenate((eight, factors[whole:]))


def _log_of_product(product: float, exponent: int, sign: int) -> float:
    """``_kernels._log_of_product``."""
    return -sign * (math.log(product) + exponent * _k._LN2)


def _fine_bins(q: np.ndarray, fine_bins: int) -> np.ndarray:
    """``_kernels._fine_bin`` of float64 confidences ``q`` (valid: not NaN)."""
    f = (q * float(fine_bins)).astype(np.int64)
    return np.clip(f, 0, fine_bins - 1)


# ---------------------------------------------------------------------- keys
def _probability_keys(v: np.ndarray, layout: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``(bin, exact)`` of valid probabilities ``v`` (float32 or float64), as
    ``_kernels._probability_key``."""
    fine, fine_low, tiny, coarse, coarse_low, offset, base, last, complement, complement_low = (
        layout
    )
    f = v.astype(np.float32)
    u = (f.view(np.uint32) & np.uint32(0x7FFFFFFF)).astype(np.int64)
    uy = (np.float32(1.0) - f).view(np.uint32).astype(np.int64)
    small = u < tiny
    lower = np.where(small, u >> coarse, offset + ((u - tiny) >> fine)) + (u != 0)
    upper = np.where(uy == 0, last, (last - 1 + base) - (uy >> complement))
    below = f < np.float32(0.5)
    dropped = np.where(small, u & coarse_low, (u - tiny) & fine_low)
    exact = np.where(below, dropped, uy & complement_low) == 0
    if v.dtype != np.float32:
        exact &= f == v
    return np.where(below, lower, upper), exact


def _logit_keys(v: np.ndarray, logit: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """``(bin, exact)`` of logits ``v`` (not NaN), as ``_kernels._logit_key``."""
    fine, middle, outer, half = logit
    f = v.astype(np.float32)
    u = f.view(np.uint32).astype(np.int64)
    u[u == 0x80000000] = 0
    m = u & 0x7FFFFFFF
    e1, e2, e3, e4 = _LOGIT_EDGES
    if fine == outer:
        g = m >> fine
        edge = np.zeros_like(m)
        shift = np.full_like(m, fine)
    else:
        g = np.minimum(m, e1) >> outer
        g += (np.clip(m, e1, e2) - e1) >> middle
        g += (np.clip(m, e2, e3) - e2) >> fine
        g += (np.clip(m, e3, e4) - e3) >> middle
        g += (np.maximum(m, e4) - e4) >> outer
        region = np.searchsorted(np.array(_LOGIT_EDGES), m, side="right")
        edge = np.array((0, *_LOGIT_EDGES))[region]
        shift = np.array((outer, middle, fine, middle, outer))[region]
    exact = ((m - edge) & ((1 << shift) - 1)) == 0
    if v.dtype != np.float32:
        exact &= f == v
    negative = (u & 0x80000000) != 0
    return np.where(negative, half - 1 - g, half + g), exact


def _threshold_keys(v: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(bin, exact)`` as ``_kernels._threshold_bin``: the thresholds ``<= v``."""
    wide = v.astype(np.float64)
    b = np.searchsorted(thresholds, wide, side="right").astype(np.int64)
    exact = (b > 0) & (thresholds[np.maximum(b - 1, 0)] == wide)
    return b, exact


def _keys(acc: Any, v: np.ndarray, logit_keys: bool) -> tuple[np.ndarray, np.ndarray]:
    if acc._thresholds is not None:
        return _threshold_keys(v, acc._thresholds)
    if logit_keys:
        return _logit_keys(v, logit_layout(acc._shift))
    return _probability_keys(v, key_layout(acc._shift))


# ---------------------------------------------------------------------- labels
def _ignored(values: np.ndarray, ignore_index: int) -> np.ndarray:
    """``_kernels._ignored``: labels equal to the int64 ``ignore_index`` exactly."""
    dtype = values.dtype
    if dtype.kind == "u" and dtype.itemsize == 8:
        if ignore_index < 0:
            return np.zeros(values.shape, dtype=bool)
        return values == np.uint64(ignore_index)
    if dtype.kind in "iu":
        return values.astype(np.int64) == ignore_index
    f = float(ignore_index)  # round to nearest, as Numba converts an int64
    if not (f < 2.0**63 and int(f) == ignore_index):
        return np.zeros(values.shape, dtype=bool)
    return values == f


_LABEL_KINDS = "iubf"


# ---------------------------------------------------------------------- the hooks
def _small_rows(acc: Any, arrays: Any, y: np.ndarray, scores: np.ndarray) -> bool:
    """Whether ``ScoreAccumulator._count_rows`` counts these unweighted arrays with the row
    kernel (``count_small_rows``) rather than ``_run``."""
    fast = acc._fast_args
    if fast is None or fast[5] is None or fast[0] is not acc._arrays or arrays is not acc._arrays:
        return False
    if y.ndim != 1 or scores.ndim != 2:
        return False
    if y.dtype.kind not in "iu" or not y.dtype.isnative or scores.dtype not in _SCORE_TYPES:
        return False
    rows = y.shape[0]
    classes = scores.shape[1]
    return not (  # _kernels._small_rows_fit
        scores.shape[0] != rows
        or classes != fast[5][_k.TABLE_CLASSES]
        or (rows > 1 and y.strides[0] != y.itemsize)
        or scores.strides[1] != scores.itemsize
        or (rows > 1 and scores.strides[0] != classes * scores.itemsize)
        or y.ctypes.data % y.itemsize != 0
        or scores.ctypes.data % scores.itemsize != 0
    )


class _Typed:
    """An argument whose Numba type is given (``numba.typeof`` reads ``_numba_type_``)."""

    def __init__(self, numba_type: Any) -> None:
        self._numba_type_ = numba_type


def _small_rows_route(labels: np.dtype, scores: np.dtype, table: np.ndarray, eps: float) -> tuple:
    """``count_small_rows`` with the types ``_kernels.small_rows_for`` compiles it for."""
    from numba import from_dtype, types

    def any_array(dtype: np.dtype, ndim: int) -> _Typed:
        return _Typed(types.Array(from_dtype(dtype), ndim, "A", readonly=True, aligned=False))

    return (_k.count_small_rows, (any_array(labels, 1), any_array(scores, 2), table, eps))


def defer_fast(acc: Any, labels: np.dtype, scores: np.dtype, plain: bool) -> bool:
    """Whether the small-batch path of ``update`` should leave arrays of these dtypes to the
    general path now: the kernel its route would compile is compiling in the background (the
    general path counts with the twin meanwhile). Asked only when the route is not known yet."""
    if not warmup.enabled() or plain:
        return False
    if labels.kind not in "iu" or not labels.isnative or scores not in _SCORE_TYPES:
        return False  # no route: the general path anyway
    fast = acc._fast_args
    eps = None if acc._logits else _EPS[scores]
    if fast[5] is not None:
        return warmup.defer((_small_rows_route(labels, scores, fast[5], _EPS[scores]),))
    if acc._task == "multiclass":
        kernel = _k.count_multiclass
        y = np.zeros(1, labels)
    else:
        kernel = _k.count_elementwise
        y = np.zeros((1, 1), labels)
    args = (y, np.zeros((1, acc._num_classes), scores), None, *fast[1], 1, _CHUNK_ROWS, 1)
    return warmup.defer(((kernel, (*args, fast[2], fast[3], eps, _NO_LOG)),))


# Keys (see ``count``) of the batches whose kernel is compiled in this process, and the last
# one of them (replaced as a whole: threads never see a torn one).
_ready: set[tuple] = set()
_last: tuple = ()
# numpy's flag bits C_CONTIGUOUS, ALIGNED and WRITEABLE (``ndarray.flags.num``).
_LAYOUT_FLAGS = 0x1 | 0x100 | 0x400


def _remember(key: tuple) -> None:
    global _last
    _last = key


# Whether ``check_weights``' kernel is compiled, by the weights' writeability (its only type
# difference: the weights are C-contiguous float64).
_weights_ready: set[bool] = set()


def count(acc: Any, arrays: dict[str, np.ndarray], batch: Any, log: np.ndarray) -> bool:
    """Count ``batch`` into ``arrays`` with numpy while the kernel ``ScoreAccumulator._count``
    would call is compiling: True when counted (exactly as the kernel would have), False to let
    the kernel count (compiled, or a batch the twin does not count)."""
    y = batch.y
    scores = batch.scores
    weights = batch.weights
    # What decides the kernel and its Numba types: the accumulator's kind, the dtypes, and
    # whether each array is C-contiguous, aligned and writeable.
    key = (
        acc._task,
        acc._weighted,
        acc._logits,
        acc._thresholds is None,
        acc._num_classes,
        y.dtype,
        y.flags.num & _LAYOUT_FLAGS,
        scores.dtype,
        scores.flags.num & _LAYOUT_FLAGS,
        None if weights is None else (weights.dtype, weights.flags.num & _LAYOUT_FLAGS),
    )
    if key == _last:
        return False
    if key in _ready:
        _remember(key)
        return False
    if _flags.PLAIN_KERNELS:
        return False
    small = weights is None and _small_rows(acc, arrays, y, scores)
    if small:
        route = _small_rows_route(y.dtype, scores.dtype, acc._fast_args[5], batch.eps)
    else:
        route = (_kernel(acc), _run_args(acc, arrays, batch, log))
    if not warmup.defer((route,)):
        if not warmup.busy():
            _ready.add(key)
            _remember(key)
        return False
    if y.dtype.kind not in _LABEL_KINDS or scores.dtype not in _SCORE_TYPES:
        return False
    if scores.size > (MAX_LOGIT_SCORES if acc._logits else MAX_SCORES):
        return False
    with np.errstate(all="ignore"):
        if acc._task == "multiclass":
            return _count_multiclass(acc, arrays, batch, log, small)
        return _count_elementwise(acc, arrays, batch, log)


def _kernel(acc: Any) -> Any:
    return _k.count_multiclass if acc._task == "multiclass" else _k.count_elementwise


def _run_args(acc: Any, arrays: dict[str, np.ndarray], batch: Any, log: np.ndarray) -> tuple:
    """The arguments ``ScoreAccumulator._run`` passes the kernel (their Numba types)."""
    ranks = (arrays["ranks"],) if acc._task == "multiclass" else ()
    rows = batch.scores.shape[0]
    flags = _k.HAS_IGNORE if acc._ignore_index is not None else 0
    ignore = -1 if acc._ignore_index is None else acc._ignore_index
    return (
        batch.y,
        batch.scores,
        batch.weights,
        arrays["curves"],
        arrays["inexact"],
        *ranks,
        arrays["calibration"],
        arrays["confidence"],
        arrays["losses"],
        acc._thresholds,
        acc._shift,
        0,
        rows,
        rows,
        1,
        flags,
        ignore,
        batch.eps,
        log,
    )


def check_weights(weights: np.ndarray, whole: bool) -> tuple[int, float]:
    """``_kernels.check_weights`` (``(first bad, total)``), with numpy while it compiles."""
    writeable = weights.flags.writeable
    if writeable in _weights_ready or not warmup.enabled() or _flags.PLAIN_KERNELS:
        return _k.check_weights(weights, whole)
    if not warmup.defer(((_k.check_weights, (weights, whole)),)):
        if not warmup.busy():
            _weights_ready.add(writeable)
        return _k.check_weights(weights, whole)
    with np.errstate(all="ignore"):
        good = (weights >= 0.0) & (weights != _INF)
        if whole:
            good &= np.floor(weights) == weights
        total = _sequential_sum(weights)
    if good.all():
        return -1, total
    return int(np.argmin(good)), total


# Whether ``bin_index``' kernel is compiled, by whether there are explicit thresholds.
_bin_index_ready: set[bool] = set()


def bin_index(value: float, shift: int, thresholds: np.ndarray | None, logit_keys: bool) -> int:
    """``_kernels.bin_index`` (the bin of one float64 ``value``, not NaN; probabilities in
    ``(0, 1]``), with numpy while it compiles."""
    plain = thresholds is None
    if plain in _bin_index_ready or not warmup.enabled():
        return int(_k.bin_index(value, shift, thresholds, logit_keys))
    if not warmup.defer(((_k.bin_index, (value, shift, thresholds, logit_keys)),)):
        if not warmup.busy():
            _bin_index_ready.add(plain)
        return int(_k.bin_index(value, shift, thresholds, logit_keys))
    wide = np.array([value], np.float64)
    with np.errstate(all="ignore"):
        if thresholds is not None:
            bins, _ = _threshold_keys(wide, thresholds)
        elif logit_keys:
            bins, _ = _logit_keys(wide, logit_layout(shift))
        else:
            bins, _ = _probability_keys(wide, key_layout(shift))
    return int(bins[0])


# ---------------------------------------------------------------------- counting
def _confidence(
    confidence: np.ndarray, cells: np.ndarray, values: np.ndarray, log: np.ndarray
) -> None:
    """``confidence[cell] += value`` in order; with a non-empty ``log``, each addition's cell
    and the value before it, as the kernels log them."""
    if not log.size:
        np.add.at(confidence, cells, values)
        return
    for k, (cell, value) in enumerate(zip(cells.tolist(), values.tolist(), strict=True)):
        log[2 * k] = cell
        log[2 * k + 1] = confidence[cell]
        confidence[cell] += value


def _weights_of(acc: Any, arrays: dict[str, np.ndarray], weights: Any, rows: np.ndarray) -> Any:
    """Per counted row its weight in the state's arithmetic (the kernels' ``w``)."""
    if weights is None:
        return 1.0 if arrays["curves"].dtype.kind == "f" else 1
    return weights[rows]


def _count_elementwise(
    acc: Any, arrays: dict[str, np.ndarray], batch: Any, log: np.ndarray
) -> bool:
    """``count_elementwise`` (binary, multilabel) of a whole batch, sign 1."""
    targets = batch.y
    scores = batch.scores
    weights = batch.weights
    logits = batch.eps is None
    num_labels = scores.shape[1]
    flat_targets = targets.reshape(-1)
    flat_scores = scores.reshape(-1)
    if acc._ignore_index is not None:
        kept = np.flatnonzero(~_ignored(flat_targets, acc._ignore_index))
        t = flat_targets[kept]
        v = flat_scores[kept]
    else:
        kept = None
        t = flat_targets
        v = flat_scores
    one = t == 1
    if not bool(np.all(one | (t == 0))):
        return False
    wide = v.astype(np.float64)
    if logits:
        if not bool(np.all((v == v) & (v != _INF))):
            return False
        inside = (wide >= 0.0) & (wide <= 1.0)
        if v.size >= 32 and bool(inside.all()):
            return False  # counted with a warning: the kernel's
    elif not bool(np.all((v >= 0) & (v <= 1))):
        return False
    index = np.arange(flat_scores.size) if kept is None else kept
    row = index // num_labels
    column = index % num_labels
    bins, exact = _keys(acc, v, logits)
    w = _weights_of(acc, arrays, weights, row)
    curves = arrays["curves"]
    num_bins = curves.shape[1]
    cells = (column * num_bins + bins) * 2 + one
    _add(curves.reshape(-1), cells, w, curves.size)
    arrays["inexact"] += np.bincount(column[~exact], minlength=num_labels)
    wf = 1.0 if weights is None else w.astype(np.float64)
    yi = one.astype(np.int64)
    if logits:
        e = _exp_nonpositive(-np.abs(wide))
        q = np.where(wide >= 0, 1.0, e) / (1.0 + e)
        softplus = _log1p_unit(e)
        above = np.maximum(wide, 0.0)
        loss = np.minimum(np.where(one, above - wide, above) + softplus, _k.LOG_LOSS_BOUND)
        log_terms = wf * loss
        product, exponent = 1.0, 0
    else:
        q = wide
        eps = batch.eps
        if weights is None:
            p = np.where(one, wide, 1.0 - wide)
            product, exponent = _running_product(np.minimum(np.maximum(p, eps), 1.0 - eps), False)
            log_terms = np.zeros(0)
        else:
            p = np.minimum(np.maximum(np.where(one, wide, 1.0 - wide), eps), 1.0 - eps)
            log_terms = wf * -_logs(p)
            product, exponent = 1.0, 0
    d = q - yi
    fine = _fine_bins(q, acc._calibration_bins)
    calibration = arrays["calibration"].reshape(-1)
    _add(calibration, 2 * fine, w, calibration.size)
    _add(calibration, 2 * fine[one] + 1, w if np.isscalar(w) else w[one], calibration.size)
    _confidence(arrays["confidence"], fine, wf * q, log)
    brier = _sequential_sum(wf * d * d)
    log_sum = _sequential_sum(log_terms)
    losses = arrays["losses"]
    losses[0] += brier
    losses[1] += log_sum + _log_of_product(product, exponent, 1)
    return True


def _add(flat: np.ndarray, cells: np.ndarray, values: Any, size: int) -> None:
    """``flat[cell] += value`` for each cell in order (integer counts in any order)."""
    if flat.dtype.kind != "f":
        if isinstance(values, int):
            flat += np.bincount(cells, minlength=size) * values
        else:
            np.add.at(flat, cells, values)
        return
    np.add.at(flat, cells, np.broadcast_to(np.asarray(values, np.float64), cells.shape))


def _row_sums(scores: np.ndarray) -> np.ndarray:
    """Each row's float64 sum, class by class in order (``_check_row``)."""
    total = scores[:, 0].astype(np.float64)
    for c in range(1, scores.shape[1]):
        total = total + scores[:, c].astype(np.float64)
    return total


def _tree_sums(lanes: list[np.ndarray]) -> np.ndarray:
    """``_kernels._tree_sum`` of 16 lanes (the row kernel's halving tree)."""
    a = [lanes[i] + lanes[i + 8] for i in range(8)]
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))


def _small_lanes(scores: np.ndarray) -> list[np.ndarray]:
    zero = np.zeros(scores.shape[0], scores.dtype)
    return [scores[:, j] if j < scores.shape[1] else zero for j in range(_k.ROW_LANES)]


def _count_multiclass(
    acc: Any, arrays: dict[str, np.ndarray], batch: Any, log: np.ndarray, small: bool
) -> bool:
    """``count_multiclass`` (or, ``small``, ``count_small_rows``) of a whole batch, sign 1."""
    labels = batch.y
    scores = batch.scores
    weights = batch.weights
    logits = batch.eps is None
    rows, num_classes = scores.shape
    if acc._ignore_index is not None:
        ignored = _ignored(labels, acc._ignore_index)
        counted = np.flatnonzero(~ignored)
    else:
        ignored = None
        counted = np.arange(rows)
    t_raw = labels[counted]
    if labels.dtype.kind == "b":
        t_raw = t_raw.astype(np.int64)
    if not bool(np.all((t_raw >= 0) & (t_raw < num_classes) & (np.floor(t_raw) == t_raw))):
        return False
    t = t_raw.astype(np.intp)
    s = scores[counted]
    n = counted.size
    position = np.arange(n)
    if logits:
        if not bool(np.all((s == s) & (s != _INF))):
            return False
        top = s[position, np.argmax(s, axis=1)] if n else s[:, 0]
        if not bool(np.all(top != -_INF)):
            return False
        # Logits that all lie in [0, 1] in rows summing to one (ignored rows: zeros, which do
        # not) are counted with a warning: the kernel's.
        if ignored is None or not ignored.any():
            if bool(np.all((s >= 0) & (s <= 1))) and bool(
                np.all(np.abs(_row_sums(s) - 1.0) <= _k.ROW_SUM_TOLERANCE)
            ):
                return False
    else:
        if not bool(np.all((s >= 0) & (s <= 1))):
            return False
        if not bool(np.all(np.abs(_row_sums(s) - 1.0) <= _k.ROW_SUM_TOLERANCE)):
            return False
        top = s[position, np.argmax(s, axis=1)] if n else s[:, 0]
    true = s[position, t]
    greater = (s > true[:, None]).sum(axis=1)
    equal = s == true[:, None]
    classes = np.arange(num_classes)
    before = (equal & (classes < t[:, None])).sum(axis=1)
    after = (equal & (classes > t[:, None])).sum(axis=1)
    correct = (greater == 0) & (before == 0)
    top64 = top.astype(np.float64)
    true64 = true.astype(np.float64)
    w = _weights_of(acc, arrays, weights, counted)
    wf = 1.0 if weights is None else w.astype(np.float64)
    if logits:
        e = _exp_nonpositive(s.astype(np.float64) - top64[:, None])
        totals = e[:, 0].copy()
        squares = np.where(t == 0, 0.0, e[:, 0] * e[:, 0])
        for c in range(1, num_classes):
            totals = totals + e[:, c]
            squares = squares + np.where(t == c, 0.0, e[:, c] * e[:, c])
        inverse = 1.0 / totals
        p = e[position, t] * inverse
        square = squares * (inverse * inverse) + (1.0 - p) * (1.0 - p)
        q = e * inverse[:, None]
        confidence = inverse
        bins, exact = _keys(acc, q, False)
    else:
        bins, exact = _keys(acc, s, False)
        confidence = top64
        if small:
            wide = [lane.astype(np.float64) for lane in _small_lanes(s)]
            lanes = [np.where(t == j, 0.0, lane * lane) for j, lane in enumerate(wide)]
            miss = 1.0 - true64
            square = miss * miss + _tree_sums(lanes)
        else:
            d = s[:, 0].astype(np.float64) - (t == 0)
            square = d * d
            for c in range(1, num_classes):
                d = s[:, c].astype(np.float64) - (t == c)
                square = square + d * d
    # Histograms, exact counts and ranks.
    curves = arrays["curves"]
    num_bins = curves.shape[1]
    cells = (classes[None, :] * num_bins + bins) * 2 + (classes[None, :] == t[:, None])
    state_float = curves.dtype.kind == "f"
    flat = curves.reshape(-1)
    if ignored is not None and state_float and ignored.any():
        # The kernel adds a weight of 0.0 for each ignored row (its scores zeroed) into each
        # class's cell of the zero score (logits: of its softmax, 1 / C): -0.0 becomes 0.0.
        blank, _ = _keys(acc, np.full(1, 1.0 / num_classes if logits else 0.0), False)
        every = np.empty((rows, num_classes), np.int64)
        every[ignored] = (classes * num_bins + blank[0]) * 2
        every[counted] = cells
        values = np.zeros(rows)
        values[counted] = w
        np.add.at(flat, every.T.reshape(-1), np.tile(values, num_classes))
    elif np.isscalar(w):
        _add(flat, cells.T.reshape(-1), w, curves.size)
    else:
        _add(flat, cells.T.reshape(-1), np.tile(w, num_classes), curves.size)
    arrays["inexact"] += n - exact.sum(axis=0)
    ranks = arrays["ranks"].reshape(-1)
    _add(ranks, t * num_classes + greater + after, w, ranks.size)
    _add(ranks, num_classes * num_classes + t * num_classes + greater, w, ranks.size)
    fine = _fine_bins(confidence, acc._calibration_bins)
    calibration = arrays["calibration"].reshape(-1)
    _add(calibration, 2 * fine, w, calibration.size)
    if state_float or not np.isscalar(w):
        _add(calibration, 2 * fine + 1, w * correct.astype(np.int64), calibration.size)
    else:
        _add(calibration, 2 * fine[correct] + 1, w, calibration.size)
    _confidence(arrays["confidence"], fine, wf * confidence, log)
    # The Brier and log-loss sums.
    losses = arrays["losses"]
    if small:
        losses[0] += _sequential_sum(square)
        factors = np.minimum(np.maximum(true64, batch.eps), 1.0 - batch.eps)
        product, exponent = _running_product(factors, False)
        losses[1] += _log_of_product(product, exponent, 1)
        return True
    brier = _sequential_sum(wf * square)
    if logits:
        gap = top64 - true64
        clip = gap > _k.LOG_LOSS_BOUND - math.log(float(num_classes))
        factor = np.where(clip, 1.0, totals)
        first = np.where(clip, 0.0, gap)
        if clip.any():
            clipped = np.minimum(gap[clip] + _logs(totals[clip]), _k.LOG_LOSS_BOUND)
            first[clip] = clipped
        first = wf * first
    else:
        eps = batch.eps
        factor = np.minimum(np.maximum(true64, eps), 1.0 - eps)
        first = np.zeros(n)
    if weights is None:
        steps = np.ones(rows)
        steps[counted] = factor
        product, exponent = _running_product(_eights(steps), logits)
        log_sum = _sequential_sum(first)
    else:
        product, exponent = 1.0, 0
        later = wf * _logs(factor)
        if not logits:
            later = -later
        # Per block of BLOCK_ROWS rows: the rows' first terms (logits: the gaps), then their
        # log terms.
        block = np.searchsorted(counted, np.arange(0, rows, _k.BLOCK_ROWS))
        parts = []
        for lo, hi in zip(block, np.r_[block[1:], n], strict=True):
            if logits:
                parts.append(first[lo:hi])
            parts.append(later[lo:hi])
        log_sum = _sequential_sum(np.concatenate(parts) if parts else np.zeros(0))
    losses[0] += brier
    losses[1] += log_sum + _log_of_product(product, exponent, -1 if logits else 1)
    return True
