"""First use without waiting for a compile: the multilabel kernels' numpy twin
(metricstream.multilabel._firstuse) and the background compile that replaces it.

The twin must leave exactly the state the kernels leave (int64 counts equal; float64 weighted
sums equal bit for bit) on randomized batches: indicators and scores of several dtypes,
probabilities and logits, weights, ``ignore_index``, co-occurrence, several betas, empty batches,
absent labels, infinities and scores on the threshold; through ``update``'s one-call path (the
stand-in route) and the general path (lists, strided arrays). It must decline every batch the
kernels refuse, leaving the state untouched, so that the update raises exactly what it raises
without the twin; and a stream counted partly by the twin and partly by the kernels must end
where the kernels alone end. A subprocess with an empty Numba cache shows the first update
counting without a compile.
"""

from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from metricstream import LabelSets, MultilabelAccumulator
from tests.first_use_process import run_first_use

warmup = pytest.importorskip("metricstream._core.warmup")
_firstuse = pytest.importorskip("metricstream.multilabel._firstuse")


# This module tests first use: background compiles on (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("background_compiles_on")


# ------------------------------------------------------------------ switches
class Switch:
    """Which path counts: ``twin()`` (every kernel reported as compiling, a compile always
    running) or ``kernel()`` (background compiles off); ``uses`` lists the batch sizes the twin
    counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.uses: list[int] = []
        count = _firstuse.count

        def counting(arrays, layout, y_true, *args):
            self.uses.append(y_true.shape[0])
            return count(arrays, layout, y_true, *args)

        monkeypatch.setattr(_firstuse, "count", counting)
        self._real = (warmup.defer, warmup.busy)

    def twin(self) -> None:
        self.monkeypatch.setattr(warmup, "_enabled", True)
        self.monkeypatch.setattr(warmup, "defer", lambda routes: True)
        self.monkeypatch.setattr(warmup, "busy", lambda: True)
        for name, empty in (
            ("_routes_ready", set()),
            ("_dense_ready", set()),
            ("_dense_last", (None,) * 5),
            ("_unit_ready", set()),
            ("_unit_last", None),
            ("_sets_ready", set()),
        ):
            self.monkeypatch.setattr(_firstuse, name, empty)

    def kernel(self) -> None:
        self.monkeypatch.setattr(warmup, "defer", self._real[0])
        self.monkeypatch.setattr(warmup, "busy", self._real[1])
        self.monkeypatch.setattr(warmup, "_enabled", False)


@pytest.fixture
def switch(monkeypatch):
    return Switch(monkeypatch)


def same_state(a: MultilabelAccumulator, b: MultilabelAccumulator) -> bool:
    """Equal dtype, shape and bits of every state array (float64 sums: rounding included)."""
    x, y = a.state_arrays(), b.state_arrays()
    return x.keys() == y.keys() and all(
        x[k].dtype == y[k].dtype and x[k].shape == y[k].shape and x[k].tobytes() == y[k].tobytes()
        for k in x
    )


def outcome(accumulator: MultilabelAccumulator, batch: tuple) -> tuple:
    """(error type, message) of an update, or (None, None), with any warnings' messages."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            accumulator.update(*batch)
        except (TypeError, ValueError) as error:
            return type(error), str(error), [str(w.message) for w in caught]
    return None, None, [str(w.message) for w in caught]


# ------------------------------------------------------------------ random batches
SIZES = (0, 1, 2, 7, 63, 64, 65, 256, 700)
LABELS = (1, 3, 20, 70)


def seed_state(acc: MultilabelAccumulator, rng: np.random.Generator) -> None:
    """A non-zero starting state (float sums of many magnitudes: the order of the additions
    then shows in the rounding)."""
    for array in acc._arrays.values():
        if array.dtype.kind == "f":
            array[...] = rng.random(array.shape) * 10.0 ** rng.integers(-3, 4, size=array.shape)
        else:
            array[...] = rng.integers(0, 1000, size=array.shape)
    acc._changed()


def make_config(rng: np.random.Generator, case: str) -> dict:
    config: dict = {}
    if "logits" in case:
        config["logits"] = True
        config["threshold"] = float(rng.choice((0.5, 0.2, 0.9)))
    elif "probabilities" in case:
        config["threshold"] = float(rng.choice((0.5, 0.3, 1.0, 0.0)))
    if "weighted" in case:
        config["weighted"] = True
    if "masked" in case:
        config["ignore_index"] = int(rng.choice((-1, 255, 2)))
    if "cooccurrence" in case:
        config["cooccurrence"] = True
    if "betas" in case:
        config["betas"] = (0.5, 1.0, 2.0)
    return config


def make_batch(rng: np.random.Generator, case: str, num_labels: int, config: dict) -> tuple:
    """(y_true, y_pred, weights) of one randomized batch of ``case``."""
    n = int(rng.choice(SIZES))
    present = int(rng.integers(1, num_labels + 1))  # absent labels: only the first few occur
    y_true = np.zeros((n, num_labels), dtype=np.int64)
    y_true[:, :present] = rng.random((n, present)) < rng.random()
    if "bool" in case:
        y_true = y_true.astype(bool)
    elif "uint8" in case:
        y_true = y_true.astype(np.uint8)
    ignore = config.get("ignore_index")
    if "sets" in case:
        y_pred = rng.random((n, num_labels)) < rng.random()
        weights = None
        if "weighted" in case:
            weights = rng.random(n) * 10.0 ** rng.integers(-6, 7, size=n)
            weights[rng.random(n) < 0.1] = 0.0
        elif "weights" in case:
            weights = rng.integers(0, 4, size=n)
        return as_sets(rng, y_true), as_sets(rng, y_pred), weights
    if ignore is not None and n:
        y_true[rng.random((n, num_labels)) < 0.15] = ignore
        y_true[rng.integers(0, n)] = ignore  # a sample with every label masked
    if "logits" in case or "probabilities" in case:
        dtype = np.float32 if "float32" in case else np.float64
        if "logits" in case:
            y_pred = np.round(rng.normal(size=(n, num_labels)) * 3, 1)
            if n:
                y_pred[rng.random((n, num_labels)) < 0.03] = np.inf
                y_pred[rng.random((n, num_labels)) < 0.03] = -np.inf
                y_pred[0, 0] = -7.0  # never all in [0, 1] (counted with a warning: tested apart)
        else:
            # on and around the threshold, -0.0, 0 and 1
            y_pred = np.round(rng.random((n, num_labels)), 1)
            y_pred[rng.random((n, num_labels)) < 0.05] = -0.0
        y_pred = y_pred.astype(dtype)
        if dtype == np.float32 and n:
            # float32 values just below and above a float64 threshold
            near = np.float32(config.get("threshold", 0.5))
            y_pred[rng.random((n, num_labels)) < 0.05] = np.nextafter(near, np.float32(0))
            y_pred[rng.random((n, num_labels)) < 0.05] = near
    else:
        y_pred = (rng.random((n, num_labels)) < rng.random()).astype(np.int64)
        if "bool" in case:
            y_pred = y_pred.astype(bool)
    weights = None
    if "weighted" in case:
        weights = rng.random(n) * 10.0 ** rng.integers(-6, 7, size=n)
        weights[rng.random(n) < 0.1] = 0.0
        weights[rng.random(n) < 0.05] = -0.0
        if rng.random() < 0.2:
            weights = None  # unit weights of a weighted accumulator
    elif "weights" in case:
        weights = rng.integers(0, 4, size=n)
    if "strided" in case:
        y_pred = np.repeat(y_pred, 2, axis=1)[:, ::2]
    if "lists" in case and n:
        return y_true.tolist(), y_pred.tolist(), None if weights is None else weights.tolist()
    return y_true, y_pred, weights


def as_sets(rng: np.random.Generator, indicators: np.ndarray) -> LabelSets:
    """The label sets of an indicator matrix, each sample's labels in a random order."""
    return LabelSets.from_lists([rng.permutation(np.flatnonzero(row)) for row in indicators])


CASES = (
    "indicators",
    "bool indicators",
    "uint8 indicators",
    "float32 logits",
    "float64 logits",
    "float32 probabilities",
    "float64 probabilities",
    "indicators weights",
    "float64 logits weighted",
    "indicators weighted",
    "masked indicators",
    "masked float64 logits weighted",
    "masked float32 logits weights",
    "cooccurrence indicators",
    "cooccurrence indicators weighted",
    "betas float64 probabilities",
    "lists float64 logits",
    "strided float32 logits",
    "sets",
    "sets weights",
    "sets weighted",
    "masked sets",
    "cooccurrence sets weighted",
)


def run_stream(case: str, seed: int, switch: Switch, mode: str, batches: int = 5):
    rng = np.random.default_rng(seed)
    num_labels = int(rng.choice(LABELS))
    config = make_config(rng, case)
    acc = MultilabelAccumulator(num_labels, **config)
    seed_state(acc, rng)
    getattr(switch, mode)()
    for _ in range(batches):
        acc.update(*make_batch(rng, case, num_labels, config))
    return acc


@pytest.mark.parametrize("case", CASES)
def test_twin_state_is_the_kernels(case, switch):
    """The twin's state equals the kernels' bit for bit, from a non-zero starting state."""
    for repeat in range(3):
        seed = zlib.crc32(f"{case} {repeat}".encode())
        by_twin = run_stream(case, seed, switch, "twin")
        assert switch.uses, case  # the twin counted them
        by_kernel = run_stream(case, seed, switch, "kernel")
        assert same_state(by_twin, by_kernel), case


def test_twin_worked_example(switch):
    """A hand-checked batch: per label TP/AP/PP and the per-sample histograms."""
    switch.twin()
    acc = MultilabelAccumulator(3, logits=True)
    y_true = np.array([[1, 0, 1], [0, 1, 0], [0, 0, 0]])
    logits = np.array([[2.0, -1.0, -0.5], [-3.0, 0.0, 1.0], [-1.0, -1.0, -1.0]], dtype=np.float32)
    acc.update(y_true, logits)
    assert switch.uses == [3]
    assert type(acc._routes[(y_true.dtype, logits.dtype)][2]) is _firstuse.StandIn
    counts = acc.multilabel_confusion_matrix()
    # label 0: TP 1; label 1: TP 1; label 2: FN 1 (-0.5 < 0), FP 1 (sample 1 scores 1.0)
    assert counts.tolist() == [[[2, 0], [0, 1]], [[2, 0], [0, 1]], [[1, 1], [1, 0]]]
    # samples: P = 1/1, 1/2, 0/0; R = 1/2, 1/1, 0/0 (empty samples count as 0/0 -> 1.0 here)
    assert acc.precision(average="samples", zero_division=1.0) == pytest.approx((1 + 0.5 + 1) / 3)
    assert acc.recall(average="samples", zero_division=1.0) == pytest.approx((0.5 + 1 + 1) / 3)
    assert acc.subset_accuracy() == pytest.approx(1 / 3)


# ------------------------------------------------------------------ refusals
BAD = [
    ("indicators", [[0, 2], [1, 0]], [[0, 1], [1, 0]]),  # a truth other than 0/1
    ("indicators", [[0, 1], [-1, 0]], [[0, 1], [1, 0]]),  # negative truth
    ("indicators", [[0, 1], [1, 0]], [[0, 1], [3, 0]]),  # an indicator other than 0/1
    ("logits", [[0, 1], [1, 0]], [[0.5, np.nan], [1.0, 2.0]]),  # NaN score
    ("probabilities", [[0, 1], [1, 0]], [[0.5, 1.5], [0.2, 0.1]]),  # probability above 1
    ("probabilities", [[0, 1], [1, 0]], [[0.5, -0.1], [0.2, 0.1]]),  # probability below 0
    ("probabilities", [[0, 1], [1, 0]], [[0.5, np.nan], [0.2, 0.1]]),  # NaN probability
    ("masked", [[0, 1], [1, 5]], [[0, 1], [1, 0]]),  # neither 0, 1 nor ignore_index
]


@pytest.mark.parametrize(("kind", "y_true", "y_pred"), BAD)
@pytest.mark.parametrize("form", ["array", "float32", "list", "weighted"])
def test_twin_declines_what_the_kernel_refuses(kind, y_true, y_pred, form, switch):
    """The twin counts nothing of a batch the kernels refuse; the update then raises exactly
    what it raises without the twin, and the state is left bit-identical."""
    config: dict = {"logits": kind == "logits"}
    if kind == "masked":
        config["ignore_index"] = -1
    if form == "weighted":
        config["weighted"] = True
    y_true = np.array(y_true)
    y_pred = np.array(y_pred)
    if form == "float32" and y_pred.dtype.kind == "f":
        y_pred = y_pred.astype(np.float32)
    batch: tuple = (y_true, y_pred)
    if form == "list":
        batch = (y_true.tolist(), y_pred.tolist())
    good = (np.array([[1, 0]]), np.array([[1, 1]]))

    def attempt(mode: str) -> tuple:
        getattr(switch, mode)()
        acc = MultilabelAccumulator(2, **config).update(*good)
        before = acc.state_arrays()
        result = outcome(acc, batch)
        after = acc.state_arrays()
        assert all(before[k].tobytes() == after[k].tobytes() for k in before)
        return result

    with_twin = attempt("twin")
    assert switch.uses == [1]  # the good batch only
    without = attempt("kernel")
    assert with_twin == without
    assert with_twin[0] is ValueError


@pytest.mark.parametrize("path", ["route", "general"])
def test_logits_that_look_like_probabilities_are_counted_with_the_warning(path, switch):
    """16 or more logits all in [0, 1]: counted, with the same warning, on either path."""
    rng = np.random.default_rng(3)
    y_true = rng.integers(0, 2, size=(8, 4))
    scores = rng.random((8, 4))
    batch = (y_true, scores) if path == "route" else (y_true.tolist(), scores.tolist())
    switch.twin()
    twin = MultilabelAccumulator(4, logits=True)
    result = outcome(twin, batch)
    assert switch.uses == [8]
    switch.kernel()
    kernel = MultilabelAccumulator(4, logits=True)
    assert result == outcome(kernel, batch)
    assert result[0] is None and len(result[2]) == 1
    assert same_state(twin, kernel)


def test_near_the_int64_limit_the_route_steps_aside(switch):
    """A batch that could take a total past 2**63 - 1 is not counted by the stand-in (as by the
    kernel): the general path decides, as without the twin."""

    def attempt(mode: str) -> tuple:
        getattr(switch, mode)()
        acc = MultilabelAccumulator(2)
        acc._arrays["per_sample"][0] = 2**63 - 10
        acc._changed()
        return outcome(acc, (np.ones((4, 2), dtype=np.int64), np.ones((4, 2), dtype=np.int64)))

    with_twin = attempt("twin")
    assert with_twin == attempt("kernel")
    assert with_twin[0] is ValueError


@pytest.mark.parametrize("weighted", [False, True])
def test_label_sets_twin_declines_a_label_listed_twice(weighted, switch):
    batch = (LabelSets.from_lists([[0, 1], [2, 2]]), LabelSets.from_lists([[0], [1]]))
    results = []
    for mode in ("twin", "kernel"):
        getattr(switch, mode)()
        acc = MultilabelAccumulator(4, weighted=weighted).update_sets([[1]], [[1]])
        before = acc.state_arrays()
        results.append(outcome(acc, batch))
        after = acc.state_arrays()
        assert all(before[k].tobytes() == after[k].tobytes() for k in before)
    assert switch.uses == [1]  # the first batch only
    assert results[0] == results[1] and results[0][0] is ValueError


def test_large_label_sets_take_their_kernel(switch, monkeypatch):
    switch.twin()
    monkeypatch.setattr(_firstuse, "_MAX_SETS_ENTRIES", 11)
    acc = MultilabelAccumulator(4).update_sets([[0, 1], [], [3]], [[0], [2], [3]])
    assert switch.uses == []
    assert acc.num_samples == 3


# ------------------------------------------------------------------ mid-stream
@st.composite
def streams(draw):
    case = draw(st.sampled_from(CASES))
    seed = draw(st.integers(0, 2**32 - 1))
    batches = draw(st.integers(1, 5))
    switch_at = draw(st.integers(0, batches))
    return case, seed, batches, switch_at


@given(streams())
def test_switch_from_twin_to_kernel_mid_stream(stream):
    """The first batches counted by the twin, the rest by the kernels (the stand-in route hands
    over to the compiled one): the state of the kernels alone, bit for bit."""
    case, seed, batches, switch_at = stream
    with pytest.MonkeyPatch.context() as patch:
        switch = Switch(patch)
        reference = run_stream(case, seed, switch, "kernel", batches)
        rng = np.random.default_rng(seed)
        num_labels = int(rng.choice(LABELS))
        config = make_config(rng, case)
        mixed = MultilabelAccumulator(num_labels, **config)
        seed_state(mixed, rng)
        switch.twin()
        routed_after_switch = False
        for position in range(batches):
            if position == switch_at:
                # the compile has finished: the kernels count from here on
                patch.setattr(warmup, "defer", switch._real[0])
                patch.setattr(warmup, "busy", lambda: False)
            batch = make_batch(rng, case, num_labels, config)
            mixed.update(*batch)
            if position >= switch_at and isinstance(batch[0], np.ndarray) and batch[2] is None:
                routed_after_switch = True  # took ``update``'s route (if it has one)
        assert same_state(mixed, reference)
        if routed_after_switch:
            assert not isinstance(mixed._last_route[2], _firstuse.StandIn)


def test_stand_in_hands_over_once_no_compile_is_left(switch, monkeypatch):
    rng = np.random.default_rng(9)
    y_true = rng.integers(0, 2, size=(50, 6))
    logits = rng.normal(size=(50, 6)).astype(np.float32)
    switch.twin()
    acc = MultilabelAccumulator(6, logits=True).update(y_true, logits)
    key = (y_true.dtype, logits.dtype)
    assert isinstance(acc._routes[key][2], _firstuse.StandIn)
    assert acc._last_route[2] is acc._routes[key]
    monkeypatch.setattr(warmup, "defer", switch._real[0])
    monkeypatch.setattr(warmup, "busy", lambda: False)
    acc.update(y_true, logits)
    assert not isinstance(acc._routes[key][2], _firstuse.StandIn)
    assert acc._last_route[2] is acc._routes[key]
    assert switch.uses == [50]
    switch.kernel()
    reference = MultilabelAccumulator(6, logits=True).update(y_true, logits).update(y_true, logits)
    assert same_state(acc, reference)


def test_compiled_routes_are_not_asked_again(switch, monkeypatch):
    """Once a kernel is known compiled, the checks cost a set lookup: ``defer`` is not called."""
    switch.kernel()
    monkeypatch.setattr(warmup, "_enabled", True)
    y_true = np.zeros((4, 3), dtype=np.int64)
    y_pred = np.ones((4, 3), dtype=np.int64)
    MultilabelAccumulator(3).update(y_true, y_pred).update(y_true.tolist(), y_pred.tolist())
    if warmup.busy():
        warmup.wait(timeout=300)
        MultilabelAccumulator(3).update(y_true, y_pred).update(y_true.tolist(), y_pred.tolist())
    calls: list[int] = []
    real = warmup.defer
    monkeypatch.setattr(warmup, "defer", lambda routes: calls.append(1) or real(routes))
    acc = MultilabelAccumulator(3).update(y_true, y_pred).update(y_true.tolist(), y_pred.tolist())
    assert calls == []
    assert not isinstance(acc._routes[(y_true.dtype, y_pred.dtype)][2], _firstuse.StandIn)


def test_outside_unit_twin():
    values = np.array([0.0, -0.0, 1.0, 0.5], dtype=np.float32)
    assert _firstuse.outside_unit(values) is False
    for bad in (np.nan, -1e-30, np.nextafter(1.0, 2.0)):
        assert _firstuse.outside_unit(np.append(values, bad)) is True


# ------------------------------------------------------------------ fresh processes
FIRST_USE = """
import json, os, sys
import numpy as np
from metricstream import LabelSets, MultilabelAccumulator
from metricstream._core import warmup
from metricstream.multilabel import _firstuse
rng = np.random.default_rng(0)
y_true = rng.integers(0, 2, size=(256, 20))
logits = rng.normal(size=(256, 20)).astype(np.float32)
acc = MultilabelAccumulator(20, logits=True).update(y_true, logits)
route = acc._routes[(y_true.dtype, logits.dtype)]
first = {
    "stand_in": type(route[2]).__name__,
    "jobs": [repr(job) for job in warmup.jobs()],
    "running": warmup.busy(),
    "state": {k: v.tolist() for k, v in acc.state_arrays().items()},
}
if sys.argv[1] == "exit":
    print(json.dumps(first), flush=True)
    os._exit(0)  # not waiting for the compile (the interpreter's exit lets it finish)
first["finished"] = warmup.wait(timeout=900)
first["errors"] = [repr(job.error) for job in warmup.jobs() if job.error is not None]
acc.update(y_true, logits)
route = acc._routes[(y_true.dtype, logits.dtype)]
first["after"] = type(route[2]).__name__
first["state after"] = {k: v.tolist() for k, v in acc.state_arrays().items()}
print(json.dumps(first))
"""


def run_fresh(cache: str, mode: str) -> dict:
    return run_first_use(FIRST_USE, cache, mode)


def expected_state(switch: Switch, times: int = 1) -> dict:
    switch.kernel()
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 2, size=(256, 20))
    logits = rng.normal(size=(256, 20)).astype(np.float32)
    acc = MultilabelAccumulator(20, logits=True)
    for _ in range(times):
        acc.update(y_true, logits)
    return {k: v.tolist() for k, v in acc.state_arrays().items()}


def test_first_update_counts_while_compiling(tmp_path, switch):
    """Empty cache: the first update returns, counted by the stand-in route, with the compile of
    ``count_routed`` queued or running, and the kernel's numbers."""
    result = run_fresh(str(tmp_path), "exit")
    assert result["stand_in"] == "StandIn"
    assert any("count_routed" in job for job in result["jobs"])
    assert result["running"]
    assert result["state"] == expected_state(switch)


@pytest.mark.slow
def test_fresh_cache_compiles_in_background_then_the_kernel_counts(tmp_path, switch):
    cache = str(tmp_path)
    cold = run_fresh(cache, "wait")
    assert cold["stand_in"] == "StandIn" and cold["finished"] and not cold["errors"]
    assert cold["after"] != "StandIn"
    assert cold["state"] == expected_state(switch)
    assert cold["state after"] == expected_state(switch, 2)
    # The same cache, a new process: loaded from disk at the first call, nothing queued.
    warm = run_fresh(cache, "wait")
    assert warm["stand_in"] != "StandIn" and warm["jobs"] == []
    assert warm["state"] == expected_state(switch)
