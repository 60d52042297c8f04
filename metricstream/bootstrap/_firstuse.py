"""The bootstrap kernels' plain-numpy twin, for the first calls while they compile.

Each function here is called first by the bootstrap's Python layer with the arguments of one
kernel of :mod:`metricstream.bootstrap._kernels`. While that kernel's specialisation is not
compiled yet (see :mod:`metricstream._core.warmup`), it does the kernel's work with numpy and
returns the kernel's result, having left exactly the arrays the kernel would have left;
otherwise, or when it cannot do the work exactly and cheaply, it returns None (nothing
written) and the caller runs the kernel, which compiles at that call as it would without the
twin.

Why it can be exact: the bootstrap's randomness is counter-based, never a stateful generator.

* A cluster's Poisson(1) weight in replicate ``b`` is the inversion of a uniform that is a hash
  of ``(seed keys, cluster, b)`` (SplitMix64's finaliser, 64-bit integer arithmetic that numpy
  wraps like the kernels do).
* Replicate ``b`` of the read-time bootstrap has its own SplitMix64 stream seeded from
  ``(seed, b)``; its ``i``-th uniform is a hash of the stream's start plus ``i`` times the
  golden-ratio constant. The twin advances every replicate's stream in an array and runs the
  kernels' samplers (sequential-search inversion, BTRS, PTRS) for all replicates of a cell at
  once, masking those whose variate is done, with the kernels' float64 operations in the
  kernels' order. Elementwise ``+ - * /``, ``sqrt`` and ``floor`` round as the compiled code
  does; ``exp``, ``log`` and ``log1p`` are Python's ``math`` functions, which call the C
  library the kernels call (numpy's own ``exp``/``log`` differ in the last bit), and
  ``lgamma`` is the C library's, through ``ctypes`` (Python's ``math.lgamma`` is its own).

Integer sums do not depend on order. Float64 sums of the weighted clustered accumulator are
formed as the kernel forms them: each cluster run's cell sums in sample order (``np.add.at``),
then added to the replicates run after run.

Declined (None): anything past the size bounds below (the twin is for first calls; a large one
is worth the compile), inputs the kernels would not see from the Python layer (non-label
dtypes, odd layouts), and, where the C library's ``lgamma`` cannot be loaded, Poisson draws
with a cell of 10 or more.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core import warmup
from . import _kernels as _k

# The twin draws at most this many variates (replicates × cells) per call, over at most this
# many cells, and counts clustered batches of at most this many runs of one cluster; beyond,
# the kernel compiles (its compile costs less than the twin's work there).
MAX_DRAWS = 1 << 18
MAX_CELLS = 1 << 12
MAX_RUNS = 1 << 12
# Integer sums of float weights stay exact (the kernel adds them in float64) below this.
_EXACT_FLOAT_SUM = 2.0**52

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_ONE = np.uint64(1)
_TWO_M53 = 1.0 / 9007199254740992.0
_RECIPROCALS = np.array([1.0 / (k + 1) for k in range(64)])
_STIRLING_TABLE = _k._STIRLING_TABLE
_INVERSION_MAX_MEAN = _k.INVERSION_MAX_MEAN


def _c_lgamma() -> Callable[[float], float] | None:
    """The C library's ``lgamma`` (the one the compiled kernels call), or None."""
    for name in (None, "m"):  # the process's symbols (as the JIT links), else libm by name
        try:
            if name is not None:
                name = ctypes.util.find_library(name)
            function = ctypes.CDLL(name).lgamma
        except (OSError, AttributeError, TypeError):
            continue
        function.restype = ctypes.c_double
        function.argtypes = [ctypes.c_double]
        return function  # type: ignore[no-any-return]
    return None


_lgamma = _c_lgamma()


# ---------------------------------------------------------------------------- dispatch
# Keys (the kernel and its arrays' dtypes) of the routes whose kernels are compiled in this
# process: the twin then steps aside at the cost of one set lookup. Layout and writeability
# also decide a kernel's Numba types; a route marked ready whose kernel then meets another
# layout compiles it at the call, as it would without the twin.
_ready: set[tuple] = set()


def _kernel_runs(key: tuple, kernel: Any, args: tuple) -> bool:
    """Whether the caller should run ``kernel`` (compiled, or to compile at the call) rather
    than the twin; queues its background compile when it is missing."""
    if key in _ready:
        return True
    if not warmup.defer(((kernel, args),)):
        if not warmup.busy():
            _ready.add(key)
        return True
    return False


def _dtype(array: np.ndarray | None) -> Any:
    return None if array is None else array.dtype


# ---------------------------------------------------------------------------- random bits
def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on a uint64 array (array arithmetic wraps mod 2^64)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)  # type: ignore[no-any-return]


def _to_unit(bits: np.ndarray) -> np.ndarray:
    """The kernels' 53-bit uniform in (0, 1) from 64 hashed bits."""
    return ((bits >> _S11).astype(np.float64) + 0.5) * _TWO_M53  # type: ignore[no-any-return]


def _uniform(state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Uniforms of the streams ``state`` (uint64 array) and the advanced states."""
    state = state + _GOLDEN
    return _to_unit(_mix64(state)), state


def _map(function: Callable[[float], float], values: np.ndarray) -> np.ndarray:
    """``function`` (a C library function) on each float64 of ``values``."""
    return np.array([function(v) for v in values.tolist()], dtype=np.float64).reshape(values.shape)


def _log(v: float) -> float:
    """``log`` as the kernels get it from the C library (-inf at 0, NaN below)."""
    if v > 0.0:
        return math.log(v)
    return -math.inf if v == 0.0 else math.nan


def cluster_weights(
    keys: np.ndarray, k1: Any, k2: Any, legacy: bool, num_replicates: int
) -> np.ndarray:
    """``(len(keys), B)`` int64: the Poisson(1) weight of cluster ``keys[c]`` (uint64) in
    replicate ``b``, as ``_kernels._cluster_weights`` draws it."""
    keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
    hashed = _mix64(keys ^ np.uint64(k1))
    if not legacy:
        hashed = _mix64(hashed + np.uint64(k2))
    replicates = _mix64((np.arange(num_replicates, dtype=np.uint64) + _ONE) * _GOLDEN)
    uniforms = _to_unit(_mix64(hashed[:, None] ^ replicates[None, :]))
    # The first k with u <= CDF[k]: the kernels' sequential search.
    return np.searchsorted(_k.POISSON1_CDF, uniforms, side="left").astype(np.int64)


# ---------------------------------------------------------------------------- clustered
def add_cluster_matrix(
    local: np.ndarray,
    key: Any,
    k1: Any,
    k2: Any,
    legacy: bool,
    replicates: np.ndarray,
    matrix: np.ndarray,
    add_main: bool,
    limit: Any,
) -> int | None:
    """``_kernels.add_cluster_matrix`` while it compiles (its result: -1, or the flat index of
    the cell that would pass ``limit``); None to run the kernel."""
    if not warmup.enabled():
        return None
    args = (local, key, k1, k2, legacy, replicates, matrix, add_main, limit)
    route = ("cluster_matrix", local.dtype, replicates.dtype, matrix.dtype, type(limit))
    if _kernel_runs(route, _k.add_cluster_matrix, args):
        return None
    dtype = replicates.dtype
    if (
        dtype not in (np.int64, np.float64)
        or local.dtype != dtype
        or matrix.dtype != dtype
        or not (local.flags.c_contiguous and matrix.flags.c_contiguous)
        or replicates.ndim != 2
        or replicates.shape[1] != local.size
        or matrix.size != local.size
    ):
        return None
    flat = local.reshape(-1)
    main = matrix.reshape(-1)
    cells = np.flatnonzero(flat)
    values = flat[cells]
    if add_main:
        room = np.asarray(limit, dtype=dtype) - main[cells]  # int64 wraps as the kernel's
        over = np.flatnonzero(values > room)
        if over.size:
            return int(cells[over[0]])
        main[cells] += values
    weights = cluster_weights(np.array([key], dtype=np.uint64), k1, k2, legacy, len(replicates))
    _flush(replicates, cells, values, weights[0].astype(dtype))
    return -1


def _flush(
    replicates: np.ndarray, cells: np.ndarray, values: np.ndarray, weights: np.ndarray
) -> None:
    """``replicates[b, cells] += weights[b] * values`` for the replicates of non-zero weight
    (the kernel skips the others: adding a zero product could turn a -0.0 cell into 0.0)."""
    if not cells.size:
        return
    drawn = np.flatnonzero(weights)
    if drawn.size:
        index = np.ix_(drawn, cells)
        replicates[index] += weights[drawn, None] * values[None, :]


def add_clusters(
    y_true: np.ndarray | None,
    y_pred: np.ndarray | None,
    weights: np.ndarray | None,
    cluster_ids: np.ndarray | None,
    run_length: int,
    ignore_index: int,
    has_ignore: bool,
    num_classes: int,
    k1: Any,
    k2: Any,
    legacy: bool,
    replicates: np.ndarray,
    scratch: np.ndarray,
    touched: np.ndarray,
    scan: bool,
    sign: int,
) -> int | None:
    """``_kernels.add_clusters`` while it compiles (its result: the number of runs); None to
    run the kernel. The labels are valid (the main matrix counted them first)."""
    if not warmup.enabled() or y_true is None or y_pred is None or cluster_ids is None:
        return None
    args: tuple = (y_true, y_pred, weights, cluster_ids, run_length, ignore_index, has_ignore)
    args += (num_classes, k1, k2, legacy, replicates, scratch, touched, scan, sign)
    route = ("clusters", y_true.dtype, y_pred.dtype, _dtype(weights), replicates.dtype)
    if _kernel_runs(route, _k.add_clusters, args):
        return None
    dtype = replicates.dtype
    n = y_true.shape[0] if y_true.ndim == 1 else -1
    if (
        n < 0
        or y_pred.shape != y_true.shape
        or y_true.dtype.kind not in "iub"
        or y_pred.dtype.kind not in "iub"
        or dtype not in (np.int64, np.float64)
        or scratch.dtype != dtype
        or (weights is not None and weights.shape != y_true.shape)
        or (weights is not None and weights.dtype.kind not in "iuf")
        or cluster_ids.ndim != 1
        or replicates.ndim != 2
        or replicates.shape[1] != num_classes * num_classes
        or run_length < 1
        or (scratch != 0).any()
    ):
        return None
    if n == 0:
        return 0
    num_items = cluster_ids.shape[0]
    if num_items == 0:
        return None
    ids = cluster_ids.view(np.uint64) if cluster_ids.dtype == np.int64 else None
    if ids is None:
        return None
    # Runs of consecutive items of one cluster: each is flushed once.
    starts = np.flatnonzero(np.concatenate(([True], cluster_ids[1:] != cluster_ids[:-1])))
    runs = starts.size
    if runs > MAX_RUNS or runs * num_classes * num_classes > MAX_DRAWS:
        return None
    samples = min(n, num_items * run_length)
    is_start = np.zeros(num_items, dtype=bool)
    is_start[starts] = True
    sample_run = (np.cumsum(is_start) - 1)[np.arange(samples) // run_length]
    labels = y_true[:samples]
    keep = None
    if has_ignore:
        if labels.dtype.kind == "b":
            return None  # bool labels with an ignore index: left to the kernel
        info = np.iinfo(labels.dtype)
        if info.min <= ignore_index <= info.max:  # else no label equals it
            keep = labels != labels.dtype.type(ignore_index)
    sizes = num_classes * num_classes
    cells = labels.astype(np.int64) * num_classes + y_pred[:samples].astype(np.int64)
    if keep is not None:
        cells = cells[keep]
    if cells.size and not 0 <= cells.min() <= cells.max() < sizes:
        return None  # the caller validates labels first; anything else is the kernel's
    if weights is not None and samples:
        low, high = weights[:samples].min(), weights[:samples].max()
        if not (low >= 0 and high < math.inf):  # NaN fails both
            return None  # the caller refuses these first; anything else is the kernel's
        if dtype != np.float64 and (np.floor(weights[:samples]) != weights[:samples]).any():
            return None
    if weights is None:
        values = np.ones(samples, dtype=dtype)
    elif dtype == np.float64:
        values = weights[:samples].astype(np.float64)
    else:
        # int64 cells get float (or uint64) weights added in float64 and truncated: exact
        # while the sums stay exact integers, as the validated whole weights' do here.
        total = float(np.sum(np.abs(weights[:samples]), dtype=np.float64))
        if not total < _EXACT_FLOAT_SUM:
            return None
        values = weights[:samples].astype(np.int64)
    if keep is not None:
        sample_run, values = sample_run[keep], values[keep]
    sums = np.zeros(runs * sizes, dtype=dtype)
    # Per run and cell, in sample order (float64 weights: the kernel's rounding).
    np.add.at(sums, sample_run * sizes + cells, values)
    sums = sums.reshape(runs, sizes)
    run_weights = cluster_weights(ids[starts], k1, k2, legacy, len(replicates)).astype(dtype)
    for run in range(runs):
        row = sums[run]
        flushed = np.flatnonzero(row)
        _flush(replicates, flushed, sign * row[flushed], run_weights[run])
    return runs


# ---------------------------------------------------------------------------- read-time draws
def replicate_marginals(
    rows: np.ndarray,
    cols: np.ndarray,
    counts: np.ndarray,
    num_classes: int,
    seed: int,
    first: int,
    stop: int,
    multinomial: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``_kernels.replicate_marginals`` while it compiles: ``(tp, ap, pp, total)`` of
    replicates ``first .. stop-1``; None to run the kernel."""
    if not warmup.enabled():
        return None
    args = (rows, cols, counts, num_classes, np.uint64(seed), first, stop, multinomial)
    route = ("marginals", counts.dtype)
    if _kernel_runs(route, _k.replicate_marginals, args):
        return None
    cells = _draw_cells(counts, seed, first, stop, multinomial)
    if cells is None or not (rows.shape == cols.shape == counts.shape):
        return None
    labels = np.concatenate((rows, cols))
    if labels.size and not 0 <= labels.min() <= labels.max() < num_classes:
        return None
    # Integer sums: any order gives the kernel's.
    on_diagonal = np.flatnonzero(rows == cols)
    return (
        _sum_columns(cells[:, on_diagonal], rows[on_diagonal], num_classes),
        _sum_columns(cells, rows, num_classes),
        _sum_columns(cells, cols, num_classes),
        cells.sum(axis=1),
    )


def _sum_columns(cells: np.ndarray, index: np.ndarray, width: int) -> np.ndarray:
    """``out[:, j]`` = the sum of the columns ``c`` of ``cells`` with ``index[c] == j``."""
    out = np.zeros((cells.shape[0], width), dtype=np.int64)
    if index.size:
        order = np.argsort(index, kind="stable")
        ordered = index[order]
        starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
        out[:, ordered[starts]] = np.add.reduceat(cells[:, order], starts, axis=1)
    return out


def replicate_cells(
    counts: np.ndarray, seed: int, first: int, stop: int, multinomial: bool
) -> np.ndarray | None:
    """``_kernels.replicate_cells`` while it compiles: ``(stop - first, len(counts))`` drawn
    cells; None to run the kernel."""
    if not warmup.enabled():
        return None
    args = (counts, np.uint64(seed), first, stop, multinomial)
    if _kernel_runs(("cells", counts.dtype), _k.replicate_cells, args):
        return None
    return _draw_cells(counts, seed, first, stop, multinomial)


def _draw_cells(
    counts: np.ndarray, seed: int, first: int, stop: int, multinomial: bool
) -> np.ndarray | None:
    """The kernels' replicates ``first .. stop-1`` of the non-zero ``counts``, or None when
    they are not drawn here (see the module docstring)."""
    if counts.dtype != np.int64 or counts.ndim != 1 or not 0 <= first < stop:
        return None
    size = counts.shape[0]
    if size > MAX_CELLS or (stop - first) * size > MAX_DRAWS or (counts <= 0).any():
        return None
    values = [int(c) for c in counts.tolist()]
    if not multinomial and _lgamma is None and max(values, default=0) >= _INVERSION_MAX_MEAN:
        return None
    seed64 = np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF)
    replicates = np.arange(first, stop, dtype=np.uint64)
    state = _mix64(seed64 ^ _mix64(replicates * _GOLDEN + _ONE))  # each replicate's stream
    out = np.zeros((stop - first, size), dtype=np.int64)
    with np.errstate(all="ignore"):  # casts of rejected proposals, as the kernels' casts
        if multinomial:
            _multinomial(values, state, out)
        else:
            _poisson_cells(values, state, out)
    return out


def _multinomial(values: list[int], state: np.ndarray, out: np.ndarray) -> None:
    """Multinomial(total, counts/total) by conditional binomials, as ``_draw_replicate``."""
    size = len(values)
    # _prepare: per cell p <= 1/2, flip, log(1 - p), p / (1 - p), from the cells after it.
    conditional = [(0.0, False, 0.0, 0.0)] * size
    rest = 0.0
    for k in range(size - 1, -1, -1):
        rest += float(values[k])
        p = float(values[k]) / rest
        flip = p > 0.5
        if flip:
            p = 1.0 - p
        conditional[k] = (p, flip, math.log1p(-p), p / (1.0 - p))
    remaining = np.full(state.shape, sum(values), dtype=np.int64)
    for k in range(size - 1):
        p, flip, log_q, ratio = conditional[k]
        drawn = np.zeros(state.shape, dtype=np.int64)
        live = np.flatnonzero(remaining != 0)
        n = remaining[live]
        if p > 0.0:
            mean = n.astype(np.float64) * p
            for subset, sampler in (
                (live[mean < _INVERSION_MAX_MEAN], _binomial_inversion),
                (live[~(mean < _INVERSION_MAX_MEAN)], _binomial_btrs),
            ):
                if subset.size:
                    drawn[subset], state[subset] = sampler(
                        state[subset], remaining[subset], p, log_q, ratio
                    )
        if flip:
            drawn[live] = remaining[live] - drawn[live]
        out[:, k] = drawn
        remaining -= drawn
    out[:, size - 1] = remaining


def _binomial_inversion(
    state: np.ndarray, n: np.ndarray, p: float, log_q: float, ratio: float
) -> tuple[np.ndarray, np.ndarray]:
    """``_kernels._binomial_inversion`` for each stream of ``state`` with its ``n``."""
    pk = _map(math.exp, n.astype(np.float64) * log_q)
    u, state = _uniform(state)
    k = np.zeros(n.shape, dtype=np.int64)
    active = np.flatnonzero((u > pk) & (k < n))
    while active.size:
        u[active] = u[active] - pk[active]
        ka = k[active]
        step = ratio * (n[active] - ka).astype(np.float64)
        factor = np.where(
            ka < 64,
            step * _RECIPROCALS[np.minimum(ka, 63)],
            step / (ka + 1).astype(np.float64),
        )
        pk[active] = pk[active] * factor
        k[active] = ka + 1
        active = active[(u[active] > pk[active]) & (k[active] < n[active])]
    return k, state


def _stirling(k: np.ndarray) -> np.ndarray:
    """``_kernels._stirling`` (table below 10, series above) of float64 ``k``."""
    k1 = k + 1.0
    k1sq = k1 * k1
    series = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / k1sq) / k1sq) / k1
    small = k < 10
    table = _STIRLING_TABLE[np.where(small, k, 0).astype(np.int64)]
    return np.where(small, table, series)  # type: ignore[no-any-return]


def _binomial_btrs(
    state: np.ndarray, n: np.ndarray, p: float, log_q: float, r: float
) -> tuple[np.ndarray, np.ndarray]:
    """``_kernels._binomial_btrs`` for each stream of ``state`` with its ``n``."""
    count = n.astype(np.float64)
    stddev = np.sqrt(count * p * (1.0 - p))
    b = 1.15 + 2.53 * stddev
    inv_b = 1.0 / b
    a = -0.0873 + 0.0248 * b + 0.01 * p
    two_a = 2 * a
    c = count * p + 0.5
    v_r = 0.92 - 4.2 * inv_b
    k = np.zeros(n.shape, dtype=np.int64)
    pending = np.arange(n.size)
    while pending.size:
        u, s = _uniform(state[pending])
        u -= 0.5
        v, s = _uniform(s)
        state[pending] = s
        us = 0.5 - np.abs(u)
        drawn = np.floor((two_a[pending] / us + b[pending]) * u + c[pending]).astype(np.int64)
        accept = (us >= 0.07) & (v <= v_r[pending])
        cnt = count[pending]
        test = np.flatnonzero(~accept & (drawn >= 0) & ~(drawn > cnt))
        if test.size:
            t = pending[test]
            kk = drawn[test]
            kf = kk.astype(np.float64)
            ct = count[t]
            alpha = (2.83 + 5.1 * inv_b[t]) * stddev[t]
            m = np.floor((ct + 1) * p).astype(np.int64)
            mf = m.astype(np.float64)
            lhs = _map(_log, v[test] * alpha / (a[t] / (us[test] * us[test]) + b[t]))
            bound = (
                (mf + 0.5) * _map(_log, (m + 1).astype(np.float64) / (r * (ct - mf + 1)))
                + (ct + 1) * _map(_log, (ct - mf + 1) / (ct - kf + 1))
                + (kf + 0.5) * _map(_log, r * (ct - kf + 1) / (kk + 1).astype(np.float64))
                + _stirling(mf)
                + _stirling(ct - mf)
                - _stirling(kf)
                - _stirling(ct - kf)
            )
            accept[test[lhs <= bound]] = True
        k[pending[accept]] = drawn[accept]
        pending = pending[~accept]
    return k, state


def _poisson_cells(values: list[int], state: np.ndarray, out: np.ndarray) -> None:
    """Independent Poisson(counts[k]) cells, as ``_draw_replicate`` with ``poisson``."""
    for k, count in enumerate(values):
        lam = float(count)
        if lam < _INVERSION_MAX_MEAN:
            out[:, k], state[:] = _poisson_inversion(state, lam)
        else:
            out[:, k], state[:] = _poisson_ptrs(state, lam)


def _poisson_inversion(state: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """``_kernels.poisson`` for ``lam < 10`` on each stream of ``state``."""
    first = math.exp(-lam)
    pk = np.full(state.shape, first)
    u, state = _uniform(state)
    k = np.zeros(state.shape, dtype=np.int64)
    active = np.flatnonzero(u > pk)
    while active.size:
        u[active] = u[active] - pk[active]
        ka = k[active]
        factor = np.where(
            ka < 64, lam * _RECIPROCALS[np.minimum(ka, 63)], lam / (ka + 1).astype(np.float64)
        )
        pk[active] = pk[active] * factor
        k[active] = ka + 1
        # Float64 rounding left u above the total mass: that stream draws again.
        again = active[pk[active] == 0.0]
        if again.size:
            pk[again] = first
            u[again], state[again] = _uniform(state[again])
            k[again] = 0
        active = active[u[active] > pk[active]]
    return k, state


def _poisson_ptrs(state: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """``_kernels.poisson`` for ``lam >= 10`` (Hörmann's PTRS) on each stream of ``state``."""
    assert _lgamma is not None  # _draw_cells declines these without it
    slam = math.sqrt(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    v_r = 0.9277 - 3.6224 / (b - 2)
    log_lam = math.log(lam)
    log_inv_alpha = math.log(inv_alpha)
    k = np.zeros(state.shape, dtype=np.int64)
    pending = np.arange(state.size)
    while pending.size:
        u, s = _uniform(state[pending])
        u -= 0.5
        v, s = _uniform(s)
        state[pending] = s
        us = 0.5 - np.abs(u)
        drawn = np.floor((2 * a / us + b) * u + lam + 0.43).astype(np.int64)
        accept = (us >= 0.07) & (v <= v_r)
        test = np.flatnonzero(~accept & (drawn >= 0) & ~((us < 0.013) & (v > us)))
        if test.size:
            kk = drawn[test]
            ut = us[test]
            lhs = _map(_log, v[test]) + log_inv_alpha - _map(_log, a / (ut * ut) + b)
            rhs = (
                -lam + kk.astype(np.float64) * log_lam - _map(_lgamma, (kk + 1).astype(np.float64))
            )
            accept[test[lhs <= rhs]] = True
        k[pending[accept]] = drawn[accept]
        pending = pending[~accept]
    return k, state
