"""Exactly-once distributed evaluation: the padding guard and the unpadded sampler."""

from __future__ import annotations

import os
import socket
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="metricstream.exactly_once needs PyTorch")
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

from metricstream import AccumulatorGroup, ConfusionAccumulator, ScoreAccumulator  # noqa: E402
from metricstream.exactly_once import (  # noqa: E402
    PaddingGuard,
    UnpaddedDistributedSampler,
    padded_sampler_layout,
)


@pytest.mark.parametrize("shuffle", [False, True])
def test_guard_keeps_every_index_exactly_once(shuffle):
    # Against the real sampler: for every dataset length, world size and batch size, the samples
    # the guard keeps on all ranks together are each index exactly once.
    for n in range(1, 23):
        for world in range(1, 6):
            for batch_size in (1, 2, 3, 7):
                kept: list[int] = []
                for rank in range(world):
                    sampler = DistributedSampler(
                        range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=n
                    )
                    guard = PaddingGuard(DataLoader(range(n), batch_size, sampler=sampler))
                    indices = list(sampler)
                    for start in range(0, len(indices), batch_size):
                        batch = np.array(indices[start : start + batch_size])
                        (real,) = guard.trim(batch)
                        kept.extend(real.tolist())
                    assert guard.padded == len(indices) - guard.real
                assert sorted(kept) == list(range(n)), (n, world, batch_size)


def test_guard_arithmetic_worked_example():
    # 7 samples, 2 ranks: rank 1 holds positions 1, 3, 5, 7 -> 7 >= 7 is padding.
    sampler = DistributedSampler(range(7), num_replicas=2, rank=1, shuffle=False)
    assert padded_sampler_layout(sampler) == (7, 2, 1, 3)
    guard = PaddingGuard(sampler)
    assert guard.mask(3).tolist() == [True, True, True]
    assert guard.mask(3).tolist() == [False, False, False]  # past the end: nothing is real
    assert guard.reset().keep(4) == 3 and guard.real_count(0, 2) == 2
    y, p, w = guard.reset().trim(np.arange(4), np.arange(4), None)
    assert y.tolist() == [0, 1, 2] and w is None


def test_guard_refuses_what_it_cannot_make_exact():
    dropping = DistributedSampler(range(7), num_replicas=2, rank=0, drop_last=True)
    with pytest.raises(ValueError, match="drop_last=True: 1 of the 7 samples"):
        PaddingGuard(dropping)
    with pytest.raises(TypeError, match="found no DistributedSampler in the list"):
        PaddingGuard([1, 2])
    guard = PaddingGuard(DistributedSampler(range(7), num_replicas=2, rank=0))
    with pytest.raises(ValueError, match="share one batch size, got lengths \\[2, 3\\]"):
        guard.trim(np.arange(3), np.arange(2))
    with pytest.raises(ValueError, match="`batch_size` must be >= 0, got -1"):
        guard.keep(-1)
    assert guard.seen == 0  # refused calls consume nothing


def test_unpadded_sampler():
    for n in range(0, 12):
        for world in (1, 2, 3, 5):
            for shuffle in (False, True):
                parts = [
                    list(UnpaddedDistributedSampler(range(n), world, r, shuffle=shuffle, seed=3))
                    for r in range(world)
                ]
                assert sorted(sum(parts, [])) == list(range(n))
                assert [len(p) for p in parts] == [
                    len(UnpaddedDistributedSampler(range(n), world, r)) for r in range(world)
                ]
    lone = UnpaddedDistributedSampler(range(1), num_replicas=2, rank=1)
    assert list(lone) == [] and PaddingGuard(lone).keep(0) == 0
    with pytest.raises(ValueError, match="`rank` must be an int in \\[0, 2\\), got 2"):
        UnpaddedDistributedSampler(range(3), num_replicas=2, rank=2)
    a, b = UnpaddedDistributedSampler(range(9), 1, 0, shuffle=True), None
    first = list(a)
    a.set_epoch(1)
    b = list(a)
    assert sorted(first) == sorted(b) == list(range(9)) and first != b


# ----------------------------------------------------------------------------- 2 gloo ranks
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _data(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    y = rng.integers(0, 3, n)
    probs = (rng.multinomial(29, np.ones(3) / 3, size=n) + 1) / 32.0
    weights = rng.integers(1, 4, n)
    return y, probs, weights


def _group() -> AccumulatorGroup:
    return AccumulatorGroup(
        labels=ConfusionAccumulator(3),
        weighted=ConfusionAccumulator(3, weighted=True),
        scores=ScoreAccumulator("multiclass", 3),
    )


def _worker(rank: int, world: int, port: int, n: int, route: str, queue) -> None:
    import torch.distributed as dist

    from metricstream.distributed import all_reduce

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        y, probs, weights = _data(n)
        dataset = list(range(n))
        if route == "guard":
            sampler = DistributedSampler(dataset, shuffle=True, seed=5)
            loader = DataLoader(dataset, batch_size=2, sampler=sampler)
            guard = PaddingGuard(loader)
        else:
            loader = DataLoader(
                dataset, batch_size=2, sampler=UnpaddedDistributedSampler(dataset, shuffle=True)
            )
            guard = None
        group = _group()
        for batch in loader:
            index = batch.numpy()
            if guard is not None:
                (index,) = guard.trim(index)
            group.update(y[index], probs[index], weights[index])
        synced = all_reduce(group, inplace=False)
        queue.put((rank, synced.to_bytes()))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("route", ["guard", "unpadded"])
def test_two_gloo_ranks_equal_one_process(route):
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    for n in (7, 8, 9, 1):
        queue = context.Queue()
        port = _free_port()
        procs = [
            context.Process(target=_worker, args=(r, 2, port, n, route, queue)) for r in range(2)
        ]
        for proc in procs:
            proc.start()
        results = dict(queue.get(timeout=500) for _ in procs)
        for proc in procs:
            proc.join(timeout=60)
            assert proc.exitcode == 0
        y, probs, weights = _data(n)
        one = _group().update(y, probs, weights)
        for rank in (0, 1):
            synced = AccumulatorGroup.from_bytes(results[rank])
            # Integer counts and the weighted sums of whole weights: bit-identical.
            for name in ("labels", "weighted"):
                assert synced[name] == one[name], (n, rank, name)
            mine, ref = synced["scores"].state_arrays(), one["scores"].state_arrays()
            for key in ("curves", "ranks", "inexact"):
                assert np.array_equal(mine[key], ref[key]), (n, key)
            assert synced["scores"].num_samples == weights.sum()
            np.testing.assert_allclose(mine["losses"], ref["losses"], rtol=1e-14)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-n0", "--run-slow", "-q"]))
