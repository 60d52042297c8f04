"""Benchmark: summing a K=1000 confusion matrix across 2 torch.distributed ranks (gloo, CPU).

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

Every variant's result is checked equal to the expected global matrix before any time is
reported. Times are rank 0's wall-clock medians; the collectives each variant issues are counted
by wrapping the ``torch.distributed`` functions.
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
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
    "all_gather_object", "broadcast",
    "broadcast_object_list", "reduce", "gather", "scatter", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier",
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
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))
    k = num_classes
    rng = np.random.default_rng(rank)
    local = rng.integers(0, 1000, size=(k, k), dtype=np.int64)
    expected = sum(np.random.default_rng(r).integers(0, 1000, size=(k, k), dtype=np.int64)
                   for r in range(world))
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
    if rank == 0:
        Path(out).write_text(json.dumps({"times": times, "counts": counts}))
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--worker", nargs=3, metavar=("RANK", "PORT", "OUT"),
                        help=argparse.SUPPRESS)
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
                [sys.executable, "-m", "benchmarks.bench_sync", "--num-classes",
                 str(args.num_classes), "--repeats", str(args.repeats), "--world-size",
                 str(args.world_size), "--worker", str(rank), str(port), out],
                env=env,
            )
            for rank in range(args.world_size)
        ]
        codes = [proc.wait(timeout=900) for proc in procs]
        if any(codes):
            print(f"worker exit codes: {codes}", file=sys.stderr)
            return 1
        result = json.loads(Path(out).read_text())

    times, counts = result["times"], result["counts"]
    k = args.num_classes
    raw = times["raw all_reduce"]
    print(f"sync of a K={k} int64 confusion matrix ({k * k * 8 / 1e6:.1f} MB) across "
          f"{args.world_size} gloo ranks on 127.0.0.1; {args.repeats} interleaved repetitions, "
          f"rank 0 wall clock; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'variant':<25} {'median':>9} {'min':>9} {'median/raw':>11} {'paired':>7}  collectives")
    for name, samples in times.items():
        median = statistics.median(samples)
        # Ratio of each repetition to the raw all_reduce of the same round: robust to drift.
        paired = statistics.median(t / r for t, r in zip(samples, raw, strict=True))
        calls = counts[name]
        summary = ", ".join(f"{calls.count(c)}× {c}" for c in dict.fromkeys(calls))
        print(f"{name:<25} {median * 1e3:>6.2f} ms {min(samples) * 1e3:>6.2f} ms "
              f"{median / statistics.median(raw):>10.2f}× {paired:>6.2f}×  {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
