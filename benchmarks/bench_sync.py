"""Benchmark: summing a K=1000 confusion matrix, and a group of 6 accumulators, across 2
torch.distributed ranks (gloo, CPU).

Run from the repository root::

    python -m benchmarks.bench_sync                # K=1000, 2 ranks, 50 repetitions
    python -m benchmarks.bench_sync --num-classes 100 --repeats 200

It starts 2 worker processes that rendezvous over 127.0.0.1 and time, interleaved round-robin
with a barrier before each repetition:

* ``raw all_reduce``: ``torch.distributed.all_reduce`` of an int64 tensor of K*K elements, the
  floor for moving those bytes;
* ``metricstream (in place)``: ``metricstream.distributed.all_reduce(acc)``;
* ``metricstream (copy)``: ``all_reduce(acc, inplace=False)``, which keeps the local counts;
* ``torchmetrics sync``: ``MulticlassConfusionMatrix.sync()`` + ``unsync()`` of the same matrix
  (torchmetrics gathers every rank's state and sums it), if torchmetrics is installed
  (``pip install torchmetrics``; it is not a metricstream dependency).

Then the same for a group of 6 accumulators (``metricstream.AccumulatorGroup``): confusion
matrices of K = 1000 (int64), K = 100 weighted (float64), K = 100 with an ignored label, K = 10,
K = 2, and K = 10 weighted: 1,010,204 int64 and 10,100 float64 values.

* ``raw 2× all_reduce``: the packed int64 and float64 buffers, the floor for those bytes;
* ``metricstream group (in place)`` / ``(copy)``: ``all_reduce(group)``: one check and one
  SUM per dtype, whatever the number of members;
* ``torchmetrics 6× sync``: the same six states as ``MulticlassConfusionMatrix`` metrics of a
  ``MetricCollection``, each ``sync()``-ed and ``unsync()``-ed (the collection has no sync of its
  own; ``compute()`` syncs each metric this way).

Every variant's result is checked equal to the expected global state before any time is
reported. Times are rank 0's wall-clock medians; "paired" is the median over repetitions of the
ratio to the floor measured in the same round, and the last table gives paired ratios of
torchmetrics to metricstream. The collectives each variant issues are counted by wrapping the
``torch.distributed`` functions.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "gather",
    "scatter",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "barrier",
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _install_counter(dist, log: list) -> dict:
    """Make each collective of ``dist`` append its name to ``log``; return the originals."""
    originals = {}
    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is None:
            continue

        def wrapper(*args, _original=original, _name=name, **kwargs):
            log.append(_name)
            return _original(*args, **kwargs)

        originals[name] = original
        setattr(dist, name, wrapper)
    return originals


def worker(rank: int, world: int, port: int, num_classes: int, repeats: int, out: str) -> None:
    from datetime import timedelta

    import numpy as np
    import torch
    import torch.distributed as dist

    from metricstream import ConfusionAccumulator
    from metricstream.distributed import all_reduce

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=120),
    )
    k = num_classes
    rng = np.random.default_rng(rank)
    local = rng.integers(0, 1000, size=(k, k), dtype=np.int64)
    expected = sum(
        np.random.default_rng(r).integers(0, 1000, size=(k, k), dtype=np.int64)
        for r in range(world)
    )
    acc = ConfusionAccumulator.from_matrix(local)

    try:
        from torchmetrics.classification import MulticlassConfusionMatrix
    except ImportError:
        MulticlassConfusionMatrix = None

    variants = {}

    def run_raw():
        tensor = raw_inputs.pop()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        elapsed = time.perf_counter() - start
        return elapsed, tensor.numpy()

    def run_inplace():
        target = inplace_inputs.pop()
        start = time.perf_counter()
        all_reduce(target)
        elapsed = time.perf_counter() - start
        return elapsed, target.matrix

    def run_copy():
        start = time.perf_counter()
        synced = all_reduce(acc, inplace=False)
        elapsed = time.perf_counter() - start
        return elapsed, synced.matrix

    variants["raw all_reduce"] = run_raw
    variants["metricstream (in place)"] = run_inplace
    variants["metricstream (copy)"] = run_copy
    if MulticlassConfusionMatrix is not None:
        metric = MulticlassConfusionMatrix(num_classes=k)
        metric.confmat = torch.from_numpy(local.copy())

        def run_torchmetrics():
            start = time.perf_counter()
            metric.sync(should_sync=True, distributed_available=lambda: True)
            synced = metric.confmat.clone()
            metric.unsync()
            elapsed = time.perf_counter() - start
            return elapsed, synced.numpy()

        variants["torchmetrics sync"] = run_torchmetrics

    # Correctness and collective counts first (untimed).
    counts = {}
    log: list = []
    originals = _install_counter(dist, log)
    for name, run in variants.items():
        raw_inputs = [torch.from_numpy(local.copy())]
        inplace_inputs = [acc.copy()]
        del log[:]
        _, result = run()
        if not np.array_equal(result, expected):
            raise SystemExit(f"{name}: wrong result on rank {rank}")
        counts[name] = list(log)
    if not np.array_equal(acc.matrix, local):
        raise SystemExit("inplace=False modified the local accumulator")
    for name, original in originals.items():  # time the unwrapped functions
        setattr(dist, name, original)

    times = {name: [] for name in variants}
    warmup = 3
    for repeat in range(warmup + repeats):
        # Fresh, untimed inputs for the variants that sum in place.
        raw_inputs = [torch.from_numpy(local.copy())]
        inplace_inputs = [acc.copy()]
        for name, run in variants.items():
            dist.barrier()
            elapsed, _ = run()
            if repeat >= warmup:
                times[name].append(elapsed)
    group_times, group_counts = _group_worker(rank, world, repeats, warmup)
    if rank == 0:
        Path(out).write_text(
            json.dumps(
                {
                    "times": times,
                    "counts": counts,
                    "group_times": group_times,
                    "group_counts": group_counts,
                }
            )
        )
    dist.barrier()
    dist.destroy_process_group()


# (name, K, weighted, ignore_index) of the six group members.
GROUP_MEMBERS = [
    ("k1000", 1000, False, None),
    ("k100_weighted", 100, True, None),
    ("k100_ignore", 100, False, 0),
    ("k10", 10, False, None),
    ("binary", 2, False, None),
    ("k10_weighted", 10, True, None),
]


def _member_states(rank: int):
    import numpy as np

    rng = np.random.default_rng(100 + rank)
    states = {}
    for name, k, weighted, _ in GROUP_MEMBERS:
        if weighted:
            states[name] = rng.integers(0, 1000, size=(k, k)) * 0.25  # exact in any order
        else:
            states[name] = rng.integers(0, 1000, size=(k, k), dtype=np.int64)
    return states


def _group_worker(rank: int, world: int, repeats: int, warmup: int) -> tuple[dict, dict]:
    import numpy as np
    import torch
    import torch.distributed as dist

    from metricstream import AccumulatorGroup, ConfusionAccumulator
    from metricstream.distributed import all_reduce

    local = _member_states(rank)
    expected = {name: sum(_member_states(r)[name] for r in range(world)) for name in local}
    group = AccumulatorGroup(
        {
            name: ConfusionAccumulator.from_matrix(
                local[name], ignore_index=ignore, weighted=weighted
            )
            for name, _, weighted, ignore in GROUP_MEMBERS
        }
    )
    ints = np.concatenate([local[n].ravel() for n, _, w, _ in GROUP_MEMBERS if not w])
    floats = np.concatenate([local[n].ravel() for n, _, w, _ in GROUP_MEMBERS if w])
    expected_ints = np.concatenate([expected[n].ravel() for n, _, w, _ in GROUP_MEMBERS if not w])

    def matrices(target):
        return {name: target[name].matrix for name in target}

    def run_raw():
        int_buffer, float_buffer = raw_inputs.pop()
        start = time.perf_counter()
        dist.all_reduce(int_buffer)
        dist.all_reduce(float_buffer)
        elapsed = time.perf_counter() - start
        return elapsed, int_buffer.numpy()

    def run_inplace():
        target = inplace_inputs.pop()
        start = time.perf_counter()
        all_reduce(target)
        elapsed = time.perf_counter() - start
        return elapsed, matrices(target)

    def run_copy():
        start = time.perf_counter()
        synced = all_reduce(group, inplace=False)
        elapsed = time.perf_counter() - start
        return elapsed, matrices(synced)

    variants = {
        "raw 2× all_reduce": run_raw,
        "metricstream group (in place)": run_inplace,
        "metricstream group (copy)": run_copy,
    }
    try:
        from torchmetrics import MetricCollection
        from torchmetrics.classification import MulticlassConfusionMatrix
    except ImportError:
        MetricCollection = None
    if MetricCollection is not None:
        collection = MetricCollection(
            {
                name: MulticlassConfusionMatrix(num_classes=k, ignore_index=ignore)
                for name, k, _, ignore in GROUP_MEMBERS
            },
            compute_groups=False,
        )
        for name, metric in collection.items(keep_base=True, copy_state=False):
            metric.confmat = torch.from_numpy(local[name].copy())

        def run_torchmetrics():
            start = time.perf_counter()
            for metric in collection.values(copy_state=False):
                metric.sync(should_sync=True, distributed_available=lambda: True)
            synced = {
                name: metric.confmat.clone().numpy()
                for name, metric in collection.items(keep_base=True, copy_state=False)
            }
            for metric in collection.values(copy_state=False):
                metric.unsync()
            elapsed = time.perf_counter() - start
            return elapsed, synced

        variants["torchmetrics 6× sync"] = run_torchmetrics

    def fresh_inputs():
        raw_inputs[:] = [(torch.from_numpy(ints.copy()), torch.from_numpy(floats.copy()))]
        inplace_inputs[:] = [group.copy()]

    raw_inputs: list = []
    inplace_inputs: list = []
    counts = {}
    log: list = []
    originals = _install_counter(dist, log)
    for name, run in variants.items():
        fresh_inputs()
        del log[:]
        _, result = run()
        if name.startswith("raw"):
            ok = np.array_equal(result, expected_ints)
        else:
            ok = all(np.array_equal(result[member], expected[member]) for member in expected)
        if not ok:
            raise SystemExit(f"{name}: wrong result on rank {rank}")
        counts[name] = list(log)
    if not all(np.array_equal(group[name].matrix, local[name]) for name in local):
        raise SystemExit("inplace=False modified the local group")
    for name, original in originals.items():
        setattr(dist, name, original)

    times: dict[str, list[float]] = {name: [] for name in variants}
    for repeat in range(warmup + repeats):
        fresh_inputs()
        for name, run in variants.items():
            dist.barrier()
            elapsed, _ = run()
            if repeat >= warmup:
                times[name].append(elapsed)
    return times, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument(
        "--worker", nargs=3, metavar=("RANK", "PORT", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.worker:
        rank, port, out = args.worker
        worker(int(rank), args.world_size, int(port), args.num_classes, args.repeats, out)
        return 0

    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        port = _free_port()
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.bench_sync",
                    "--num-classes",
                    str(args.num_classes),
                    "--repeats",
                    str(args.repeats),
                    "--world-size",
                    str(args.world_size),
                    "--worker",
                    str(rank),
                    str(port),
                    out,
                ],
                env=env,
            )
            for rank in range(args.world_size)
        ]
        codes = [proc.wait(timeout=900) for proc in procs]
        if any(codes):
            print(f"worker exit codes: {codes}", file=sys.stderr)
            return 1
        result = json.loads(Path(out).read_text())

    k = args.num_classes
    load = os.getloadavg()[0]
    print(
        f"sync of a K={k} int64 confusion matrix ({k * k * 8 / 1e6:.1f} MB) across "
        f"{args.world_size} gloo ranks on 127.0.0.1; {args.repeats} interleaved repetitions, "
        f"rank 0 wall clock; load average {load:.2f} on {os.cpu_count()} CPUs"
    )
    _table(result["times"], result["counts"], "raw all_reduce")
    print()
    print(
        "sync of a group of 6 accumulators (confusion K=1000, K=100 weighted, K=100 ignoring a "
        "label, K=10, K=2, K=10 weighted: 1,010,204 int64 + 10,100 float64 values)"
    )
    group_times = result["group_times"]
    _table(group_times, result["group_counts"], "raw 2× all_reduce")
    pairs = [
        (name, other)
        for name in group_times
        if name.startswith("torchmetrics")
        for other in group_times
        if other.startswith("metricstream")
    ]
    if pairs:
        print()
        print(f"{'paired ratio (same rounds)':<58} {'median':>7}")
        for name, other in pairs:
            ratio = statistics.median(
                t / m for t, m in zip(group_times[name], group_times[other], strict=True)
            )
            print(f"{name + ' / ' + other:<58} {ratio:>6.2f}×")
    return 0


def _table(times: dict[str, list[float]], counts: dict[str, list[str]], floor: str) -> None:
    raw = times[floor]
    print(f"{'variant':<31} {'median':>9} {'min':>9} {'median/raw':>11} {'paired':>7}  collectives")
    for name, samples in times.items():
        median = statistics.median(samples)
        # Ratio of each repetition to the raw all_reduce of the same round: robust to drift.
        paired = statistics.median(t / r for t, r in zip(samples, raw, strict=True))
        calls = counts[name]
        summary = ", ".join(f"{calls.count(c)}× {c}" for c in dict.fromkeys(calls))
        print(
            f"{name:<31} {median * 1e3:>6.2f} ms {min(samples) * 1e3:>6.2f} ms "
            f"{median / statistics.median(raw):>10.2f}× {paired:>6.2f}×  {summary}"
        )


if __name__ == "__main__":
    sys.exit(main())
