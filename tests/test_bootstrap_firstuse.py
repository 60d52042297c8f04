"""First use of the bootstrap without waiting for a compile: the numpy twin of the bootstrap
kernels (metricstream.bootstrap._firstuse) and the background compile that replaces it.

The twin must leave exactly what the kernels leave: the same replicate draws of the read-time
bootstrap (multinomial and Poisson, every sampler regime) and the same clustered accumulator
state (integer counts equal, float64 sums equal bit for bit), on randomized inputs with weights,
ignore_index, absent classes, empty batches and extreme values; decline (write nothing) what it
does not draw or count exactly, so that the kernel does; leave every error to be worded as the
kernel path words it, with the state untouched; and a stream counted partly by the twin and
partly by the kernels must end where the kernels alone end. A subprocess with an empty Numba
cache shows the first calls returning before the compiles finish, with the kernels' numbers.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from metricstream import BootstrapConfusionAccumulator
from metricstream.bootstrap import bootstrap
from tests.first_use_process import run_first_use

warmup = pytest.importorskip("metricstream._core.warmup")
_firstuse = pytest.importorskip("metricstream.bootstrap._firstuse")
_kernels = pytest.importorskip("metricstream.bootstrap._kernels")


# This module tests first use: background compiles on (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("background_compiles_on")


TWINS = ("add_cluster_matrix", "add_clusters", "replicate_marginals", "replicate_cells")


class Paths:
    """Switches between the twin (every kernel reported as compiling) and the kernels
    (background compiles off); ``used`` counts the calls each twin function answered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.used: collections.Counter[str] = collections.Counter()
        for name in TWINS:
            monkeypatch.setattr(_firstuse, name, self._recording(name, getattr(_firstuse, name)))
        # Restored after the test, whatever the switches below did.
        monkeypatch.setattr(warmup, "_enabled", warmup._enabled)
        monkeypatch.setattr(warmup, "defer", warmup.defer)
        monkeypatch.setattr(_firstuse, "_ready", set())
        self._defer = warmup.defer

    def _recording(self, name, function):
        def recording(*args):
            result = function(*args)
            if result is not None:
                self.used[name] += 1
            return result

        return recording

    @contextlib.contextmanager
    def twin(self) -> Iterator[None]:
        warmup._enabled = True
        warmup.defer = lambda routes: True
        _firstuse._ready.clear()
        try:
            yield
        finally:
            warmup.defer = self._defer

    @contextlib.contextmanager
    def kernel(self) -> Iterator[None]:
        saved = warmup._enabled
        warmup._enabled = False
        try:
            yield
        finally:
            warmup._enabled = saved


@pytest.fixture
def paths(monkeypatch):
    return Paths(monkeypatch)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def same_state(a, b) -> bool:
    left, right = a.state_arrays(), b.state_arrays()
    return left.keys() == right.keys() and all(same_bits(left[n], right[n]) for n in left)


# ------------------------------------------------------------------ cluster weights
@pytest.mark.parametrize("legacy", [False, True])
def test_cluster_weights_are_the_kernels(legacy):
    rng = np.random.default_rng(1)
    extremes = [0, 1, -1, 2**63 - 1, -(2**63)]
    keys = np.concatenate([extremes, rng.integers(-(2**63), 2**63 - 1, 200)]).astype(np.int64)
    for seed in (0, 1, 2**64 - 1, int(rng.integers(0, 2**63))):
        for replicates in (1, 7, 300):
            expected = np.zeros((keys.size, replicates), dtype=np.int64)
            _kernels.poisson1_weights(keys, seed, replicates, expected, legacy)
            k1, k2 = _kernels.seed_keys(seed, legacy)
            got = _firstuse.cluster_weights(keys.view(np.uint64), k1, k2, legacy, replicates)
            assert same_bits(got, expected)


# ------------------------------------------------------------------ read-time draws
def _cells(rng, size: int, scale: float) -> np.ndarray:
    """Non-zero cell counts from 1 to about ``scale`` (both samplers' regimes of each)."""
    return np.maximum(1, (rng.random(size) * scale).astype(np.int64))


DRAW_CASES = [
    # (cells, largest count): inversion only; both; rejection samplers with huge counts
    (1, 5),
    (2, 30),
    (9, 8),
    (17, 200),
    (40, 1e4),
    (12, 1e9),
    (6, 2**61),
]


@pytest.mark.parametrize(("size", "scale"), DRAW_CASES)
@pytest.mark.parametrize("multinomial", [True, False])
def test_draws_are_the_kernels(size, scale, multinomial):
    rng = np.random.default_rng(size)
    for trial in range(3):
        counts = _cells(rng, size, scale)
        if trial == 2:
            counts[0] = 1  # a tiny cell beside large ones: p near 0 and near 1
        seed = int(rng.integers(0, 2**63)) * 2 + trial % 2
        first = int(rng.integers(0, 40))
        stop = first + int(rng.integers(1, 250))
        expected = _kernels.replicate_cells(counts, np.uint64(seed), first, stop, multinomial)
        got = _firstuse._draw_cells(counts, seed, first, stop, multinomial)
        assert got is not None and same_bits(got, expected)


@given(
    counts=st.lists(st.integers(1, 2**40), min_size=1, max_size=12),
    seed=st.integers(0, 2**64 - 1),
    first=st.integers(0, 1000),
    count=st.integers(1, 60),
    multinomial=st.booleans(),
)
def test_draws_property(counts, seed, first, count, multinomial):
    cells = np.array(counts, dtype=np.int64)
    expected = _kernels.replicate_cells(cells, np.uint64(seed), first, first + count, multinomial)
    got = _firstuse._draw_cells(cells, seed, first, first + count, multinomial)
    assert got is not None and same_bits(got, expected)


def _matrices():
    rng = np.random.default_rng(7)
    yield np.array([[50, 3, 2], [4, 40, 6], [1, 5, 39]])
    yield np.array([[0, 0], [0, 3]])  # absent class
    yield np.array([[10**12, 7], [1, 3 * 10**11]])  # extreme counts
    for k in (2, 5, 10):
        matrix = rng.integers(0, 60, size=(k, k)) * (rng.random((k, k)) < 0.6)
        matrix[0, 0] += 1
        yield matrix


@pytest.mark.parametrize("resampling", ["multinomial", "poisson"])
def test_bootstrap_intervals_are_the_kernels(paths, resampling):
    """Every interval method and metric kind (batched per-class counts, a callable on cells):
    identical replicates, estimate and bounds."""
    macro = {"average": "macro", "zero_division": 0.0}  # absent classes: no warning
    metrics = [("accuracy", {}), ("f1", macro), (lambda m: (m[0, 0] + 1) / (m.sum() + 2), {})]
    for matrix in _matrices():
        for metric, kwargs in metrics:
            for method in ("percentile", "bca"):
                results = []
                for path in (paths.twin, paths.kernel):
                    with path():
                        results.append(
                            bootstrap(
                                matrix,
                                metric,
                                n_resamples=120,
                                seed=3,
                                method=method,
                                resampling=resampling,
                                **kwargs,
                            )
                        )
                twin, kernel = results
                assert same_bits(twin.replicates, kernel.replicates)
                assert twin == kernel
    assert paths.used["replicate_marginals"] and paths.used["replicate_cells"]


def test_marginals_are_the_kernels(paths):
    rng = np.random.default_rng(11)
    for k in (1, 2, 7, 30):
        matrix = rng.integers(0, 9, size=(k, k)) * (rng.random((k, k)) < 0.3)
        matrix[-1, 0] += 2
        flat = matrix.reshape(-1)
        cells = np.flatnonzero(flat)
        args = ((cells // k).astype(np.int64), (cells % k).astype(np.int64), flat[cells], k)
        for multinomial in (True, False):
            with paths.twin():
                got = _firstuse.replicate_marginals(*args, 99, 5, 130, multinomial)
            expected = _kernels.replicate_marginals(*args, np.uint64(99), 5, 130, multinomial)
            assert got is not None
            assert all(same_bits(a, b) for a, b in zip(got, expected, strict=True))


def test_draws_declined(paths, monkeypatch):
    """Past its bounds, or without the C library's lgamma for a large Poisson cell, the twin
    draws nothing and the kernel draws."""
    many = np.ones(_firstuse.MAX_CELLS + 1, dtype=np.int64)
    assert _firstuse._draw_cells(many, 0, 0, 2, True) is None
    wide = np.ones(64, dtype=np.int64)
    assert _firstuse._draw_cells(wide, 0, 0, _firstuse.MAX_DRAWS // 64 + 1, True) is None
    assert _firstuse._draw_cells(np.array([3, 0]), 0, 0, 5, True) is None  # a zero cell
    assert _firstuse._draw_cells(np.array([3.0, 1.0]), 0, 0, 5, True) is None
    monkeypatch.setattr(_firstuse, "_lgamma", None)
    assert _firstuse._draw_cells(np.array([3, 10]), 0, 0, 5, False) is None
    assert _firstuse._draw_cells(np.array([3, 9]), 0, 0, 5, False) is not None
    assert _firstuse._draw_cells(np.array([3, 10]), 0, 0, 5, True) is not None
    matrix = np.array([[5, 20], [1, 30]])
    with paths.twin():
        twin = bootstrap(matrix, "accuracy", n_resamples=50, resampling="poisson")
    assert paths.used["replicate_marginals"] == 0  # declined: the kernel drew
    with paths.kernel():
        assert twin == bootstrap(matrix, "accuracy", n_resamples=50, resampling="poisson")


# ------------------------------------------------------------------ clustered accumulator
def _batch(rng, kind: str, k: int, weighted: bool, integral_weights: bool, dtypes: bool):
    """(y_true, y_pred, weights, cluster_ids) of one randomized batch of ``kind``; with
    ``dtypes``, some batches of narrower label dtypes (each a specialisation the kernel path
    compiles in the test process: the slow grid only)."""
    if kind == "images":  # large items: one K×K matrix per item (the items path)
        y = rng.integers(0, k, size=(3, 40, 40))
        p = np.where(rng.random(y.shape) < 0.7, y, rng.integers(0, k, size=y.shape))
        ids = rng.integers(-5, 5, size=3)
    else:
        n = int(rng.choice([0, 1, 5, 64, 300]))
        if kind == "rows":
            n += 4  # (0, L) labels with (0,) ids are refused before any kernel (IndexError)
        present = int(rng.integers(1, k + 1))  # absent classes
        y = rng.integers(0, present, size=n)
        p = rng.integers(0, k, size=n)
        if kind == "scalar":
            ids = int(rng.integers(-(2**62), 2**62))
        elif kind == "sorted":
            ids = np.sort(rng.integers(-3, 40, size=n))
        elif kind == "samples":
            ids = rng.integers(-3, 5, size=n)
        else:  # "rows": (N, L) labels with one id per row, runs of L samples
            y, p = y[: n - n % 4].reshape(-1, 4), p[: n - n % 4].reshape(-1, 4)
            ids = rng.integers(0, 3, size=y.shape[0])
        if dtypes and rng.random() < 0.2:
            y, p = y.astype(np.int32), p.astype(np.uint8)
    weights = None
    if weighted:
        weights = rng.random(y.shape) * 10.0 ** rng.integers(-6, 7, size=y.shape)
        if weights.size and rng.random() < 0.3:
            weights.reshape(-1)[0] = 0.0
    elif integral_weights:
        weights = rng.integers(0, 4, size=y.shape).astype(np.float64)
    return y, p, weights, ids


KINDS = ("scalar", "sorted", "samples", "rows", "images")


def _stream_case(seed: int, dtypes: bool = False):
    rng = np.random.default_rng(seed)
    k = int(rng.choice([2, 3, 10, 37]))
    weighted = bool(rng.random() < 0.35)
    integral = not weighted and rng.random() < 0.25
    config = {
        "num_classes": k,
        "n_resamples": int(rng.choice([2, 7, 100])),
        "seed": int(rng.integers(0, 2**63)),
        "weighted": weighted,
        "ignore_index": int(rng.integers(0, k)) if rng.random() < 0.3 else None,
        "weight_hash": "xor-legacy" if rng.random() < 0.2 else "keyed",
    }
    count = int(rng.integers(1, 5))
    kinds = rng.choice(KINDS, size=count)
    batches = [_batch(rng, str(kind), k, weighted, integral, dtypes) for kind in kinds]
    return config, batches


def _count(config, batches) -> BootstrapConfusionAccumulator:
    acc = BootstrapConfusionAccumulator(**config)
    for y, p, w, ids in batches:
        acc.update(y, p, w, cluster_ids=ids)
    return acc


@pytest.mark.parametrize("seed", range(24))
def test_accumulator_state_is_the_kernels(paths, seed, dtypes=False):
    config, batches = _stream_case(seed, dtypes)
    with paths.twin():
        twin = _count(config, batches)
    with paths.kernel():
        kernel = _count(config, batches)
    assert same_state(twin, kernel)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(24, 300))
def test_accumulator_state_is_the_kernels_grid(paths, seed):
    test_accumulator_state_is_the_kernels(paths, seed, dtypes=True)


def test_every_clustered_route_used_the_twin(paths):
    for seed in range(24):
        config, batches = _stream_case(seed)
        with paths.twin():
            _count(config, batches)
    assert paths.used["add_cluster_matrix"] and paths.used["add_clusters"]


def test_scan_and_tracked_flushes(paths):
    """Long runs over few cells (the kernel scans every cell) and short runs over many (it
    tracks the touched cells), weighted and not, undone by ``sign`` -1."""
    rng = np.random.default_rng(3)
    for k, runs in ((2, 3), (30, 200)):
        y = rng.integers(0, k, 400)
        p = rng.integers(0, k, 400)
        ids = np.repeat(np.arange(runs), -(-400 // runs))[:400]
        for dtype in (np.int64, np.float64):
            weights = None if dtype == np.int64 else rng.random(400)
            for scan in (True, False):
                for sign in (1, -1):
                    states = []
                    for twin in (True, False):
                        replicates = np.zeros((9, k * k), dtype=dtype)
                        args = (y, p, weights, ids, 1, 0, False, k, np.uint64(5), np.uint64(6))
                        args += (False, replicates, np.zeros(k * k, dtype=dtype))
                        args += (np.empty(k * k, dtype=np.int64), scan, sign)
                        if twin:
                            with paths.twin():
                                assert _firstuse.add_clusters(*args) == runs
                        else:
                            assert _kernels.add_clusters(*args) == runs
                        states.append(replicates)
                    assert same_bits(*states)


@given(
    data=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 6)), max_size=80),
    cuts=st.lists(st.integers(0, 80), max_size=4),
    seed=st.integers(0, 2**64 - 1),
)
def test_any_split_counted_by_the_twin_is_the_kernels_whole(data, cuts, seed):
    """Integer counts: the twin over any split of a stream into batches ends where the kernel
    ends on the whole stream (a cluster spanning batches keeps its weights)."""
    y = np.array([d[0] for d in data], dtype=np.int64)
    p = np.array([d[1] for d in data], dtype=np.int64)
    ids = np.array([d[2] for d in data], dtype=np.int64)
    bounds = sorted({0, len(data), *[min(c, len(data)) for c in cuts]})
    patches = pytest.MonkeyPatch()  # hypothesis runs many examples per function fixture
    paths = Paths(patches)
    try:
        with paths.twin():
            twin = BootstrapConfusionAccumulator(4, n_resamples=5, seed=seed)
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                twin.update(y[lo:hi], p[lo:hi], cluster_ids=ids[lo:hi])
        with paths.kernel():
            kernel = BootstrapConfusionAccumulator(4, n_resamples=5, seed=seed)
            kernel.update(y, p, cluster_ids=ids)
    finally:
        patches.undo()
    assert same_state(twin, kernel)


def test_switching_from_twin_to_kernel_mid_stream(paths):
    for seed in range(6):
        config, batches = _stream_case(100 + seed)
        batches = batches * 2
        mixed = BootstrapConfusionAccumulator(**config)
        for index, (y, p, w, ids) in enumerate(batches):
            path = paths.twin if index < len(batches) // 2 else paths.kernel
            with path():
                mixed.update(y, p, w, cluster_ids=ids)
        with paths.kernel():
            assert same_state(mixed, _count(config, batches))


def test_add_cluster_matrix_refuses_like_the_kernel(paths):
    """A cell that would pass the limit: the twin returns the kernel's cell index and writes
    nothing; within the limit, the same arrays as the kernel."""
    k1, k2 = _kernels.seed_keys(4)
    for dtype, limit in ((np.int64, 100), (np.float64, 100.0)):
        local = np.array([[0, 3], [70, 50]], dtype=dtype)
        results = []
        for twin in (True, False):
            matrix = np.array([[1, 99], [40, 20]], dtype=dtype)
            replicates = np.zeros((6, 4), dtype=dtype)
            args = (local, np.uint64(9), k1, k2, False, replicates, matrix, True, limit)
            if twin:
                with paths.twin():
                    cell = _firstuse.add_cluster_matrix(*args)
            else:
                cell = _kernels.add_cluster_matrix(*args)
            results.append((cell, matrix, replicates))
        (cell, matrix, replicates), (kernel_cell, kernel_matrix, kernel_replicates) = results
        assert cell == kernel_cell == 1
        assert same_bits(matrix, kernel_matrix) and same_bits(replicates, kernel_replicates)
        assert not replicates.any() and matrix[0, 1] == 99


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        (([0, 9], [0, 1]), ValueError, "holds label 9 at position 1"),
        (([0, 1], [0, 1], [1.0, -2.0]), ValueError, "weights"),
        (([0, 1], [0, 1], [1.0, np.nan]), ValueError, "weights"),
        (([0, 1], [0, 1], [1.0, 0.5]), ValueError, "weights"),
        (([0, 1, 1], [0, 1, 0], None, [1, 2]), ValueError, "`cluster_ids` has shape"),
        (([0, 1], [0, 1], None, [1.5, 2.0]), TypeError, "must hold integers"),
    ],
)
def test_errors_are_worded_as_without_the_twin(paths, arguments, error, match):
    """What the kernel path refuses, the twin path refuses with the same message, and the state
    stays bit for bit as it was."""
    y, p, *rest = arguments
    weights = rest[0] if rest else None
    ids = rest[1] if len(rest) > 1 else 7
    messages = []
    for path in (paths.twin, paths.kernel):
        acc = BootstrapConfusionAccumulator(3, n_resamples=4, seed=1)
        with path():
            acc.update([0, 1, 2], [0, 2, 2], cluster_ids=np.array([1, 1, 2]))
            before = {n: a.copy() for n, a in acc.state_arrays().items()}
            with pytest.raises(error, match=match) as raised:
                acc.update(y, p, weights, cluster_ids=ids)
        messages.append(str(raised.value))
        assert all(same_bits(before[n], a) for n, a in acc.state_arrays().items())
    assert messages[0] == messages[1]


def test_count_limit_is_worded_as_without_the_twin(paths):
    from metricstream.bootstrap.accumulator import count_limit

    messages = []
    for path in (paths.twin, paths.kernel):
        acc = BootstrapConfusionAccumulator(2, n_resamples=2)
        with acc.exclusive_state() as arrays:
            arrays["matrix"][0, 0] = count_limit(2) - 1
        before = {n: a.copy() for n, a in acc.state_arrays().items()}
        with path(), pytest.raises(ValueError, match="nothing was counted") as raised:
            acc.update([0, 1], [0, 1], cluster_ids=[4, 5])
        messages.append(str(raised.value))
        assert all(same_bits(before[n], a) for n, a in acc.state_arrays().items())
        with path():
            acc.update([1], [0], cluster_ids=3)  # up to the limit still counts
        assert acc.matrix.sum() == count_limit(2)
    assert messages[0] == messages[1]


def test_clustered_declined(paths):
    """What the twin does not count exactly is left to the kernel, nothing written."""
    k1, k2 = _kernels.seed_keys(0)
    y = np.array([0, 1, 1])
    replicates = np.zeros((3, 4), dtype=np.int64)
    scratch = np.zeros(4, dtype=np.int64)
    touched = np.empty(4, dtype=np.int64)
    base = (np.array([1, 1, 2]), 1, 0, False, 2, k1, k2, False, replicates, scratch, touched)
    with paths.twin():
        # float labels; bool labels with an ignore index; too many runs
        assert _firstuse.add_clusters(y.astype(float), y, None, *base, True, 1) is None
        flags = np.array([False, True, True])
        bools = (np.array([1, 1, 2]), 1, 0, True, *base[4:])
        assert _firstuse.add_clusters(flags, flags, None, *bools, True, 1) is None
        n = _firstuse.MAX_RUNS + 1
        runs = (np.arange(n), *base[1:])
        labels = np.zeros(n, dtype=np.int64)
        assert _firstuse.add_clusters(labels, labels, None, *runs, True, 1) is None
        # float weights into int64 counts whose sum is not exact in float64
        heavy = np.full(3, 2.0**51)
        assert _firstuse.add_clusters(y, y, heavy, *base, True, 1) is None
        # weights the caller refuses (negative, NaN), or fractional into int64 counts
        for bad in ([1.0, -1.0, 1.0], [1.0, np.nan, 1.0], [1.0, 0.5, 1.0]):
            assert _firstuse.add_clusters(y, y, np.array(bad), *base, True, 1) is None
        assert not replicates.any()
        assert _firstuse.add_clusters(y, y, np.ones(3), *base, True, 1) == 2
    assert replicates.any() and not scratch.any()


def test_warm_calls_do_not_use_the_twin(paths):
    """Once compiled (as here, in the test process), the twin steps aside after one check."""
    assert warmup.wait(timeout=600)  # no compile queued by an earlier test is running
    y, p = np.array([0, 1, 1, 2]), np.array([0, 1, 2, 2])
    acc = BootstrapConfusionAccumulator(3, n_resamples=5)
    warmup._enabled = True
    with paths.kernel():
        acc.update(y, p, cluster_ids=1)  # compiled (or loaded) at the call
        acc.update(y, p, cluster_ids=np.array([1, 1, 2, 2]))
        bootstrap(acc.matrix, "accuracy", n_resamples=20)
    warmup._enabled = True
    acc.update(y, p, cluster_ids=1)
    acc.update(y, p, cluster_ids=np.array([1, 1, 2, 2]))
    bootstrap(acc.matrix, "accuracy", n_resamples=20)
    assert not paths.used
    assert len(_firstuse._ready) == 3


# ------------------------------------------------------------------ a fresh process
FIRST_USE = """
import json, sys
import numpy as np
from metricstream import BootstrapConfusionAccumulator
from metricstream.bootstrap import _kernels, bootstrap
from metricstream._core import warmup

matrix = np.array([[50, 3, 2], [4, 40, 6], [1, 5, 39]])
rng = np.random.default_rng(0)
y, p = rng.integers(0, 3, 300), rng.integers(0, 3, 300)
ids = np.sort(rng.integers(0, 30, 300))

def run():
    acc = BootstrapConfusionAccumulator(3, n_resamples=50, seed=1)
    acc.update(y[:100], p[:100], cluster_ids=7)
    acc.update(y, p, cluster_ids=ids)
    result = bootstrap(matrix, "f1", average="macro", n_resamples=200, seed=2)
    curve = bootstrap(matrix, lambda m: m[0, 0] / m.sum(), n_resamples=200, seed=2)
    return {
        "replicates": acc.replicates.tolist(),
        "draws": result.replicates.tolist(),
        "cells": curve.replicates.tolist(),
    }

kernels = ("add_cluster_matrix", "add_clusters", "replicate_marginals", "replicate_cells")
first = run()
first["compiled at return"] = [bool(getattr(_kernels, k).overloads) for k in kernels]
first["busy"] = warmup.busy()
first["finished"] = warmup.wait(timeout=900)
first["errors"] = [repr(job.error) for job in warmup.jobs() if job.error is not None]
first["compiled after"] = [bool(getattr(_kernels, k).overloads) for k in kernels]
again = run()
first["same after"] = all(first[key] == again[key] for key in again)
print(json.dumps(first))
"""


@pytest.mark.slow
def test_first_calls_return_before_the_compiles_with_the_kernels_numbers(tmp_path):
    """Empty Numba cache: the first update and bootstrap return drawn and counted by the twin,
    with no kernel compiled yet and the compiles running; once they finish the kernels give
    the same numbers."""
    result = run_first_use(FIRST_USE, str(tmp_path), quiet=False)
    assert result["compiled at return"] == [False] * 4
    assert result["busy"] and result["finished"] and not result["errors"]
    assert result["compiled after"] == [True] * 4
    assert result["same after"]
