"""Concurrent ``update`` calls from several threads lose no count.

The accumulator holds a lock while a batch is counted; the kernels release the GIL, so threads
that feed different accumulators run in parallel (measured in ``benchmarks/``, not here: no
timed assertions in tests).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import metricstream
from metricstream import ConfusionAccumulator
from metricstream.confusion import _dispatch


def run_threads(target, args_list):
    errors = []
    barrier = threading.Barrier(len(args_list))

    def wrapped(*args):
        try:
            barrier.wait()
            target(*args)
        except BaseException as error:  # noqa: BLE001 - re-raised in the main thread
            errors.append(error)

    threads = [threading.Thread(target=wrapped, args=args) for args in args_list]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@pytest.fixture(params=["small-batches", "large-batches"])
def batches(request, monkeypatch):
    """Batches on the serial path, or split across the pool (tiny chunks force many of them)."""
    rng = np.random.default_rng(0)
    if request.param == "large-batches":
        monkeypatch.setattr(_dispatch, "PARALLEL_MIN_LABELS", 1000)
        monkeypatch.setattr(_dispatch, "PARALLEL_MIN_LABELS_PER_CELL", 0)
        monkeypatch.setattr(_dispatch, "CHUNK_LABELS", 700)
        size = 5000
    else:
        size = 256
    return [(rng.integers(0, 6, size), rng.integers(0, 6, size)) for _ in range(5)]


def total(batches, repeats):
    flat = sum(np.bincount(6 * y + p, minlength=36) for y, p in batches)
    return repeats * flat.reshape(6, 6)


@pytest.mark.parametrize("num_threads", [2, 4, 8])
def test_concurrent_updates_on_one_accumulator_lose_no_count(batches, num_threads):
    acc = ConfusionAccumulator(6)
    repeats = 30

    def feed():
        for _ in range(repeats):
            for y_true, y_pred in batches:
                acc.update(y_true, y_pred)

    run_threads(feed, [() for _ in range(num_threads)])
    np.testing.assert_array_equal(acc.matrix, total(batches, num_threads * repeats))


def test_concurrent_weighted_and_score_updates_lose_no_count():
    rng = np.random.default_rng(1)
    y_true = rng.integers(0, 4, 300)
    scores = rng.normal(size=(300, 4))
    weights = rng.integers(0, 3, 300)
    acc = ConfusionAccumulator(4)
    repeats = 50

    def feed_scores():
        for _ in range(repeats):
            acc.update(y_true, scores)

    def feed_weighted():
        for _ in range(repeats):
            acc.update(y_true, np.argmax(scores, axis=1), weights)

    run_threads(
        lambda kind: feed_scores() if kind == "scores" else feed_weighted(),
        [("scores",), ("weighted",), ("scores",)],
    )
    predicted = np.argmax(scores, axis=1)
    once = np.bincount(4 * y_true + predicted, minlength=16).reshape(4, 4)
    once_weighted = np.bincount(4 * y_true + predicted, weights=weights, minlength=16).reshape(4, 4)
    np.testing.assert_array_equal(acc.matrix, repeats * (2 * once + once_weighted))


def test_failing_updates_in_one_thread_do_not_disturb_the_others(batches):
    acc = ConfusionAccumulator(6)
    repeats = 20
    bad_true = np.array(batches[0][0])
    bad_true[len(bad_true) // 2] = 6
    failures = []

    def feed_good():
        for _ in range(repeats):
            for y_true, y_pred in batches:
                acc.update(y_true, y_pred)

    def feed_bad():
        for _ in range(repeats):
            try:
                acc.update(bad_true, batches[0][1])
            except ValueError:
                failures.append(1)

    run_threads(lambda good: feed_good() if good else feed_bad(), [(True,), (False,), (True,)])
    assert len(failures) == repeats
    np.testing.assert_array_equal(acc.matrix, total(batches, 2 * repeats))


def test_threads_feeding_different_accumulators(batches):
    accumulators = [ConfusionAccumulator(6) for _ in range(3)]

    def feed(acc):
        for _ in range(20):
            for y_true, y_pred in batches:
                acc.update(y_true, y_pred)

    run_threads(feed, [(acc,) for acc in accumulators])
    for acc in accumulators:
        np.testing.assert_array_equal(acc.matrix, total(batches, 20))


def test_set_num_threads_validates_and_round_trips():
    previous = metricstream.get_num_threads()
    try:
        metricstream.set_num_threads(1)
        assert metricstream.get_num_threads() == 1
        y = np.arange(300_000) % 5
        acc = ConfusionAccumulator(5).update(y, y)
        assert acc.num_samples == 300_000
    finally:
        metricstream.set_num_threads(previous)
    with pytest.raises(TypeError, match="`num_threads` must be an int"):
        metricstream.set_num_threads(2.0)
    with pytest.raises(ValueError, match="`num_threads` must be at least 1, got 0"):
        metricstream.set_num_threads(0)


def test_set_num_threads_during_a_large_update_in_another_thread(monkeypatch):
    # Before: the updating thread read the pool, another thread shut it down, and submitting
    # raised "cannot schedule new futures after shutdown".
    monkeypatch.setattr(_dispatch, "PARALLEL_MIN_LABELS", 1000)
    monkeypatch.setattr(_dispatch, "PARALLEL_MIN_LABELS_PER_CELL", 0)
    monkeypatch.setattr(_dispatch, "CHUNK_LABELS", 500)
    rng = np.random.default_rng(3)
    y_true = rng.integers(0, 6, 20_000)
    y_pred = rng.integers(0, 6, 20_000)
    expected = np.bincount(6 * y_true + y_pred, minlength=36).reshape(6, 6)
    acc = ConfusionAccumulator(6)
    previous = metricstream.get_num_threads()
    stop = threading.Event()
    rounds = 60

    def update():
        try:
            for _ in range(rounds):
                acc.update(y_true, y_pred)
        finally:
            stop.set()

    def resize():
        size = 2
        while not stop.is_set():
            metricstream.set_num_threads(size)
            size = 5 - size  # 2, 3, 2, 3, ...

    try:
        run_threads(
            lambda role: update() if role == "update" else resize(), [("update",), ("resize",)]
        )
    finally:
        metricstream.set_num_threads(previous)
    np.testing.assert_array_equal(acc.matrix, rounds * expected)
