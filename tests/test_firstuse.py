"""First use without waiting for a compile: the confusion kernels' numpy twin and the background
compile that replaces it (metricstream._core.warmup, metricstream.confusion._firstuse).

The twin must leave exactly the state the kernel leaves (integer counts equal, float64 sums equal
bit for bit) on randomized batches with weights, ignore_index and corner cases; decline (leave the
matrix untouched) every batch the kernel would refuse, so that the kernel words the error; and a
stream counted partly by the twin and partly by the kernel must end where the kernel alone ends.
Subprocesses with an empty Numba cache show the first update counting without a compile, the
compile finishing in the background and taking over, and the process exiting cleanly mid-compile.
"""

from __future__ import annotations

import inspect
import math
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from metricstream import ConfusionAccumulator
from tests.first_use_process import run_first_use

warmup = pytest.importorskip("metricstream._core.warmup")
_firstuse = pytest.importorskip("metricstream.confusion._firstuse")
_dispatch = pytest.importorskip("metricstream.confusion._dispatch")


# This module tests first use: background compiles on (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("background_compiles_on")


NAN = math.nan
HAS_LOGITS = pytest.mark.skipif(
    "logits" not in inspect.signature(ConfusionAccumulator).parameters,
    reason="this ConfusionAccumulator has no `logits` setting",
)


@pytest.fixture
def kernel_only(monkeypatch):
    """Background compiles off: every batch goes to the kernel (compiled at the call)."""
    monkeypatch.setattr(warmup, "_enabled", False)


@pytest.fixture
def twin_only(monkeypatch):
    """Every route reported as compiling: batches the twin accepts are counted by it; the
    returned list holds one entry per batch the twin counted."""
    used: list[int] = []
    count = _firstuse.count

    def counting(out, batch, ignore_index, total):
        result = count(out, batch, ignore_index, total)
        if result is not None:
            used.append(batch.size)
        return result

    monkeypatch.setattr(warmup, "_enabled", True)
    monkeypatch.setattr(warmup, "defer", lambda routes: True)
    monkeypatch.setattr(_firstuse, "_ready", set())
    monkeypatch.setattr(_firstuse, "_last", (False,) * 6 + (None,))
    monkeypatch.setattr(_firstuse, "count", counting)
    for name in SMALL_REGISTRIES:
        monkeypatch.setattr(_dispatch, name, getattr(_dispatch, name))
    forget_small_entries()
    return used


# The small-batch paths' registries of compiled entry points (a fresh process starts empty).
SMALL_REGISTRIES = (
    "_small_entries",
    "_last_small",
    "_threshold_entries",
    "_last_threshold",
    "_tensor_entries",
    "_last_tensors",
)


def forget_small_entries() -> None:
    """As in a process that has not compiled the small-batch entries yet."""
    _dispatch._small_entries = {}
    _dispatch._last_small = (None, None, -1, None)
    _dispatch._threshold_entries = {}
    _dispatch._last_threshold = (None, None, None)
    _dispatch._tensor_entries = {}
    _dispatch._last_tensors = (None, None, -1, None, None, None, 0)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and bit pattern (float64 sums: rounding included)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def kernel_count(out, batch, ignore_index, total=NAN):
    saved = warmup._enabled
    warmup._enabled = False
    try:
        return _dispatch.count_batch(out, batch, ignore_index, total)
    finally:
        warmup._enabled = saved


# ------------------------------------------------------------------ random batches
SIZES = (0, 1, 7, 255, 256, 257, 1000, 4099)


def _weights(rng, size, integral):
    if integral:
        return rng.integers(0, 6, size=size).astype(np.float64)
    # Magnitudes over many orders, so that the order of the additions shows in the rounding.
    return rng.random(size) * 10.0 ** rng.integers(-8, 8, size=size)


def make_case(rng, case: str):
    """(accumulator, y_true, y_pred, weights, initial matrix) for one randomized batch."""
    size = int(rng.choice(SIZES))
    k = int(rng.choice((2, 3, 10, 37)))
    ignore = int(rng.integers(0, k)) if rng.random() < 0.4 else None
    weighted = case.endswith("weighted")
    present = rng.integers(1, k + 1)  # absent classes: labels drawn from the first few
    y_true = rng.integers(0, present, size=size)
    weights = None
    if "weights" in case or weighted:
        weights = _weights(rng, size, integral=not weighted)
    if case.startswith("labels"):
        acc = ConfusionAccumulator(k, ignore_index=ignore, weighted=weighted)
        y_pred = rng.integers(0, k, size=size)
    elif case.startswith("logits"):
        dtype = np.float32 if "float32" in case else np.float64
        acc = ConfusionAccumulator(k, ignore_index=ignore, weighted=weighted)
        # Rounded scores: ties (first maximum wins), signed zeros and infinities.
        y_pred = np.round(rng.normal(size=(size, k)), 1).astype(dtype)
        if size:
            y_pred[rng.random(size=(size, k)) < 0.05] = -0.0
            y_pred[rng.random(size=(size, k)) < 0.02] = np.inf
            y_pred[rng.random(size=(size, k)) < 0.02] = -np.inf
    elif case.startswith("masks"):
        acc = ConfusionAccumulator(k, ignore_index=ignore)
        side = int(rng.integers(1, 5))
        y_true = rng.integers(0, present, size=(size // side, side))
        y_pred = np.round(rng.normal(size=(size // side, k, side)), 1).astype(np.float32)
        if weights is not None:
            weights = weights[: y_true.size].reshape(y_true.shape)
    else:  # binary scores against a threshold
        threshold = float(rng.choice((0.5, 0.3, 0.1)))
        ignore = None
        y_true = rng.integers(0, 2, size=size)
        if "logits" in case:
            acc = ConfusionAccumulator(2, threshold=threshold, logits=True, weighted=weighted)
            y_pred = np.round(rng.normal(size=size) * 3, 1)
            y_pred[:1] = -5.0  # never all in [0, 1] (that is counted with a warning)
        else:
            acc = ConfusionAccumulator(2, threshold=threshold, weighted=weighted)
            # Scores on and around the threshold, including float32 values just below it.
            y_pred = np.round(rng.random(size), 1).astype(np.float32)
    initial = np.zeros(
        (acc.num_classes, acc.num_classes), dtype=np.float64 if weighted else np.int64
    )
    if rng.random() < 0.5:
        if weighted:
            initial[...] = rng.random(initial.shape) * 1e3
        else:
            initial[...] = rng.integers(0, 1000, size=initial.shape)
    return acc, y_true, y_pred, weights, initial


CASES = (
    "labels",
    "labels weights",
    "labels weighted",
    "logits float32",
    "logits float64",
    "logits float32 weighted",
    "masks",
    "binary",
    "binary weights",
    pytest.param("binary logits", marks=HAS_LOGITS),
)


@pytest.mark.parametrize("case", CASES)
def test_twin_state_is_the_kernels(case):
    """The twin's matrix equals the kernel's bit for bit; its bound is an upper bound."""
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    for _ in range(12):
        acc, y_true, y_pred, weights, initial = make_case(rng, case)
        batch = acc._prepare(y_true, y_pred, weights)
        twin = initial.copy()
        kernel = initial.copy()
        total = NAN if rng.random() < 0.5 else float(initial.sum()) * (1 + 1e-12)
        bound = _firstuse.count(twin, batch, acc.ignore_index, total)
        assert bound is not None, (case, batch.kind, y_true.dtype, y_pred.dtype)
        kernel_count(kernel, batch, acc.ignore_index, total)
        assert same_bits(twin, kernel), case
        assert bound >= float(kernel.sum())


def test_twin_worked_example():
    """A hand-checked batch: ignored pairs skipped, ties to the first maximum, weights summed."""
    acc = ConfusionAccumulator(3, ignore_index=2)
    logits = np.array([[1, 1, 0], [0, 2, 2], [5, 0, 0], [0, 0, 1]], dtype=np.float32)
    batch = acc._prepare(np.array([0, 1, 2, 1]), logits, np.array([1.0, 2.0, 7.0, 3.0]))
    out = np.zeros((3, 3), dtype=np.int64)
    assert _firstuse.count(out, batch, 2, 0.0) == 0.0 + 13.0
    assert out.tolist() == [[1, 0, 0], [0, 2, 3], [0, 0, 0]]


@pytest.mark.parametrize(
    ("y_true", "y_pred", "weights"),
    [
        ([0, 3], [0, 1], None),  # label outside [0, K)
        ([0, -1], [0, 1], None),  # negative label
        ([0, 1], [0, 5], None),  # prediction outside [0, K)
        ([0, 1], [[0.1, np.nan, 0.2], [0.3, 0.2, 0.1]], None),  # NaN score
        ([0, 1], [0, 1], [1.0, -1.0]),  # negative weight
        ([0, 1], [0, 1], [1.0, 0.5]),  # fractional weight into int64 counts
        ([0, 1], [0, 1], [1.0, np.inf]),  # infinite weight
    ],
)
def test_twin_declines_what_the_kernel_words(y_true, y_pred, weights, twin_only):
    """Batches the twin does not count leave the matrix untouched, and the update then raises
    exactly what it raises without the twin (or counts as the kernel counts)."""
    acc = ConfusionAccumulator(3)
    batch = acc._prepare(np.asarray(y_true), np.asarray(y_pred), weights)
    out = np.arange(9, dtype=np.int64).reshape(3, 3)
    assert _firstuse.count(out, batch, None, NAN) is None
    assert out.tolist() == np.arange(9).reshape(3, 3).tolist()

    def outcome(accumulator):
        try:
            accumulator.update(np.asarray(y_true), np.asarray(y_pred), weights)
        except (TypeError, ValueError) as error:
            return type(error), str(error), accumulator.matrix.tolist()
        return None, None, accumulator.matrix.tolist()

    with_twin = outcome(ConfusionAccumulator(3).update([0, 1, 2], [0, 1, 2]))
    warmup._enabled = False
    try:
        without = outcome(ConfusionAccumulator(3).update([0, 1, 2], [0, 1, 2]))
    finally:
        warmup._enabled = True
    assert with_twin == without


def test_cpu_tensors_step_aside_while_compiling(twin_only):
    """CPU torch tensors (read in place by the small-batch path once compiled) are counted by
    the twin through the general path meanwhile, to the kernel's state."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    y = torch.from_numpy(rng.integers(0, 4, size=300))
    logits = torch.from_numpy(rng.normal(size=(300, 4)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 4, size=300))
    twin = ConfusionAccumulator(4).update(y, logits).update(y, labels)
    assert twin_only == [300, 300]
    warmup._enabled = False
    reference = ConfusionAccumulator(4).update(y, logits).update(y, labels)
    assert same_bits(twin.matrix, reference.matrix)


@HAS_LOGITS
@pytest.mark.parametrize(
    ("logits", "scores"),
    [(False, [0.2, 1.5] * 20), (False, [-0.1, 0.5] * 20), (True, [0.2, 0.9] * 20)],
)
def test_twin_declines_scores_the_kernel_refuses_or_warns_about(logits, scores, twin_only):
    """Probabilities outside [0, 1] are refused, and 32 or more logits that all lie in [0, 1]
    are counted with a warning: the kernel does both, the twin neither."""
    acc = ConfusionAccumulator(2, threshold=0.5, logits=logits)
    y_true = np.array([0, 1] * 20)
    batch = acc._prepare(y_true, np.array(scores), None)
    out = np.zeros((2, 2), dtype=np.int64)
    assert _firstuse.count(out, batch, None, NAN) is None
    assert not out.any()
    if logits:
        with pytest.warns(UserWarning):
            acc.update(y_true, np.array(scores))
        assert acc.num_samples == 40
    else:
        with pytest.raises(ValueError, match="probabilities"):
            acc.update(y_true, np.array(scores))
        assert acc.num_samples == 0
    assert twin_only == []


def test_big_batches_queue_the_threads_specialisation_too():
    """A batch that ``_dispatch`` may share between threads also needs the kernel for private
    int32 matrices: it is compiled along."""
    assert _firstuse._PARALLEL_LABELS == _dispatch.PARALLEL_MIN_LABELS
    acc = ConfusionAccumulator(3)
    out = np.zeros((3, 3), dtype=np.int64)
    y = np.zeros(_dispatch.PARALLEL_MIN_LABELS, dtype=np.int64)
    routes = _firstuse._routes(out, acc._prepare(y, y, None), 4, 0)
    matrices = [args[3] if len(args) > 1 else args[0] for _, args in routes]
    assert [matrix.dtype for matrix in matrices] == [np.int64, np.int64, np.int32]
    small = _firstuse._routes(out, acc._prepare(y[:10], y[:10], None), 4, 0)
    assert len(small) == 2


@pytest.mark.slow
@pytest.mark.parametrize("case", ["labels", "logits", "weighted"])
def test_twin_matches_the_kernel_on_batches_shared_between_threads(case):
    """2^17 labels or more: the kernel counts in chunks on several threads (float64 sums as by
    one thread, ``set_num_threads(1)``, whose rounding is the only deterministic one)."""
    rng = np.random.default_rng(11)
    n = _dispatch.PARALLEL_MIN_LABELS + 12345
    y = rng.integers(0, 10, size=n)
    weights = None
    if case == "logits":
        n = _dispatch.PARALLEL_MIN_LABELS // 10 + 77
        y = y[:n]
        y_pred = rng.normal(size=(n, 10)).astype(np.float32)
    else:
        y_pred = rng.integers(0, 10, size=n)
    if case == "weighted":
        weights = rng.random(n) * 10.0 ** rng.integers(-6, 6, size=n)
    acc = ConfusionAccumulator(10, weighted=case == "weighted", ignore_index=3)
    batch = acc._prepare(y, y_pred, weights)
    twin = np.zeros((10, 10), dtype=acc.matrix.dtype)
    kernel = twin.copy()
    assert _firstuse.count(twin, batch, 3, 0.0) is not None
    threads = _dispatch.get_num_threads()
    if case == "weighted":
        _dispatch.set_num_threads(1)
    try:
        kernel_count(kernel, batch, 3, 0.0)
    finally:
        _dispatch.set_num_threads(threads)
    assert same_bits(twin, kernel)


@pytest.mark.parametrize(
    ("y_true", "y_pred", "start"),
    [
        ([0, 1], [1, 1], 2**62),  # near the int64 limit: the kernel's exact path decides
        ([0.0, 1.0], [1, 1], 0),  # float labels
        ([0, 1], np.array([[0.1, 0.2], [0.3, 0.1]], dtype=np.float16), 0),  # half precision
    ],
)
def test_left_to_the_kernel(y_true, y_pred, start):
    acc = ConfusionAccumulator(2)
    batch = acc._prepare(np.array(y_true), np.asarray(y_pred), None)
    out = np.array([[start, 0], [0, 0]], dtype=np.int64)
    assert _firstuse.count(out, batch, None, NAN) is None
    assert out.tolist() == [[start, 0], [0, 0]]


@st.composite
def streams(draw):
    kind = draw(st.sampled_from(("labels", "logits", "binary", "weighted")))
    seed = draw(st.integers(0, 2**32 - 1))
    lengths = draw(st.lists(st.integers(0, 300), min_size=1, max_size=6))
    switch = draw(st.integers(0, len(lengths)))
    ignore = draw(st.sampled_from((None, 0, 3)))
    return kind, seed, lengths, switch, ignore


def _stream_batches(kind, seed, lengths):
    rng = np.random.default_rng(seed)
    for n in lengths:
        y = rng.integers(0, 4 if kind != "binary" else 2, size=n)
        if kind == "logits":
            yield y, np.round(rng.normal(size=(n, 4)), 1).astype(np.float32), None
        elif kind == "binary":
            yield y, rng.random(n), None
        elif kind == "weighted":
            yield y, rng.integers(0, 4, size=n), rng.random(n) * 10.0 ** rng.integers(-5, 5)
        else:
            yield y, rng.integers(0, 4, size=n), None


def _accumulator(kind, ignore):
    if kind == "binary":
        return ConfusionAccumulator(2, threshold=0.5)
    return ConfusionAccumulator(4, ignore_index=ignore, weighted=kind == "weighted")


@given(streams())
def test_switch_from_twin_to_kernel_mid_stream(stream):
    """The first batches counted by the twin, the rest by the kernel: the state of the kernel
    alone, bit for bit, through ``update`` (the small-batch paths step aside to the twin)."""
    kind, seed, lengths, switch, ignore = stream
    saved = (warmup._enabled, warmup.defer, _firstuse._ready, _firstuse.count, _firstuse._last)
    registries = {name: getattr(_dispatch, name) for name in SMALL_REGISTRIES}
    try:
        warmup._enabled = False
        reference = _accumulator(kind, ignore)
        for batch in _stream_batches(kind, seed, lengths):
            reference.update(*batch)
        used: list[int] = []

        def counting(out, batch, ignore_index, total):
            result = saved[3](out, batch, ignore_index, total)
            used.append(batch.size)
            return result

        mixed = _accumulator(kind, ignore)
        warmup._enabled = True
        warmup.defer = lambda routes: True  # type: ignore[assignment]
        _firstuse._ready = set()
        _firstuse._last = (False,) * 6 + (None,)
        _firstuse.count = counting  # type: ignore[assignment]
        forget_small_entries()
        for position, batch in enumerate(_stream_batches(kind, seed, lengths)):
            if position == switch:
                warmup.defer = saved[1]  # type: ignore[assignment]
                warmup._enabled = False
            mixed.update(*batch)
        counted = [n for n in lengths[:switch] if n]
        assert used == counted
        assert same_bits(mixed.matrix, reference.matrix)
        assert mixed.num_samples == reference.num_samples
        # Shards, one counted by the twin and one by the kernel, merge to the same counts
        # (float64 sums are added in another order than in one stream: equal within rounding).
        warmup.defer = lambda routes: True  # type: ignore[assignment]
        warmup._enabled = True
        _firstuse._ready = set()
        _firstuse._last = (False,) * 6 + (None,)
        forget_small_entries()
        batches = list(_stream_batches(kind, seed, lengths))
        by_twin = _accumulator(kind, ignore)
        for batch in batches[:switch]:
            by_twin.update(*batch)
        warmup._enabled = False
        by_kernel = _accumulator(kind, ignore)
        for batch in batches[switch:]:
            by_kernel.update(*batch)
        merged = by_twin.merge(by_kernel)
        if kind != "weighted":
            assert same_bits(merged.matrix, reference.matrix)
        else:
            np.testing.assert_allclose(merged.matrix, reference.matrix, rtol=1e-12, atol=0)
    finally:
        warmup._enabled, warmup.defer, _firstuse._ready, _firstuse.count, _firstuse._last = saved
        for name, value in registries.items():
            setattr(_dispatch, name, value)


# ------------------------------------------------------------------ the machinery
def test_background_compile_takes_over():
    """A kernel not yet compiled is deferred and queued once; the worker compiles it; then it is
    no longer deferred."""
    numba = pytest.importorskip("numba")

    @numba.njit
    def plus_one(x):
        return x + 1

    assert warmup.defer(((plus_one, (1,)),)) is True
    assert warmup.defer(((plus_one, (2,)),)) is True  # the same signature: queued once
    mine = [job for job in warmup.jobs() if job.kernel is plus_one]
    assert len(mine) == 1
    assert warmup.wait(timeout=120)
    assert mine[0].done.is_set() and mine[0].error is None
    assert warmup.compiled(plus_one, warmup.signature((1,)))
    assert warmup.defer(((plus_one, (1,)),)) is False
    assert plus_one(1) == 2


def test_failed_compile_is_kept_and_the_call_compiles():
    numba = pytest.importorskip("numba")

    @numba.njit
    def untypable(x):
        return x.no_such_attribute

    assert warmup.defer(((untypable, (1,)),)) is True
    assert warmup.wait(timeout=120)
    (job,) = [job for job in warmup.jobs() if job.kernel is untypable]
    assert job.error is not None
    # Not deferred again: the call compiles and raises the error itself.
    assert warmup.defer(((untypable, (1,)),)) is False
    with pytest.raises(numba.core.errors.TypingError):
        untypable(1)


def test_switch_off(kernel_only):
    numba = pytest.importorskip("numba")

    @numba.njit
    def plus_two(x):
        return x + 2

    assert warmup.defer(((plus_two, (1,)),)) is False
    assert not [job for job in warmup.jobs() if job.kernel is plus_two]
    with pytest.raises(TypeError, match="flag"):
        warmup.set_enabled("no")  # type: ignore[arg-type]


def test_on_disk_cache_is_loaded_at_the_call():
    """A specialisation in Numba's cache is not deferred (loading it is cheap)."""
    from metricstream.confusion import _kernels

    out = np.zeros((2, 2), dtype=np.int64)
    ConfusionAccumulator(2).update([0, 1], [1, 1])  # compiled or loaded by now
    types = warmup.signature((out,))
    assert warmup.compiled(_kernels.matrix_total, types)
    if warmup.cached_on_disk(_kernels.matrix_total, types):
        assert warmup.defer(((_kernels.matrix_total, (out,)),)) is warmup.busy()


# ------------------------------------------------------------------ fresh processes
FIRST_USE = """
import json, sys, time
import numpy as np
from metricstream import ConfusionAccumulator
from metricstream._core import warmup
from metricstream.confusion import _dispatch
rng = np.random.default_rng(0)
y, p = rng.integers(0, 10, size=256), rng.integers(0, 10, size=256)
logits = rng.normal(size=(256, 10)).astype(np.float32)
acc = ConfusionAccumulator(10).update(y, p)
scores = ConfusionAccumulator(10).update(y, logits)
first = {
    "small": len(_dispatch._small_entries),
    "jobs": [repr(job) for job in warmup.jobs()],
    "running": warmup.busy(),
    "matrix": acc.matrix.tolist(),
    "scores": scores.matrix.tolist(),
}
if sys.argv[1] == "exit":
    time.sleep(float(sys.argv[2]))
    first["still running"] = warmup.busy()
    print(json.dumps(first))
    raise SystemExit(0)
first["finished"] = warmup.wait(timeout=600)
first["errors"] = [repr(job.error) for job in warmup.jobs() if job.error is not None]
acc.update(y, p)
scores.update(y, logits)
first["small after"] = len(_dispatch._small_entries)
first["matrix after"] = acc.matrix.tolist()
first["scores after"] = scores.matrix.tolist()
print(json.dumps(first))
"""


def run_fresh(cache: str | None, *args: str, background: bool = True) -> dict:
    """FIRST_USE in a new interpreter with Numba's cache in ``cache`` (None: this environment's)."""
    return run_first_use(FIRST_USE, cache, *args, background=background)


def expected_matrices():
    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 10, size=256), rng.integers(0, 10, size=256)
    logits = rng.normal(size=(256, 10)).astype(np.float32)
    labels = np.bincount(y * 10 + p, minlength=100).reshape(10, 10)
    scores = np.bincount(y * 10 + logits.argmax(axis=1), minlength=100).reshape(10, 10)
    return labels.tolist(), scores.tolist()


@pytest.mark.slow
def test_first_update_counts_while_compiling_and_exits_cleanly(tmp_path):
    """Empty cache: the first updates return counted by the twin (no kernel registered) with the
    compiles queued, and the process exits cleanly (rc 0, nothing on stderr) mid-compile."""
    result = run_fresh(str(tmp_path), "exit", "0.5")
    labels, scores = expected_matrices()
    assert result["matrix"] == labels
    assert result["scores"] == scores
    assert result["small"] == 0  # the compiled small-batch entries were not used
    assert any("count_labels" in job for job in result["jobs"])
    assert any("count_argmax_rows" in job for job in result["jobs"])
    assert result["running"] and result["still running"]


@pytest.mark.slow
@pytest.mark.parametrize("delay", ["0", "3"])
def test_exit_at_other_moments_of_a_compile(tmp_path, delay):
    result = run_fresh(str(tmp_path), "exit", delay)
    assert result["matrix"] == expected_matrices()[0]


@pytest.mark.slow
def test_fresh_cache_compiles_in_background_then_kernels_count(tmp_path):
    cache = str(tmp_path)
    labels, scores = expected_matrices()
    cold = run_fresh(cache, "wait")
    assert cold["small"] == 0 and cold["jobs"] and cold["finished"] and not cold["errors"]
    assert cold["small after"] == 2  # both small-batch kernels now registered
    assert cold["matrix after"] == (2 * np.array(labels)).tolist()
    assert cold["scores after"] == (2 * np.array(scores)).tolist()
    # The same cache, a new process: loaded from disk at the first call, nothing queued.
    warm = run_fresh(cache, "wait")
    assert warm["small"] == 2 and warm["jobs"] == []
    assert warm["matrix"] == labels and warm["scores"] == scores


@pytest.mark.slow
def test_switched_off_compiles_at_the_call(tmp_path):
    result = run_fresh(str(tmp_path), "wait", background=False)
    assert result["small"] == 2 and result["jobs"] == []
    assert result["matrix"] == expected_matrices()[0]


def test_warm_up_runs_every_input_kind_with_background_compiles_off(monkeypatch, capsys):
    """Each input kind runs on the calling thread (background off meanwhile, restored after);
    one that fails is reported and the others still run; the command's status says so."""
    from metricstream import cli

    seen: list[bool] = []

    def fails() -> None:
        raise RuntimeError("no compiler")

    monkeypatch.setattr(warmup, "_enabled", True)
    monkeypatch.setattr(
        warmup,
        "_scenarios",
        lambda: {"first": lambda: seen.append(warmup.enabled()), "second": fails, "third": list},
    )
    assert warmup.warm_up() == (3, ["second"])
    assert seen == [False] and warmup.enabled()
    assert cli.main(["warm-up"]) == 1
    captured = capsys.readouterr()
    assert "second: failed: RuntimeError: no compiler" in captured.err
    assert "first: " in captured.err and "third: " in captured.err
    assert "2 of 3 input kinds" in captured.out
    monkeypatch.setattr(warmup, "_scenarios", lambda: {"only": list})
    assert cli.main(["warm-up"]) == 0


@pytest.mark.slow
def test_warm_up_command():
    """``python -m metricstream warm-up`` leaves a cache from which first updates load.

    It warms this environment's own cache (compiling into an empty one costs a few minutes of
    CPU; what is cached already is loaded): whatever was there before, a new process's first
    updates then find every kernel they need."""
    done = subprocess.run(
        [sys.executable, "-m", "metricstream", "warm-up"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    assert "confusion: int64 labels" in done.stderr
    assert "failed" not in done.stderr
    assert "input kinds compiled" in done.stdout
    warm = run_fresh(None, "wait")
    assert warm["small"] == 2 and warm["jobs"] == []
