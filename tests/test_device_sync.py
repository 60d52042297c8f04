"""Syncing device-resident state: ``metricstream.distributed.all_reduce`` on the device tensors.

An accumulator counting on a device (here the device path forced on CPU tensors, as a GPU's
would be counted) is synced with collectives on its device tensors: the device counts are never
flushed to the host first, the host reads the check's table and the combined result once. Three
layers:

* in process (default run): ``all_reduce`` itself, with ``torch.distributed`` replaced by a
  fake of N ranks (threads exchanging tensors through a barrier) that logs every collective;
* two real gloo ranks (slow): this file run as a script (``--worker``), every result compared
  bit for bit with one process counting all the data on the Numba path, every collective logged;
* NCCL, world size 1, on a CUDA device (slow; skipped where there is no GPU or no NCCL): the
  collectives on the CUDA tensors, and at most two host syncs (the check's table and the result).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if __package__ in (None, ""):  # run as a script (--worker): make `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

torch = pytest.importorskip("torch")

from metricstream import (  # noqa: E402
    AccumulatorGroup,
    ConfusionAccumulator,
    RegressionAccumulator,
    device,
    distributed,
)
from tests.sync_fixtures import LabelHistogram, WeightTotals  # noqa: E402

K = 5
VOID = 255


@pytest.fixture(autouse=True)
def _forced() -> Iterator[None]:
    previous = device.force_device_path(True)
    eager = device.eager(False)
    yield
    device.force_device_path(previous)
    device.eager(eager)


# ---------------------------------------------------------------------------- data and members
def data(n: int = 2000, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, K, size=n)
    y_true[rng.random(n) < 0.05] = VOID
    logits = rng.normal(size=(n, K)) + 1.5 * np.eye(K)[np.minimum(y_true, K - 1)]
    return {
        "y_true": y_true,
        "logits": logits,
        "y_pred": logits.argmax(axis=1),
        "weights": rng.integers(0, 4, size=n).astype(np.float64),  # whole: exact in any order
        "target": rng.normal(size=(n, 2)) * 3 + 1e3,
        "estimate": rng.normal(size=(n, 2)) * 3 + 1e3,
    }


def make_group() -> AccumulatorGroup:
    """Device-counted members (int64 and float64) beside host-counted ones (the fallback)."""
    return AccumulatorGroup(
        counts=ConfusionAccumulator(K, ignore_index=VOID),
        weighted=ConfusionAccumulator(K, ignore_index=VOID, weighted=True),
        labels=LabelHistogram(K, ignore_index=VOID),
        totals=WeightTotals(K),
    )


def feed(
    target: Any, d: dict[str, np.ndarray], rows: Any, *, tensors: bool = True, place: str = "cpu"
) -> Any:
    """Count ``rows`` of ``d`` in batches of 250: torch tensors on ``place`` (the device path)
    or numpy arrays (the Numba path)."""
    index = np.arange(len(d["y_true"]))[rows]
    for start in range(0, len(index), 250):
        part = index[start : start + 250]
        batch = {
            key: torch.from_numpy(value[part]).to(place) if tensors else value[part]
            for key, value in d.items()
        }
        if isinstance(target, AccumulatorGroup) and "errors" in target:
            target["errors"].update(batch["target"], batch["estimate"])
            target["counts"].update(batch["y_true"], batch["y_pred"])
        elif isinstance(target, RegressionAccumulator):
            target.update(batch["target"], batch["estimate"])
        elif isinstance(target, AccumulatorGroup):
            target.update(batch["y_true"], batch["y_pred"], batch["weights"])
        elif target.weighted:
            target.update(batch["y_true"], batch["logits"], batch["weights"])
        else:
            target.update(batch["y_true"], batch["y_pred"])
    return target


def reference(make: Any, d: dict[str, np.ndarray]) -> Any:
    """One process counting every row on the Numba path."""
    previous = device.force_device_path(False)
    try:
        return feed(make(), d, slice(None), tensors=False)
    finally:
        device.force_device_path(previous)


def states(target: Any) -> dict[str, np.ndarray]:
    if isinstance(target, AccumulatorGroup):
        return {
            f"{name}/{key}": array
            for name, member in target.items()
            for key, array in member.state_arrays().items()
        }
    return target.state_arrays()


def assert_bits(a: Any, b: Any) -> None:
    mine, theirs = states(a), states(b)
    assert mine.keys() == theirs.keys()
    for key in mine:
        assert mine[key].dtype == theirs[key].dtype, key
        assert mine[key].tobytes() == theirs[key].tobytes(), key


def members(target: Any) -> list[Any]:
    return list(target.values()) if isinstance(target, AccumulatorGroup) else [target]


def pending(target: Any) -> bool:
    """Whether some member still holds counts on its device that the host has not read."""
    return any(m._device is not None and m._device.dirty for m in members(target))


def _base_device_state() -> type:
    """The device-state class whose flush the families that mirror the host arrays use."""
    probe = ConfusionAccumulator(2).update(torch.tensor([0]), torch.tensor([0]))._device
    return next(c for c in type(probe).__mro__ if c.__name__ == "DeviceState")


# ---------------------------------------------------------------------------- a fake world
class FakeDist:
    """``torch.distributed`` for N ranks run as threads (the rank is per thread).

    Collectives exchange tensors through a barrier (a rank that skips one leaves the others
    waiting: the barrier's timeout turns that into an error instead of a hung test) and are
    logged per rank as ``(name, elements, dtype, device type, op)``.
    """

    class ReduceOp:
        SUM = "SUM"
        MAX = "MAX"

    def __init__(self, size: int, timeout: float = 30.0) -> None:
        self.size = size
        self._barrier = threading.Barrier(size, timeout=timeout)
        self._slots: list[Any] = [None] * size
        self._local = threading.local()
        self.calls: list[list[tuple]] = [[] for _ in range(size)]

    # the API all_reduce uses
    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_backend(self, group: Any = None) -> str:
        return "gloo"

    def get_world_size(self, group: Any = None) -> int:
        return self.size

    def get_rank(self, group: Any = None) -> int:
        return self._local.rank

    def _exchange(self, tensor: Any) -> list[Any]:
        self._slots[self._local.rank] = tensor.clone()
        self._barrier.wait()
        every = list(self._slots)
        self._barrier.wait()
        return every

    def all_gather_into_tensor(self, out: Any, tensor: Any, group: Any = None) -> None:
        self._log("all_gather", tensor, None)
        out.copy_(torch.cat(self._exchange(tensor)))

    def all_reduce(self, tensor: Any, op: Any = None, group: Any = None) -> None:
        self._log("all_reduce", tensor, op)
        # Backends reduce the elements whatever the shapes (a rank may send a (K, K) matrix in
        # place, another a flat buffer).
        every = [other.reshape(-1) for other in self._exchange(tensor)]
        total = every[0].clone()
        for other in every[1:]:
            total = total + other if op == "SUM" else torch.maximum(total, other)
        tensor.copy_(total.reshape(tensor.shape))

    def _log(self, name: str, tensor: Any, op: Any) -> None:
        entry = (name, tensor.numel(), str(tensor.dtype).split(".")[-1], tensor.device.type, op)
        self.calls[self._local.rank].append(entry)

    def run(self, targets: list[Any], **kwargs: Any) -> list[Any]:
        """Every rank calls ``all_reduce`` on its target; each rank's result or exception."""
        results: list[Any] = [None] * self.size

        def one(rank: int) -> None:
            self._local.rank = rank
            try:
                results[rank] = distributed.all_reduce(targets[rank], **kwargs)
            except BaseException as error:  # noqa: BLE001 - reported to the test
                results[rank] = error

        threads = [threading.Thread(target=one, args=(r,)) for r in range(self.size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads), "a rank hung in a collective"
        return results


@pytest.fixture
def world(monkeypatch):
    """``world(n)``: a fake world of n ranks that ``all_reduce`` talks to; flushes counted."""
    flushes = []
    state_type = _base_device_state()
    original = state_type.flush_into

    def counted(self, acc, host_arrays):
        if self.dirty:
            flushes.append(type(acc).__name__)
        return original(self, acc, host_arrays)

    monkeypatch.setattr(state_type, "flush_into", counted)

    def make(size: int, **kwargs: Any) -> FakeDist:
        fake = FakeDist(size, **kwargs)
        fake.flushes = flushes  # type: ignore[attr-defined]
        monkeypatch.setattr(distributed, "_import_torch", lambda: (torch, fake))
        return fake

    return make


def check(size: int) -> tuple:
    return ("all_gather", 6, "int64", "cpu", None)


# ============================================================================ in process
@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("inplace", [True, False], ids=["inplace", "copy"])
def test_device_counts_are_synced_on_the_device_bit_identical_to_one_process(world, size, inplace):
    d = data()
    accs = [
        feed(ConfusionAccumulator(K, ignore_index=VOID), d, slice(r, None, size))
        for r in range(size)
    ]
    assert all(pending(acc) for acc in accs)
    fake = world(size)
    results = fake.run(accs, inplace=inplace)
    expected = reference(lambda: ConfusionAccumulator(K, ignore_index=VOID), d)
    for rank, result in enumerate(results):
        assert isinstance(result, ConfusionAccumulator), result
        assert (result is accs[rank]) is inplace
        assert fake.calls[rank] == [check(size), ("all_reduce", K * K, "int64", "cpu", "SUM")]
        assert not pending(result)
        assert fake.flushes == []  # the device counts were never read into the host first
        assert_bits(result, expected)
    if not inplace:  # the local counts are still on the device, as they were
        assert all(pending(acc) for acc in accs)
        for rank, acc in enumerate(accs):
            local = reference(
                lambda: ConfusionAccumulator(K, ignore_index=VOID),
                {key: value[rank::size] for key, value in d.items()},
            )
            assert_bits(acc, local)


def test_a_group_of_device_and_host_members_syncs_in_one_check_and_one_sum_per_dtype(world):
    d = data()
    groups = [feed(make_group(), d, slice(r, None, 2)) for r in range(2)]
    assert groups[0]["counts"]._device is not None and groups[0]["labels"]._device is None
    fake = world(2)
    results = fake.run(groups)
    ints = K * K + K + 1  # counts, labels, totals' samples
    floats = K * K + K  # weighted, totals' weight
    expected = reference(make_group, d)
    for rank, result in enumerate(results):
        assert result is groups[rank]
        assert fake.calls[rank] == [
            check(2),
            ("all_reduce", ints, "int64", "cpu", "SUM"),
            ("all_reduce", floats, "float64", "cpu", "SUM"),
        ]
        assert_bits(result, expected)
    assert fake.flushes == []


def test_a_rank_counting_on_the_device_and_one_on_the_host_sync_together(world):
    d = data()
    device_rank = feed(make_group(), d, slice(0, None, 2))
    host_rank = feed(make_group(), d, slice(1, None, 2), tensors=False)
    assert pending(device_rank) and not pending(host_rank)
    fake = world(2)
    results = fake.run([device_rank, host_rank])
    expected = reference(make_group, d)
    for result in results:
        assert_bits(result, expected)
    assert fake.calls[0] == fake.calls[1]  # the device path and the host path: the same calls


def test_host_counts_beside_device_counts_are_added_on_the_device(world):
    """Counts already on the host (an earlier read, a merge) join the device counts."""
    d = data()
    accs = []
    for rank in range(2):
        acc = ConfusionAccumulator(K, ignore_index=VOID)
        feed(acc, d, slice(rank, 1000, 2))
        acc.matrix  # noqa: B018 - a read brings these counts to the host
        feed(acc, d, slice(1000 + rank, None, 2))
        accs.append(acc)
    fake = world(2)
    for result in fake.run(accs):
        assert_bits(result, reference(lambda: ConfusionAccumulator(K, ignore_index=VOID), d))


def test_regression_maxima_are_reduced_by_max_in_the_same_collective_count(world):
    d = data()
    accs = [
        feed(RegressionAccumulator(2), d, slice(r * 1000, (r + 1) * 1000), tensors=r == 0)
        for r in range(2)
    ]
    sizes = {key: array.size for key, array in accs[0].state_arrays().items()}
    fake = world(2)
    results = fake.run(accs, inplace=False)
    expected = reference(lambda: RegressionAccumulator(2), d)
    maxima = np.maximum(accs[0].state_arrays()["max_error"], accs[1].state_arrays()["max_error"])
    for rank, result in enumerate(results):
        assert fake.calls[rank] == [
            check(2),
            ("all_reduce", sizes["moments"] + sizes["num_samples"], "int64", "cpu", "SUM"),
            ("all_reduce", sizes["max_error"] + sizes["max_parts"], "int64", "cpu", "MAX"),
        ]
        assert_bits(result, expected)
        np.testing.assert_array_equal(result.state_arrays()["max_error"], maxima)
        assert result.max_error(multioutput="raw_values").tolist() == maxima.tolist()


def _refused(fake: FakeDist, targets: list[Any]) -> list[Any]:
    results = fake.run(targets)
    assert all(isinstance(r, ValueError) for r in results), results
    for calls in fake.calls:
        assert all(call[0] == "all_gather" for call in calls)  # no data collective
    return results


def test_a_configuration_mismatch_raises_the_same_error_on_every_rank(world):
    d = data()
    accs = [
        feed(ConfusionAccumulator(K, ignore_index=VOID), d, slice(0, 500)),
        feed(ConfusionAccumulator(K + 1, ignore_index=VOID), d, slice(500, 1000)),
    ]
    local = [
        reference(
            lambda: ConfusionAccumulator(K, ignore_index=VOID), {k: v[:500] for k, v in d.items()}
        )
    ]
    fake = world(2)
    results = _refused(fake, accs)
    assert str(results[0]) == str(results[1])
    assert "`num_classes` is 5 on rank 0 and 6 on rank 1" in str(results[0])
    assert all(pending(acc) for acc in accs)  # nothing was read or summed
    assert fake.flushes == []
    assert_bits(accs[0], local[0])


def test_collectives_on_different_kinds_of_device_are_refused_on_every_rank(world, monkeypatch):
    from metricstream import _sync

    fake = world(2)
    original = _sync._kind_of
    monkeypatch.setattr(
        _sync, "_kind_of", lambda dev: "cuda" if fake.get_rank() == 1 else original(dev)
    )
    d = data()
    accs = [feed(ConfusionAccumulator(K, ignore_index=VOID), d, slice(r, 400, 2)) for r in range(2)]
    results = _refused(fake, accs)
    assert str(results[0]) == str(results[1])
    assert re.search(
        r"the collectives would run on different kinds of device: cpu on rank 0 and cuda on "
        r"rank 1 \(pass the same `device=` on every rank, or none\)",
        str(results[0]),
    )


def test_bad_values_on_one_ranks_device_raise_on_every_rank_and_keep_the_valid_batches(world):
    d = data()
    good = feed(ConfusionAccumulator(K, ignore_index=VOID), d, slice(0, 500))
    spoiled = ConfusionAccumulator(K, ignore_index=VOID)
    feed(spoiled, d, slice(500, 750))
    spoiled.update(torch.tensor([0, 1, 7]), torch.tensor([0, 1, 2]))  # 7 is not a class
    feed(spoiled, d, slice(750, 1000))
    fake = world(2)
    results = _refused(fake, [good, spoiled])
    assert "rank(s) 1 could not take part" in str(results[0])
    assert re.search(r"1 bad value was seen on cpu.*`y_true` holds label 7", str(results[1]))
    assert fake.calls == [[check(2)]] * 2
    valid = {k: v[500:1000] for k, v in d.items()}
    assert_bits(spoiled, reference(lambda: ConfusionAccumulator(K, ignore_index=VOID), valid))
    assert pending(good)  # rank 0 read nothing
    # The ranks are still in step: the next sync sums both.
    again = world(2)
    results = again.run([good, spoiled])
    assert_bits(
        results[0],
        reference(
            lambda: ConfusionAccumulator(K, ignore_index=VOID), {k: v[:1000] for k, v in d.items()}
        ),
    )


def test_int64_overflow_of_device_and_host_counts_is_refused_on_every_rank(world):
    accs = []
    for _ in range(2):
        acc = ConfusionAccumulator.from_matrix(np.array([[2**62, 0], [0, 0]]))
        acc.update(torch.tensor([1, 1]), torch.tensor([1, 0]))
        accs.append(acc)
    fake = world(2)
    results = _refused(fake, accs)
    for result in results:
        assert "the summed int64 counts could pass 2**63 - 1" in str(result)
    assert all(pending(acc) for acc in accs)
    # One rank whose own host + device counts would wrap: it raises the read's error.
    wraps = ConfusionAccumulator.from_matrix(np.array([[2**63 - 2, 0], [0, 0]]))
    wraps.update(torch.tensor([0, 0, 0]), torch.tensor([0, 0, 0]))
    fake = world(2)
    results = _refused(fake, [ConfusionAccumulator(2), wraps])
    assert "rank(s) 1 could not take part" in str(results[0])
    assert "would pass 2**63 - 1" in str(results[1])


def test_float64_overflow_is_refused_on_every_rank(world):
    accs = []
    for _ in range(2):
        acc = ConfusionAccumulator.from_matrix(np.array([[1e308, 0.0], [0.0, 0.0]]), weighted=True)
        acc.update(torch.tensor([1]), torch.tensor([1]), torch.tensor([0.5]))
        accs.append(acc)
    results = _refused(world(2), accs)
    assert all("would overflow to infinity" in str(r) for r in results)


def test_a_non_accumulator_on_one_rank_makes_every_rank_raise(world):
    acc = feed(ConfusionAccumulator(K, ignore_index=VOID), data(), slice(0, 300))
    results = world(2).run([acc, acc._device])
    assert isinstance(results[1], TypeError)
    assert isinstance(results[0], ValueError) and "rank(s) 1 could not take part" in str(results[0])
    assert pending(acc)


def test_device_updates_during_an_inplace_sync_are_not_lost(world):
    acc = ConfusionAccumulator(3)
    stop = threading.Event()
    updates = [0]
    batch = (torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2]))

    def updater() -> None:
        while not stop.is_set():
            acc.update(*batch)
            updates[0] += 1

    thread = threading.Thread(target=updater)
    thread.start()
    try:
        for _ in range(15):
            assert world(2).run([acc, ConfusionAccumulator(3)])[0] is acc
    finally:
        stop.set()
        thread.join()
    assert updates[0] > 0
    np.testing.assert_array_equal(acc.matrix, np.eye(3, dtype=np.int64) * updates[0])


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    size=st.integers(1, 3),
    cuts=st.lists(st.integers(0, 600), max_size=4),
    on_host=st.sets(st.integers(0, 2)),
    seed=st.integers(0, 2**16),
)
def test_any_split_across_ranks_and_places_equals_one_process(size, cuts, on_host, seed):
    d = data(n=600, seed=seed)
    bounds = [0, *sorted(cuts), 600]
    groups = [make_group() for _ in range(size)]
    for i, (start, stop) in enumerate(zip(bounds, bounds[1:], strict=False)):
        feed(groups[i % size], d, slice(start, stop), tensors=(i % size) not in on_host)
    fake = FakeDist(size)
    original = distributed._import_torch
    distributed._import_torch = lambda: (torch, fake)  # type: ignore[assignment]
    try:
        results = fake.run(groups)
    finally:
        distributed._import_torch = original  # type: ignore[assignment]
    expected = reference(make_group, d)
    for result in results:
        assert_bits(result, expected)


# ============================================================================ real ranks
WORLD = 2
GLOO_SCENARIOS = ["single", "copy", "weighted_logits", "group", "regression", "mixed", "after"]


def _makers() -> dict[str, Any]:
    return {
        "single": lambda: ConfusionAccumulator(K, ignore_index=VOID),
        "copy": lambda: ConfusionAccumulator(K, ignore_index=VOID),
        "weighted_logits": lambda: ConfusionAccumulator(K, ignore_index=VOID, weighted=True),
        "group": make_group,
        "regression": lambda: AccumulatorGroup(
            errors=RegressionAccumulator(2), counts=ConfusionAccumulator(K, ignore_index=VOID)
        ),
        "mixed": make_group,
        "after": make_group,
    }


def _named(log: list) -> list:
    """The logged collectives, the check's all-gather under its newer name (torch before 2.12
    has ``all_gather_into_tensor`` only)."""
    rename = {"all_gather_into_tensor": "all_gather_single"}
    return [[rename.get(call[0], call[0]), *call[1:]] for call in log]


def _hex_states(target: Any) -> dict[str, str]:
    return {key: array.tobytes().hex() for key, array in states(target).items()}


def worker(mode: str, rank: int, world: int, port: int, out: str) -> None:
    """One rank: each scenario's shard counted on the device path, synced, results written."""
    from datetime import timedelta

    import torch.distributed as dist

    from tests.test_distributed import _install_counter

    torch.set_num_threads(1)
    device.force_device_path(True)
    backend = "nccl" if mode == "--nccl" else "gloo"
    place = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        place = f"cuda:{rank}"
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    log: list = []
    _install_counter(dist, log)
    flushes: list = []
    state_type = _base_device_state()
    original = getattr(state_type, "flush_into")  # noqa: B009 - a type from a probe

    def counted(self: Any, acc: Any, host_arrays: Any) -> Any:
        if self.dirty:
            flushes.append(type(acc).__name__)
        return original(self, acc, host_arrays)

    setattr(state_type, "flush_into", counted)  # noqa: B010 - on the class, for every state
    d = data()
    shard = slice(rank, None, world)
    results: dict[str, Any] = {}

    def on_device(make: Any, tensors: bool = True) -> Any:
        return feed(make(), d, shard, tensors=tensors, place=place)

    def sync(name: str, target: Any, **kwargs: Any) -> None:
        import traceback
        import warnings

        del log[:], flushes[:]
        syncs: list = []

        def seen(message: Any, *args: Any, **kw: Any) -> None:
            # Where the host waited: the innermost frames of metricstream and this file.
            if "synchroniz" in str(message):
                frames = [
                    f"{Path(f.filename).name}:{f.lineno}"
                    for f in traceback.extract_stack()[:-1]
                    if "metricstream" in f.filename or "test_device_sync" in f.filename
                ]
                syncs.append(" < ".join(frames[::-1][:3]))

        if place != "cpu":
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = seen
            result = distributed.all_reduce(target, **kwargs)
            if place != "cpu":
                torch.cuda.set_sync_debug_mode(0)
        results[name] = {
            "calls": _named(log),
            "flushes": list(flushes),
            "syncs": syncs,
            "is_self": result is target,
            "pending_after": pending(target),
            "state": _hex_states(result),
        }

    if backend == "nccl":  # the communicator is set up by the first collective: not measured
        dist.all_reduce(torch.zeros(1, device=place))
        torch.cuda.synchronize()
    makers = _makers()
    for name in ("single", "weighted_logits", "group", "regression"):
        sync(name, on_device(makers[name]))
    local = on_device(makers["copy"])
    sync("copy", local, inplace=False)
    results["copy"]["local_pending"] = pending(local)
    results["copy"]["local"] = _hex_states(local)
    if world > 1:
        sync("mixed", on_device(makers["mixed"], tensors=rank == 0))
        # A mismatch and a bad value on one rank's device: every rank raises, then goes on.
        errors: dict[str, Any] = {}
        wrong = ConfusionAccumulator(K + rank, ignore_index=VOID)
        wrong.update(torch.tensor([0, 1]), torch.tensor([1, 1]))
        spoiled = on_device(makers["single"])
        if rank == 1:
            spoiled.update(torch.tensor([0, 9]), torch.tensor([0, 1]))
        for name, target in (("mismatch", wrong), ("bad_value", spoiled)):
            del log[:]
            try:
                distributed.all_reduce(target)
            except ValueError as error:
                errors[name] = {"message": str(error), "calls": _named(log)}
            else:
                errors[name] = {"message": None, "calls": _named(log)}
        results["errors"] = errors
        sync("after", on_device(makers["after"]))
    Path(out, f"rank{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


def _session(tmp_path_factory: Any, mode: str, world: int) -> list[dict]:
    import subprocess

    from tests.test_distributed import _free_port

    out = tmp_path_factory.mktemp(mode.strip("-"))
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    for _attempt in range(3):  # a free port can be taken between probing and binding
        port = _free_port()
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, mode, str(rank), str(world), str(port), str(out)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for rank in range(world)
        ]
        outputs = []
        for proc in procs:
            try:
                outputs.append(proc.communicate(timeout=240)[0])
            except subprocess.TimeoutExpired:
                for other in procs:
                    other.kill()
                outputs.append(proc.communicate()[0] + "\n[killed after 240 s]")
        codes = [proc.returncode for proc in procs]
        if not any(codes) or "address already in use" not in "".join(outputs).lower():
            break
    assert not any(codes), "\n\n".join(f"rank {r}: {t[-4000:]}" for r, t in enumerate(outputs))
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world)]


@pytest.fixture(scope="module")
def gloo(tmp_path_factory) -> list[dict]:
    return _session(tmp_path_factory, "--gloo", WORLD)


def _expected(name: str) -> dict[str, str]:
    return _hex_states(reference(_makers()[name], data()))


@pytest.mark.slow
@pytest.mark.parametrize("name", GLOO_SCENARIOS)
def test_two_gloo_ranks_sync_device_counts_bit_identical_to_one_process(gloo, name):
    expected = _expected(name)
    if name == "regression":  # counted on the host in batches of the shard's rows
        d = data()
        previous = device.force_device_path(False)
        try:
            whole = _makers()[name]()
            for rank in range(WORLD):
                shard = feed(_makers()[name](), d, slice(rank, None, WORLD), tensors=False)
                whole.merge(shard)
        finally:
            device.force_device_path(previous)
        expected = _hex_states(whole)
    for rank in gloo:
        assert rank[name]["state"] == expected, name
        assert rank[name]["flushes"] == []  # no device count was read to the host first
        assert rank[name]["pending_after"] is (name == "copy")
        assert rank[name]["is_self"] is (name != "copy")


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, data_calls",
    [
        ("single", [["all_reduce", K * K, "SUM"]]),
        ("copy", [["all_reduce", K * K, "SUM"]]),
        ("weighted_logits", [["all_reduce", K * K, "SUM"]]),
        ("group", [["all_reduce", K * K + K + 1, "SUM"], ["all_reduce", K * K + K, "SUM"]]),
        ("mixed", [["all_reduce", K * K + K + 1, "SUM"], ["all_reduce", K * K + K, "SUM"]]),
    ],
)
def test_one_check_and_one_collective_per_buffer_on_gloo(gloo, name, data_calls):
    for rank in gloo:
        assert rank[name]["calls"] == [["all_gather_single", 6 * WORLD, None], *data_calls]


@pytest.mark.slow
def test_a_regression_member_adds_one_max_collective_on_gloo(gloo):
    arrays = RegressionAccumulator(2).state_arrays()
    ints = arrays["moments"].size + arrays["num_samples"].size + K * K
    for rank in gloo:
        assert rank["regression"]["calls"] == [
            ["all_gather_single", 6 * WORLD, None],
            ["all_reduce", ints, "SUM"],
            ["all_reduce", arrays["max_error"].size + arrays["max_parts"].size, "MAX"],
        ]


@pytest.mark.slow
def test_copy_leaves_the_local_device_counts_on_the_device(gloo):
    d = data()
    for index, rank in enumerate(gloo):
        assert rank["copy"]["local_pending"] is True
        local = reference(_makers()["copy"], {key: value[index::WORLD] for key, value in d.items()})
        assert rank["copy"]["local"] == _hex_states(local)


@pytest.mark.slow
def test_gloo_errors_raise_on_every_rank_with_the_check_alone(gloo):
    mismatch = [rank["errors"]["mismatch"] for rank in gloo]
    assert mismatch[0]["message"] == mismatch[1]["message"]
    assert "`num_classes` is 5 on rank 0 and 6 on rank 1" in mismatch[0]["message"]
    assert all(c[0] == "all_gather_single" for m in mismatch for c in m["calls"])
    bad = [rank["errors"]["bad_value"] for rank in gloo]
    assert "rank(s) 1 could not take part" in bad[0]["message"]
    assert "`y_true` holds label 9" in bad[1]["message"]
    assert bad[0]["calls"] == bad[1]["calls"] == [["all_gather_single", 6 * WORLD, None]]


def _nccl_available() -> bool:
    import torch.distributed as dist

    return (
        torch.cuda.is_available()
        and torch.cuda.device_count() >= 1
        and dist.is_available()
        and dist.is_nccl_available()
    )


@pytest.mark.slow
@pytest.mark.skipif(not _nccl_available(), reason="needs a CUDA device and NCCL")
def test_nccl_syncs_cuda_counts_on_the_device(tmp_path_factory):
    (rank,) = _session(tmp_path_factory, "--nccl", 1)
    for name, data_calls in (
        ("single", [["all_reduce", K * K, "SUM"]]),
        ("group", [["all_reduce", K * K + K + 1, "SUM"], ["all_reduce", K * K + K, "SUM"]]),
    ):
        assert rank[name]["calls"] == [["all_gather_single", 6, None], *data_calls], name
        assert rank[name]["flushes"] == []
        assert rank[name]["state"] == _expected(name), name
        # The host waits twice: for the check's table and for the result.
        assert len(rank[name]["syncs"]) <= 2, rank[name]["syncs"]
    assert rank["copy"]["local_pending"] is True
    print(json.dumps({name: rank[name]["syncs"] for name in rank}))  # where the host waited


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] in ("--gloo", "--nccl"):
        rank, size, port = (int(v) for v in sys.argv[2:5])
        worker(sys.argv[1], rank, size, port, sys.argv[5])
    else:
        sys.exit(f"usage: {sys.argv[0]} --gloo|--nccl RANK WORLD PORT OUT_DIR (started by pytest)")


# ---------------------------------------------------------------------------- every family
def _family_kinds() -> list[str]:
    from tests.conformance import registry

    return [
        name
        for name in registry.names()
        if name.split("-")[0] in ("confusion", "scores", "multilabel", "regression")
    ]


@pytest.mark.slow  # every family's Numba reference compiles: minutes on a loaded 2-core box
@pytest.mark.parametrize("name", _family_kinds())
def test_every_familys_device_state_syncs_to_one_process(world, name):
    """Each family's device state (mirroring the host arrays, or kept in its own form and read
    first) syncs to the state of one process counting every batch on the Numba path."""
    from tests.conformance.registry import kind
    from tests.test_conformance import assert_same_state

    spec = kind(name)
    rng = np.random.default_rng(5)
    batches = [spec.make_batch(rng) for _ in range(6)]
    if any(kwargs for _, kwargs in batches):
        pytest.skip(f"{name} batches take keywords, which the device path does not")
    shards = [spec.make(), spec.make()]
    for index, (args, _) in enumerate(batches):
        tensors = [None if a is None else torch.from_numpy(np.asarray(a)) for a in args]
        shards[index % 2].update(*tensors)
    on_device = [bool(acc._device is not None and acc._device.dirty) for acc in shards]
    expected = spec.make()
    previous = device.force_device_path(False)
    try:
        for args, _ in batches:
            expected.update(*args)
    finally:
        device.force_device_path(previous)
    fake = world(2)
    results = fake.run(shards)
    for result in results:
        assert not isinstance(result, BaseException), result
        assert_same_state(result, expected, spec)
    assert states(results[0]).keys() == states(results[1]).keys()
    for key, array in states(results[0]).items():
        assert array.tobytes() == states(results[1])[key].tobytes(), key
    assert any(on_device), "the device path was not taken"
