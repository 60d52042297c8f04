"""Numba kernels of the bootstrap: exact random variates and replicate counting.

Arithmetic only: the Python layer (:mod:`metricstream.bootstrap`,
:mod:`metricstream.bootstrap.accumulator`) validates, allocates and words the errors.

Random numbers
--------------
Every replicate ``b`` has its own SplitMix64 stream, seeded from ``(seed, b)`` (SplitMix64
passes BigCrush; its 64-bit state lives in one register). Replicates are therefore independent
of how many are drawn at once, of chunking, and of the order they are drawn in: replicate 17 of
seed 3 is the same matrix whether 20 or 2,000 replicates are asked for. Uniforms have 53 bits
and lie in the open interval (0, 1).

Exact samplers (all are exact up to float64 rounding, none is a normal approximation):

* Binomial(n, p): sequential-search inversion when ``n·min(p, 1-p) < 10`` (one uniform, one
  ``exp``, about ``n·p + 1`` multiply-adds); otherwise Hörmann's BTRS transformed rejection
  with squeeze (1993, "The generation of binomial random variates"; the variant of
  TensorFlow's ``random_binomial_op``), which accepts about 86% of proposals without a single
  logarithm.
* Poisson(λ): sequential-search inversion for ``λ < 10``, Hörmann's PTRS (1993, "The
  transformed rejection method for generating Poisson random variables") for ``λ >= 10``.
  The per-cell constants depend on λ only, so they are computed once per cell, not per draw.
* Multinomial(N, C/N) over the non-zero cells: conditional binomials,
  ``X_k ~ Binomial(N - sum_{j<k} X_j, C_k / sum_{j>=k} C_j)``; the last cell takes the rest.
* Poisson(1) weights of the clustered bootstrap: inversion of a 53-bit uniform that is a hash
  of (seed, cluster, replicate) against the cumulative table of Poisson(1), so any process
  computes the same weight for the same cluster without communicating.

Cluster hash
------------
The weight of cluster ``c`` in replicate ``b`` under ``seed`` is drawn from
``u = mix64(h ^ mix64((b + 1)·φ))`` with ``h = mix64(mix64(c ^ k1) + k2)``, where
``k1 = mix64(seed + φ)`` and ``k2 = mix64(seed ^ SEED_SALT)`` are keys of the seed (``φ`` the
golden-ratio constant, ``mix64`` SplitMix64's bijective finaliser). Two rounds keyed by
different functions of the seed make the map from ``(seed, cluster)`` to ``h`` a pseudo-random
permutation of the cluster ids for every seed, with no algebraic relation between seeds.
``legacy``: the earlier ``h = mix64(c ^ seed)``, kept only to continue states saved with it
(why it was replaced: ``docs/performance.md``, bootstrap kernels).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


def _kernel(function):
    """``njit(nogil=True)`` with the on-disk cache when there is somewhere to write it."""
    try:
        return njit(cache=True, nogil=True)(function)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(nogil=True)(function)


def _inline(function):
    return njit(inline="always")(function)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_TWO_M53 = 1.0 / 9007199254740992.0
# Salt of the second key of a seed (any odd constant other than the golden ratio: the first
# key is derived from ``seed + φ``); the fractional digits of sqrt(3).
SEED_SALT = 0xBB67AE8584CAA73B
_MASK64 = (1 << 64) - 1

# Below this mean the inversion samplers are cheaper than the rejection ones (and the rejection
# constants of BTRS/PTRS are only valid from about 10 on).
INVERSION_MAX_MEAN = 10.0


def _stirling_tail(k: int) -> float:
    """``log k! - [(k + 1/2) log(k + 1) - (k + 1) + log(2π)/2]`` (exact, for the table)."""
    return math.lgamma(k + 1) - (
        (k + 0.5) * math.log(k + 1) - (k + 1) + 0.5 * math.log(2 * math.pi)
    )


_STIRLING_TABLE = np.array([_stirling_tail(k) for k in range(10)])
# 1 / (k + 1): the inversion samplers multiply by these instead of dividing (a division has
# several times the latency of a multiplication; measured 28 -> 20 ns per variate).
_RECIPROCALS = np.array([1.0 / (k + 1) for k in range(64)])


def _poisson1_cdf() -> np.ndarray:
    """Cumulative probabilities of Poisson(1), up to where float64 reaches 1."""
    cdf = []
    total = 0.0
    term = math.exp(-1.0)
    k = 0
    while total < 1.0 and k < 40:
        total += term
        cdf.append(min(total, 1.0))
        k += 1
        term /= k
    cdf[-1] = 1.0
    return np.array(cdf)


POISSON1_CDF = _poisson1_cdf()
# The largest weight a cluster can get in one replicate (bounds the growth of replicate counts).
MAX_POISSON1_WEIGHT = len(POISSON1_CDF) - 1


# ---------------------------------------------------------------------------- random bits
@_inline
def mix64(z):
    """SplitMix64's finaliser: a bijective 64-bit hash (``z`` is uint64)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def mix64_int(z: int) -> int:
    """:func:`mix64` on a Python int (for keys computed once per call, outside the kernels)."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def seed_keys(seed: int, legacy: bool = False) -> tuple[np.uint64, np.uint64]:
    """``(k1, k2)``, the keys of ``seed`` for :func:`cluster_hash` (``(seed, 0)`` if legacy)."""
    if legacy:
        return np.uint64(seed & _MASK64), np.uint64(0)
    return (
        np.uint64(mix64_int(seed + 0x9E3779B97F4A7C15)),
        np.uint64(mix64_int(seed ^ SEED_SALT)),
    )


@_inline
def cluster_hash(cluster, k1, k2, legacy):
    """``h`` of a cluster id (uint64) under the seed keys ``k1, k2`` (see the module notes)."""
    if legacy:
        return mix64(cluster ^ k1)
    return mix64(mix64(cluster ^ k1) + k2)


@_inline
def stream_state(seed, replicate):
    """Initial state of replicate ``replicate``'s stream under ``seed`` (both uint64)."""
    return mix64(seed ^ mix64(replicate * _GOLDEN + np.uint64(1)))


@_inline
def _uniform(state):
    """``(u, state')``: a uniform in (0, 1) and the advanced stream state (uint64).

    The state is passed and returned by value so that it stays in a register (measured: a
    one-element state array costs 14% of a binomial variate).
    """
    state = state + _GOLDEN
    return (np.float64(mix64(state) >> _S11) + 0.5) * _TWO_M53, state


@_inline
def hash_uniform(key, replicate):
    """A uniform in (0, 1) that is a pure function of ``(key, replicate)`` (uint64 each)."""
    return (
        np.float64(mix64(key ^ mix64((replicate + np.uint64(1)) * _GOLDEN)) >> _S11) + 0.5
    ) * _TWO_M53


@_inline
def _poisson1_from_uniform(u):
    k = 0
    while u > POISSON1_CDF[k]:
        k += 1
    return k


# ---------------------------------------------------------------------------- binomial
@_inline
def _stirling(k):
    if k < 10:
        return _STIRLING_TABLE[int(k)]
    k1 = k + 1.0
    k1sq = k1 * k1
    return (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / k1sq) / k1sq) / k1


@_inline
def _binomial_inversion(state, n, log_q, ratio):
    """Binomial(n, p) by sequential search from 0 (``n·p`` small, ``p <= 1/2``);
    ``log_q = log(1 - p)``, ``ratio = p / (1 - p)``. Returns ``(k, state')``."""
    pk = math.exp(n * log_q)
    u, state = _uniform(state)
    k = 0
    while u > pk and k < n:
        u -= pk
        if k < 64:
            pk *= ratio * (n - k) * _RECIPROCALS[k]
        else:
            pk *= ratio * (n - k) / (k + 1)
        k += 1
    return np.int64(k), state


@_inline
def _binomial_btrs(state, n, p, r):
    """Binomial(n, p) by Hörmann's BTRS (``n·p >= 10``, ``p <= 1/2``, ``r = p / (1 - p)``).

    Returns ``(k, state')``."""
    count = np.float64(n)
    stddev = math.sqrt(count * p * (1.0 - p))
    b = 1.15 + 2.53 * stddev
    inv_b = 1.0 / b
    a = -0.0873 + 0.0248 * b + 0.01 * p
    two_a = 2 * a
    c = count * p + 0.5
    v_r = 0.92 - 4.2 * inv_b
    while True:
        u, state = _uniform(state)
        u -= 0.5
        v, state = _uniform(state)
        us = 0.5 - abs(u)
        k = math.floor((two_a / us + b) * u + c)
        if us >= 0.07 and v <= v_r:
            return np.int64(k), state
        if k < 0 or k > count:
            continue
        alpha = (2.83 + 5.1 * inv_b) * stddev
        m = math.floor((count + 1) * p)
        v = math.log(v * alpha / (a / (us * us) + b))
        bound = (
            (m + 0.5) * math.log((m + 1) / (r * (count - m + 1)))
            + (count + 1) * math.log((count - m + 1) / (count - k + 1))
            + (k + 0.5) * math.log(r * (count - k + 1) / (k + 1))
            + _stirling(m)
            + _stirling(count - m)
            - _stirling(k)
            - _stirling(count - k)
        )
        if v <= bound:
            return np.int64(k), state


@_inline
def binomial_prepared(state, n, p, flip, log_q, ratio):
    """Binomial(n, p') with ``p' = 1 - p`` if ``flip`` else ``p``, where ``p <= 1/2``,
    ``log_q = log(1 - p)`` and ``ratio = p / (1 - p)`` are computed once per probability.
    Returns ``(k, state')``."""
    if n <= 0 or p <= 0.0:
        k = np.int64(0)
    elif n * p < INVERSION_MAX_MEAN:
        k, state = _binomial_inversion(state, n, log_q, ratio)
    else:
        k, state = _binomial_btrs(state, n, p, ratio)
    return (np.int64(n - k) if flip else k), state


@_inline
def binomial(state, n, p):
    """An exact Binomial(n, p) variate (``n >= 0`` an integer, ``0 <= p <= 1``) and the
    advanced state: ``(k, state')``."""
    if p >= 1.0:
        return np.int64(max(n, 0)), state
    flip = p > 0.5
    if flip:
        p = 1.0 - p
    return binomial_prepared(state, n, p, flip, math.log1p(-p), p / (1.0 - p))


@_kernel
def binomial_draws(n, p, seed, size):
    """``size`` Binomial(n, p) variates from stream 0 of ``seed`` (for tests and benchmarks)."""
    out = np.empty(size, dtype=np.int64)
    state = stream_state(np.uint64(seed), np.uint64(0))
    for i in range(size):
        out[i], state = binomial(state, n, p)
    return out


# ---------------------------------------------------------------------------- poisson
@_kernel
def poisson_constants(lam):
    """Per-cell constants of the Poisson samplers, one row per mean in ``lam``.

    Columns: exp(-λ) (inversion) or, for λ >= 10, PTRS's ``a, b, 1/α, v_r, log λ``.
    """
    out = np.zeros((lam.shape[0], 6))
    for i in range(lam.shape[0]):
        m = lam[i]
        out[i, 0] = math.exp(-m)
        if m >= INVERSION_MAX_MEAN:
            slam = math.sqrt(m)
            b = 0.931 + 2.53 * slam
            out[i, 1] = -0.059 + 0.02483 * b
            out[i, 2] = b
            out[i, 3] = 1.1239 + 1.1328 / (b - 3.4)
            out[i, 4] = 0.9277 - 3.6224 / (b - 2)
            out[i, 5] = math.log(m)
    return out


@_inline
def poisson(state, lam, consts):
    """An exact Poisson(λ) variate and the advanced state, ``(k, state')``; ``consts`` is
    ``lam``'s row of :func:`poisson_constants`."""
    if lam <= 0.0:
        return np.int64(0), state
    if lam < INVERSION_MAX_MEAN:
        pk = consts[0]
        u, state = _uniform(state)
        k = 0
        while u > pk:
            u -= pk
            pk *= lam * _RECIPROCALS[k] if k < 64 else lam / (k + 1)
            k += 1
            if pk == 0.0:  # float64 rounding left u above the total mass: draw again
                pk = consts[0]
                u, state = _uniform(state)
                k = 0
        return np.int64(k), state
    a = consts[1]
    b = consts[2]
    inv_alpha = consts[3]
    v_r = consts[4]
    log_lam = consts[5]
    while True:
        u, state = _uniform(state)
        u -= 0.5
        v, state = _uniform(state)
        us = 0.5 - abs(u)
        k = math.floor((2 * a / us + b) * u + lam + 0.43)
        if us >= 0.07 and v <= v_r:
            return np.int64(k), state
        if k < 0 or (us < 0.013 and v > us):
            continue
        if math.log(v) + math.log(inv_alpha) - math.log(
            a / (us * us) + b
        ) <= -lam + k * log_lam - math.lgamma(k + 1):
            return np.int64(k), state


@_kernel
def poisson_draws(lam, seed, size):
    """``size`` Poisson(λ) variates from stream 0 of ``seed`` (for tests and benchmarks)."""
    out = np.empty(size, dtype=np.int64)
    consts = poisson_constants(np.array([lam]))
    state = stream_state(np.uint64(seed), np.uint64(0))
    for i in range(size):
        out[i], state = poisson(state, lam, consts[0])
    return out


# ---------------------------------------------------------------------------- replicates
@_inline
def _draw_replicate(state, counts, total, conditional, consts, multinomial, out):
    """One replicate of the non-zero ``counts`` into ``out`` (same length), from ``state``."""
    size = counts.shape[0]
    if multinomial:
        remaining = total
        for k in range(size - 1):
            if remaining == 0:
                out[k] = 0
                continue
            x, state = binomial_prepared(
                state,
                remaining,
                conditional[k, 0],
                conditional[k, 1] != 0,
                conditional[k, 2],
                conditional[k, 3],
            )
            out[k] = x
            remaining -= x
        if size:
            out[size - 1] = remaining
    else:
        for k in range(size):
            out[k], state = poisson(state, np.float64(counts[k]), consts[k])


@_inline
def _prepare(counts, multinomial):
    size = counts.shape[0]
    # per cell: p <= 1/2, flip (the cell's probability is 1 - p), log(1 - p), p / (1 - p)
    conditional = np.zeros((size, 4))
    if multinomial:
        rest = np.float64(0.0)
        for k in range(size - 1, -1, -1):
            rest += counts[k]
            p = counts[k] / rest
            if p > 0.5:
                p = 1.0 - p
                conditional[k, 1] = 1.0
            conditional[k, 0] = p
            conditional[k, 2] = math.log1p(-p)
            conditional[k, 3] = p / (1.0 - p)
        consts = np.zeros((0, 6))
    else:
        consts = poisson_constants(counts.astype(np.float64))
    return conditional, consts


@_kernel
def replicate_cells(counts, seed, first, stop, multinomial):
    """Replicates ``first .. stop-1`` of the non-zero ``counts`` (int64, 1-D): (B, len(counts)).

    ``multinomial``: Multinomial(sum(counts), counts/sum(counts)); else independent
    Poisson(counts[k]) cells.
    """
    total = np.int64(0)
    for k in range(counts.shape[0]):
        total += counts[k]
    conditional, consts = _prepare(counts, multinomial)
    out = np.zeros((stop - first, counts.shape[0]), dtype=np.int64)
    seed64 = np.uint64(seed)
    for b in range(first, stop):
        _draw_replicate(
            stream_state(seed64, np.uint64(b)),
            counts,
            total,
            conditional,
            consts,
            multinomial,
            out[b - first],
        )
    return out


@_kernel
def replicate_marginals(rows, cols, counts, num_classes, seed, first, stop, multinomial):
    """Per-class counts of replicates ``first .. stop-1`` of a sparse confusion matrix.

    The matrix is given by its non-zero cells ``(rows[k], cols[k], counts[k])``. Returns
    ``(tp, ap, pp, total)``: ``(B, K)`` int64 arrays of the diagonal, row sums and column sums of
    each replicate, and its ``(B,)`` total. Draws exactly the cells :func:`replicate_cells`
    draws, without holding B×nnz of them.
    """
    size = counts.shape[0]
    total = np.int64(0)
    for k in range(size):
        total += counts[k]
    conditional, consts = _prepare(counts, multinomial)
    count = stop - first
    tp = np.zeros((count, num_classes), dtype=np.int64)
    ap = np.zeros((count, num_classes), dtype=np.int64)
    pp = np.zeros((count, num_classes), dtype=np.int64)
    totals = np.zeros(count, dtype=np.int64)
    cells = np.zeros(size, dtype=np.int64)
    seed64 = np.uint64(seed)
    for b in range(first, stop):
        _draw_replicate(
            stream_state(seed64, np.uint64(b)),
            counts,
            total,
            conditional,
            consts,
            multinomial,
            cells,
        )
        i = b - first
        tpb = tp[i]
        apb = ap[i]
        ppb = pp[i]
        n = np.int64(0)
        for k in range(size):
            x = cells[k]
            r = rows[k]
            c = cols[k]
            apb[r] += x
            ppb[c] += x
            if r == c:
                tpb[r] += x
            n += x
        totals[i] = n
    return tp, ap, pp, totals


# ---------------------------------------------------------------------------- clustered
@_kernel
def _poisson1_weights(keys, k1, k2, legacy, num_replicates, out):
    for c in range(keys.shape[0]):
        hashed = cluster_hash(np.uint64(keys[c]), k1, k2, legacy)
        for b in range(num_replicates):
            out[c, b] = _poisson1_from_uniform(hash_uniform(hashed, np.uint64(b)))


def poisson1_weights(
    keys: np.ndarray, seed: int, num_replicates: int, out: np.ndarray, legacy: bool = False
) -> None:
    """``out[c, b]`` = the Poisson(1) weight of cluster id ``keys[c]`` in replicate ``b`` under
    ``seed`` (``legacy``: the earlier hash, see the module notes)."""
    k1, k2 = seed_keys(int(seed), legacy)
    _poisson1_weights(keys, k1, k2, bool(legacy), num_replicates, out)


@_inline
def _cluster_weights(key, k1, k2, legacy, out):
    """The Poisson(1) weight of cluster ``key`` in each replicate, into ``out``."""
    hashed = cluster_hash(np.uint64(key), k1, k2, legacy)
    for b in range(out.shape[0]):
        out[b] = _poisson1_from_uniform(hash_uniform(hashed, np.uint64(b)))


@_inline
def _flush(cells, values, count, weights, replicates):
    """``replicates[b, cells[m]] += weights[b] * values[m]`` for the first ``count`` cells."""
    for b in range(replicates.shape[0]):
        w = weights[b]
        if w == 0:
            continue
        row = replicates[b]
        for m in range(count):
            row[cells[m]] += w * values[m]


@_kernel
def add_cluster_matrix(local, key, k1, k2, legacy, replicates, matrix, add_main, limit):
    """Add one cluster's K×K counts ``local`` to ``matrix`` (if ``add_main``) and, with weight
    Poisson(1) drawn from ``(seed, key, b)`` (the seed's keys ``k1, k2``), to each replicate
    ``replicates[b]`` (``(B, K*K)``, flat).

    With ``add_main``, first checks that no cell of ``matrix`` would pass ``limit``; if one
    would, returns its flat index and changes nothing. Returns -1 on success.
    """
    flat = local.reshape(-1)
    main = matrix.reshape(-1)
    cells = np.empty(flat.shape[0], dtype=np.int64)
    values = np.empty(flat.shape[0], dtype=replicates.dtype)
    count = 0
    for cell in range(flat.shape[0]):
        v = flat[cell]
        if v != 0:
            if add_main and v > limit - main[cell]:
                return cell
            cells[count] = cell
            values[count] = v
            count += 1
    if add_main:
        for m in range(count):
            main[cells[m]] += values[m]
    weights = np.empty(replicates.shape[0], dtype=replicates.dtype)
    _cluster_weights(key, k1, k2, legacy, weights)
    _flush(cells, values, count, weights, replicates)
    return -1


@_kernel
def add_clusters(
    y_true,
    y_pred,
    weights,
    cluster_ids,
    run_length,
    ignore_index,
    has_ignore,
    num_classes,
    k1,
    k2,
    legacy,
    replicates,
    scratch,
    touched,
    scan,
    sign,
):
    """Add each sample to the replicates with its cluster's Poisson(1) weight.

    Samples ``[i·run_length, (i+1)·run_length)`` belong to cluster ``cluster_ids[i]``.
    Consecutive samples of one cluster are first counted into ``scratch`` (a zeroed flat K×K
    buffer; ``touched`` lists its non-zero cells), then added to each replicate ``b`` of
    ``replicates`` (``(B, K*K)``) with that cluster's weight: O(B × distinct cells) per run of
    a cluster rather than O(B) per sample. With ``scan`` (long runs, small K) the cells are
    not tracked while counting — the increments then have no branch, measured 2-3x faster —
    and a flush scans all K² cells instead. The labels must already be validated (the main
    matrix counts them). ``sign`` -1 subtracts what +1 added (an exact undo of integer counts).
    Returns the number of runs.
    """
    n = y_true.shape[0]
    num_items = cluster_ids.shape[0]
    wts = np.empty(replicates.shape[0], dtype=replicates.dtype)
    values = np.empty(touched.shape[0], dtype=replicates.dtype)
    num_touched = 0
    runs = 0
    if n == 0:
        return runs
    current = cluster_ids[0]
    for item in range(num_items + 1):
        if item == num_items or cluster_ids[item] != current:
            # flush the run of cluster `current`
            if scan:
                for cell in range(scratch.shape[0]):
                    if scratch[cell] != 0:
                        touched[num_touched] = cell
                        values[num_touched] = sign * scratch[cell]
                        scratch[cell] = 0
                        num_touched += 1
            else:
                for m in range(num_touched):
                    values[m] = sign * scratch[touched[m]]
                    scratch[touched[m]] = 0
            _cluster_weights(current, k1, k2, legacy, wts)
            _flush(touched, values, num_touched, wts, replicates)
            num_touched = 0
            runs += 1
            if item == num_items:
                break
            current = cluster_ids[item]
        lo = item * run_length
        hi = min(lo + run_length, n)
        for j in range(lo, hi):
            t = y_true[j]
            if has_ignore and t == ignore_index:
                continue
            cell = np.int64(t) * num_classes + np.int64(y_pred[j])
            if scan:
                if weights is None:
                    scratch[cell] += 1
                else:
                    scratch[cell] += weights[j]
            elif weights is None:
                if scratch[cell] == 0:
                    touched[num_touched] = cell
                    num_touched += 1
                scratch[cell] += 1
            else:
                w = weights[j]
                if w != 0:
                    if scratch[cell] == 0:
                        touched[num_touched] = cell
                        num_touched += 1
                    scratch[cell] += w
    return runs
