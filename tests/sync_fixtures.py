"""Shared pieces of the sync tests: two small accumulators beside ConfusionAccumulator, the group
of six the tests sync, and a fake world of N ranks (threads) that drives ``_sync.synchronize``.

The two accumulators are deliberately not confusion matrices, so that a group mixes types,
int64 and float64 states, and an accumulator holding arrays of both dtypes. The multi-process
tests run as scripts (``--worker``) and import this module, so every rank registers the same
types under the same names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from metricstream import Accumulator, AccumulatorGroup, ConfusionAccumulator

K = 7
NAMES = [f"class-{i}" for i in range(K)]
VOID = 255


class LabelHistogram(Accumulator):
    """How often each true label in [0, size) occurs (int64); ``ignore_index`` is skipped."""

    def __init__(self, size: int, ignore_index: int | None = None) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"`size` must be a positive int, got {size!r}.")
        self._size, self._ignore_index = size, ignore_index
        super().__init__({"counts": ((size,), np.int64)})

    def config(self) -> dict[str, Any]:
        return {"size": self._size, "ignore_index": self._ignore_index}

    def _prepare(self, y_true: Any, y_pred: Any = None, weights: Any = None) -> np.ndarray:
        values = np.asarray(y_true, dtype=np.int64).reshape(-1)
        if self._ignore_index is not None:
            values = values[values != self._ignore_index]
        if values.size and (values.min() < 0 or values.max() >= self._size):
            raise ValueError(f"`y_true` must lie in [0, {self._size}).")
        return values

    def _count(self, arrays: dict[str, np.ndarray], batch: np.ndarray) -> None:
        arrays["counts"] += np.bincount(batch, minlength=self._size)

    def _uncount(self, arrays: dict[str, np.ndarray], batch: np.ndarray) -> None:
        arrays["counts"] -= np.bincount(batch, minlength=self._size)


class WeightTotals(Accumulator):
    """Total weight per predicted label (float64) and the number of samples (int64)."""

    def __init__(self, size: int) -> None:
        self._size = int(size)
        super().__init__({"weight": ((self._size,), np.float64), "samples": ((1,), np.int64)})

    def config(self) -> dict[str, Any]:
        return {"size": self._size}

    def _prepare(self, y_true: Any, y_pred: Any, weights: Any = None) -> tuple:
        predicted = np.asarray(y_pred, dtype=np.int64).reshape(-1)
        if predicted.size and (predicted.min() < 0 or predicted.max() >= self._size):
            raise ValueError(f"`y_pred` must lie in [0, {self._size}).")
        if weights is None:
            weights = np.ones(predicted.size)
        return predicted, np.asarray(weights, dtype=np.float64).reshape(-1)

    def _count(self, arrays: dict[str, np.ndarray], batch: tuple) -> None:
        predicted, weights = batch
        arrays["weight"] += np.bincount(predicted, weights, minlength=self._size)
        arrays["samples"] += predicted.size


def make_group(**changes: Accumulator) -> AccumulatorGroup:
    """Six accumulators of four configurations and three types; int64 and float64 states.

    int64 buffer: 49 + 90,000 + 7 + 1 values; float64 buffer: 49 + 10,000 + 7 values.
    """
    members: dict[str, Accumulator] = {
        "counts": ConfusionAccumulator(K, NAMES, VOID),
        "weighted": ConfusionAccumulator(K, ignore_index=VOID, weighted=True),
        "wide": ConfusionAccumulator(300, ignore_index=VOID),
        "weighted_wide": ConfusionAccumulator(100, ignore_index=VOID, weighted=True),
        "labels": LabelHistogram(K, ignore_index=VOID),
        "totals": WeightTotals(K),
    }
    members.update(changes)
    return AccumulatorGroup(members)


GROUP_INT_SIZE = K * K + 300 * 300 + K + 1
GROUP_FLOAT_SIZE = K * K + 100 * 100 + K


def group_data(n: int = 6000, seed: int = 0) -> dict[str, np.ndarray]:
    """Labels with void samples and whole-number weights (valid for every member)."""
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, K, size=n)
    y_true[rng.random(n) < 0.05] = VOID
    y_pred = np.where(rng.random(n) < 0.6, np.minimum(y_true, K - 1), rng.integers(0, K, n))
    # whole numbers as float64: the weight dtype the rest of the suite compiles kernels for
    weights = rng.integers(0, 4, size=n).astype(np.float64)
    return {"y_true": y_true, "y_pred": y_pred, "weights": weights}


def feed(
    group: AccumulatorGroup, data: dict[str, np.ndarray], shard: slice, batch: int = 500
) -> AccumulatorGroup:
    # Contiguous shards: strided arrays would compile kernels of their own (2-3 s each, cold).
    y_true, y_pred, weights = (
        np.ascontiguousarray(data[key][shard]) for key in ("y_true", "y_pred", "weights")
    )
    for start in range(0, len(y_true), batch):
        part = slice(start, start + batch)
        group.update(y_true[part], y_pred[part], weights[part])
    return group


def states(target: Accumulator | AccumulatorGroup) -> dict[str, list]:
    """Every state array as nested lists, keyed ``member/array`` (JSON-able)."""
    if isinstance(target, AccumulatorGroup):
        return {
            f"{name}/{key}": array.tolist()
            for name, member in target.items()
            for key, array in member.state_arrays().items()
        }
    return {key: array.tolist() for key, array in target.state_arrays().items()}


# ---------------------------------------------------------------------------- a fake world
class FakeWorld:
    """N ranks as threads: ``gather`` and ``reduce_sum`` exchange through a barrier.

    A rank that skipped a collective the others entered would leave them waiting: the barrier's
    timeout turns that into a ``BrokenBarrierError`` in the result instead of a hung test.
    Each rank's collectives are logged as ``(name, number of elements, dtype)``.
    """

    def __init__(self, size: int, *, timeout: float = 30.0, copy_result: bool = False) -> None:
        self.size = size
        self.copy_result = copy_result  # reduce_sum returns a new array (like the NCCL path)
        self._barrier = threading.Barrier(size, timeout=timeout)
        self._slots: list[Any] = [None] * size
        self.calls: list[list[tuple]] = [[] for _ in range(size)]
        self.tamper: Callable[[int, np.ndarray], np.ndarray] | None = None

    def _exchange(self, rank: int, value: np.ndarray) -> list[np.ndarray]:
        self._slots[rank] = value
        self._barrier.wait()
        every = list(self._slots)
        self._barrier.wait()  # nobody overwrites a slot before everyone has read it
        return every

    def gather(self, rank: int) -> Callable[[np.ndarray], np.ndarray]:
        def gather(vector: np.ndarray) -> np.ndarray:
            self.calls[rank].append(("gather", int(vector.size), vector.dtype.str))
            sent = np.array(vector, copy=True)
            if self.tamper is not None and len(self.calls[rank]) == 1:
                sent = self.tamper(rank, sent)
            return np.concatenate(self._exchange(rank, sent))

        return gather

    def reduce_sum(self, rank: int) -> Callable[[np.ndarray], np.ndarray]:
        def reduce_sum(buffer: np.ndarray) -> np.ndarray:
            self.calls[rank].append(("sum", int(buffer.size), buffer.dtype.str))
            every = self._exchange(rank, buffer.copy())
            total = every[0].copy()
            for other in every[1:]:
                total += other
            if self.copy_result:
                return total
            buffer[...] = total
            return buffer

        return reduce_sum

    def run(
        self, targets: Sequence[Any], *, inplace: bool = True, engine: str = "all_reduce"
    ) -> list[Any]:
        """Every rank syncs its target; returns each rank's result or exception."""
        from metricstream import _sync

        assert len(targets) == self.size
        results: list[Any] = [None] * self.size

        def one(rank: int) -> None:
            try:
                results[rank] = _sync.synchronize(
                    targets[rank],
                    gather=self.gather(rank),
                    reduce_sum=self.reduce_sum(rank),
                    engine=engine,
                    inplace=inplace,
                )
            except BaseException as error:  # noqa: BLE001 - reported to the test
                results[rank] = error

        threads = [threading.Thread(target=one, args=(rank,)) for rank in range(self.size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads), "a rank hung in a collective"
        return results
