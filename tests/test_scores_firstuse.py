"""First use without waiting for a compile: the score kernels' numpy twin
(metricstream.scores._firstuse) and the background compile that replaces it.

The twin must leave exactly the state the kernel leaves (integer counts equal; confidence,
Brier, log-loss and weighted sums equal bit for bit) on randomized batches of every input kind
(binary, multiclass probabilities on both counting kernels, multiclass logits, multilabel), with
weights, ignore_index, explicit thresholds, absent classes, ties and extreme scores; decline
(leave the state untouched) every batch the kernel refuses or warns about, so that the kernel
words it; and a stream counted partly by the twin and partly by the kernel must end where the
kernel alone ends. Its exp, log1p and layouts equal the kernels'. A fresh process with an empty
Numba cache counts its first updates before the compiles finish, to the kernels' numbers.
"""

from __future__ import annotations

import contextlib
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from metricstream import ScoreAccumulator
from metricstream.base import AccumulatorGroup
from tests.first_use_process import run_first_use

warmup = pytest.importorskip("metricstream._core.warmup")
_firstuse = pytest.importorskip("metricstream.scores._firstuse")
_k = pytest.importorskip("metricstream.scores._kernels")
_accumulator = pytest.importorskip("metricstream.scores.accumulator")


# This module tests first use: background compiles on (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("background_compiles_on")


@contextlib.contextmanager
def twin_mode(used: list | None = None):
    """Every kernel reported as compiling: the batches the twin accepts are counted by it
    (``used`` receives each call's answer)."""
    names = ("_ready", "_last", "_weights_ready", "_bin_index_ready", "count")
    saved = (warmup._enabled, warmup.defer, *(getattr(_firstuse, name) for name in names))
    count = _firstuse.count

    def counting(acc, arrays, batch, log):
        result = count(acc, arrays, batch, log)
        if used is not None:
            used.append(result)
        return result

    warmup._enabled = True
    warmup.defer = lambda routes: True
    fresh = (set(), (), set(), set(), counting)
    for name, value in zip(names, fresh, strict=True):
        setattr(_firstuse, name, value)
    try:
        yield
    finally:
        warmup._enabled, warmup.defer = saved[:2]
        for name, value in zip(names, saved[2:], strict=True):
            setattr(_firstuse, name, value)


@contextlib.contextmanager
def kernel_mode():
    """Background compiles off: every batch goes to the kernel (compiled at the call)."""
    saved = warmup._enabled
    warmup._enabled = False
    try:
        yield
    finally:
        warmup._enabled = saved


def same_state(a: ScoreAccumulator, b: ScoreAccumulator) -> list[str]:
    """The state arrays whose dtype, shape or bits differ."""
    left, right = a.state_arrays(), b.state_arrays()
    return [
        name
        for name in left
        if left[name].dtype != right[name].dtype or left[name].tobytes() != right[name].tobytes()
    ]


# ------------------------------------------------------------------ random batches
SIZES = (0, 1, 7, 255, 256, 257, 1000, 4099)


def _labels(rng, size, classes, ignore, dtype=np.int64):
    present = int(rng.integers(1, classes + 1))  # absent classes: the first few only
    labels = rng.integers(0, present, size=size)
    if ignore is not None and size:
        labels[rng.random(size) < 0.2] = ignore
    return labels.astype(dtype)


def _probability_rows(rng, size, classes, dtype):
    """Rows summing to one: small integer shares (ties, exact zeros), one-hot rows, uniform
    rows and float16-rounded random rows."""
    shares = rng.integers(0, 4, size=(size, classes)).astype(np.float64)
    empty = shares.sum(axis=1) == 0
    shares[empty, 0] = 1.0
    rows = shares / shares.sum(axis=1, keepdims=True)
    kind = rng.integers(0, 4, size=size)
    one_hot = np.eye(classes)[rng.integers(0, classes, size=size)]
    rows[kind == 1] = one_hot[kind == 1]
    rows[kind == 2] = 1.0 / classes
    noise = rng.random((size, classes)) ** 3
    noise = (noise / noise.sum(axis=1, keepdims=True)).astype(np.float16).astype(np.float64)
    rows[kind == 3] = noise[kind == 3]
    return rows.astype(dtype)


def _binary_scores(rng, size, dtype):
    scores = rng.random(size)
    special = np.array([0.0, 1.0, -0.0, 0.5, 1 - 2.0**-24, 2.0**-149, 0.25, 1e-30, 0.999])
    pick = rng.random(size) < 0.3
    scores[pick] = rng.choice(special, size=int(pick.sum()))
    return scores.astype(dtype)


def _logits(rng, shape, dtype):
    scores = np.round(rng.normal(size=shape) * 3, 1)
    scores[rng.random(shape) < 0.05] = -0.0
    scores[rng.random(shape) < 0.03] = -np.inf
    scores[rng.random(shape) < 0.02] = 1e30 if dtype == np.float32 else 1e300
    scores[rng.random(shape) < 0.02] = -1e30
    return scores.astype(dtype)


def make_settings(rng, case: str) -> dict:
    """The accumulator settings of ``case``, randomized."""
    logits = "logits" in case
    ignore = int(rng.choice((-100, 0, 1))) if rng.random() < 0.4 else None
    settings_: dict = {"ignore_index": ignore, "weighted": "weighted" in case, "logits": logits}
    if case.startswith("binary"):
        settings_.update(task="binary", ignore_index=None)
    elif case.startswith("multilabel"):
        settings_.update(task="multilabel", num_classes=int(rng.choice((1, 3, 7))))
    else:
        sizes = (17, 37) if "wide" in case else (2, 3, 10, 16)
        if logits:
            sizes = (2, 3, 10, 37)
        settings_.update(task="multiclass", num_classes=int(rng.choice(sizes)))
    if "thresholds" not in case and rng.random() < 0.3:  # other key layouts
        settings_["bins"] = int(rng.choice((16, 64, 1024, 1 << 17)))
    if "thresholds" in case:
        if logits and settings_["task"] != "multiclass":
            settings_["thresholds"] = np.sort(rng.normal(size=7) * 2)
        else:
            settings_["thresholds"] = np.r_[0.0, np.sort(rng.random(6)), 1.0]
    return settings_


def make_batch(rng, case: str, settings_: dict):
    """(y_true, y_pred, weights) of one randomized batch of ``case`` for ``settings_``."""
    size = int(rng.choice(SIZES))
    dtype = np.float64 if "float64" in case else np.float32
    ignore = settings_["ignore_index"]
    logits = settings_["logits"]
    if settings_["task"] == "binary":
        y = rng.integers(0, 2, size=size)
        p = _logits(rng, size, dtype) if logits else _binary_scores(rng, size, dtype)
    elif settings_["task"] == "multilabel":
        shape = (size, settings_["num_classes"])
        y = rng.integers(0, 2, size=shape)
        if ignore is not None and size:
            y[rng.random(shape) < 0.2] = ignore
        p = _logits(rng, shape, dtype) if logits else rng.random(shape).astype(dtype)
        if ignore is not None:
            p[y == ignore] = np.nan  # ignored targets' scores may be anything
    else:
        classes = settings_["num_classes"]
        y = _labels(rng, size, classes, ignore)
        if logits:
            p = _logits(rng, (size, classes), dtype)
            p[p.max(axis=1) == -np.inf, 0] = 0.0  # a row of -inf logits is refused
        else:
            p = _probability_rows(rng, size, classes, dtype)
        if ignore is not None:
            p[y == ignore] = np.nan if rng.random() < 0.5 else -1.0
    weights = None
    if "weighted" in case:
        weights = rng.random(size) * 10.0 ** rng.integers(-8, 8, size=size)
    elif "weights" in case:
        weights = rng.integers(0, 6, size=size).astype(np.float64)
    return y, p, weights


CASES = (
    "binary",
    "binary float64",
    "binary logits",
    "binary weights",
    "binary weighted",
    "binary thresholds",
    "binary logits thresholds",
    "multiclass",
    "multiclass float64",
    "multiclass wide",
    "multiclass weights",
    "multiclass weighted",
    "multiclass thresholds",
    "multiclass logits",
    "multiclass logits float64",
    "multiclass logits weighted",
    "multiclass logits thresholds",
    "multilabel",
    "multilabel logits",
    "multilabel weighted",
)


def _start(settings_, rng, case):
    """An accumulator that has counted one earlier batch (with the kernel): float sums to add
    to."""
    acc = ScoreAccumulator(**settings_)
    with kernel_mode():
        acc.update(*make_batch(rng, case, settings_))
    return acc


def check_case(case: str, draws: int, seed: int = 0) -> None:
    rng = np.random.default_rng(zlib.crc32(case.encode()) + seed)
    for _ in range(draws):
        settings_ = make_settings(rng, case)
        start = _start(settings_, rng, case)
        y, p, weights = make_batch(rng, case, settings_)
        twin, kernel = start.copy(), start.copy()
        used: list = []
        with twin_mode(used):
            twin.update(y, p, weights)
        with kernel_mode():
            kernel.update(y, p, weights)
        assert used == ([True] if p.shape[0] else []), (case, settings_, p.dtype, p.shape)
        assert same_state(twin, kernel) == [], (case, settings_, p.shape)
        assert twin.num_samples == kernel.num_samples


@pytest.mark.parametrize("case", CASES)
def test_twin_state_is_the_kernels(case):
    """The twin's state equals the kernel's bit for bit, through ``update``."""
    check_case(case, draws=3)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_twin_state_is_the_kernels_grid(case):
    check_case(case, draws=40, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("label_dtype", "score_dtype"),
    [(np.int32, np.float32), (np.uint8, np.float64), (np.float64, np.float32), (bool, np.float32)],
)
def test_twin_other_label_dtypes(label_dtype, score_dtype):
    rng = np.random.default_rng(7)
    for task, classes in (("binary", None), ("multiclass", 2), ("multiclass", 20)):
        for ignore in (None, 1):
            acc = ScoreAccumulator(task, classes, ignore_index=ignore)
            y = rng.integers(0, 2, size=500).astype(label_dtype)
            p = rng.random(500).astype(score_dtype)
            if task == "multiclass":
                p = _probability_rows(rng, 500, classes, score_dtype)
            twin, kernel = acc.copy(), acc.copy()
            with twin_mode():
                twin.update(y, p)
            with kernel_mode():
                kernel.update(y, p)
            assert same_state(twin, kernel) == []


def test_twin_worked_example():
    """A hand-checked batch: binary probabilities, one ignored target."""
    acc = ScoreAccumulator("binary", thresholds=[0.5], calibration_bins=2, ignore_index=7)
    used: list = []
    with twin_mode(used):
        acc.update([0, 1, 1, 7], [0.25, 0.75, 0.5, 0.9])
    assert used == [True]
    state = acc.state_arrays()
    # bin 0: score < 0.5 (one negative); bin 1: the two positives (0.5 exactly is exact)
    assert state["curves"].tolist() == [[[1, 0], [0, 2]]]
    assert state["inexact"].tolist() == [2]
    assert state["calibration"].tolist() == [[1, 0], [2, 2]]
    assert state["confidence"].tolist() == [0.25, 1.25]
    assert state["losses"][0] == 0.25**2 + 0.25**2 + 0.5**2


@pytest.mark.parametrize(
    ("settings_", "y_true", "y_pred", "weights"),
    [
        ({"task": "binary"}, [0, 2], [0.1, 0.2], None),  # a target other than 0/1
        ({"task": "binary"}, [0, 1], [0.1, 1.5], None),  # a probability above 1
        ({"task": "binary"}, [0, 1], [0.1, np.nan], None),  # NaN
        ({"task": "binary", "logits": True}, [0, 1], [0.1, np.inf], None),  # +inf logit
        ({"task": "binary"}, [0, 1], [0.1, 0.2], [1.0, -1.0]),  # negative weight
        ({"task": "binary"}, [0, 1], [0.1, 0.2], [1.0, 0.5]),  # fractional, integer counts
        ({"task": "multiclass", "num_classes": 3}, [0, 3], [[1, 0, 0], [0, 1, 0]], None),
        ({"task": "multiclass", "num_classes": 3}, [0, 1], [[0.5, 0, 0], [0, 1, 0]], None),
        ({"task": "multiclass", "num_classes": 20}, [0, 1], np.eye(20)[[0, 1]] * 2, None),
        (
            {"task": "multiclass", "num_classes": 3, "logits": True},
            [0, 1],
            [[1.0, 2.0, 0.0], [-np.inf, -np.inf, -np.inf]],
            None,
        ),
        (
            {"task": "multiclass", "num_classes": 3, "logits": True},
            [0, 1],
            [[1.0, np.nan, 0.0], [1.0, 2.0, 3.0]],
            None,
        ),
        ({"task": "multilabel", "num_classes": 2}, [[0, 1], [1, 5]], [[0.1, 0.2]] * 2, None),
    ],
)
def test_twin_declines_what_the_kernel_refuses(settings_, y_true, y_pred, weights):
    """Batches the twin does not count leave the state untouched, and the update then raises
    exactly what it raises without the twin."""
    start = ScoreAccumulator(**settings_)
    shape = np.asarray(y_pred).shape[1:]
    rows = np.asarray(y_pred).shape[0]
    with kernel_mode():
        if settings_["task"] == "multiclass":
            scores = np.eye(shape[0])[[0, 1]] * (3.0 if start.config()["logits"] else 1.0)
            start.update(np.zeros(2, np.int64), scores)
        else:
            start.update(np.zeros((rows, *shape), np.int64), np.full((rows, *shape), 0.5))

    def outcome(accumulator):
        try:
            accumulator.update(np.asarray(y_true), np.asarray(y_pred), weights)
        except (TypeError, ValueError) as error:
            return type(error), str(error), accumulator.state_arrays()
        return None, None, accumulator.state_arrays()

    used: list = []
    twin = start.copy()
    with twin_mode(used):
        with_twin = outcome(twin)
    with kernel_mode():
        without = outcome(start.copy())
    assert True not in used
    assert with_twin[:2] == without[:2] and with_twin[0] is ValueError
    assert same_state(twin, start) == []


@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_twin_declines_logits_that_look_like_probabilities(task):
    """32 or more logits all in [0, 1] (multiclass: in rows summing to one) are counted with a
    warning: by the kernel."""
    rng = np.random.default_rng(2)
    if task == "binary":
        acc = ScoreAccumulator("binary", logits=True)
        y, p = rng.integers(0, 2, 40), rng.random(40)
    else:
        acc = ScoreAccumulator("multiclass", 3, logits=True)
        y, p = rng.integers(0, 3, 40), _probability_rows(rng, 40, 3, np.float64)
    used: list = []
    with twin_mode(used), pytest.warns(UserWarning, match="probabilities"):
        acc.update(y, p)
    assert used == [False]
    assert acc.num_samples == 40


def test_twin_leaves_big_batches_and_plain_kernels_to_the_kernel(monkeypatch):
    from metricstream._core import flags

    acc = ScoreAccumulator("binary")
    y = np.zeros(10, np.int64)
    p = np.full(10, 0.5)
    monkeypatch.setattr(_firstuse, "MAX_SCORES", 4)
    used: list = []
    with twin_mode(used):
        acc.update(y, p)
    monkeypatch.setattr(_firstuse, "MAX_SCORES", 1 << 20)
    monkeypatch.setattr(flags, "PLAIN_KERNELS", True)
    with twin_mode(used):
        assert _firstuse.defer_fast(acc, y.dtype, p.dtype, True) is False
        assert _firstuse.count(acc, acc._arrays, acc._prepare(y, p), _firstuse._NO_LOG) is False
    assert used == [False, False]
    assert acc.num_samples == 10


def test_group_undo_log_matches_the_kernels():
    """In a group a member's count logs each confidence addition (cell, value before) so that
    it can be undone: the twin logs as the kernel does, and the undo restores the state."""
    rng = np.random.default_rng(4)
    for task, classes in (("binary", None), ("multiclass", 4), ("multiclass", 20)):
        acc = ScoreAccumulator(task, classes)
        n = 300
        if task == "binary":
            y, p = rng.integers(0, 2, n), rng.random(n)
        else:
            y, p = rng.integers(0, classes, n), _probability_rows(rng, n, classes, np.float64)
        with kernel_mode():
            acc.update(y[:50], p[:50])
        results = []
        for mode in (twin_mode, kernel_mode):
            member = acc.copy()
            with mode():
                batch = member._prepare(y, p)
                rows = batch.scores.shape[0]
                per_row = 1 if task == "multiclass" else member.num_classes
                log = np.full(2 * rows * per_row, np.nan)
                with member._lock:
                    member._count(member._arrays, batch, log)
            results.append((member, log))
        (twin, twin_log), (kernel, kernel_log) = results
        assert same_state(twin, kernel) == []
        assert twin_log.tobytes() == kernel_log.tobytes()
        with twin_mode():
            undo = twin._count_undoable(twin._prepare(y, p))
        undo()
        assert same_state(twin, kernel) == []


def test_group_counts_with_the_twin():
    rng = np.random.default_rng(8)
    y, p = rng.integers(0, 3, 200), _probability_rows(rng, 200, 3, np.float32)
    members = {"a": ScoreAccumulator("multiclass", 3), "b": ScoreAccumulator("multiclass", 3)}
    used: list = []
    with twin_mode(used):
        group = AccumulatorGroup(members).update(y, p)
    with kernel_mode():
        reference = ScoreAccumulator("multiclass", 3).update(y, p)
    assert used == [True, True]
    assert same_state(group["a"], reference) == [] and same_state(group["b"], reference) == []


def test_check_weights_twin():
    rng = np.random.default_rng(5)
    for whole in (False, True):
        for _ in range(20):
            weights = rng.random(int(rng.integers(0, 300))) * 10.0 ** rng.integers(-5, 5)
            if whole:
                weights = np.floor(weights)
            if weights.size and rng.random() < 0.5:
                weights[rng.integers(0, weights.size)] = rng.choice((-1.0, np.nan, np.inf, 0.5))
            with twin_mode():
                first, total = _firstuse.check_weights(weights, whole)
            expected = _k.check_weights(weights, whole)
            assert first == expected[0]
            assert np.float64(total).tobytes() == np.float64(expected[1]).tobytes()


# ------------------------------------------------------------------ the twin's arithmetic
@pytest.mark.slow  # (compiles the kernels' layouts, which are not cached: 1 s)
def test_layouts_are_the_kernels():
    codes = list(range(1, 32))
    rng = np.random.default_rng(6)
    codes += [int(a + 32 * b + 1024 * c) for a, b, c in rng.integers(1, 24, size=(300, 3))]
    for code in codes:
        assert _firstuse.key_layout(code) == tuple(int(v) for v in _k.key_layout(code))
        assert _firstuse.logit_layout(code) == tuple(int(v) for v in _k.logit_layout(code))
        expected = tuple(int(v) for v in _k.probability_key_layout(code))
        assert _firstuse.probability_key_layout(code) == expected


def test_exp_and_log1p_are_the_kernels():
    rng = np.random.default_rng(9)
    x = np.r_[
        -rng.random(20000) * 800,
        -(10.0 ** rng.uniform(-320, 3, 20000)),
        [0.0, -0.0, -np.inf, -745.0, -746.0, -708.4, -1e-320, -5e-324],
    ]
    expected = np.empty_like(x)
    _k.exp_nonpositive(x, expected)
    with np.errstate(all="ignore"):
        assert _firstuse._exp_nonpositive(x).tobytes() == expected.tobytes()
    e = np.r_[rng.random(20000), 10.0 ** rng.uniform(-320, 0, 20000), [0.0, 1.0, 5e-324]]
    e = np.r_[e, np.nextafter(np.sqrt(2) - 1, [0.0, 1.0]), np.sqrt(2) - 1]
    expected = np.empty_like(e)
    _k.log1p_unit(e, expected)
    with np.errstate(all="ignore"):
        assert _firstuse._log1p_unit(e).tobytes() == expected.tobytes()


def test_running_product_rescales_as_the_kernel():
    """Many tiny factors: the product is rescaled many times within and across windows."""
    rng = np.random.default_rng(10)
    eps = float(np.finfo(np.float64).eps)
    factors = np.clip(rng.random(5000) ** 8, eps, 1 - eps)
    product, exponent = 1.0, 0
    for f in factors:
        product *= f
        if product < 2.0**-500:
            product *= 2.0**500
            exponent -= 500
    assert _firstuse._running_product(factors, False) == (product, exponent)
    big = 1.0 + rng.random(3000) * 9.0
    product, exponent = 1.0, 0
    for f in _firstuse._eights(big):
        product *= f
        if product > 2.0**500:
            product *= 2.0**-500
            exponent += 500
    assert _firstuse._running_product(_firstuse._eights(big), True) == (product, exponent)


def test_constants_are_the_accumulators():
    assert _firstuse._CHUNK_ROWS == _accumulator._CHUNK_ROWS
    assert _firstuse._EPS == _accumulator._EPS


# ------------------------------------------------------------------ routes and streams
@pytest.mark.parametrize(
    ("settings_", "y", "p"),
    [
        ({"task": "binary"}, np.array([0, 1]), np.array([0.2, 0.7], np.float32)),
        ({"task": "multiclass", "num_classes": 3}, np.array([0, 1]), np.eye(3)[:2]),
        (
            {"task": "multiclass", "num_classes": 3, "logits": True},
            np.array([0, 1]),
            np.array([[2.0, 0.0, -1.0], [0.5, 3.0, 1.0]], np.float32),
        ),
    ],
)
def test_deferred_routes_are_the_ones_compiled(settings_, y, p):
    """What the twin queues for compiling is the specialisation the small-batch path and the
    general path then call (else they would compile again at the call)."""
    asked: list = []
    with twin_mode():
        warmup.defer = lambda routes: asked.extend(routes) or True
        acc = ScoreAccumulator(**settings_).update(y, p)
    with kernel_mode():
        reference = ScoreAccumulator(**settings_).update(y, p).update(y, p)
        reference._prepare(y, p)
        general = ScoreAccumulator(**settings_)
        general.update(list(y), p.tolist())  # the general path
    assert len(asked) == 2  # the small-batch path's route, then the general path's
    for kernel, args in asked:
        assert warmup.compiled(kernel, warmup.signature(args)), kernel
    assert same_state(acc, ScoreAccumulator(**settings_).update(y, p)) == []


@st.composite
def streams(draw):
    kind = draw(st.sampled_from(("binary", "multiclass", "logits", "multilabel", "weighted")))
    seed = draw(st.integers(0, 2**32 - 1))
    lengths = draw(st.lists(st.integers(0, 300), min_size=1, max_size=5))
    switch = draw(st.integers(0, len(lengths)))
    ignore = draw(st.sampled_from((None, 0, -1)))
    return kind, seed, lengths, switch, ignore


def _stream(kind, seed, lengths, ignore):
    rng = np.random.default_rng(seed)
    if kind == "binary":
        acc = ScoreAccumulator("binary")
    elif kind == "multilabel":
        acc = ScoreAccumulator("multilabel", 3, ignore_index=ignore)
    elif kind == "weighted":
        acc = ScoreAccumulator("multiclass", 4, weighted=True, ignore_index=ignore)
    else:
        acc = ScoreAccumulator("multiclass", 4, logits=kind == "logits", ignore_index=ignore)
    batches = []
    for n in lengths:
        if kind == "binary":
            batches.append((rng.integers(0, 2, n), rng.random(n).astype(np.float32), None))
        elif kind == "multilabel":
            batches.append((rng.integers(0, 2, (n, 3)), rng.random((n, 3)), None))
        elif kind == "logits":
            batches.append((_labels(rng, n, 4, ignore), _logits(rng, (n, 4), np.float32), None))
        else:
            weights = rng.random(n) * 10.0 ** rng.integers(-4, 4) if kind == "weighted" else None
            y = _labels(rng, n, 4, ignore)
            batches.append((y, _probability_rows(rng, n, 4, np.float32), weights))
    if kind == "logits":  # a row of -inf logits is refused
        for _, p, _ in batches:
            p[p.max(axis=1) == -np.inf, 0] = 0.0
    return acc, batches


@given(streams())
def test_switch_from_twin_to_kernel_mid_stream(stream):
    """The first batches counted by the twin, the rest by the kernel (through ``update``, the
    small-batch path stepping aside meanwhile): the state of the kernel alone, bit for bit."""
    kind, seed, lengths, switch, ignore = stream
    reference, batches = _stream(kind, seed, lengths, ignore)
    with kernel_mode():
        for batch in batches:
            reference.update(*batch)
    mixed, _ = _stream(kind, seed, lengths, ignore)
    used: list = []
    with twin_mode(used):
        for batch in batches[:switch]:
            mixed.update(*batch)
    with kernel_mode():
        for batch in batches[switch:]:
            mixed.update(*batch)
    assert used == [True for n in lengths[:switch] if n]
    assert same_state(mixed, reference) == []


# ------------------------------------------------------------------ fresh processes
FIRST_USE = """
import json, sys
import numpy as np
from metricstream import ScoreAccumulator
from metricstream._core import warmup
from metricstream.scores import _firstuse, _kernels
counted = []
count = _firstuse.count
def counting(*args):
    counted.append(count(*args))
    return counted[-1]
_firstuse.count = counting
rng = np.random.default_rng(0)
y2, y10 = rng.integers(0, 2, 256), rng.integers(0, 10, 256)
binary = rng.random(256).astype(np.float32)
probabilities = rng.random((256, 10))
probabilities = (probabilities / probabilities.sum(axis=1, keepdims=True)).astype(np.float32)
logits = rng.normal(size=(256, 10)).astype(np.float32)
accumulators = [
    ScoreAccumulator("binary").update(y2, binary),
    ScoreAccumulator("multiclass", 10).update(y10, probabilities),
    ScoreAccumulator("multiclass", 10, logits=True).update(y10, logits),
]
first = {
    "counted": counted[:],
    "running": warmup.busy(),
    "compiled": [
        len(kernel.overloads)
        for kernel in (_kernels.count_elementwise, _kernels.count_small_rows,
                       _kernels.count_multiclass)
    ],
    "states": [
        {name: array.tobytes().hex() for name, array in acc.state_arrays().items()}
        for acc in accumulators
    ],
}
first["finished"] = warmup.wait(timeout=900)
first["errors"] = [repr(job.error) for job in warmup.jobs() if job.error is not None]
counted.clear()
accumulators[0].update(y2, binary)
accumulators[1].update(y10, probabilities)
accumulators[2].update(y10, logits)
first["counted after"] = counted[:]
print(json.dumps(first))
"""


@pytest.mark.slow
def test_fresh_cache_first_updates_count_while_compiling(tmp_path):
    """Empty Numba cache: the first updates of binary scores, multiclass probabilities and
    multiclass logits are counted by the twin while their kernels compile in the background
    (none compiled when they return), to the kernels' states; once compiled, the kernels
    count (the small-batch path, not the twin)."""
    result = run_first_use(FIRST_USE, str(tmp_path), quiet=False)
    assert result["counted"] == [True, True, True]
    assert result["running"] and result["compiled"] == [0, 0, 0]
    assert result["finished"] and result["errors"] == []
    assert result["counted after"] == []  # the small-batch paths took them
    rng = np.random.default_rng(0)
    y2, y10 = rng.integers(0, 2, 256), rng.integers(0, 10, 256)
    binary = rng.random(256).astype(np.float32)
    probabilities = rng.random((256, 10))
    probabilities = (probabilities / probabilities.sum(axis=1, keepdims=True)).astype(np.float32)
    logits = rng.normal(size=(256, 10)).astype(np.float32)
    with kernel_mode():
        expected = [
            ScoreAccumulator("binary").update(y2, binary),
            ScoreAccumulator("multiclass", 10).update(y10, probabilities),
            ScoreAccumulator("multiclass", 10, logits=True).update(y10, logits),
        ]
    for state, acc in zip(result["states"], expected, strict=True):
        assert state == {name: a.tobytes().hex() for name, a in acc.state_arrays().items()}


# The default bin budgets (thousands of values, one call each) in CI; small budgets of
# probabilities and logits by default.
@pytest.mark.parametrize(
    "settings_",
    [
        pytest.param({"task": "binary"}, marks=pytest.mark.slow),
        {"task": "binary", "bins": 64},
        pytest.param({"task": "binary", "logits": True}, marks=pytest.mark.slow),
        {"task": "multilabel", "num_classes": 2, "logits": True, "bins": 16},
        {"task": "binary", "thresholds": [0.1, 0.5, 0.5000001, 0.9]},
        {"task": "binary", "logits": True, "thresholds": [-3.0, 0.0, 2.5]},
    ],
)
def test_bin_index_twin(settings_):
    """``bin_index`` (threshold views such as ``confusion_at``) while its kernel compiles: the
    kernel's bin for bin values, lower edges, their float neighbours and random values."""
    binning = ScoreAccumulator(**settings_).binning
    rng = np.random.default_rng(11)
    values = np.r_[binning.values(), binning.edges(), rng.random(200), rng.normal(size=200) * 50]
    values = values[np.isfinite(values) | (binning.logit_keys & ~np.isnan(values))]
    values = np.r_[values, np.nextafter(values, np.inf), np.nextafter(values, -np.inf)]
    values = values[::7] if values.size > 3000 else values
    with twin_mode():
        twin = [binning.index(v) for v in values]
        assert not _firstuse._bin_index_ready  # (the kernel was not asked)
    with kernel_mode():
        kernel = [binning.index(v) for v in values]
    assert twin == kernel
